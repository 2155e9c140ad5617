"""Compiling the mock machine's C sources: content-hash cache and readable failures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nvhook.errors import MockError
from nvhook.mock import build


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NVHOOK_MOCK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def fresh_toolchain() -> Iterator[None]:
    build.toolchain.cache_clear()
    yield
    build.toolchain.cache_clear()


def unit(source: bytes, output: str = "libt.so") -> build.Unit:
    return build.Unit(
        output=output,
        sources=(("t.c", source),),
        compile=("t.c",),
        args=("-shared", "-fPIC", f"-Wl,-soname,{output}"),
    )


def test_a_unit_is_compiled_once_and_then_served_from_the_cache(cache: Path) -> None:
    first = build.build([unit(b"int answer(void) { return 42; }\n")])[0]
    assert first.is_file() and first.is_relative_to(cache)
    before = first.stat()
    again = build.build([unit(b"int answer(void) { return 42; }\n")])[0]
    assert again == first
    assert (again.stat().st_ino, again.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    other = build.build([unit(b"int answer(void) { return 43; }\n")])[0]
    assert other != first
    assert first.read_bytes()[:4] == b"\x7fELF"
    assert list((cache / "tmp").iterdir()) == []


def test_the_32_bit_libc_stand_in(cache: Path) -> None:
    standin = build.build([build.libc32_standin()])[0].read_bytes()
    assert standin[:5] == b"\x7fELF\x01"  # ELFCLASS32
    assert int.from_bytes(standin[18:20], "little") == 3  # EM_386
    assert b"libc.so.6" in standin


def test_a_compile_error_names_the_output(cache: Path) -> None:
    with pytest.raises(MockError, match=r"failed to build libbroken\.so .*error"):
        build.build([unit(b"this is not C\n", "libbroken.so")])


def test_a_missing_compiler(
    cache: Path, monkeypatch: pytest.MonkeyPatch, fresh_toolchain: None
) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(MockError, match=r"no C compiler '/nonexistent/cc'.*install gcc"):
        build.build([unit(b"int x;\n")])


def test_cache_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NVHOOK_MOCK_CACHE", str(tmp_path / "explicit"))
    assert build.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("NVHOOK_MOCK_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_dir() == tmp_path / "xdg/nvhook/mock"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert build.cache_dir() == tmp_path / "home/.cache/nvhook/mock"
