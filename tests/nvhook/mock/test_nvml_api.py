"""The fake NVML's export list: every name pynvml can look up resolves, and each call answers.

``nvml_calls.c`` (next to this file) is compiled with the mock's build and run against the
dgx-a100 mock's library: it resolves every name and calls each implemented function with real
arguments (each stub must answer NOT_SUPPORTED).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pynvml
import pytest

from nvhook.mock import build, nvmlapi
from nvhook.mock.layout import LIB_DIR

HERE = Path(__file__).parent


def _nvml_c() -> str:
    return build.csource("nvml.c").decode()


def test_the_list_names_every_function_the_installed_pynvml_looks_up() -> None:
    installed = nvmlapi.pynvml_names(Path(pynvml.__file__ or "").read_text(encoding="utf-8"))
    listed = nvmlapi.listed_names()
    missing = sorted(set(installed) - set(listed.names))
    assert not missing, (
        f"pynvml of nvidia-ml-py {metadata.version('nvidia-ml-py')} looks up NVML functions "
        f"that the fake libnvidia-ml.so.1 does not export (its list is from "
        f"{listed.pynvml_version}): {missing}; run `python -m nvhook.mock.nvmlapi`"
    )
    assert len(installed) > 300 and "nvmlDeviceGetCount_v2" in installed
    assert listed.pynvml_version and listed.names == tuple(sorted(set(listed.names)))


def test_names_are_read_from_pynvml_source() -> None:
    source = (
        'fn = _nvmlGetFunctionPointer("nvmlDeviceGetCount_v2")\n'
        'fn = _nvmlGetFunctionPointer( "nvmlInitWithFlags" )\n'
        'fn = _nvmlGetFunctionPointer("nvmlDeviceGetCount_v2")\n'
        "name = 'nvmlNotALookup'\n"
    )
    assert nvmlapi.pynvml_names(source) == ("nvmlDeviceGetCount_v2", "nvmlInitWithFlags")
    text = nvmlapi.render_names("1.2.3", ("nvmlA", "nvmlB"))
    assert text.startswith("# nvidia-ml-py 1.2.3\n") and text.endswith("nvmlA\nnvmlB\n")


def test_stubs_are_generated_for_what_nvml_c_does_not_define() -> None:
    source = (
        "API nvmlReturn_t nvmlInit_v2(void)\n{\n}\n"
        "API const char *nvmlErrorString(nvmlReturn_t r)\n{\n}\n"
        "static nvmlReturn_t nvmlHelper(void);\n"
        "    API nvmlReturn_t fn(void);  /* inside a macro: not a definition */\n"
    )
    assert nvmlapi.implemented_names(source) == ("nvmlErrorString", "nvmlInit_v2")
    stubs = nvmlapi.unsupported_source(source, ("nvmlErrorString", "nvmlHelper", "nvmlX_v2"))
    assert stubs.decode().splitlines()[1:] == ["UNSUPPORTED(nvmlHelper)", "UNSUPPORTED(nvmlX_v2)"]


def test_every_name_resolves_and_every_implemented_call_answers(
    mock_machine: Callable[..., Path], tmp_path: Path
) -> None:
    built = build.build(
        [
            build.Unit(
                output="nvml_calls",
                sources=(("nvml_calls.c", (HERE / "nvml_calls.c").read_bytes()),),
                compile=("nvml_calls.c",),
                args=("-O1", "-Wall", "-Wextra", "-Werror", "-ldl"),
            )
        ]
    )[0]
    program = tmp_path / "nvml_calls"  # the cache keeps bytes, not modes
    shutil.copyfile(built, program)
    program.chmod(0o755)
    library = mock_machine("dgx-a100") / LIB_DIR / "libnvidia-ml.so.1"
    listed = set(nvmlapi.listed_names().names)
    implemented = set(nvmlapi.implemented_names(_nvml_c()))
    names = sorted(listed | implemented)
    proc = subprocess.run(
        [str(program), str(library)],
        input="\n".join(names) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = proc.stdout.splitlines()
    failures = [ln for ln in lines if ln.startswith("FAIL")]
    assert proc.returncode == 0 and not failures, (failures, proc.stderr)
    called = {ln.split()[1] for ln in lines if ln.startswith("called ")}
    stubbed = {ln.split()[1] for ln in lines if ln.startswith("stub ")}
    assert called == implemented, "nvml_calls.c calls each implemented function, and only those"
    assert stubbed == listed - implemented
    assert len(called) + len(stubbed) == len(names)
    # nvidia-ctk cdi generate died on this one before every name was exported
    assert "nvmlDeviceGetGpuInstanceById" in called


def test_the_library_exports_exactly_the_listed_and_implemented_names(
    mock_machine: Callable[..., Path],
) -> None:
    library = mock_machine("dgx-a100") / LIB_DIR / "libnvidia-ml.so.1"
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    exported = {ln.split()[-1] for ln in out.splitlines() if ln.split()[-1].startswith("nvml")}
    expected = set(nvmlapi.listed_names().names) | set(nvmlapi.implemented_names(_nvml_c()))
    assert exported == expected


@pytest.mark.parametrize("name", ["nvmlDeviceGetFanSpeed", "nvmlDeviceCreateGpuInstance"])
def test_a_stub_honours_fault_injection(
    name: str, mock_machine: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ctypes

    lib = ctypes.CDLL(str(mock_machine("dgx-a100") / LIB_DIR / "libnvidia-ml.so.1"))
    assert getattr(lib, name)() == pynvml.NVML_ERROR_NOT_SUPPORTED
    monkeypatch.setenv("NVHOOK_MOCK_NVML_FAIL", f"{name}:15")
    assert getattr(lib, name)() == pynvml.NVML_ERROR_GPU_IS_LOST
