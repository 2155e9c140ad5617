"""Untrusted CDI spec files (oci.cdi.trust): refused by default, or used with a warning.

A spec's hooks run as root on the host, so a spec file someone other than root may write
(its owner, its mode, its directory's) or a link (whose target is not judged) is not read
unless the caller asks to be only warned. Owners other than root need root to set up.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oci.cdi import index, registry
from oci.cdi.index import resolve
from oci.cdi.registry import Registry, read_checked
from oci.errors import CdiResolveError, CdiTrustError
from tests.oci.cdi.test_registry_index import write_spec
from tests.support.basics import require_root

NAME = "vendor.io/gpu=x"


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    d = tmp_path / "cdi"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    write_spec(d / "a.json", "vendor.io/gpu", {"x": ["A=1"]})
    os.chmod(d / "a.json", 0o644)
    return d


def test_a_trusted_spec_is_used(spec_dir: Path) -> None:
    reg = Registry([str(spec_dir)])
    assert list(reg.devices) == [NAME] and reg.untrusted == {} and reg.errors == {}
    assert resolve([str(spec_dir)], [NAME]).env == ("A=1",)


@pytest.mark.root
def test_a_spec_owned_by_another_user_is_refused_with_one_line(spec_dir: Path) -> None:
    require_root()  # chown
    path = spec_dir / "a.json"
    os.chown(path, 1000, 1000)
    reg = Registry([str(spec_dir)])
    assert reg.devices == {}
    (line,) = reg.errors[str(path)]
    assert line == (
        f"{path}: CDI spec file is owned by uid 1000, not root (uid 1000, mode 0644), and its "
        f"hooks would run as root: chown root {path} and chmod go-w {path}, or remove it "
        "(not used)"
    )
    assert list(reg.untrusted) == [str(path)]
    warnings: list[str] = []
    with pytest.raises(CdiResolveError) as info:
        resolve([str(spec_dir)], [NAME], warnings=warnings)
    assert "untrusted spec files are not read: " + str(path) in str(info.value)
    assert "\n" not in str(info.value)
    assert warnings == [line]
    # deliberately shared: used, and still warned of
    assert list(Registry([str(spec_dir)], untrusted="warn").devices) == [NAME]
    warnings = []
    assert resolve([str(spec_dir)], [NAME], warnings=warnings, untrusted="warn").env == ("A=1",)
    used = "(used anyway: untrusted spec files are only warned of)"
    assert warnings == [line.replace("(not used)", used)]


@pytest.mark.parametrize("mode", [0o664, 0o646])
def test_a_spec_writable_by_group_or_others_is_refused(spec_dir: Path, mode: int) -> None:
    path = spec_dir / "a.json"
    os.chmod(path, mode)
    reg = Registry([str(spec_dir)])
    assert reg.devices == {}
    assert (
        f"writable by group or others (uid {os.geteuid()}, mode {mode:04o})"
        in (reg.errors[str(path)][0])
    )
    with pytest.raises(CdiResolveError):
        resolve([str(spec_dir)], [NAME])
    with pytest.raises(CdiTrustError, match="chmod go-w"):
        read_checked(str(path))


def test_a_spec_in_a_directory_others_may_write_is_refused(spec_dir: Path) -> None:
    os.chmod(spec_dir, 0o777)
    reg = Registry([str(spec_dir)])
    assert reg.devices == {}
    assert reg.errors[str(spec_dir / "a.json")][0].startswith(
        f"{spec_dir}: CDI spec directory is writable by group or others "
        f"(uid {os.geteuid()}, mode 0777)"
    )
    assert f"chmod go-w {spec_dir}" in reg.errors[str(spec_dir / "a.json")][0]


def test_a_linked_spec_is_refused_by_default(spec_dir: Path, tmp_path: Path) -> None:
    target = write_spec(tmp_path / "elsewhere" / "b.json", "vendor.io/gpu", {"y": ["B=1"]})
    (spec_dir / "b.json").symlink_to(target)
    reg = Registry([str(spec_dir)])
    assert list(reg.devices) == [NAME]
    assert "is a symbolic link" in reg.errors[str(spec_dir / "b.json")][0]
    with pytest.raises(CdiTrustError, match="symbolic link"):
        read_checked(str(spec_dir / "b.json"))
    assert "vendor.io/gpu=y" in Registry([str(spec_dir)], untrusted="warn").devices


def test_the_index_never_lets_an_untrusted_file_through(
    spec_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdict is judged on every call: a file the index remembers as trusted (its
    identity unchanged: a chmod of the directory changes no file's ctime) is refused."""
    monkeypatch.setattr(index, "RACY_NS", 0)
    cache = str(tmp_path / "cache")
    assert resolve([str(spec_dir)], [NAME], cache_dir=cache).env == ("A=1",)
    assert os.listdir(cache)  # the index was written
    os.chmod(spec_dir, 0o777)
    with pytest.raises(CdiResolveError, match="CDI spec directory is writable by group"):
        resolve([str(spec_dir)], [NAME], cache_dir=cache)
    os.chmod(spec_dir, 0o755)
    os.chmod(spec_dir / "a.json", 0o666)
    with pytest.raises(CdiResolveError, match="CDI spec file is writable by group"):
        resolve([str(spec_dir)], [NAME], cache_dir=cache)


def test_a_file_made_untrusted_after_the_listing_is_refused_as_opened(
    spec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is read is judged by fstat of what was opened, not by the listing's stat."""
    real = index.list_spec_files

    def listed_then_changed(directory: str, ignored: dict[str, str] | None = None) -> object:
        out = real(directory, ignored)
        os.chmod(spec_dir / "a.json", 0o666)
        return out

    monkeypatch.setattr(index, "list_spec_files", listed_then_changed)  # the indexed scan's
    monkeypatch.setattr(registry, "list_spec_files", listed_then_changed)  # the full scan's
    with pytest.raises(CdiResolveError, match="writable by group or others"):
        resolve([str(spec_dir)], [NAME])
    os.chmod(spec_dir / "a.json", 0o644)
    reg = Registry([str(spec_dir)])
    assert reg.devices == {} and "writable by group" in reg.errors[str(spec_dir / "a.json")][0]


def test_untrusted_must_be_refuse_or_warn(spec_dir: Path) -> None:
    with pytest.raises(ValueError, match="refuse"):
        Registry([str(spec_dir)], untrusted="ignore")
