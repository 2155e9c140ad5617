"""``nvhook mock profiles`` and ``nvhook mock create``."""

from __future__ import annotations

import json
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
