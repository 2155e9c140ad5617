"""Registry: directories, priorities, conflicts, errors, resolution order."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from oci.cdi.edits import Edits
from oci.cdi.index import resolve
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


#: What the registry does with an entry of each name. The reference library's rule
#: (oci/cdi/registry.py): a regular file (links followed) whose name ends, case-sensitively,
#: with .json or .yaml is read; hidden names are not special; anything else is ignored
#: without an error (and listed in Registry.ignored).
SPEC_FILE_NAMES: dict[str, str] = {
    "a.json": "read",
    "b.yaml": "read",
    "c.yml": "ignored",  # the reference library reads only .json and .yaml
    ".hidden.json": "read",
    "link.json": "read",  # a symlink to a spec outside the directory
    ".json": "error",  # listed, but its extension is none: an error against it
    "d.JSON": "ignored",
    "e.Yaml": "ignored",
    "f.json.bak": "ignored",
    "g.json~": "ignored",
    "h.yaml.orig": "ignored",
    "i.jsonl": "ignored",
    "j.txt": "ignored",
    "json": "ignored",
    "k.cdi": "ignored",
    "dir.json": "ignored",  # a directory holding a spec
    "dangling.json": "ignored",  # a symlink to nothing
    "socket.json": "ignored",  # a unix socket (a fifo alike, but opening it cannot hang)
}


def _spec_file_zoo(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A directory with an entry of each name in SPEC_FILE_NAMES, every file a valid spec
    defining one device of its own; and the device each name defines."""
    d = tmp_path / "d"
    d.mkdir()
    devices = {name: f"vendor.io/zoo=dev{i}" for i, name in enumerate(SPEC_FILE_NAMES)}
    for name, qualified in devices.items():
        kind, _, device = qualified.partition("=")
        if name == "link.json":
            target = write_spec(tmp_path / "elsewhere" / "target.txt", kind, {device: ["Z=1"]})
            (d / name).symlink_to(target)
        elif name == "dir.json":
            write_spec(d / name / "inner.json", kind, {device: ["Z=1"]})
        elif name == "dangling.json":
            (d / name).symlink_to(tmp_path / "nothing.json")
        elif name == "socket.json":
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(str(d / name))
        elif name.lower().endswith((".yaml", ".yml")):
            (d / name).write_text(
                f"cdiVersion: 0.5.0\nkind: {kind}\n"
                f"devices:\n  - name: {device}\n    containerEdits:\n      env: [Z=1]\n"
            )
        else:
            write_spec(d / name, kind, {device: ["Z=1"]})
    return d, devices


def _named(what: str) -> list[str]:
    return sorted(name for name, outcome in SPEC_FILE_NAMES.items() if outcome == what)


def test_which_file_names_are_read(tmp_path: Path) -> None:
    """The names read (a link is untrusted, so refused by default: test_registry_trust.py)."""
    d, devices = _spec_file_zoo(tmp_path)
    reg = Registry([str(d)], untrusted="warn")
    assert {n: Path(defn.path).name for n, defn in reg.devices.items()} == {
        devices[name]: name for name in _named("read")
    }
    assert [Path(s.source).name for s in reg.specs] == _named("read")  # in name order
    assert reg.errors == {
        str(d / name): (
            f"{d / name}: unsupported file extension none (a CDI spec is .json or .yaml)",
        )
        for name in _named("error")
    }
    assert sorted(Path(path).name for path in reg.ignored) == _named("ignored")
    assert reg.ignored[str(d / "c.yml")] == (
        "ignored: not a CDI spec file name (only *.json and *.yaml are read)"
    )
    assert reg.ignored[str(d / "dir.json")] == "ignored: not a regular file"


def test_which_file_names_the_indexed_resolve_reads(tmp_path: Path) -> None:
    d, devices = _spec_file_zoo(tmp_path)
    read = [devices[name] for name in _named("read")]
    unread = tuple(devices[name] for name in [*_named("error"), *_named("ignored")])
    assert resolve([str(d)], read, untrusted="warn").env == ("Z=1",) * len(read)
    with pytest.raises(CdiResolveError) as info:
        resolve([str(d)], [*read, *unread], untrusted="warn")
    assert info.value.names == unread
    assert f"problems in 1 file(s), see `nvhook cdi list`: {d / '.json'})" in str(info.value)


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
