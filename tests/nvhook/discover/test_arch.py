"""nvhook.discover.arch: discovery looks for the driver root's architecture, not this machine's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvhook.discover import DEFAULT_SEARCH_PATHS, discover_driver_files
from nvhook.discover.arch import driver_arch, machine_arch, normalize_arch
from nvhook.discover.ldsocache import read_ld_cache
from nvhook.discover.root import Root
from nvhook.errors import DriverError
from nvhook.mock import elfgen, ldcache
from nvhook.planner import nvml_library_dir

V = "550.90.07"
ARM = "/usr/lib/aarch64-linux-gnu"
X86 = "/usr/lib/x86_64-linux-gnu"
#: The other 64-bit architecture than this machine's (the tests run on either).
FOREIGN = "aarch64" if machine_arch() == "x86_64" else "x86_64"
DIRS = {"aarch64": ARM, "x86_64": X86}


def lay_out(root: Path, arch: str, stems: tuple[str, ...], *, cache: bool = True) -> None:
    """Driver libraries of ``arch`` (written ELF objects) in its Debian directory, and a
    cache with its flags (as the mock writes them) listing that directory."""
    directory = root / DIRS[arch].lstrip("/")
    directory.mkdir(parents=True, exist_ok=True)
    for stem in stems:
        soname = f"{stem}.1"
        (directory / f"{stem}.{V}").write_bytes(elfgen.shared_object(arch, soname))
        (directory / soname).symlink_to(f"{stem}.{V}")
    if cache:
        conf = root / "etc/ld.so.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        listed = conf.read_text() if conf.exists() else ""
        conf.write_text(listed + DIRS[arch] + "\n")
        entries = [
            e
            for a in ("aarch64", "x86_64")
            if DIRS[a] in conf.read_text()
            for e in ldcache.cache_entries(root, [DIRS[a]], a)
        ]
        (root / "etc/ld.so.cache").write_bytes(ldcache.encode_cache(entries))


def arch_of(root: Path) -> str:
    r = Root(str(root))
    cache_file = root / "etc/ld.so.cache"
    cache = read_ld_cache(str(cache_file)) if cache_file.exists() else None
    return driver_arch(r, cache, DEFAULT_SEARCH_PATHS)


def test_a_foreign_cache_chooses_its_architecture(tmp_path: Path) -> None:
    lay_out(tmp_path, FOREIGN, ("libnvidia-ml.so", "libcuda.so"))
    assert arch_of(tmp_path) == FOREIGN
    files = discover_driver_files(str(tmp_path), ["utility", "compute"], driver_version=V)
    assert files.arch == FOREIGN
    assert files.capability("utility").libraries == (f"{DIRS[FOREIGN]}/libnvidia-ml.so.{V}",)
    assert files.capability("compute").libraries == (f"{DIRS[FOREIGN]}/libcuda.so.{V}",)
    assert files.driver_version is not None  # inferred from the foreign libraries too
    assert (
        discover_driver_files(str(tmp_path), ["utility"], driver_version=None).driver_version == V
    )


def test_the_machines_own_architecture_wins_on_a_multiarch_root(tmp_path: Path) -> None:
    lay_out(tmp_path, FOREIGN, ("libnvidia-ml.so",))
    lay_out(tmp_path, machine_arch(), ("libnvidia-ml.so",))
    assert arch_of(tmp_path) == machine_arch()
    files = discover_driver_files(str(tmp_path), ["utility"], driver_version=V)
    assert files.capability("utility").libraries == (f"{DIRS[machine_arch()]}/libnvidia-ml.so.{V}",)
    # asked for, the other one is found instead
    other = discover_driver_files(str(tmp_path), ["utility"], driver_version=V, arch=FOREIGN)
    assert other.arch == FOREIGN
    assert other.capability("utility").libraries == (f"{DIRS[FOREIGN]}/libnvidia-ml.so.{V}",)


def test_without_a_cache_the_elf_header_decides(tmp_path: Path) -> None:
    lay_out(tmp_path, FOREIGN, ("libcuda.so",), cache=False)
    assert arch_of(tmp_path) == FOREIGN
    files = discover_driver_files(str(tmp_path), ["compute"], driver_version=V)
    assert files.arch == FOREIGN
    assert files.capability("compute").libraries == (f"{DIRS[FOREIGN]}/libcuda.so.{V}",)
    assert any("no ld.so.cache" in p for p in files.problems)


def test_a_red_hat_aarch64_root_in_usr_lib64(tmp_path: Path) -> None:
    """RHEL's aarch64 driver packages use /usr/lib64, with /usr/lib holding nothing of it."""
    lib64 = tmp_path / "usr/lib64"
    lib64.mkdir(parents=True)
    (lib64 / f"libnvidia-ml.so.{V}").write_bytes(
        elfgen.shared_object("aarch64", "libnvidia-ml.so.1")
    )
    (lib64 / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{V}")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ld.so.conf").write_text("/usr/lib64\n")
    ldcache.write_ld_cache(tmp_path, "aarch64")
    assert read_ld_cache(str(tmp_path / "etc/ld.so.cache")).libraries("aarch64") == [
        ("libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1")
    ]
    files = discover_driver_files(str(tmp_path), ["utility"], driver_version=None)
    assert (files.arch, files.driver_version) == ("aarch64", V)
    assert files.capability("utility").libraries == (f"/usr/lib64/libnvidia-ml.so.{V}",)
    (tmp_path / "etc/ld.so.cache").unlink()  # and by directory search alone
    files = discover_driver_files(str(tmp_path), ["utility"], driver_version=V)
    assert files.arch == "aarch64"
    assert files.capability("utility").libraries == (f"/usr/lib64/libnvidia-ml.so.{V}",)


def test_a_cache_without_the_driver_falls_back_to_the_elf_header(tmp_path: Path) -> None:
    lay_out(tmp_path, FOREIGN, ("libnvidia-ml.so",), cache=False)
    lay_out(tmp_path, machine_arch(), ("libfoo.so",))  # a cache, but no driver in it
    assert arch_of(tmp_path) == FOREIGN


def test_an_empty_root_is_this_machines(tmp_path: Path) -> None:
    assert arch_of(tmp_path) == machine_arch() == normalize_arch(os.uname().machine)
    not_elf = tmp_path / X86.lstrip("/") / f"libcuda.so.{V}"
    not_elf.parent.mkdir(parents=True)
    not_elf.write_text("not an ELF file\n")
    assert arch_of(tmp_path) == machine_arch()


def test_explicit_architectures_are_checked() -> None:
    assert normalize_arch("arm64") == "aarch64" and normalize_arch("amd64") == "x86_64"
    with pytest.raises(DriverError, match=r"unsupported architecture 'i686'.*aarch64, x86_64"):
        normalize_arch("i686")
    with pytest.raises(DriverError, match="unsupported architecture 'riscv64'"):
        discover_driver_files("/", ["utility"], driver_version=V, arch="riscv64")


def test_a_foreign_nvml_is_not_loaded(tmp_path: Path) -> None:
    lay_out(tmp_path, FOREIGN, ("libnvidia-ml.so",))
    with pytest.raises(DriverError) as e:
        nvml_library_dir(str(tmp_path))
    assert e.value.message == (
        f"{tmp_path}: the driver is built for {FOREIGN}; its NVML cannot be loaded on this"
        f" {machine_arch()} machine"
    )
    lay_out(tmp_path, machine_arch(), ("libnvidia-ml.so",))
    assert nvml_library_dir(str(tmp_path)) == str(tmp_path) + DIRS[machine_arch()]
