"""nvhook.mock.elfgen and nvhook.mock.ldcache: a mock machine of another architecture."""

from __future__ import annotations

import ctypes
import functools
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.discover.elf import ARCH_ELF, read_elf
from nvhook.discover.ldsocache import CacheEntry, parse_ld_cache, read_ld_cache
from nvhook.mock import elfgen, installed_libraries, lib_dirs, load_profile
from nvhook.mock.ldcache import FLAGS, cache_entries, encode_cache, libcmp
from tests.support.containers import require

Machine = Callable[..., Path]


def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=60, check=False, env=env
    )


# --- the ELF writer ---------------------------------------------------------------------------


@pytest.mark.parametrize("arch", sorted(elfgen.MACHINES))
def test_shared_objects_say_their_machine_soname_and_needs(arch: str, tmp_path: Path) -> None:
    path = tmp_path / "libfoo.so.550.90.07"
    path.write_bytes(elfgen.shared_object(arch, "libfoo.so.1"))
    info = read_elf(str(path))
    assert info is not None
    assert (info.elf_class, info.machine, info.soname) == (*ARCH_ELF[arch], "libfoo.so.1")
    dynamic = run(require("readelf"), "-d", path).stdout
    assert "Library soname: [libfoo.so.1]" in dynamic
    assert "Shared library: [libc.so.6]" in dynamic
    header = run(require("readelf"), "-h", path).stdout
    assert "DYN (Shared object file)" in header
    assert {"aarch64": "AArch64", "x86_64": "X86-64"}[arch] in header
    module = tmp_path / "nvidia_drv.so"
    module.write_bytes(elfgen.shared_object(arch, None, name="nvidia_drv.so"))
    assert read_elf(str(module)) == type(info)(64, ARCH_ELF[arch][1], None)
    assert elfgen.shared_object(arch, "libfoo.so.1") == path.read_bytes()  # deterministic


def test_an_x86_64_shared_object_is_loaded_by_the_real_loader(tmp_path: Path) -> None:
    """The layout every architecture shares, checked where it can run."""
    if os.uname().machine != "x86_64":
        pytest.skip("runs x86-64 code")
    path = tmp_path / "libnvhook-elfgen.so.1"
    path.write_bytes(elfgen.shared_object("x86_64", path.name))
    ctypes.CDLL(str(path))  # maps both segments, reads DT_HASH/SYMTAB/STRTAB, needs libc.so.6
    out = run(require("ldconfig"), "-p", "-C", _real_cache(tmp_path, path))
    assert f"{path.name} (libc6,x86-64) => {tmp_path}/{path.name}" in out.stdout


def test_an_x86_64_executable_runs_and_exits_0(tmp_path: Path) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("runs x86-64 code")
    path = tmp_path / "tool"
    path.write_bytes(elfgen.executable("x86_64"))
    path.chmod(0o755)
    assert run(path).returncode == 0
    assert "EXEC (Executable file)" in run(require("readelf"), "-h", path).stdout


def test_aarch64_executable_header(tmp_path: Path) -> None:
    path = tmp_path / "nvidia-smi"
    path.write_bytes(elfgen.executable("aarch64"))
    header = run(require("readelf"), "-h", path).stdout
    assert "AArch64" in header and "EXEC (Executable file)" in header
    assert "Entry point address:               0x400078" in header  # right after the headers
    with pytest.raises(ValueError, match="no ELF writer for architecture 'riscv64'"):
        elfgen.executable("riscv64")


def _real_cache(tmp_path: Path, library: Path) -> Path:
    """A cache the real ldconfig writes for the directory of ``library``."""
    cache = tmp_path / "ld.so.cache"
    conf = tmp_path / "ld.so.conf"
    conf.write_text(f"{library.parent}\n")
    done = run(require("ldconfig"), "-X", "-C", cache, "-f", conf)
    assert done.returncode == 0, done.stderr
    return cache


# --- the cache writer -------------------------------------------------------------------------


def test_libcmp_compares_digits_as_numbers() -> None:
    assert libcmp("libfoo.so.10", "libfoo.so.9") > 0
    assert libcmp("libfoo.so.1", "libfoo.so.1") == 0
    assert libcmp("libfoo.so.1", "libfoo.so.1.2") < 0
    assert libcmp("libfoo9.so", "libfoo.so") > 0  # a digit sorts after any other character
    assert libcmp("libfoo.so", "libfoo9.so") < 0
    assert libcmp("libGL.so.1", "libEGL.so.1") > 0
    names = ["libnvidia-egl-gbm.so.1", "libcuda.so.1", "libnvidia-ml.so.1", "libnvcuvid.so.1"]
    ordered = sorted(names, key=functools.cmp_to_key(libcmp), reverse=True)
    assert ordered == [
        "libnvidia-ml.so.1",
        "libnvidia-egl-gbm.so.1",
        "libnvcuvid.so.1",
        "libcuda.so.1",
    ]


def test_the_writer_matches_the_real_ldconfig(mock_machine: Machine) -> None:
    """On an x86-64 layout, the entries written are the real ldconfig's, in its order."""
    if os.uname().machine != "x86_64":
        pytest.skip("compares with an x86-64 ldconfig's cache")
    root = mock_machine("dgx-a100")
    real = read_ld_cache(str(root / "etc/ld.so.cache"))
    written = cache_entries(root, ["/usr/lib/x86_64-linux-gnu"], "x86_64")
    assert len(written) > 30
    assert [e for e in real.entries if e.flags == FLAGS["x86_64"]] == written
    assert parse_ld_cache(encode_cache(written)).entries == tuple(written)


def test_gh200_cache_has_aarch64_entries_for_every_library(mock_machine: Machine) -> None:
    root = mock_machine("gh200")
    prof = load_profile("gh200")
    assert lib_dirs(prof) == ("usr/lib/aarch64-linux-gnu", None)
    path = root / "etc/ld.so.cache"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    cache = read_ld_cache(str(path))
    assert cache.format == "new"
    assert {e.flags for e in cache.entries} == {0x0A03}
    expected = {
        (lib.soname, f"/{lib.soname_path}")
        for lib in installed_libraries(prof)
        if "/vdpau/" not in lib.path  # vdpau/ is not a linker directory, as on a real host
    }
    assert set(cache.libraries("aarch64")) == expected
    assert cache.libraries("x86_64") == []
    out = run(require("ldconfig"), "-p", "-C", path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{len(expected)} libs found in cache")
    for soname, target in expected:
        assert f"\t{soname} (libc6,AArch64) => {target}\n" in out.stdout
    # ldconfig lists them in the cache's order, which is its own sort order
    listed = [line.split()[0] for line in out.stdout.splitlines()[1:]]
    assert listed == [e.soname for e in cache.entries]


def test_encoded_header_and_strings() -> None:
    entries = [CacheEntry("libb.so.1", "/lib/libb.so.1", 0x0A03)]
    data = encode_cache(entries)
    assert data[:20] == b"glibc-ld.so.cache1.1"
    assert data[28] == 2  # little endian
    assert len(data) == 48 + 24 + len(b"libb.so.1\0/lib/libb.so.1\0")
    assert parse_ld_cache(data).entries == tuple(entries)
    assert parse_ld_cache(encode_cache([])).entries == ()


def test_a_shared_object_asks_for_no_executable_stack(tmp_path: Path) -> None:
    """A PT_GNU_STACK without PF_X, as linkers write: glibc 2.43 refuses to dlopen a library
    without one ("cannot enable executable stack"); readelf shows what any loader reads."""
    path = tmp_path / "libnvhook-elfgen.so.1"
    for arch in elfgen.MACHINES:
        path.write_bytes(elfgen.shared_object(arch, path.name))
        headers = run(require("readelf"), "-lW", path).stdout
        (stack,) = [line.split() for line in headers.splitlines() if "GNU_STACK" in line]
        assert stack[-2:] == ["RW", "0x10"], (arch, stack)
