"""Write an ``ld.so.cache`` for a mock machine of any architecture, as ``ldconfig -X -r`` would.

The host's ``ldconfig`` files only libraries of its own architectures (an x86-64 one skips
aarch64 objects), so a mock machine laid out for another architecture gets its cache from
here. The format is glibc 2.32+'s default, the new ``glibc-ld.so.cache1.1`` alone, as
:mod:`nvhook.discover.ldsocache` reads it: a 48-byte header (magic and version, ``nlibs``,
the string table's length, the little-endian marker 2, no extension), ``nlibs`` entries of
``(flags, key, value, osversion 0, hwcap 0)``, then the strings; offsets count from the start
of the header.

The entries are ldconfig's: each directory of ``etc/ld.so.conf`` is scanned (not its
subdirectories), every file whose name starts with ``lib`` and contains ``.so`` that is an
ELF object of the architecture's class and machine gives an entry for its SONAME (or its
name, without one) at ``<directory>/<SONAME>``, once per directory; the flags are the
architecture's (:data:`FLAGS`: ``0x0a03`` libc6 AArch64, ``0x0303`` libc6 x86-64). They are
sorted as ldconfig sorts them and ``ld.so`` bisects them: by SONAME descending under glibc's
``_dl_cache_libcmp`` (runs of digits compare as numbers), higher flags first among equals.
``tests/nvhook/mock/test_ldcache.py`` checks the result against the real ``ldconfig`` on an
x86-64 layout, and ``ldconfig -p -C`` reads the aarch64 one back.
"""

from __future__ import annotations

import functools
import os
import struct
from pathlib import Path

from nvhook.discover.elf import ARCH_ELF, read_elf
from nvhook.discover.ldsocache import (
    FLAG_AARCH64_LIB64,
    FLAG_ELF_LIBC6,
    FLAG_X8664_LIB64,
    CacheEntry,
)

__all__ = ["FLAGS", "cache_entries", "encode_cache", "libcmp", "write_ld_cache"]

#: Architecture -> the flags ldconfig gives its libraries (``elf/ldconfig.h``).
FLAGS: dict[str, int] = {
    "x86_64": FLAG_X8664_LIB64 | FLAG_ELF_LIBC6,
    "aarch64": FLAG_AARCH64_LIB64 | FLAG_ELF_LIBC6,
}

_MAGIC = b"glibc-ld.so.cache1.1"
_LITTLE_ENDIAN = 2


def libcmp(a: str, b: str) -> int:
    """glibc's ``_dl_cache_libcmp``: like ``strcmp``, but runs of digits compare as numbers."""
    p, q = os.fsencode(a) + b"\0", os.fsencode(b) + b"\0"
    i = j = 0
    while p[i] != 0:
        if 0x30 <= p[i] <= 0x39:
            if not 0x30 <= q[j] <= 0x39:
                return 1
            x = i
            while 0x30 <= p[i] <= 0x39:
                i += 1
            y = j
            while 0x30 <= q[j] <= 0x39:
                j += 1
            if int(p[x:i]) != int(q[y:j]):
                return int(p[x:i]) - int(q[y:j])
        elif 0x30 <= q[j] <= 0x39:
            return -1
        elif p[i] != q[j]:
            return p[i] - q[j]
        else:
            i += 1
            j += 1
    return p[i] - q[j]


def _order(e1: CacheEntry, e2: CacheEntry) -> int:
    """ldconfig's ``compare``: SONAME descending, then higher flags first."""
    res = libcmp(e2.soname, e1.soname)
    if res == 0:
        return (e1.flags < e2.flags) - (e1.flags > e2.flags)
    return res


def cache_entries(root: Path, directories: list[str], arch: str) -> list[CacheEntry]:
    """The entries ldconfig would write for the ``arch`` libraries in ``directories`` (paths
    in ``root``), in cache order."""
    elf = ARCH_ELF[arch]
    flags = FLAGS[arch]
    entries: list[CacheEntry] = []
    for directory in directories:
        base = directory.rstrip("/")
        seen: set[str] = set()
        folder = root / base.lstrip("/")
        for name in sorted(os.listdir(folder)) if folder.is_dir() else ():
            path = folder / name
            if not name.startswith("lib") or ".so" not in name or not path.is_file():
                continue
            info = read_elf(str(path))
            if info is None or (info.elf_class, info.machine) != elf:
                continue
            soname = info.soname or name
            if soname not in seen:
                seen.add(soname)
                entries.append(CacheEntry(soname, f"{base}/{soname}", flags))
    return sorted(entries, key=functools.cmp_to_key(_order))


def encode_cache(entries: list[CacheEntry]) -> bytes:
    """The bytes of a new-format cache holding ``entries`` (in the order given)."""
    table_at = 48 + 24 * len(entries)
    strings = bytearray()
    where: dict[str, int] = {}

    def offset(text: str) -> int:
        if text not in where:
            where[text] = table_at + len(strings)
            strings.extend(os.fsencode(text) + b"\0")
        return where[text]

    rows = b"".join(
        struct.pack("<iIIIQ", e.flags, offset(e.soname), offset(e.path), 0, e.hwcap)
        for e in entries
    )
    header = _MAGIC + struct.pack("<IIB3xI12x", len(entries), len(strings), _LITTLE_ENDIAN, 0)
    return header + rows + bytes(strings)


def write_ld_cache(root: Path, arch: str) -> None:
    """Write ``root/etc/ld.so.cache`` for the ``arch`` libraries of ``root/etc/ld.so.conf``."""
    conf = (root / "etc/ld.so.conf").read_text()
    directories = [line.strip() for line in conf.splitlines() if line.strip().startswith("/")]
    data = encode_cache(cache_entries(root, directories, arch))
    cache = root / "etc/ld.so.cache"
    cache.write_bytes(data)
    cache.chmod(0o644)
