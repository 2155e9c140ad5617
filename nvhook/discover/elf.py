"""Just enough ELF to tell a library's architecture and SONAME.

Used for libraries found by searching directories rather than through
``ld.so.cache`` (which already records both): ``/usr/lib`` holds 32-bit
libraries on Red Hat systems and 64-bit ones elsewhere, so a file is taken only
when its class and machine match, and its ``DT_SONAME`` names the symlink the
container needs. Reads a few hundred bytes with ``pread``; a file that is not a
well-formed ELF object gives None, never an exception.
"""

from __future__ import annotations

import os
import struct

from oci._frozen import Frozen

__all__ = ["ARCH_ELF", "ElfInfo", "read_elf"]

EM_386 = 3
EM_X86_64 = 62
EM_AARCH64 = 183

#: Architecture name -> (ELF class: 32 or 64, e_machine).
ARCH_ELF: dict[str, tuple[int, int]] = {
    "x86_64": (64, EM_X86_64),
    "i386": (32, EM_386),
    "aarch64": (64, EM_AARCH64),
}

_PT_LOAD = 1
_PT_DYNAMIC = 2
_DT_NULL = 0
_DT_STRTAB = 5
_DT_SONAME = 14
_MAX_PHDRS = 256
_MAX_DYNAMIC = 1 << 16  # bytes of the dynamic section read at most
_MAX_SONAME = 1024


class ElfInfo(Frozen):
    """What an ELF file says about itself."""

    elf_class: int  # 32 or 64
    machine: int  # e_machine
    soname: str | None  # DT_SONAME, None when there is none


def read_elf(path: str) -> ElfInfo | None:
    """Class, machine and SONAME of the ELF file at ``path`` (on this machine), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _read(fd)
    except (OSError, struct.error, ValueError):
        return None
    finally:
        os.close(fd)


def _read(fd: int) -> ElfInfo | None:
    ident = os.pread(fd, 64, 0)
    if len(ident) < 52 or ident[:4] != b"\x7fELF":
        return None
    cls, data = ident[4], ident[5]
    if cls not in (1, 2) or data not in (1, 2):
        return None
    end = "<" if data == 1 else ">"
    machine = struct.unpack_from(end + "H", ident, 18)[0]
    if cls == 2:
        if len(ident) < 64:
            return None
        phoff = struct.unpack_from(end + "Q", ident, 32)[0]
        phentsize, phnum = struct.unpack_from(end + "HH", ident, 54)
        phdr, phmin = end + "IIQQQQQQ", 56  # type flags off vaddr paddr filesz memsz align
        dyn, dynsize = end + "qQ", 16
    else:
        phoff = struct.unpack_from(end + "I", ident, 28)[0]
        phentsize, phnum = struct.unpack_from(end + "HH", ident, 42)
        phdr, phmin = end + "IIIIIIII", 32  # type off vaddr paddr filesz memsz flags align
        dyn, dynsize = end + "iI", 8
    info = ElfInfo(32 if cls == 1 else 64, machine, None)
    if phentsize < phmin or not 0 < phnum <= _MAX_PHDRS:
        return info
    table = os.pread(fd, phentsize * phnum, phoff)
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None  # (offset, filesz)
    for i in range(min(phnum, len(table) // phentsize)):
        fields = struct.unpack_from(phdr, table, i * phentsize)
        if cls == 2:
            p_type, p_offset, p_vaddr, p_filesz = fields[0], fields[2], fields[3], fields[5]
        else:
            p_type, p_offset, p_vaddr, p_filesz = fields[0], fields[1], fields[2], fields[4]
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC and dynamic is None:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return info
    raw = os.pread(fd, min(dynamic[1], _MAX_DYNAMIC), dynamic[0])
    strtab = soname = None
    for tag, value in struct.iter_unpack(dyn, raw[: len(raw) - len(raw) % dynsize]):
        if tag == _DT_NULL:
            break
        if tag == _DT_STRTAB:
            strtab = value
        elif tag == _DT_SONAME:
            soname = value
    if strtab is None or soname is None:
        return info
    for vaddr, offset, filesz in loads:  # DT_STRTAB is an address; map it to a file offset
        if vaddr <= strtab < vaddr + filesz:
            name = os.pread(fd, _MAX_SONAME, offset + (strtab - vaddr) + soname)
            stop = name.find(b"\0")
            if stop > 0:
                return ElfInfo(info.elf_class, machine, os.fsdecode(name[:stop]))
            break
    return info
