"""Registry: directories, priorities, conflicts, errors, resolution order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oci.cdi.edits import Edits
from oci.cdi.registry import Registry
from oci.errors import CdiNameError, CdiResolveError
from tests.support.unprivileged import call_unprivileged


def write_spec(path: Path, kind: str, devices: dict[str, list[str]], **extra: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "cdiVersion": "0.5.0",
        "kind": kind,
        **extra,
        "devices": [{"name": n, "containerEdits": {"env": env}} for n, env in devices.items()],
    }
    path.write_text(json.dumps(body))
    return path


def test_missing_directories_are_empty(tmp_path: Path) -> None:
    reg = Registry([str(tmp_path / "nope"), str(tmp_path / "nada")])
    assert reg.devices == {}
    assert reg.errors == {}


def test_devices_sorted_with_their_files(tmp_path: Path) -> None:
    b = write_spec(tmp_path / "d" / "b.json", "vendor.io/b", {"x": ["B=1"]})
    a = write_spec(tmp_path / "d" / "a.json", "vendor.io/a", {"y": ["A=1"], "1": ["A=2"]})
    reg = Registry([str(tmp_path / "d")])
    assert {n: d.path for n, d in reg.devices.items()} == {
        "vendor.io/a=1": str(a),
        "vendor.io/a=y": str(a),
        "vendor.io/b=x": str(b),
    }
    assert list(reg.devices) == sorted(reg.devices)


def test_conflict_recorded_against_both_files(tmp_path: Path) -> None:
    a = write_spec(tmp_path / "d" / "a.json", "vendor.io/a", {"x": ["A=1"], "keep": ["K=1"]})
    b = write_spec(tmp_path / "d" / "b.json", "vendor.io/a", {"x": ["A=2"]})
    reg = Registry([str(tmp_path / "d")])
    assert "vendor.io/a=x" not in reg.devices
    assert "vendor.io/a=keep" in reg.devices
    assert set(reg.errors) == {str(a), str(b)}
    assert str(b) in reg.errors[str(a)][0] and str(a) in reg.errors[str(b)][0]


def test_later_directory_wins_without_error(tmp_path: Path) -> None:
    write_spec(tmp_path / "etc" / "a.json", "vendor.io/a", {"x": ["FROM=etc"]})
    write_spec(tmp_path / "run" / "a.json", "vendor.io/a", {"x": ["FROM=run"]})
    reg = Registry([str(tmp_path / "etc"), str(tmp_path / "run")])
    assert reg.errors == {}
    assert reg.resolve(["vendor.io/a=x"]).env == ("FROM=run",)


def test_only_spec_suffixes_are_read(tmp_path: Path) -> None:
    write_spec(tmp_path / "d" / "a.json.bak", "vendor.io/a", {"x": ["A=1"]})
    (tmp_path / "d" / "sub.json").mkdir()
    reg = Registry([str(tmp_path / "d")])
    assert reg.devices == {}
    assert reg.errors == {}


def test_broken_file_is_an_error_and_hides_nothing(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "0.json").write_text("{")
    write_spec(tmp_path / "d" / "1.json", "vendor.io/a", {"x": ["A=1"]})
    reg = Registry([str(tmp_path / "d")])
    assert list(reg.devices) == ["vendor.io/a=x"]
    assert list(reg.errors) == [str(tmp_path / "d" / "0.json")]


def test_spec_dir_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("")
    reg = Registry([str(f)])
    assert "not a directory" in reg.errors[str(f)][0]


def _scan(directory: Path) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    reg = Registry([str(directory)])
    return list(reg.devices), dict(reg.errors)


def test_unreadable_directory_is_an_error(unprivileged_tmp: Path) -> None:
    d = unprivileged_tmp / "d"
    write_spec(d / "a.json", "vendor.io/a", {"x": ["A=1"]})
    assert call_unprivileged(lambda: _scan(d)) == (["vendor.io/a=x"], {})  # reachable
    d.chmod(0)
    assert call_unprivileged(lambda: _scan(d)) == (
        [],
        {str(d): (f"{d}: cannot read CDI spec directory: Permission denied",)},
    )


def test_resolve_names_every_unresolvable_device(tmp_path: Path) -> None:
    write_spec(tmp_path / "d" / "a.json", "vendor.io/a", {"x": ["A=1"]})
    reg = Registry([str(tmp_path / "d")])
    with pytest.raises(CdiResolveError) as info:
        reg.resolve(["vendor.io/a=x", "vendor.io/a=y", "other.io/b=z"])
    assert info.value.names == ("vendor.io/a=y", "other.io/b=z")
    assert "'vendor.io/a=y'" in str(info.value) and "'other.io/b=z'" in str(info.value)


def test_resolve_rejects_malformed_names(tmp_path: Path) -> None:
    reg = Registry([str(tmp_path)])
    with pytest.raises(CdiNameError, match="not-qualified"):
        reg.resolve(["not-qualified"])


def test_resolve_order_and_dedup(tmp_path: Path) -> None:
    write_spec(
        tmp_path / "d" / "a.json",
        "vendor.io/a",
        {"x": ["X=1"], "y": ["Y=1"]},
        containerEdits={"env": ["SPEC_A=1"]},
    )
    write_spec(tmp_path / "d" / "b.json", "vendor.io/b", {"z": ["Z=1"]})
    reg = Registry([str(tmp_path / "d")])
    edits = reg.resolve(["vendor.io/a=y", "vendor.io/b=z", "vendor.io/a=x", "vendor.io/a=y"])
    assert edits.env == ("SPEC_A=1", "Y=1", "Z=1", "X=1")
    assert reg.resolve([]) == Edits()
