"""nvhook.discover.elf on libraries gcc builds here, and on things that are not ELF."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nvhook.discover.elf import EM_386, EM_X86_64, ElfInfo, read_elf
from tests.nvhook.discover import fakeroot

compiler = fakeroot.compiler


def test_64_bit_library(compiler: fakeroot.Compiler) -> None:
    info = read_elf(str(compiler.library("libcuda.so.1", "x86_64")))
    assert info == ElfInfo(64, EM_X86_64, "libcuda.so.1")


@pytest.mark.parametrize("arch", ["i386", "plain32"])
def test_32_bit_library(compiler: fakeroot.Compiler, arch: str) -> None:
    info = read_elf(str(compiler.library("libGLX_nvidia.so.0", arch)))
    assert info == ElfInfo(32, EM_386, "libGLX_nvidia.so.0")


def test_library_without_soname(compiler: fakeroot.Compiler, tmp_path: Path) -> None:
    out = tmp_path / "nosoname.so"
    subprocess.run(["gcc", "-shared", "-o", str(out), str(compiler.cache / "stub.c")], check=True)
    assert read_elf(str(out)) == ElfInfo(64, EM_X86_64, None)


def test_not_elf_truncated_or_missing(compiler: fakeroot.Compiler, tmp_path: Path) -> None:
    text = tmp_path / "script"
    text.write_text("#!/bin/sh\n")
    assert read_elf(str(text)) is None
    assert read_elf(str(tmp_path / "missing")) is None
    assert read_elf(str(tmp_path)) is None  # a directory
    data = compiler.library("libfoo.so.1", "x86_64").read_bytes()
    for n in (0, 4, 16, 51, 63, 64, 200, len(data) // 2):
        cut = tmp_path / f"cut{n}"
        cut.write_bytes(data[:n])
        info = read_elf(str(cut))
        assert info is None or (info.elf_class, info.machine) == (64, EM_X86_64)
        assert info is None or info.soname in (None, "libfoo.so.1")
