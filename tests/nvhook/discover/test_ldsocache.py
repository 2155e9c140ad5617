"""nvhook.discover.ldsocache against caches the real ldconfig wrote, and broken ones."""

from __future__ import annotations

import os
import random
import struct

import pytest

from nvhook.discover.ldsocache import ARCH_FLAGS, CacheEntry, LdCache, parse_ld_cache, read_ld_cache
from nvhook.errors import DriverError
from tests.nvhook.discover import fakeroot
from tests.nvhook.discover.fakeroot import FakeRoot, ldconfig_print

compiler = fakeroot.compiler
fake_root = fakeroot.fake_root

X86 = "/usr/lib/x86_64-linux-gnu"
I386 = "/usr/lib/i386-linux-gnu"

# ldconfig -p's names for the flags of the entries we make.
_DESCRIPTIONS = {0x0303: "libc6,x86-64", 0x0003: "libc6", 0x0001: "ELF"}


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _rows(cache: LdCache) -> list[tuple[str, str]]:
    return [(e.soname, e.path) for e in cache.entries]


@pytest.fixture
def small_root(fake_root: FakeRoot) -> FakeRoot:
    """Two 64-bit libraries, a 32-bit libc6 one and a 32-bit plain-ELF one."""
    fake_root.library(X86, "libfoo.so.1.2", "libfoo.so.1")
    fake_root.library(X86, "libbar.so.1.0", "libbar.so.1")
    fake_root.library(I386, "libfoo.so.1.2", "libfoo.so.1", arch="i386")
    fake_root.library(I386, "libqux.so.3.0", "libqux.so.3", arch="plain32")
    return fake_root


EXPECTED_X86 = [("libfoo.so.1", f"{X86}/libfoo.so.1"), ("libbar.so.1", f"{X86}/libbar.so.1")]
EXPECTED_I386 = [("libqux.so.3", f"{I386}/libqux.so.3"), ("libfoo.so.1", f"{I386}/libfoo.so.1")]


# --- real caches ---------------------------------------------------------------------------


def test_host_cache_matches_ldconfig_p() -> None:
    if not os.path.exists("/etc/ld.so.cache"):
        pytest.skip("this host has no /etc/ld.so.cache")
    data = _read("/etc/ld.so.cache")
    cache = parse_ld_cache(data, source="/etc/ld.so.cache")
    expected = ldconfig_print("/etc/ld.so.cache")
    assert len(cache.entries) > 10
    assert _rows(cache) == [(soname, path) for soname, _, path in expected]
    for entry, (_, desc, _) in zip(cache.entries, expected, strict=True):
        if entry.flags == 0x0303 and not entry.hwcap:
            assert desc == "libc6,x86-64"


@pytest.mark.parametrize(("fmt", "read_as"), [("new", "new"), ("compat", "new"), ("old", "old")])
def test_ldconfig_formats(small_root: FakeRoot, fmt: str, read_as: str) -> None:
    path = small_root.ldconfig(X86, I386, fmt=fmt)
    cache = read_ld_cache(path)
    assert cache.format == read_as
    assert cache.source == path
    printed = ldconfig_print(path)
    assert [(e.soname, _DESCRIPTIONS[e.flags], e.path) for e in cache.entries] == printed
    assert cache.libraries("x86_64") == EXPECTED_X86
    assert cache.libraries("i386") == EXPECTED_I386
    assert cache.libraries("aarch64") == []
    # the 32-bit library that links no libc: plain ELF (0x0001) to older ldconfigs, libc6
    # (0x0003) to newer ones (Debian unstable's); ldconfig -p says which (checked above)
    assert {0x0303, 0x0003} <= {e.flags for e in cache.entries} <= {0x0303, 0x0003, 0x0001}


@pytest.mark.parametrize("fmt", ["new", "old"])
def test_prefixes_keep_only_matching_sonames(small_root: FakeRoot, fmt: str) -> None:
    path = small_root.ldconfig(X86, I386, fmt=fmt)
    full = read_ld_cache(path)
    some = read_ld_cache(path, prefixes=("libfoo.so.", "libqux.so."))
    assert some.entries == tuple(e for e in full.entries if e.soname.split(".so.")[0] != "libbar")
    assert len(some.entries) == 3
    assert read_ld_cache(path, prefixes=()).entries == ()
    # a broken entry that is skipped is not looked at; one that is kept still fails
    data = bytearray(_read(path))
    bar = next(i for i, e in enumerate(full.entries) if e.soname == "libbar.so.1")
    header, entry = (48, 24) if fmt == "new" else (16, 12)
    struct.pack_into("<I", data, header + bar * entry + 4, 0xFFFFFF)  # its key
    assert parse_ld_cache(bytes(data), prefixes=("libfoo.so.",)).entries == tuple(
        e for e in full.entries if e.soname == "libfoo.so.1"
    )
    with pytest.raises(DriverError, match="soname offset 16777215 points outside"):
        parse_ld_cache(bytes(data))


def test_cache_file_and_conf_options(small_root: FakeRoot) -> None:
    """``ldconfig -C FILE -f CONF`` (inside -r ROOT): another file name, same contents."""
    path = small_root.ldconfig(X86, cache="/var/cache/custom.cache")
    assert path.endswith("/var/cache/custom.cache")
    assert read_ld_cache(path).libraries("x86_64") == EXPECTED_X86


def test_old_half_of_a_compat_cache(small_root: FakeRoot) -> None:
    """With the embedded new format unrecognisable, the old entries are read (as libc5-era
    ld.so would); ldconfig pads them to an even count by repeating the last one."""
    data = bytearray(_read(small_root.ldconfig(X86, I386, fmt="compat")))
    new = parse_ld_cache(bytes(data))
    at = data.index(b"glibc-ld.so.cache1.1")
    assert at % 8 == 0
    data[at] = ord("X")
    old = parse_ld_cache(bytes(data))
    assert old.format == "old"
    expected = [(e.soname, e.path, e.flags) for e in new.entries]
    if len(expected) % 2:
        expected.append(expected[-1])
    assert [(e.soname, e.path, e.flags) for e in old.entries] == expected


def test_hwcap_subdirectory_entries(fake_root: FakeRoot) -> None:
    fake_root.library(X86, "libfoo.so.1.2", "libfoo.so.1")
    fake_root.library(f"{X86}/glibc-hwcaps/x86-64-v3", "libfoo.so.1.2", "libfoo.so.1")
    cache = read_ld_cache(fake_root.ldconfig(X86))
    printed = ldconfig_print(str(fake_root.at("/etc/ld.so.cache")))
    assert _rows(cache) == [(soname, path) for soname, _, path in printed]
    plain = [e for e in cache.entries if not e.hwcap]
    variants = [e for e in cache.entries if e.hwcap]
    assert [e.path for e in plain] == [f"{X86}/libfoo.so.1"]
    assert len(variants) == 1
    assert variants[0].path.startswith(f"{X86}/glibc-hwcaps/x86-64-v3/libfoo.so.1")


def test_big_endian_new_format(small_root: FakeRoot) -> None:
    """A cache written on a big-endian machine (flag byte 3) reads the same."""
    data = _read(small_root.ldconfig(X86, I386))
    little = parse_ld_cache(data)
    nlibs, len_strings = struct.unpack_from("<II", data, 20)
    swapped = bytearray(data)
    struct.pack_into(">II", swapped, 20, nlibs, len_strings)
    swapped[28] = 3
    (ext,) = struct.unpack_from("<I", data, 32)
    struct.pack_into(">I", swapped, 32, ext)
    for i in range(nlibs):
        at = 48 + 24 * i
        struct.pack_into(">iIIIQ", swapped, at, *struct.unpack_from("<iIIIQ", data, at))
    big = parse_ld_cache(bytes(swapped))
    assert big.entries == little.entries


def test_libraries_rejects_unknown_arch() -> None:
    cache = LdCache(
        "/x/ld.so.cache", "new", (CacheEntry("libfoo.so.1", "/lib/libfoo.so.1", 0x303),)
    )
    with pytest.raises(DriverError, match=r"^/x/ld.so.cache: unknown architecture 'sparc'"):
        cache.libraries("sparc")


def test_arch_flags_are_the_loaders() -> None:
    assert ARCH_FLAGS["x86_64"] == {0x0303}
    assert ARCH_FLAGS["i386"] == {0x0001, 0x0003}
    assert ARCH_FLAGS["aarch64"] == {0x0A03}


def test_read_missing_file(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "nope")
    with pytest.raises(DriverError, match=rf"^{path}: cannot read ld.so.cache: No such file"):
        read_ld_cache(path)


# --- broken caches -------------------------------------------------------------------------


def _new_cache(
    entries: list[tuple[int, int, int]],
    strings: bytes,
    *,
    nlibs: int | None = None,
    len_strings: int | None = None,
    endian: int = 2,
) -> bytes:
    """A new-format cache by hand: offsets count from the header's start."""
    header = struct.pack(
        "<20sIIB3xI12x",
        b"glibc-ld.so.cache1.1",
        len(entries) if nlibs is None else nlibs,
        len(strings) if len_strings is None else len_strings,
        endian,
        0,
    )
    body = b"".join(struct.pack("<iIIIQ", f, k, v, 0, 0) for f, k, v in entries)
    return header + body + strings


def _valid_new() -> bytes:
    base = 48 + 24
    strings = b"libfoo.so.1\0/lib/libfoo.so.1\0"
    return _new_cache([(0x303, base, base + 12)], strings)


def test_hand_made_cache_is_valid() -> None:
    cache = parse_ld_cache(_valid_new())
    assert cache.entries == (CacheEntry("libfoo.so.1", "/lib/libfoo.so.1", 0x303, 0),)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "ld.so.cache is empty"),
        (b"glibc-ld.so", "ld.so.cache truncated: 11 bytes"),
        (b"ld.so-1.", "ld.so.cache truncated: 8 bytes"),
        (b"\x7fELF\x02\x01\x01" + bytes(60), "not an ld.so.cache (unknown magic"),
        (b"glibc-ld.so.cache1.1" + bytes(10), "new header at 0 needs 48 bytes, file has 30"),
        (b"ld.so-1.7.0\0" + b"\x01\0", "old header needs 16 bytes, has 14"),
        (b"ld.so-1.7.0\0" + struct.pack("<I", 1000), "1000 old-format entries need 12016 bytes"),
        (
            b"ld.so-1.7.0\0" + struct.pack("<I", 0xFFFFFFFF),
            "4294967295 old-format entries need",
        ),
        (_new_cache([], b"", nlibs=5), "5 entries need 168 bytes, file has 48"),
        (_new_cache([], b"abc\0", len_strings=99), "string table needs 147 bytes, file has 52"),
        (_new_cache([(0x303, 7, 7)], b"x\0"), "soname offset 7 points outside the string table"),
        (_new_cache([(0x303, 72, 900)], b"x\0"), "path offset 900 points outside the string table"),
        (_new_cache([(0x303, 72, 72)], b"abc"), "soname at offset 72 is not terminated"),
        (_new_cache([(0x303, 72, 73)], b"\0x\0"), "entry has an empty soname"),
        (_new_cache([], b"", endian=1), "invalid endianness marker (1)"),
        (
            b"ld.so-1.7.0\0" + struct.pack("<IiII", 1, 3, 50, 0) + b"x\0",
            "soname offset 50 points outside the string table",
        ),
    ],
)
def test_corrupt(data: bytes, message: str) -> None:
    with pytest.raises(DriverError) as info:
        parse_ld_cache(data, source="/root/etc/ld.so.cache")
    text = str(info.value)
    assert text.startswith("/root/etc/ld.so.cache: ")
    assert message in text
    assert "\n" not in text


def test_every_truncation_and_bit_flip_is_a_driver_error_or_a_parse(small_root: FakeRoot) -> None:
    """No slice or single-byte corruption of a real cache escapes as another exception."""
    for fmt in ("new", "compat", "old"):
        data = _read(small_root.ldconfig(X86, I386, fmt=fmt))
        for n in range(len(data)):
            try:
                parse_ld_cache(data[:n], source="c")
            except DriverError as e:
                assert str(e).startswith("c: ")
        rng = random.Random(fmt)
        for _ in range(2000):
            mutated = bytearray(data)
            at = rng.randrange(len(data))
            mutated[at] = rng.randrange(256)
            try:
                cache = parse_ld_cache(bytes(mutated), source="c")
            except DriverError as e:
                assert str(e).startswith("c: ")
            else:
                assert all(e.soname and e.path for e in cache.entries)
