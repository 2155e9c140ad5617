"""Minimal ELF64 objects written byte by byte, for a mock machine of another architecture.

A profile built for an architecture this machine's C compiler does not target (``arch =
"aarch64"`` laid out on x86-64) cannot compile its driver stubs. What discovery, ``ldconfig``
and a container's loader look at is small, so it is written here instead:

- :func:`shared_object`: an ``ET_DYN`` library with the ELF class and ``e_machine`` of its
  architecture, a ``DT_SONAME``, ``DT_NEEDED libc.so.6`` (as every driver library has), and
  the tables a dynamic loader needs to map it (``DT_HASH``, ``DT_SYMTAB`` with the null
  symbol, ``DT_STRTAB``). Two ``PT_LOAD`` segments as a linker lays them out: headers and
  tables read-only, the dynamic section read-write (the loader relocates its pointers in
  place), and a ``PT_GNU_STACK`` asking for a stack that is not executable, as every linker
  writes one (without it a loader assumes an executable stack, which newer glibc (2.43) refuses to
  give a library loaded by ``dlopen``: "cannot enable executable stack"). It exports
  nothing: the mock's NVML and CUDA behaviour exist only in the compiled stubs.
- :func:`executable`: a static ``ET_EXEC`` whose code calls ``exit(0)`` (the driver's
  binaries on such a profile are stand-ins with the right machine, nothing more).

The same writer makes x86-64 objects; the tests load those with the real loader (and run
the executable), which checks the layout that the aarch64 ones share. No section headers:
loaders, ``ldconfig`` and ``readelf -d`` work from the program headers. Deterministic bytes.
"""

from __future__ import annotations

import struct

__all__ = ["MACHINES", "executable", "shared_object"]

#: Architecture -> (``e_machine``, the code of ``exit(0)``).
MACHINES: dict[str, tuple[int, bytes]] = {
    # mov x0, #0; mov x8, #93 (exit); svc #0
    "aarch64": (183, struct.pack("<3I", 0xD2800000, 0xD2800BA8, 0xD4000001)),
    # xor edi, edi; mov eax, 60 (exit); syscall
    "x86_64": (62, bytes.fromhex("31ffb83c0000000f05")),
}

_EHDR = 64
_PHDR = 56
_PAGE = 0x10000  # the largest page size of both architectures (aarch64 kernels with 64K pages)
_PT_LOAD, _PT_DYNAMIC = 1, 2
_PT_GNU_STACK = 0x6474E551
_PF_X, _PF_W, _PF_R = 1, 2, 4
_ET_EXEC, _ET_DYN = 2, 3
_DT = {"NULL": 0, "NEEDED": 1, "HASH": 4, "STRTAB": 5, "SYMTAB": 6, "STRSZ": 10, "SYMENT": 11}
_DT_SONAME = 14


def _machine(arch: str) -> tuple[int, bytes]:
    try:
        return MACHINES[arch]
    except KeyError:
        raise ValueError(f"no ELF writer for architecture {arch!r}") from None


def _ehdr(kind: int, machine: int, entry: int, phnum: int) -> bytes:
    ident = b"\x7fELF" + bytes((2, 1, 1, 0)) + bytes(8)  # ELFCLASS64, little endian, SysV
    return ident + struct.pack(
        "<HHIQQQIHHHHHH", kind, machine, 1, entry, _EHDR, 0, 0, _EHDR, _PHDR, phnum, 64, 0, 0
    )


def _phdr(kind: int, flags: int, offset: int, vaddr: int, size: int, align: int) -> bytes:
    return struct.pack("<IIQQQQQQ", kind, flags, offset, vaddr, vaddr, size, size, align)


def _align(n: int, to: int) -> int:
    return (n + to - 1) & -to


def shared_object(
    arch: str, soname: str | None, *, name: str = "", needed: tuple[str, ...] = ("libc.so.6",)
) -> bytes:
    """An ELF shared object for ``arch`` with ``soname`` (None: no ``DT_SONAME``, as the Xorg
    driver module), needing ``needed``; ``name`` (default: the SONAME) goes in its note."""
    machine, _ = _machine(arch)
    strings = bytearray(b"\0")
    offsets = {}
    for text in (*needed, *([soname] if soname else [])):
        offsets[text] = len(strings)
        strings += text.encode() + b"\0"
    note = f"nvhook mock machine: {name or soname} ({arch})\0".encode()
    hash_at = _EHDR + 4 * _PHDR  # after the four program headers
    hash_table = struct.pack("<4I", 1, 1, 0, 0)  # nbucket 1, nchain 1, bucket[0], chain[0]
    symtab_at = hash_at + len(hash_table)
    symtab = bytes(24)  # the null symbol
    strtab_at = symtab_at + len(symtab)
    text_end = strtab_at + len(strings) + len(note)
    dynamic_at = _align(text_end, 8)
    entries = [(_DT["NEEDED"], offsets[n]) for n in needed]
    if soname:
        entries.append((_DT_SONAME, offsets[soname]))
    entries += [
        (_DT["HASH"], hash_at),
        (_DT["STRTAB"], strtab_at),
        (_DT["SYMTAB"], symtab_at),
        (_DT["STRSZ"], len(strings)),
        (_DT["SYMENT"], 24),
        (_DT["NULL"], 0),
    ]
    dynamic = b"".join(struct.pack("<qQ", tag, value) for tag, value in entries)
    data_vaddr = _PAGE + dynamic_at  # the next page, congruent with its file offset
    head = _ehdr(_ET_DYN, machine, 0, 4)
    head += _phdr(_PT_LOAD, _PF_R, 0, 0, text_end, _PAGE)
    head += _phdr(_PT_LOAD, _PF_R | _PF_W, dynamic_at, data_vaddr, len(dynamic), _PAGE)
    head += _phdr(_PT_DYNAMIC, _PF_R | _PF_W, dynamic_at, data_vaddr, len(dynamic), 8)
    head += _phdr(_PT_GNU_STACK, _PF_R | _PF_W, 0, 0, 0, 16)
    body = head + hash_table + symtab + bytes(strings) + note
    return body + bytes(dynamic_at - len(body)) + dynamic


def executable(arch: str) -> bytes:
    """A static ELF executable for ``arch`` that exits with status 0."""
    machine, code = _machine(arch)
    base = 0x400000
    start = _EHDR + _PHDR
    size = start + len(code)
    head = _ehdr(_ET_EXEC, machine, base + start, 1)
    head += _phdr(_PT_LOAD, _PF_R | _PF_X, 0, base, size, _PAGE)
    return head + code
