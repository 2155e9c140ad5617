"""nvhook.discover.libraries: libraries by stem, through ld.so.cache and then directories."""

from __future__ import annotations

import pytest

from nvhook.discover.catalog import DEFAULT_SEARCH_PATHS, LibrarySpec
from nvhook.discover.ldsocache import read_ld_cache
from nvhook.discover.libraries import Library, LibraryFinder, is_version, version_of
from nvhook.discover.root import Root
from tests.nvhook.discover import fakeroot
from tests.nvhook.discover.fakeroot import I386, VERSION, X86, FakeRoot, driver_library

compiler = fakeroot.compiler
fake_root = fakeroot.fake_root

CUDA = LibrarySpec("libcuda.so")


def _finder(root: FakeRoot, arch: str = "x86_64", *, cache: bool = True) -> LibraryFinder:
    r = Root(str(root))
    ld = read_ld_cache(r.host("/etc/ld.so.cache")) if cache else None
    return LibraryFinder(r, arch=arch, cache=ld, search_paths=DEFAULT_SEARCH_PATHS)


def test_versions() -> None:
    assert version_of("libcuda.so", "libcuda.so.550.54.15") == "550.54.15"
    assert version_of("libcuda.so", "libcuda.so.1") == "1"
    assert version_of("libcuda.so", "libcuda.so") is None
    assert version_of("libcuda.so", "libcuda.so.1.bak") is None
    assert version_of("libnvidia-pkcs11.so", "libnvidia-pkcs11-openssl3.so.550") is None
    assert is_version("550.54.15")
    assert not is_version("550..1")
    assert not is_version("\uff15\uff15\uff10")  # fullwidth digits: isdigit() but not a version


def test_through_the_cache(fake_root: FakeRoot) -> None:
    path = driver_library(fake_root, "libcuda.so")
    fake_root.ldconfig(X86)
    found = _finder(fake_root).find(CUDA, VERSION)
    assert found == Library("libcuda.so", path, "libcuda.so.1")
    assert path == f"{X86}/libcuda.so.{VERSION}"


def test_cache_path_through_merged_usr(fake_root: FakeRoot) -> None:
    """The cache says /lib/x86_64-linux-gnu (a symlink to usr/lib): the real path is mounted."""
    driver_library(fake_root, "libcuda.so")
    fake_root.symlink("/lib", "usr/lib")
    fake_root.ldconfig("/lib/x86_64-linux-gnu")
    assert read_ld_cache(str(fake_root.at("/etc/ld.so.cache"))).entries[0].path.startswith("/lib/")
    found = _finder(fake_root).find(CUDA, VERSION)
    assert found is not None and found.path == f"{X86}/libcuda.so.{VERSION}"


def test_absolute_soname_link_stays_in_the_root(fake_root: FakeRoot) -> None:
    driver_library(fake_root, "libcuda.so")
    fake_root.at(f"{X86}/libcuda.so.1").unlink()
    fake_root.symlink(f"{X86}/libcuda.so.1", f"{X86}/libcuda.so.{VERSION}")  # absolute
    fake_root.ldconfig(X86)
    found = _finder(fake_root).find(CUDA, VERSION)
    assert found is not None and found.path == f"{X86}/libcuda.so.{VERSION}"


def test_wrong_version_in_the_cache_is_a_problem_and_the_right_file_is_found(
    fake_root: FakeRoot,
) -> None:
    driver_library(fake_root, "libcuda.so", version="535.104.05")
    fake_root.ldconfig(X86)  # libcuda.so.1 -> libcuda.so.535.104.05
    driver_library(fake_root, "libcuda.so")  # the new driver's file, and the link now points to it
    fake_root.at(f"{X86}/libcuda.so.1").unlink()
    fake_root.symlink(f"{X86}/libcuda.so.1", "libcuda.so.535.104.05")  # stale link, as after
    finder = _finder(fake_root)  # an upgrade that did not run ldconfig
    found = finder.find(CUDA, VERSION)
    assert found is not None and found.path == f"{X86}/libcuda.so.{VERSION}"
    assert found.soname == "libcuda.so.1"  # from the file's own dynamic section
    assert len(finder.problems) == 1
    assert (
        "libcuda.so.1 is libcuda.so.535.104.05 (version 535.104.05), not driver version"
        in (finder.problems[0])
    )
    assert finder.problems[0].startswith(str(fake_root.at(f"{X86}/libcuda.so.1")))
    assert finder.find(CUDA, "999.1") is None


def test_without_a_cache_directories_are_searched(fake_root: FakeRoot) -> None:
    path = driver_library(fake_root, "libcuda.so", directory="/usr/lib64")
    found = _finder(fake_root, cache=False).find(CUDA, VERSION)
    assert found == Library("libcuda.so", path, "libcuda.so.1")


def test_a_32_bit_copy_in_usr_lib_is_not_taken_for_64_bit(fake_root: FakeRoot) -> None:
    """Red Hat layout: 64-bit in /usr/lib64, 32-bit in /usr/lib; /usr/lib comes first here."""
    lib32 = driver_library(fake_root, "libcuda.so", directory="/usr/lib", arch="i386")
    lib64 = driver_library(fake_root, "libcuda.so", directory="/usr/lib64")
    search = ("/usr/lib", "/usr/lib64")
    root = Root(str(fake_root))
    f64 = LibraryFinder(root, arch="x86_64", cache=None, search_paths=search)
    f32 = LibraryFinder(root, arch="i386", cache=None, search_paths=search)
    assert f64.find(CUDA, VERSION) == Library("libcuda.so", lib64, "libcuda.so.1")
    assert f32.find(CUDA, VERSION) == Library("libcuda.so", lib32, "libcuda.so.1")


def test_i386_entries_of_the_cache(fake_root: FakeRoot) -> None:
    lib64 = driver_library(fake_root, "libcuda.so")
    lib32 = driver_library(fake_root, "libcuda.so", directory=I386, arch="i386")
    fake_root.ldconfig(X86, I386)
    assert _finder(fake_root).find(CUDA, VERSION) == Library("libcuda.so", lib64, "libcuda.so.1")
    found32 = _finder(fake_root, "i386").find(CUDA, VERSION)
    assert found32 == Library("libcuda.so", lib32, "libcuda.so.1")


def test_no_version_takes_the_caches_choice_or_the_highest(fake_root: FakeRoot) -> None:
    driver_library(fake_root, "libcuda.so", version="535.1")
    driver_library(fake_root, "libcuda.so", version="550.2")  # link now -> 550.2
    fake_root.ldconfig(X86)
    found = _finder(fake_root).find(CUDA, None)
    assert found is not None and found.path == f"{X86}/libcuda.so.550.2"
    assert _finder(fake_root).infer_version(["libnvidia-ml.so", "libcuda.so"]) == "550.2"
    driver_library(fake_root, "libcuda.so", version="560.10", directory="/usr/lib64")
    no_cache = _finder(fake_root, cache=False).find(CUDA, None)
    assert no_cache is not None and no_cache.path == f"{X86}/libcuda.so.550.2"  # first dir wins
    root = Root(str(fake_root))
    only64 = LibraryFinder(root, arch="x86_64", cache=None, search_paths=["/usr/lib64"])
    assert only64.infer_version(["libcuda.so"]) == "560.10"
    assert only64.infer_version(["libnvidia-ml.so"]) is None


def test_egl_platform_libraries_keep_their_own_version(fake_root: FakeRoot) -> None:
    wayland = LibrarySpec("libnvidia-egl-wayland.so", own_version=True)
    path = driver_library(fake_root, "libnvidia-egl-wayland.so", version="1.1.13")
    fake_root.ldconfig(X86)
    assert _finder(fake_root).find(wayland, VERSION) == Library(
        "libnvidia-egl-wayland.so", path, "libnvidia-egl-wayland.so.1"
    )
    assert _finder(fake_root, cache=False).find(wayland, VERSION) == Library(
        "libnvidia-egl-wayland.so", path, "libnvidia-egl-wayland.so.1"
    )


def test_vdpau_subdirectory(fake_root: FakeRoot) -> None:
    vdpau = LibrarySpec("libvdpau_nvidia.so", subdir="vdpau")
    path = driver_library(fake_root, "libvdpau_nvidia.so", directory=f"{X86}/vdpau")
    driver_library(fake_root, "libcuda.so")
    fake_root.ldconfig(X86)  # vdpau/ is not in ld.so.conf, as on real hosts
    assert _finder(fake_root).find(vdpau, VERSION) == Library(
        "libvdpau_nvidia.so", path, "libvdpau_nvidia.so.1"
    )


def test_hwcap_variants_are_ignored(fake_root: FakeRoot) -> None:
    path = driver_library(fake_root, "libcuda.so")
    driver_library(fake_root, "libcuda.so", directory=f"{X86}/glibc-hwcaps/x86-64-v3")
    fake_root.ldconfig(X86)
    assert any(e.hwcap for e in read_ld_cache(str(fake_root.at("/etc/ld.so.cache"))).entries)
    found = _finder(fake_root).find(CUDA, VERSION)
    assert found is not None and found.path == path


def test_stale_entry_and_non_elf_file(fake_root: FakeRoot) -> None:
    driver_library(fake_root, "libcuda.so")
    fake_root.ldconfig(X86)
    fake_root.at(f"{X86}/libcuda.so.{VERSION}").unlink()  # removed after ldconfig ran
    assert _finder(fake_root).find(CUDA, VERSION) is None
    fake_root.file(f"{X86}/libcuda.so.{VERSION}", "not an ELF file")
    assert _finder(fake_root, cache=False).find(CUDA, VERSION) is None


@pytest.mark.parametrize("arch", ["x86_64", "i386"])
def test_unknown_stem(fake_root: FakeRoot, arch: str) -> None:
    driver_library(fake_root, "libcuda.so")
    fake_root.ldconfig(X86)
    assert _finder(fake_root, arch).find(LibrarySpec("libnvidia-tileiras.so"), VERSION) is None
