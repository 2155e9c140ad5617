"""oci._cache: whose cache files and directories are believed, and how they are written."""

from __future__ import annotations

import marshal
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from oci import _cache

NAME = _cache.cache_name("test", "/etc/some/config.toml")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def test_round_trip_makes_a_private_directory_and_file(cache: Path) -> None:
    assert _cache.load(str(cache), NAME) is None  # nothing yet, and nothing created
    assert not cache.exists()
    warnings: list[str] = []
    assert _cache.store(str(cache), NAME, ("key", {"a": (1, 2)}), warnings)
    assert _cache.load(str(cache), NAME, warnings) == ("key", {"a": (1, 2)})
    assert warnings == []
    assert (mode(cache), mode(cache / NAME)) == (0o700, 0o600)
    assert [p.name for p in cache.iterdir()] == [NAME]  # no temporary file left


def test_names_are_stable_and_carry_the_python_version() -> None:
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}"
    assert _cache.cache_name("test", "/etc/some/config.toml") == NAME
    assert NAME.startswith("test-") and NAME.endswith(f".{tag}.marshal")
    assert _cache.cache_name("test", "/etc/some/other.toml") != NAME
    assert _cache.fnv1a64("") == 0xCBF29CE484222325  # FNV-1a's offset basis


def test_a_file_of_another_python_is_not_read(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cache, "PY_TAG", "py27")
    other = _cache.cache_name("test", "/etc/some/config.toml")
    assert _cache.store(str(cache), other, "written by python 2.7")
    monkeypatch.undo()
    assert other != NAME
    assert _cache.load(str(cache), NAME) is None


def test_umask_does_not_change_the_file_mode(cache: Path) -> None:
    old = os.umask(0o277)
    try:
        assert _cache.store(str(cache), NAME, 1)
    finally:
        os.umask(old)
    assert mode(cache / NAME) == 0o600
    assert _cache.load(str(cache), NAME) == 1


@pytest.mark.parametrize("file_mode", [0o644, 0o640, 0o400, 0o700])
def test_a_file_not_mode_0600_is_ignored(cache: Path, file_mode: int) -> None:
    _cache.store(str(cache), NAME, "forged?")
    (cache / NAME).chmod(file_mode)
    assert _cache.load(str(cache), NAME) is None
    (cache / NAME).chmod(0o600)
    assert _cache.load(str(cache), NAME) == "forged?"  # the control


@needs_root
def test_a_forged_file_owned_by_another_uid_is_ignored(cache: Path) -> None:
    _cache.store(str(cache), NAME, "ours")
    forged = cache / NAME
    forged.write_bytes(marshal.dumps("forged"))
    os.chown(forged, 65534, 65534)
    assert mode(forged) == 0o600
    assert _cache.load(str(cache), NAME) is None
    assert _cache.store(str(cache), NAME, "ours again")  # replaced, not written through
    assert forged.stat().st_uid == os.geteuid()
    assert _cache.load(str(cache), NAME) == "ours again"


def test_a_link_at_the_cache_name_is_not_followed(cache: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(marshal.dumps("through a link"))
    target.chmod(0o600)
    cache.mkdir(mode=0o700)
    (cache / NAME).symlink_to(target)
    assert _cache.load(str(cache), NAME) is None
    assert _cache.store(str(cache), NAME, "ours")  # the link is replaced, the target kept
    assert not (cache / NAME).is_symlink()
    assert marshal.loads(target.read_bytes()) == "through a link"


def test_a_directory_others_can_write_is_not_used(cache: Path) -> None:
    _cache.store(str(cache), NAME, "planted while it was open")
    cache.chmod(0o777)
    warnings: list[str] = []
    assert _cache.load(str(cache), NAME, warnings) is None
    assert not _cache.store(str(cache), NAME, "new", warnings)
    assert warnings == [  # said once, with the fix
        f"cache directory {cache} is writable by group or others (mode 0777): chmod go-w it; "
        "not using it till then"
    ]
    assert [p.name for p in cache.iterdir()] == [NAME]
    cache.chmod(0o755)  # writable by its owner only: fine
    assert _cache.load(str(cache), NAME) == "planted while it was open"


def test_a_group_writable_directory_is_not_used(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    cache.chmod(0o770)
    warnings: list[str] = []
    assert not _cache.store(str(cache), NAME, 1, warnings)
    assert "(mode 0770)" in warnings[0]
    assert list(cache.iterdir()) == []


@needs_root
def test_a_directory_owned_by_another_uid_is_not_used(cache: Path) -> None:
    _cache.store(str(cache), NAME, "ours")
    os.chown(cache, 65534, 65534)
    warnings: list[str] = []
    assert _cache.load(str(cache), NAME, warnings) is None
    assert warnings == [
        f"cache directory {cache} is owned by uid 65534, not {os.geteuid()}: remove it (it is "
        "re-made 0700); not using it till then"
    ]


@pytest.fixture
def planted(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every temporary name the next store could pick is a link to a file of someone's."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    cache.mkdir(mode=0o700)
    names = iter(f".{NAME}.{n:016x}.tmp" for n in range(3))
    monkeypatch.setattr(_cache, "_temp_name", lambda name: next(names))
    for n in range(3):
        (cache / f".{NAME}.{n:016x}.tmp").symlink_to(victim)
    yield victim


def test_a_link_planted_at_the_temporary_name_is_never_followed(cache: Path, planted: Path) -> None:
    assert not _cache.store(str(cache), NAME, "ours")  # the name is taken: no cache this time
    assert planted.read_text() == "precious\n"
    assert mode(planted) == 0o644  # not chmodded through the link either
    assert not (cache / NAME).exists()
    assert _cache.load(str(cache), NAME) is None


def test_temporary_names_are_unpredictable(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = _cache._temp_name

    def spy(name: str) -> str:
        seen.append(real(name))
        return seen[-1]

    monkeypatch.setattr(_cache, "_temp_name", spy)
    for value in range(3):
        assert _cache.store(str(cache), NAME, value)
    assert len(set(seen)) == 3
    assert all(s.startswith(f".{NAME}.") and s.endswith(".tmp") for s in seen)
    assert [p.name for p in cache.iterdir()] == [NAME]


@pytest.mark.parametrize(
    "data", [b"", b"\x00garbage", marshal.dumps(("k", "v" * 100))[:-7]], ids=repr
)
def test_corrupt_files_are_none(cache: Path, data: bytes) -> None:
    _cache.store(str(cache), NAME, None)
    (cache / NAME).write_bytes(data)
    assert _cache.load(str(cache), NAME) is None


@pytest.mark.parametrize("how", ["a file", "under a file"])
def test_a_directory_that_cannot_be_made_is_no_error(cache: Path, how: str) -> None:
    cache.write_text("")
    directory = cache if how == "a file" else cache / "sub"
    warnings: list[str] = []
    assert _cache.load(str(directory), NAME, warnings) is None
    assert not _cache.store(str(directory), NAME, 1, warnings)
    assert warnings == []


def test_a_fifo_at_the_name_is_not_read_and_is_replaced(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    os.mkfifo(cache / NAME, 0o600)
    assert _cache.load(str(cache), NAME) is None  # at once: O_NONBLOCK, then not a file
    assert _cache.store(str(cache), NAME, 1)
    assert _cache.load(str(cache), NAME) == 1
