"""``nvhook explain --bundle B``: the shim's decisions, stage by stage, without writing."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from nvhook.cli import main
from nvhook.discover.hooks import default_hook_path
from nvhook.planner import Host
from nvhook.settings import defaults
from nvhook.tools.explain import explain, render_text
from nvhook.tools.generate import generate_spec
from oci.cdi.write import write_spec

SPECS = Path(__file__).parents[2] / "data" / "specs"
HOOK = default_hook_path()


@pytest.fixture(autouse=True)
def _private_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test reads /etc/nvhook or writes the settings cache under /run."""
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    monkeypatch.setenv("NVHOOK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("NVHOOK_CONFIG", str(empty))
    yield


@pytest.fixture
def dgx(mock_machine: Callable[..., Path]) -> Path:
    return mock_machine("dgx-a100")


@pytest.fixture
def bundle(tmp_path: Path) -> Callable[..., Path]:
    """Factory: a bundle with runc's spec plus ``env`` (and ``annotations``)."""

    def make(
        env: Sequence[str], annotations: dict[str, str] | None = None, name: str = "b"
    ) -> Path:
        spec = json.loads((SPECS / "runc-spec.json").read_text())
        spec["process"]["env"] += list(env)
        if annotations:
            spec["annotations"] = annotations
        path = tmp_path / name
        path.mkdir()
        (path / "config.json").write_text(json.dumps(spec))
        return path

    return make


def _config(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _run(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capfd.readouterr()
    return code, out, err


def _snapshot(bundle: Path) -> tuple[bytes, int, int]:
    st = (bundle / "config.json").stat()
    return (bundle / "config.json").read_bytes(), st.st_ino, st.st_mtime_ns


def test_jit_request_explained_and_bundle_untouched(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    b = bundle(
        [
            "NVIDIA_VISIBLE_DEVICES=0:1,3",
            "NVIDIA_DRIVER_CAPABILITIES=utility",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
        ]
    )
    before = _snapshot(b)
    code, out, err = _run(["explain", "--bundle", str(b), "--root", str(dgx)], capfd)
    assert (code, err) == (0, "")
    assert _snapshot(b) == before
    lines = out.splitlines()
    assert lines[0] == (
        "Verdict: will see 2 GPUs (host 0:1 and 3 as 0 and 1), no CUDA (capabilities: utility)"
    )
    assert lines[1] == f"Bundle: {b}"
    assert "Container: unprivileged" in lines
    assert "Asks for: devices 0:1,3" in lines
    assert "  from env NVIDIA_VISIBLE_DEVICES='0:1,3': 0:1,3" in lines
    assert "  capabilities: utility" in lines
    assert (
        "Requirement NVIDIA_REQUIRE_CUDA='cuda>=12.0': met (CUDA 12.4, driver 550.54.15)" in lines
    )
    assert (
        "Mode: jit (runtime.mode is auto and a requested device is not a qualified CDI name)"
        in lines
    )
    assert "Device 0:1: /dev/nvidia0, MIG gi 3 ci 0" in lines
    assert "Device 3 (GPU-17297365-d66b-40f2-85f4-de7bd1bd8cd3): /dev/nvidia3" in lines
    # a DGX A100 has no IMEX (Ampere): its daemon is not reported missing
    assert not [line for line in lines if line.startswith("Missing for")]
    start = lines.index("Edits that would be applied:")
    assert lines[start + 1] == "  device nodes (8):"
    assert lines[start + 8] == (
        f"    /dev/nvidia-caps/nvidia-cap31  c 506:31  (host {dgx}/dev/nvidia-caps/nvidia-cap31)"
    )
    assert lines[start + 10] == "  mounts (11):"
    assert f"    /usr/bin/nvidia-smi  <- {dgx}/usr/bin/nvidia-smi  [ro,nosuid,nodev,bind]" in lines
    assert "  hooks (1):" in lines
    (hook,) = [line for line in lines if line.startswith("    createContainer: ")]
    params = f"--params {dgx}/proc/driver/nvidia/params"  # ModifyDeviceFiles: 0 in the container
    assert hook.startswith(f"    createContainer: {HOOK} create-container {params} --link ")
    assert hook.endswith(" --folder /usr/lib/x86_64-linux-gnu")
    # each GPU's presence and the MIG layout 0:1 comes from (docs/cdi.md), then void
    env = lines.index("  env (4):")
    assert lines[env + 1].startswith("    NVHOOK_GPU_0=GPU-ac376f35-")
    assert lines[env + 2] == (
        f"    NVHOOK_MIG_LAYOUT_0=2.0,3.0,4.0@{dgx}/proc/driver/nvidia/capabilities/gpu0/mig"
    )
    assert lines[env + 3].startswith("    NVHOOK_GPU_3=GPU-17297365-")
    assert lines[env + 4] == "    NVIDIA_VISIBLE_DEVICES=void"
    assert lines[-3].startswith("Device files: the container's /proc/driver/nvidia/params ")
    assert lines[-2] == (
        "After injection: the container's env says NVIDIA_VISIBLE_DEVICES=void: a second "
        "injector (a legacy nvidia-container-runtime-hook, a nested runtime) adds nothing"
    )
    assert lines[-1] == "Result: config.json would be edited"


def test_json_is_the_library_answer(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    b = bundle(["NVIDIA_VISIBLE_DEVICES=2"])
    code, out, _ = _run(["explain", "-b", str(b), "--root", str(dgx), "--json"], capfd)
    assert code == 0
    data = json.loads(out)
    settings = defaults()._replace(host_root=str(dgx))
    config = data["settings"]["config_file"]
    assert config == os.environ["NVHOOK_CONFIG"]
    assert data == explain(str(b), settings=settings)
    assert data["requests"]["sources"] == [
        {"kind": "env", "name": "NVIDIA_VISIBLE_DEVICES", "value": "2", "devices": "2"}
    ]
    assert data["requests"]["capabilities"] == ["compute", "utility"]
    assert data["devices"] == [
        {"name": "2", "uuid": "GPU-086c745f-81ed-45b1-b563-f27bba6d7561", "node": "/dev/nvidia2"}
    ]
    assert [n["path"] for n in data["edits"]["device_nodes"]][-1] == "/dev/nvidia2"
    assert data["outcome"] == {"result": "edit", "reason": "config.json would be edited"}
    assert render_text(data) == _run(["explain", "-b", str(b), "--root", str(dgx)], capfd)[1]


@pytest.mark.parametrize(
    ("env", "code", "error"),
    [
        (["NVIDIA_VISIBLE_DEVICES=9"], 5, "GPU 9 does not exist; GPUs: 0 (GPU-ac376f35"),
        (["NVIDIA_VISIBLE_DEVICES=2:0"], 5, "MIG device 2:0: GPU 2 (GPU-086c745f"),
        (["NVIDIA_VISIBLE_DEVICES=0,x"], 3, "NVIDIA_VISIBLE_DEVICES: invalid device 'x'"),
        (
            ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=tensor"],
            3,
            "unknown capability 'tensor'",
        ),
    ],
)
def test_errors_are_the_answer(
    dgx: Path,
    bundle: Callable[..., Path],
    capfd: pytest.CaptureFixture[str],
    env: list[str],
    code: int,
    error: str,
) -> None:
    b = bundle(env)
    before = _snapshot(b)
    got, out, err = _run(["explain", "--bundle", str(b), "--root", str(dgx)], capfd)
    assert got == code
    assert err == ""
    last = out.splitlines()[-1]
    assert last.startswith("Result: would fail: ")
    assert error in last
    assert last.endswith(f"(exit code {code})")
    assert _snapshot(b) == before


def test_unmet_requirement(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    b = bundle(
        [
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.8",
            "NVIDIA_REQUIRE_DRIVER=driver>=500",
        ]
    )
    code, out, _ = _run(["explain", "-b", str(b), "--root", str(dgx)], capfd)
    assert code == 7
    lines = out.splitlines()
    assert "Requirement NVIDIA_REQUIRE_CUDA='cuda>=12.8': NOT MET" in lines
    assert "Requirement NVIDIA_REQUIRE_DRIVER='driver>=500': not checked (another is not met)" in (
        lines
    )
    assert lines[-1] == (
        "Result: would fail: NVIDIA_REQUIRE_CUDA is not met: cuda>=12.8 but the host's CUDA "
        "version is 12.4; use a newer driver, an image built for this one, or set "
        "NVIDIA_DISABLE_REQUIRE=true (exit code 7)"
    )


@pytest.mark.parametrize(
    ("drivers", "extra", "requirement", "compat"),
    [
        (
            (550,),
            [],
            "met (CUDA 12.9 from CUDA forward compatibility: /usr/local/cuda/compat/"
            "libcuda.so.575.57.08 over the host's 12.4, driver 550.54.15)",
            "/usr/local/cuda/compat/libcuda.so.575.57.08, CUDA 12.9 comes first in the "
            "container's ld cache: newer than the host driver 550.54.15, whose branch it lists",
        ),
        (
            (570,),
            [],
            "NOT MET",
            "/usr/local/cuda/compat/libcuda.so.575.57.08, CUDA 12.9 not used: its note does "
            "not list the host's branch 550",
        ),
        (
            (550,),
            ["NVIDIA_DISABLE_CUDA_COMPAT=1"],
            "NOT MET",
            "off: the container sets NVIDIA_DISABLE_CUDA_COMPAT (the host's libcuda is used)",
        ),
    ],
    ids=["used", "branch-not-listed", "opted-out"],
)
def test_cuda_compat_explained(
    dgx: Path,
    bundle: Callable[..., Path],
    capfd: pytest.CaptureFixture[str],
    drivers: tuple[int, ...],
    extra: list[str],
    requirement: str,
    compat: str,
) -> None:
    """CUDA forward compatibility: the image's compat libcuda (575, CUDA 12.9) over the
    dgx-a100's 550 (12.4); ``cuda>=12.9`` holds only when the hook will put it first."""
    from nvhook.mock.compat import lay_out_compat

    b = bundle(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.9", *extra])
    lay_out_compat(b / "rootfs", profile="dgx-a100", version="575.57.08", cuda="12.9",
                   drivers=drivers)  # fmt: skip
    code, out, _ = _run(["explain", "-b", str(b), "--root", str(dgx)], capfd)
    lines = out.splitlines()
    assert f"Requirement NVIDIA_REQUIRE_CUDA='cuda>=12.9': {requirement}" in lines
    if requirement == "NOT MET":
        assert code == 7
        assert "the host's CUDA version is 12.4" in lines[-1]
        # the error says why the compat library the image carries does not count
        unused = (
            "the image's /usr/local/cuda/compat/libcuda.so.575.57.08 is not used: its note "
            "does not list the host's branch 550"
        )
        assert (unused in lines[-1]) == (drivers == (570,)), lines[-1]
        return
    assert code == 0
    assert f"CUDA forward compatibility: {compat}" in lines
    assert "--cuda-compat 550.54.15" in out


def test_driver_params_step_explained(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    """The host has /proc/driver/nvidia/params: the hook's --params step is said in words."""
    b = bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    code, out, _ = _run(["explain", "-b", str(b), "--root", str(dgx)], capfd)
    assert code == 0
    params = dgx / "proc/driver/nvidia/params"
    assert f"--params {params}" in out
    line = next(x for x in out.splitlines() if x.startswith("Device files: "))
    assert "ModifyDeviceFiles: 0" in line and f"copy of {params})" in line
    code, out, _ = _run(["explain", "-b", str(b), "--root", str(dgx), "--json"], capfd)
    assert code == 0 and str(params) in json.loads(out)["driver_params"]


def test_strict_policy_from_config_ignores_unprivileged_env(
    dgx: Path,
    bundle: Callable[..., Path],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    config = _config(
        tmp_path, f'[host]\nroot = "{dgx}"\n[policy]\naccept_env_unprivileged = false\n'
    )
    b = bundle(["NVIDIA_VISIBLE_DEVICES=all"])
    code, out, _ = _run(["explain", "-b", str(b), "--config", str(config)], capfd)
    assert code == 0
    lines = out.splitlines()
    assert f"Settings: {config}: mode auto, host root {dgx}, " in out
    assert "accept_env_unprivileged=false" in lines[3]
    assert "  from nowhere: no variable, annotation or mount asks for a device" in lines
    assert (
        "  ignored env NVIDIA_VISIBLE_DEVICES='all': the container is not privileged and "
        "policy accept_env_unprivileged is false" in lines
    )
    assert lines[-1] == (
        "Result: nothing asks for a GPU or an IMEX channel: the shim execs the runtime and "
        "leaves config.json untouched"
    )


def test_config_flag_overrides_env_and_root_overrides_config(
    dgx: Path,
    mock_machine: Callable[..., Path],
    bundle: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    l40s = mock_machine("l40s-x4")
    from_env = _config(tmp_path, f'[host]\nroot = "{dgx}"\n', "env.toml")
    from_flag = _config(tmp_path, f'[host]\nroot = "{l40s}"\n[runtime]\nmode = "jit"\n')
    monkeypatch.setenv("NVHOOK_CONFIG", str(from_env))
    b = bundle(["NVIDIA_VISIBLE_DEVICES=3"])
    data = json.loads(_run(["explain", "-b", str(b), "--json"], capfd)[1])
    assert data["settings"]["config_file"] == str(from_env)
    assert data["devices"][0]["node"] == "/dev/nvidia3"  # the DGX: minor 3
    data = json.loads(
        _run(["explain", "-b", str(b), "--config", str(from_flag), "--json"], capfd)[1]
    )
    assert (data["settings"]["config_file"], data["settings"]["mode"]) == (str(from_flag), "jit")
    assert data["devices"][0]["node"] == "/dev/nvidia0"  # the L40S: index 3 is minor 0
    argv = ["explain", "-b", str(b), "--config", str(from_flag), "--root", str(dgx), "--json"]
    data = json.loads(_run(argv, capfd)[1])
    assert data["settings"]["host_root"] == str(dgx)
    assert data["devices"][0]["node"] == "/dev/nvidia3"


def test_cdi_mode_names_and_edits(
    dgx: Path,
    bundle: Callable[..., Path],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    spec_dir = tmp_path / "cdi"
    write_spec(spec_dir / "nvidia.yaml", generate_spec(Host(root=str(dgx))).spec)
    config = _config(tmp_path, f'[host]\nroot = "{dgx}"\n[cdi]\nspec_dirs = ["{spec_dir}"]\n')
    b = bundle(
        ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=99"],
        annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=0:2"},
    )
    code, out, _ = _run(["explain", "-b", str(b), "--config", str(config)], capfd)
    assert code == 0
    lines = out.splitlines()
    assert "  from annotation cdi.k8s.io/gpu='nvidia.com/gpu=0:2': nvidia.com/gpu=0:2" in lines
    assert "  ignored env NVIDIA_VISIBLE_DEVICES='all': annotations request devices" in lines
    assert (
        "Requirement NVIDIA_REQUIRE_CUDA='cuda>=99': not checked: mode cdi does not check "
        "requirements" in lines
    )
    assert (
        "Mode: cdi (runtime.mode is auto and every requested device is a qualified CDI name)"
        in lines
    )
    assert "CDI devices: nvidia.com/gpu=0:2" in lines
    assert (
        f"    /dev/nvidia-caps/nvidia-cap40  c 506:40  (host {dgx}/dev/nvidia-caps/nvidia-cap40)"
        in (lines)
    )
    assert lines[-1] == "Result: config.json would be edited"


def test_nothing_asked(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    b = bundle([])
    code, out, _ = _run(["explain", "-b", str(b), "--root", str(dgx), "--json"], capfd)
    data: dict[str, Any] = json.loads(out)
    assert code == 0
    assert data["requests"]["devices"] == "void"
    assert data["mode"] is None and data["edits"] is None
    assert data["outcome"]["result"] == "unchanged"


def test_broken_config_json(dgx: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    b = tmp_path / "broken"
    b.mkdir()
    (b / "config.json").write_bytes(b'{"process": {"env": ["A=\xff"]}}')
    before = _snapshot(b)
    code, out, _ = _run(["explain", "-b", str(b), "--root", str(dgx)], capfd)
    assert code == 3
    assert out.splitlines()[-1].startswith(
        f"Result: would fail: {b}/config.json: invalid UTF-8 at byte offset"
    )
    assert _snapshot(b) == before


def test_invalid_or_missing_config_is_the_answer(
    bundle: Callable[..., Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    b = bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    missing = tmp_path / "nope.toml"
    code, out, err = _run(["explain", "-b", str(b), "--config", str(missing)], capfd)
    assert (code, err) == (8, "")
    assert out == (
        f"Verdict: will NOT start: {missing}: configuration file not found\n"
        f"Bundle: {b}\nResult: would fail: {missing}: configuration file not found (exit code 8)\n"
    )
    bad = _config(tmp_path, "[policy]\naccept_env_unprivileged = 1\n", "bad.toml")
    code, out, _ = _run(["explain", "-b", str(b), "--config", str(bad)], capfd)
    assert code == 8
    assert out.splitlines()[-1] == (
        f"Result: would fail: {bad}: policy.accept_env_unprivileged: expected true or false, "
        "found 1 (exit code 8)"
    )
    assert os.listdir(b) == ["config.json"]


def test_bundle_the_shim_already_edited_stays_unchanged(
    dgx: Path, bundle: Callable[..., Path]
) -> None:
    from nvhook.create import prepare
    from oci.argv import RuntimeArgs

    b = bundle(["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=utility"])
    settings = defaults()._replace(host_root=str(dgx))
    assert explain(str(b), settings=settings)["outcome"]["result"] == "edit"
    assert prepare(RuntimeArgs.parse(["create", "--bundle", str(b), "c1"]), settings).written
    data = explain(str(b), settings=settings)
    assert data["outcome"] == {
        "result": "unchanged",
        "reason": "NVIDIA_VISIBLE_DEVICES=void: no device, or the devices were already "
        "injected (nvhook's jit mode and generated CDI specs leave void behind); the shim "
        "execs the runtime and leaves config.json untouched",
    }
    assert data["edits"] is None and data["after_injection"] is None


# --- the verdict: the first line, and the same as fields in --json ---------------------------


def _verdict(root: Path, b: Path, capfd: pytest.CaptureFixture[str]) -> tuple[str, Any]:
    """The text's first line and the JSON's verdict, which must say the same."""
    code, out, _ = _run(["explain", "-b", str(b), "--root", str(root)], capfd)
    first = out.splitlines()[0]
    code_json, out_json, _ = _run(["explain", "-b", str(b), "--root", str(root), "--json"], capfd)
    data = json.loads(out_json)
    assert code == code_json
    assert first == f"Verdict: {data['verdict']['text']}"
    return first.removeprefix("Verdict: "), data


def test_verdict_numbers_gpus_in_bus_order_not_request_order(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    """Inside, the GPUs are numbered in the host's (PCI bus) order, whatever order the
    request names them in."""
    text, data = _verdict(dgx, bundle(["NVIDIA_VISIBLE_DEVICES=3,2"]), capfd)
    assert text == "will see 2 GPUs (host 2 and 3 as 0 and 1), CUDA 12.4, libcuda 550.54.15"
    v = data["verdict"]
    assert [(g["host"], g["inside"]) for g in v["gpus"]] == [("2", 0), ("3", 1)]
    assert (v["runs_cuda"], v["cuda_version"], v["libcuda"], v["problems"]) == (
        True,
        "12.4",
        "550.54.15",
        [],
    )


def test_verdict_counts_a_mig_device_where_its_gpu_sits(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    text, _ = _verdict(dgx, bundle(["NVIDIA_VISIBLE_DEVICES=4,0:1"]), capfd)
    assert text == "will see 2 GPUs (host 0:1 and 4 as 0 and 1), CUDA 12.4, libcuda 550.54.15"


def test_verdict_mig_gpu_without_mig_devices_will_not_run_cuda(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    """The dgx-a100's GPU 1 is in MIG mode without instances: the shim succeeds (exit 0,
    config.json edited) but CUDA finds no device."""
    text, data = _verdict(dgx, bundle(["NVIDIA_VISIBLE_DEVICES=1"]), capfd)
    assert text == (
        "will NOT run CUDA: GPU 1 is in MIG mode and has no MIG devices; ask for a MIG device "
        "or another GPU"
    )
    assert data["verdict"]["runs_cuda"] is False and data["verdict"]["gpus"] == []
    assert data["outcome"]["result"] == "edit"


def test_verdict_whole_mig_gpu_names_its_mig_devices(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    text, _ = _verdict(dgx, bundle(["NVIDIA_VISIBLE_DEVICES=0"]), capfd)
    assert text == (
        "will NOT run CUDA: GPU 0 is in MIG mode: CUDA sees only its MIG devices "
        "(0:0, 0:1, 0:2); ask for one of them"
    )


def test_verdict_some_gpus_usable_says_which_is_not(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    text, data = _verdict(dgx, bundle(["NVIDIA_VISIBLE_DEVICES=1,5"]), capfd)
    assert text == (
        "will see 1 GPU (host 5 as 0), CUDA 12.4, libcuda 550.54.15; but GPU 1 is in MIG "
        "mode and has no MIG devices; ask for a MIG device or another GPU"
    )
    assert data["verdict"]["runs_cuda"] is True


def test_verdict_all_gives_the_mig_devices_not_their_gpu(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    _, data = _verdict(dgx, bundle(["NVIDIA_VISIBLE_DEVICES=all"]), capfd)
    hosts = [g["host"] for g in data["verdict"]["gpus"]]
    assert hosts == ["0:0", "0:1", "0:2", "2", "3", "4", "5", "6", "7"]
    assert [g["inside"] for g in data["verdict"]["gpus"]] == list(range(9))


def test_verdict_mig_mode_from_proc_when_nvml_fails(
    dgx: Path,
    bundle: Callable[..., Path],
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NVHOOK_MOCK_NVML_FAIL", "nvmlInitWithFlags:9,nvmlInit_v2:9,nvmlInit:9")
    text, data = _verdict(dgx, bundle(["NVIDIA_VISIBLE_DEVICES=1"]), capfd)
    assert text.startswith("will NOT run CUDA: GPU 1 is in MIG mode and has no MIG devices")
    assert data["verdict"]["cuda_version"] is None


@pytest.mark.parametrize("gone", [True, False])
def test_verdict_host_without_libcuda_will_not_run_cuda(
    gone: bool,
    make_mock_machine: Callable[..., Path],
    bundle: Callable[..., Path],
    capfd: pytest.CaptureFixture[str],
) -> None:
    root = make_mock_machine("h100-pcie")
    if gone:
        for lib in (root / "usr/lib/x86_64-linux-gnu").glob("libcuda.so*"):
            lib.unlink()
    text, data = _verdict(root, bundle(["NVIDIA_VISIBLE_DEVICES=0"]), capfd)
    if gone:
        assert text == (
            f"will NOT run CUDA: the host has no libcuda.so.1 (looked under {root}): install "
            "the driver's CUDA library (libcuda, in the driver's utils or compute package) or "
            "set host.driver_root"
        )
        assert (data["verdict"]["runs_cuda"], data["verdict"]["libcuda"]) == (False, None)
        assert data["outcome"]["result"] == "edit"  # the shim itself succeeds
    else:
        assert text == "will see 1 GPU (host 0 as 0), CUDA 13.0, libcuda 580.65.06"


def test_verdict_of_a_failure_and_of_nothing_asked(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    text, data = _verdict(dgx, bundle(["NVIDIA_VISIBLE_DEVICES=9"], name="bad"), capfd)
    assert text.startswith("will NOT start: GPU 9") and data["outcome"]["result"] == "fail"
    text, _ = _verdict(dgx, bundle([], name="none"), capfd)
    assert text == "will see no GPU: nothing asks for a GPU or an IMEX channel"


def test_injected_by_says_which_path_the_gpus_came_by(
    dgx: Path, bundle: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    """Docker's --gpus hook (hook mode), an engine's CDI edits (Docker's --device or 29.2's
    nvidia.cdi driver), or nothing before the runtime."""
    hooked = bundle(["NVIDIA_VISIBLE_DEVICES=1"], name="hooked")
    spec = json.loads((hooked / "config.json").read_text())
    legacy = "/usr/bin/nvidia-container-runtime-hook"
    spec["hooks"] = {"prestart": [{"path": legacy, "args": [legacy, "prestart"]}]}
    (hooked / "config.json").write_text(json.dumps(spec))
    found = explain(str(hooked), root=str(dgx))["injected_by"]
    assert found["path"] == "hook" and legacy in found["text"]
    code, out, _ = _run(["explain", "--bundle", str(hooked), "--root", str(dgx)], capfd)
    assert code == 0 and "\nInjected by: Docker's --gpus, hook mode: dockerd added" in out

    applied = bundle([], name="applied")
    spec = json.loads((applied / "config.json").read_text())
    spec["linux"]["devices"] = [
        {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1},
        {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229},
    ]
    spec["hooks"] = {"createContainer": [{"path": HOOK, "args": ["nvhook-hook", "x"]}]}
    (applied / "config.json").write_text(json.dumps(spec))
    found = explain(str(applied), root=str(dgx))["injected_by"]
    assert found["path"] == "engine-cdi"
    assert f"(/dev/nvidia1, hook {HOOK})" in found["text"] and "/dev/fuse" not in found["text"]

    assert (
        explain(str(bundle(["NVIDIA_VISIBLE_DEVICES=1"], name="plain")), root=str(dgx))[
            "injected_by"
        ]
        is None
    )


def test_injected_by_the_shim_is_told_by_its_log(
    dgx: Path, bundle: Callable[..., Path], tmp_path: Path
) -> None:
    """The shim's edits look like an engine's CDI edits; its log's create of the container
    (the bundle directory's name) that wrote config.json says they are its own."""
    applied = bundle([], name="c0ffee")
    spec = json.loads((applied / "config.json").read_text())
    spec["linux"]["devices"] = [{"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1}]
    (applied / "config.json").write_text(json.dumps(spec))
    log = tmp_path / "shim.log"
    config = _config(tmp_path, f'[runtime]\nlog_file = "{log}"\n', "logging.toml")
    records = [
        {"time": "T1", "id": "c0ffee", "command": "create", "mode": "jit", "devices": "1",
         "written": True},
        {"time": "T2", "id": "other", "command": "create", "mode": None, "written": False},
        {"time": "T3", "id": "c0ffee", "command": "start"},
    ]  # fmt: skip
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    found = explain(str(applied), root=str(dgx), config_path=str(config))["injected_by"]
    assert found == {
        "path": "shim",
        "text": f"nvhook-runtime rewrote config.json at create (its log {log}, T1: mode jit, "
        "devices 1)",
    }
    log.write_text(json.dumps({**records[0], "written": False}) + "\n")  # it left it alone
    found = explain(str(applied), root=str(dgx), config_path=str(config))["injected_by"]
    assert found["path"] == "engine-cdi"
