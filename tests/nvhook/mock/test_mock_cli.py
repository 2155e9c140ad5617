"""``nvhook mock profiles`` and ``nvhook mock create``."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.mock import list_profiles, load_profile


def test_profiles_lists_every_profile_with_its_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mock", "profiles"]) == 0
    out = capsys.readouterr().out
    for name in list_profiles():
        p = load_profile(name)
        assert f"{name}: " in out
        assert f"driver {p.driver.version} " in out and f"CUDA {p.driver.cuda}" in out
        for g in p.gpus:
            assert f"GPU {g.index}  {g.name}  {g.uuid}  bus {g.bus_id}  minor {g.minor}" in out
            assert f"{g.model.architecture} {g.model.compute_capability}" in out
            for d in g.mig_devices:
                assert d.uuid in out


def test_profiles_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mock", "profiles", "--json", "l40s-x4"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["driver"]["version"] == "535.230.02"
    assert [(g["index"], g["minor"]) for g in doc["gpus"]] == [(0, 1), (1, 2), (2, 3), (3, 0)]


def test_create_lays_out_a_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "h100"
    assert main(["mock", "create", "--profile", "h100-pcie", "--nodes", "file", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"mock machine h100-pcie at {target}: 1 GPU(s)" in out
    assert (target / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").is_symlink()
    assert (target / "dev/nvidia0").is_file()


def test_create_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # an unknown profile name is a usage error, not a device error
    assert main(["mock", "create", "-p", "dgx-z", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nvhook: unknown mock profile 'dgx-z'; known profiles: ")
    assert err.count("\n") == 1
    assert main(["mock", "profiles", "dgx-z"]) == 2
    assert capsys.readouterr().err.startswith("nvhook: unknown mock profile 'dgx-z'")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("")
    assert main(["mock", "create", "-p", "no-gpu", str(tmp_path / "full")]) == 6
    assert "exists and is not empty" in capsys.readouterr().err


def test_create_restricts_the_driver_nodes_to_a_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--device-file-gid 44 --device-file-mode 0660``: as a driver loaded with
    ``NVreg_DeviceFileGID=44 NVreg_DeviceFileMode=0660``, its nodes and its params."""
    target = tmp_path / "h100"
    argv = ["mock", "create", "-p", "h100-pcie", "--nodes", "file", "--device-file-mode", "0660"]
    argv += ["--device-file-gid", str(os.getegid()), str(target)]
    assert main(argv) == 0
    for name in ("nvidia0", "nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"):
        st = (target / "dev" / name).stat()
        assert stat.S_IMODE(st.st_mode) == 0o660, name
    params = (target / "proc/driver/nvidia/params").read_text()
    assert f"DeviceFileGID: {os.getegid()}\n" in params and "DeviceFileMode: 432\n" in params
    plain = tmp_path / "plain"
    assert main(["mock", "create", "-p", "h100-pcie", "--nodes", "file", str(plain)]) == 0
    assert stat.S_IMODE((plain / "dev/nvidia0").stat().st_mode) == 0o666
    assert (
        "DeviceFileGID: 0\nDeviceFileMode: 438\n"
        in (plain / "proc/driver/nvidia/params").read_text()
    )
    capsys.readouterr()
    bad = ["mock", "create", "-p", "h100-pcie", "--device-file-mode", "rw", str(tmp_path / "b")]
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert err == "nvhook: --device-file-mode 'rw': expected an octal mode (e.g. 0660)\n"
    big = ["mock", "create", "-p", "h100-pcie", "--device-file-mode", "1777", str(tmp_path / "b")]
    assert main(big) == 2
    assert "device file mode 1777: expected an octal mode 0-0777" in capsys.readouterr().err
