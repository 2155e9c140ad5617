"""Read glibc's ``ld.so.cache`` without running ``ldconfig``.

Both on-disk formats are understood, as glibc 2.36's ``ld.so`` and
``ldconfig -p`` read them:

* the old ``ld.so-1.7.0`` format: a 16-byte header (magic, ``nlibs``), then
  ``nlibs`` entries of ``(int32 flags, uint32 key, uint32 value)``; string
  offsets count from the end of the entries. Written by ``ldconfig -c old``,
  and by glibc before 2.32 as the first half of a ``compat`` file;
* the new ``glibc-ld.so.cache1.1`` format: a 48-byte header (magic, version,
  ``nlibs``, ``len_strings``, an endianness flag byte, the extension offset),
  then entries of ``(int32 flags, uint32 key, uint32 value, uint32 osversion,
  uint64 hwcap)``; string offsets count from the start of this header. In a
  ``compat`` file it follows the old entries at the next 8-byte boundary, and
  then it is the one read (as ``ld.so`` does).

Entries are returned in cache order (ldconfig sorts them; ``ld.so`` bisects).
An architecture is chosen by the entry flags, compared as ``ld.so`` compares
them (``_dl_cache_check_flags``): x86-64 ``0x0303``, aarch64 ``0x0a03``, i386
``0x0003`` or a bare ``0x0001`` (ldconfig marks a 32-bit library that does not
link ``libc.so.6`` as plain ELF, and the i386 loader accepts it).

A short, corrupt or foreign file raises :class:`~nvhook.errors.DriverError`
naming the file and the fault; no offset in the file is trusted.

Standard library only, no ``re``: this runs on the runtime shim's path
(docs/architecture.md D5, D6). Values are :class:`oci._frozen.Frozen` classes, not
dataclasses, which would cost more to import than parsing the whole cache.
"""

from __future__ import annotations

import os
import struct
import sys

from nvhook.errors import DriverError
from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "ARCH_FLAGS",
    "FLAG_AARCH64_LIB64",
    "FLAG_ELF",
    "FLAG_ELF_LIBC6",
    "FLAG_X8664_LIB64",
    "CacheEntry",
    "LdCache",
    "parse_ld_cache",
    "read_ld_cache",
]

#: Entry flags (glibc ``elf/ldconfig.h``): the low byte is the library type, the next the ABI.
FLAG_ELF = 0x0001
FLAG_ELF_LIBC6 = 0x0003
FLAG_X8664_LIB64 = 0x0300
FLAG_AARCH64_LIB64 = 0x0A00

#: Architecture name (``os.uname().machine`` spelling) -> the entry flags its loader accepts.
ARCH_FLAGS: dict[str, frozenset[int]] = {
    "x86_64": frozenset({FLAG_ELF_LIBC6 | FLAG_X8664_LIB64}),
    "i386": frozenset({FLAG_ELF, FLAG_ELF_LIBC6}),
    "aarch64": frozenset({FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64}),
}

_MAGIC_OLD = b"ld.so-1.7.0"
_MAGIC_NEW = b"glibc-ld.so.cache1.1"
_OLD_HEADER = 16  # char magic[11]; (pad 1); uint32 nlibs
_OLD_ENTRY = 12  # int32 flags; uint32 key, value
_NEW_HEADER = 48  # magic+version[20]; nlibs; len_strings; uint8 flags; pad[3]; ext_off; unused[3]
_NEW_ENTRY = 24  # int32 flags; uint32 key, value, osversion; uint64 hwcap
_NEW_FLAGS_AT = 28  # offset of the endianness flag byte in the new header
_ENDIAN = {0: "=", 2: "<", 3: ">"}  # 0: unset (glibc < 2.33 wrote its own order); 1: invalid
_NATIVE = "<" if sys.byteorder == "little" else ">"


class CacheEntry(Frozen):
    """One library in the cache: ``soname`` is found at ``path`` (a path on the cache's root)."""

    soname: str
    path: str
    flags: int
    #: 0 for a plain entry; non-zero for a ``glibc-hwcaps`` or legacy hwcap subdirectory variant.
    hwcap: int = 0


class LdCache(Frozen):
    """A parsed cache: where it came from, which format was read, its entries in order."""

    source: str
    format: str  # "new" or "old"
    entries: tuple[CacheEntry, ...]

    def libraries(self, arch: str) -> list[tuple[str, str]]:
        """``(soname, path)`` of the entries that ``arch``'s loader would use, in cache order."""
        accepted = ARCH_FLAGS.get(arch)
        if accepted is None:
            known = ", ".join(sorted(ARCH_FLAGS))
            raise DriverError(f"{self.source}: unknown architecture {arch!r} (known: {known})")
        return [(e.soname, e.path) for e in self.entries if e.flags in accepted]


def read_ld_cache(path: str, *, prefixes: tuple[str, ...] | None = None) -> LdCache:
    """Read and parse the cache file at ``path`` (a path on this machine); see
    :func:`parse_ld_cache` for ``prefixes``."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise DriverError(f"{path}: cannot read ld.so.cache: {e.strerror or e}") from e
    return parse_ld_cache(data, source=path, prefixes=prefixes)


def parse_ld_cache(
    data: bytes, *, source: str = "<ld.so.cache>", prefixes: tuple[str, ...] | None = None
) -> LdCache:
    """Parse the bytes of an ``ld.so.cache``; ``source`` names it in errors.

    With ``prefixes``, only entries whose SONAME starts with one of them are
    decoded and kept (the others are skipped unchecked): decoding is most of
    the cost, and discovery wants a few dozen of a host's thousand libraries.
    """
    size = len(data)
    want = None if prefixes is None else tuple(os.fsencode(p) for p in prefixes)
    if data.startswith(_MAGIC_NEW):
        return _parse_new(data, 0, source, want)
    if not data.startswith(_MAGIC_OLD):
        if not data:
            raise DriverError(f"{source}: ld.so.cache is empty")
        if _MAGIC_OLD.startswith(data) or _MAGIC_NEW.startswith(data):
            raise DriverError(f"{source}: ld.so.cache truncated: {size} bytes")
        raise DriverError(f"{source}: not an ld.so.cache (unknown magic {data[:20]!r})")
    if size < _OLD_HEADER:
        raise DriverError(
            f"{source}: ld.so.cache truncated: old header needs {_OLD_HEADER} bytes, has {size}"
        )
    (nlibs,) = struct.unpack_from(_NATIVE + "I", data, 12)
    end = _OLD_HEADER + nlibs * _OLD_ENTRY
    if end > size:
        raise DriverError(
            f"{source}: ld.so.cache truncated: {nlibs} old-format entries need {end} bytes,"
            f" file has {size}"
        )
    new_at = (end + 7) & ~7  # the new format follows, aligned like struct cache_file_new
    if size >= new_at + _NEW_HEADER and data.startswith(_MAGIC_NEW, new_at):
        return _parse_new(data, new_at, source, want)
    rows = ((f, k, v, 0) for f, k, v in struct.iter_unpack(_NATIVE + "iII", data[_OLD_HEADER:end]))
    return LdCache(source, "old", _entries(data, end, end, rows, source, want))


def _parse_new(data: bytes, base: int, source: str, want: tuple[bytes, ...] | None) -> LdCache:
    size = len(data)
    if size < base + _NEW_HEADER:
        raise DriverError(
            f"{source}: ld.so.cache truncated: new header at {base} needs {_NEW_HEADER} bytes,"
            f" file has {size - base}"
        )
    marker = data[base + _NEW_FLAGS_AT] & 3
    order = _ENDIAN.get(marker)
    if order is None:
        raise DriverError(f"{source}: ld.so.cache has an invalid endianness marker ({marker})")
    nlibs, len_strings = struct.unpack_from(order + "II", data, base + 20)
    strings = base + _NEW_HEADER + nlibs * _NEW_ENTRY  # the string table starts here
    if strings > size:
        raise DriverError(
            f"{source}: ld.so.cache truncated: {nlibs} entries need {strings} bytes,"
            f" file has {size}"
        )
    if strings + len_strings > size:
        raise DriverError(
            f"{source}: ld.so.cache truncated: string table needs {strings + len_strings} bytes,"
            f" file has {size}"
        )
    raw = struct.iter_unpack(order + "iIIIQ", data[base + _NEW_HEADER : strings])
    rows = ((f, k, v, hwcap) for f, k, v, _osversion, hwcap in raw)
    return LdCache(source, "new", _entries(data, base, strings, rows, source, want))


def _entries(
    data: bytes,
    base: int,
    table: int,
    rows: Iterable[tuple[int, int, int, int]],
    source: str,
    want: tuple[bytes, ...] | None,
) -> tuple[CacheEntry, ...]:
    """Entries from ``(flags, key, value, hwcap)`` rows; offsets count from ``base``, and the
    strings they name must start in the string table (at ``table`` or later)."""
    size = len(data)
    find = data.find
    decode = os.fsdecode
    out = []
    for flags, key, value, hwcap in rows:
        start = base + key
        if want is not None and not data.startswith(want, start):
            continue
        stop = find(b"\0", start) if table <= start < size else -1
        if stop <= start:
            _string(data, base, key, table, source, "soname")  # raises, saying what is wrong
        soname = decode(data[start:stop])
        start = base + value
        stop = find(b"\0", start) if table <= start < size else -1
        if stop <= start:
            _string(data, base, value, table, source, "path")
        out.append(CacheEntry(soname, decode(data[start:stop]), flags, hwcap))
    return tuple(out)


def _string(data: bytes, base: int, offset: int, table: int, source: str, what: str) -> str:
    """The NUL-terminated string at ``base + offset``, which must lie in the string table;
    else a DriverError saying why not."""
    start = base + offset
    if start < table or start >= len(data):
        raise DriverError(
            f"{source}: ld.so.cache entry {what} offset {offset} points outside the string table"
        )
    stop = data.find(b"\0", start)
    if stop < 0:
        raise DriverError(f"{source}: ld.so.cache {what} at offset {offset} is not terminated")
    if stop == start:
        raise DriverError(f"{source}: ld.so.cache entry has an empty {what}")
    return os.fsdecode(data[start:stop])
