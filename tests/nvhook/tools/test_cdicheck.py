"""nvhook.tools.cdicheck and `nvhook cdi check`: CDI specs against the host they describe.

The end-to-end cases generate a spec for a fresh mock machine, then "upgrade" its
driver (every file named after the old version renamed to the new one, the kernel
module reporting the new version), as a driver package upgrade does to a host.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvhook.cli import main
from nvhook.discover.hooks import default_hook_path
from nvhook.planner import Host
from nvhook.tools.cdicheck import (
    Finding,
    check_specs,
    generated_by_nvhook,
    recorded_driver_version,
    regenerate_command,
    under_root,
)
from nvhook.tools.generate import generate_spec
from oci.cdi.parse import parse_spec
from oci.cdi.write import write_spec
from oci.errors import ExitCode
from tests.support.mockdriver import driver_version, upgrade_driver

NEW = "560.35.03"


def _spec(edits: dict[str, Any], devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "cdiVersion": "0.5.0",
        "kind": "example.com/dev",
        "containerEdits": edits,
        "devices": devices or [{"name": "d0", "containerEdits": {"env": ["A=1"]}}],
    }


def _mount(path: str) -> dict[str, Any]:
    return {"hostPath": path, "containerPath": path, "options": ["ro", "bind"]}


def _write(directory: Path, name: str, data: dict[str, Any]) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def generated(make_mock_machine: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path]:
    """A fresh dgx-a100 (character device nodes: needs root) and the directory of the spec
    `nvhook cdi generate --root MOCK` wrote for it."""
    root = make_mock_machine("dgx-a100", as_root_nodes=True)
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    write_spec(spec_dir / "nvidia.json", generate_spec(Host(root=str(root))).spec)
    return root, spec_dir


def test_a_fresh_spec_matches_its_host(generated: tuple[Path, Path]) -> None:
    root, spec_dir = generated
    assert check_specs([str(spec_dir)], root=str(root)) == []


def test_a_driver_upgrade_makes_the_spec_stale(generated: tuple[Path, Path]) -> None:
    root, spec_dir = generated
    file = str(spec_dir / "nvidia.json")
    old = upgrade_driver(root, NEW)
    findings = check_specs([str(spec_dir)], root=str(root))
    fix = f"run: nvhook cdi generate --root {root} --output {file}"
    assert {f.fix for f in findings} == {fix}
    assert findings[0] == Finding(
        file,
        None,
        "",
        "driver version",
        f"generated for driver {old} (its library names say so), the loaded driver is {NEW} "
        f"({root}/proc/driver/nvidia/version)",
        fix,
    )
    libcuda = f"{root}/usr/lib/x86_64-linux-gnu/libcuda.so.{old}"
    assert (
        f"{file}: containerEdits: mount {libcuda}: host file is missing (driver upgraded to {NEW}?)"
    ) in [f.line for f in findings]
    missing = [f for f in findings if f.what.startswith("mount ")]
    # every versioned file of the old driver, and nothing else (the EGL platform
    # libraries carry their own versions and survive the upgrade)
    assert all(
        old in f.what and f.message.endswith(f"(driver upgraded to {NEW}?)") for f in missing
    )
    assert len(missing) == sum(
        1
        for m in parse_spec(json.loads(Path(file).read_text()), source=file).edits.mounts
        if old in m.host_path
    )
    assert not [f for f in findings if f.device is not None]  # GPU nodes are unchanged


def test_regenerating_makes_it_fresh_again(generated: tuple[Path, Path]) -> None:
    root, spec_dir = generated
    upgrade_driver(root, NEW)
    assert check_specs([str(spec_dir)], root=str(root))
    write_spec(spec_dir / "nvidia.json", generate_spec(Host(root=str(root))).spec)
    assert check_specs([str(spec_dir)], root=str(root)) == []
    spec = json.loads((spec_dir / "nvidia.json").read_text())
    assert recorded_driver_version(parse_spec(spec, source="x")) == NEW


def test_a_missing_gpu_node_names_every_device_holding_it(generated: tuple[Path, Path]) -> None:
    root, spec_dir = generated
    (root / "dev" / "nvidia3").unlink()
    findings = check_specs([str(spec_dir)], root=str(root))
    names = [d["name"] for d in json.loads((spec_dir / "nvidia.json").read_text())["devices"]]
    gpu3 = "GPU-17297365-d66b-40f2-85f4-de7bd1bd8cd3"
    assert [(f.device, f.field, f.what, f.message) for f in findings] == [
        (f"nvidia.com/gpu={n}", f"devices[{names.index(n)}]", "device node /dev/nvidia3",
         "host device is missing")
        for n in ("3", gpu3, "all")
    ]  # fmt: skip


def test_a_node_with_other_numbers_is_stale(generated: tuple[Path, Path]) -> None:
    root, spec_dir = generated
    node = root / "dev" / "nvidia2"
    node.unlink()
    os.mknod(node, 0o666 | 0o020000, os.makedev(195, 42))
    (finding,) = [
        f for f in check_specs([str(spec_dir)], root=str(root)) if f.device == "nvidia.com/gpu=2"
    ]
    assert finding.message == "host device is 195:42; the spec says 195:2"


def test_cli_prints_findings_then_each_fix_once(
    generated: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, spec_dir = generated
    upgrade_driver(root, NEW)
    rc = main(["cdi", "check", "--spec-dir", str(spec_dir), "--root", str(root)])
    assert rc == ExitCode.VALIDATION
    lines = capsys.readouterr().out.splitlines()
    file = spec_dir / "nvidia.json"
    assert lines[0].startswith(f"{file}: driver version: generated for driver 550.54.15")
    assert lines[-1] == f"run: nvhook cdi generate --root {root} --output {file}"
    assert sum(1 for line in lines if line.startswith("run: ")) == 1


def test_cli_with_fresh_specs_and_without_any(
    generated: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, spec_dir = generated
    assert main(["cdi", "check", "--spec-dir", str(spec_dir), "--root", str(root)]) == 0
    assert capsys.readouterr().out == f"1 CDI spec file(s) in {spec_dir}: all match the host\n"
    empty = tmp_path / "none"
    assert main(["cdi", "check", "--spec-dir", str(empty), "--spec-dir", str(spec_dir / "x")]) == 0
    assert capsys.readouterr().out == (
        f"no CDI spec in {empty}, {spec_dir / 'x'}; run: nvhook cdi generate\n"
    )


# --- without root: specs written by hand ---------------------------------------------------------


def test_another_tools_spec_is_checked_and_left_to_that_tool(tmp_path: Path) -> None:
    lib = tmp_path / "libfoo.so.1"
    lib.write_bytes(b"")
    spec_dir = tmp_path / "cdi"
    file = _write(
        spec_dir,
        "foo.yaml",
        _spec(
            {"mounts": [_mount(str(lib)), _mount(str(tmp_path / "gone.so.2"))]},
            [{"name": "d0", "containerEdits": {"mounts": [_mount(str(tmp_path) + "/")]}}],
        ),
    )
    findings = check_specs([str(spec_dir)])
    fix = f"regenerate {file} with the tool that wrote it, or remove it"
    assert [f.line for f in findings] == [
        f"{file}: containerEdits: mount {tmp_path}/gone.so.2: host file is missing"
    ]
    assert findings[0].fix == fix
    lib.unlink()
    lib.mkdir()  # a library that became a directory
    assert check_specs([str(spec_dir)])[0].line == (
        f"{file}: containerEdits: mount {lib}: host file is a directory, not a regular file"
    )


def test_an_invalid_file_is_a_finding_and_a_missing_dir_is_none(tmp_path: Path) -> None:
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (spec_dir / "broken.json").write_text("{")
    (spec_dir / "notes.txt").write_text("not a spec")
    (finding,) = check_specs([str(tmp_path / "missing"), str(spec_dir)])
    assert finding.file == str(spec_dir / "broken.json")
    assert finding.device is None and finding.what == ""
    assert finding.fix == f"run: nvhook cdi validate {spec_dir / 'broken.json'}"
    assert finding.line.startswith(f"{spec_dir / 'broken.json'}: ") and "{" not in finding.fix


def test_a_missing_nvhook_hook_launcher_is_fixed_by_install_entrypoints(tmp_path: Path) -> None:
    hook = {"hookName": "createContainer", "path": str(tmp_path / "bin" / "nvhook-hook"),
            "args": ["nvhook-hook", "update-ldcache"]}  # fmt: skip
    file = _write(tmp_path / "cdi", "nvidia.json", _spec({"hooks": [hook]}))
    (finding,) = check_specs([str(tmp_path / "cdi")])
    assert finding.line == f"{file}: containerEdits: hook {hook['path']}: host file is missing"
    assert finding.fix == f"run: nvhook install-entrypoints --bin-dir {tmp_path / 'bin'}"


def _parsed(edits: dict[str, Any], kind: str = "example.com/dev") -> Any:
    return parse_spec({**_spec(edits), "kind": kind}, source="t")


def test_recorded_driver_version_comes_from_the_library_names() -> None:
    lib = "/usr/lib/x86_64-linux-gnu"
    mounts = [
        _mount(f"{lib}/libnvidia-egl-gbm.so.1.1.1"),  # its own version: never the driver's
        _mount(f"{lib}/libcuda.so.550.54.15"),
        _mount(f"{lib}/libnvidia-ml.so.550.54.16"),  # NVML is trusted first
    ]
    assert recorded_driver_version(_parsed({"mounts": mounts})) == "550.54.16"
    assert recorded_driver_version(_parsed({"mounts": mounts[:2]})) == "550.54.15"
    firmware = [_mount("/lib/firmware/nvidia/570.86.10/gsp_ga10x.bin")]
    assert recorded_driver_version(_parsed({"mounts": firmware})) == "570.86.10"
    odd = [_mount(f"{lib}/libcuda.so.1"), _mount(f"{lib}/libcuda.so.x.y")]
    assert recorded_driver_version(_parsed({"mounts": mounts[:1] + odd})) is None


def test_generated_by_nvhook_and_regenerate_command(tmp_path: Path) -> None:
    launcher = tmp_path / "nvhook-hook"
    hook = {"hookName": "createContainer", "path": str(launcher), "args": ["nvhook-hook", "x"]}
    ours = _parsed({"hooks": [hook]}, kind="acme.io/accel")
    other = _parsed({"hooks": [{**hook, "args": ["nvidia-cdi-hook", "x"]}]})
    assert generated_by_nvhook(ours) and not generated_by_nvhook(other)
    default = parse_spec(
        {**_spec({"hooks": [{**hook, "path": default_hook_path()}]}), "kind": "nvidia.com/gpu"},
        source="t",
    )
    assert regenerate_command("/var/run/cdi/nvidia.json", default) == "nvhook cdi generate"
    # a launcher elsewhere is kept only while it exists
    base = "nvhook cdi generate --root /m --output /e/x.yaml --vendor acme.io --class accel"
    assert regenerate_command("/e/x.yaml", ours, "/m") == base
    launcher.write_text("#!/bin/sh\n")
    launcher.chmod(0o755)
    assert regenerate_command("/e/x.yaml", ours) == (
        f"nvhook cdi generate --output /e/x.yaml --vendor acme.io --class accel "
        f"--hook-path {launcher}"
    )


def test_under_root_leaves_a_spec_written_for_that_root_alone() -> None:
    host = _parsed({"mounts": [_mount("/usr/lib/libcuda.so.1")]})
    mock = _parsed({"mounts": [_mount("/srv/mock/usr/lib/libcuda.so.1")]})
    assert under_root("/", host)("/usr/lib/a") == "/usr/lib/a"
    assert under_root("/host/", host)("/usr/lib/a") == "/host/usr/lib/a"
    assert under_root("/srv/mock", mock)("/opt/bin/nvhook-hook") == "/opt/bin/nvhook-hook"
    assert under_root("/srv/mock", None)("/dev/nvidia0") == "/srv/mock/dev/nvidia0"


def test_root_prefixes_the_paths_of_a_host_spec(tmp_path: Path) -> None:
    (tmp_path / "host" / "usr" / "lib").mkdir(parents=True)
    (tmp_path / "host" / "usr" / "lib" / "libfoo.so.1").write_bytes(b"")
    _write(tmp_path / "cdi", "foo.json", _spec({"mounts": [_mount("/usr/lib/libfoo.so.1")]}))
    assert check_specs([str(tmp_path / "cdi")], root=str(tmp_path / "host")) == []
    assert len(check_specs([str(tmp_path / "cdi")])) == 1  # not on this machine's /usr/lib


def test_driver_version_checked_only_when_nvhook_wrote_the_spec(
    mock_machine: Callable[..., Path], tmp_path: Path
) -> None:
    root = mock_machine("dgx-a100")  # shared, read-only: its driver is 550.54.15
    assert driver_version(root) == "550.54.15"
    lib = root / "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
    older = {"mounts": [_mount(str(lib).replace("550.54.15", "535.1.2"))]}
    hook = {"hookName": "createContainer", "path": default_hook_path(), "args": ["nvhook-hook"]}
    _write(tmp_path / "a", "other.json", _spec(older))
    _write(tmp_path / "b", "ours.json", _spec({**older, "hooks": [hook]}))
    other = check_specs([str(tmp_path / "a")], root=str(root))
    ours = check_specs([str(tmp_path / "b")], root=str(root))
    assert [f.what for f in other] == [f"mount {lib}".replace("550.54.15", "535.1.2")]
    assert other[0].message == "host file is missing (driver upgraded to 550.54.15?)"
    assert ours[0].what == "driver version"
    assert "generated for driver 535.1.2" in ours[0].message


def test_a_file_made_untrusted_after_the_listing_is_judged_as_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refusing, the file is read as the registry reads it (O_NOFOLLOW, judged by fstat)."""
    from oci.cdi import registry

    file = _write(tmp_path / "cdi", "foo.json", _spec({}))
    os.chmod(file, 0o644)
    os.chmod(tmp_path / "cdi", 0o755)
    real = registry.list_spec_files

    def listed_then_changed(directory: str, ignored: dict[str, str] | None = None) -> object:
        out = real(directory, ignored)
        os.chmod(file, 0o666)
        return out

    monkeypatch.setattr(registry, "list_spec_files", listed_then_changed)
    (finding,) = check_specs([str(tmp_path / "cdi")])
    assert (finding.kind, finding.severity) == ("untrusted", "error")
    assert finding.line == (
        f"{file}: CDI spec file is writable by group or others (uid {os.geteuid()}, mode 0666), "
        f"and its hooks would run as root: chown root {file} and chmod go-w {file}, or remove "
        "it (not used)"
    )
    assert finding.fix == f"chown root {file} and chmod go-w {file}, or remove it"
    os.chmod(file, 0o644)
    assert check_specs([str(tmp_path / "cdi")], untrusted="warn") == []  # warned of as listed
    with pytest.raises(ValueError, match="untrusted must be one of refuse, warn, not 'ignore'"):
        check_specs([str(tmp_path / "cdi")], untrusted="ignore")


def test_a_mig_relayout_makes_the_spec_stale_once_per_gpu(generated: tuple[Path, Path]) -> None:
    """The layout the create path checks (nvhook.devices.miglayout): 7 devices carry GPU 0's
    record, one finding names it; MIG off says so; regenerating mends it."""
    from nvhook.mock.mutate import relayout_mig

    root, spec_dir = generated
    relayout_mig(root, 0, ["1g.10gb"] * 7)
    (finding,) = check_specs([str(spec_dir)], root=str(root))
    assert (finding.what, finding.kind) == ("MIG layout of GPU 0", "stale")
    assert finding.message == (
        "written for GPU.compute instances 2.0,3.0,4.0, now 7.0,8.0,9.0,10.0,11.0,12.0,13.0: "
        "its MIG names mean others"
    )
    assert finding.fix.startswith(f"run: nvhook cdi generate --root {root} --output ")
    relayout_mig(root, 0, None)
    (finding,) = check_specs([str(spec_dir)], root=str(root))
    assert "MIG mode is off or the GPU is gone" in finding.message
    write_spec(spec_dir / "nvidia.json", generate_spec(Host(root=str(root))).spec)
    assert check_specs([str(spec_dir)], root=str(root)) == []


def test_a_gpu_gone_since_the_spec_is_a_finding(generated: tuple[Path, Path]) -> None:
    """GPU 5 off the bus: its node is gone (the device node finding) and the recorded
    presence says which GPU (the check a create makes)."""
    from nvhook.mock import load_profile
    from nvhook.mock.mutate import remove_gpu

    gpu = load_profile("dgx-a100").gpus[5]
    root, spec_dir = generated
    remove_gpu(root, 5)
    findings = check_specs([str(spec_dir)], root=str(root))
    (gone,) = [f for f in findings if f.what == f"GPU {gpu.minor}"]
    assert gone.message == (
        f"records GPU {gpu.uuid}, which is gone ({root}/proc/driver/nvidia/gpus/{gpu.bus_id} "
        "is missing)"
    )
    assert gone.fix.startswith(f"run: nvhook cdi generate --root {root} --output ")
