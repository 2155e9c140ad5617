"""CUDA forward compatibility (``create-container --cuda-compat``): which compat folder counts.

Planted bugs these catch: an older or equal compat ``libcuda`` used, a note that does not
list the host's branch ignored, a directory, FIFO or symlink named ``libcuda.so.X.Y`` taken
for the library, two libraries resolved by guess, and a compat folder that is a symlink
read on the host instead of inside the rootfs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nvhook.hook.cuda_compat import CUDA_BY_BRANCH, Compat, find_compat, read_fwd_compat_note
from nvhook.mock.compat import lay_out_compat
from nvhook.rootfs.safepath import open_root

from .conftest import LIBDIR, HookRunner, escape_forms

if TYPE_CHECKING:
    from nvhook.rootfs.safepath import Impl

COMPAT = "/usr/local/cuda/compat"
HOST = "550.54.15"


def _find(rootfs: Path, impl: Impl, folder: str = COMPAT, host: str = HOST) -> Compat | str:
    with open_root(str(rootfs), impl=impl) as root:
        return find_compat(root, folder, host)


def _plain(rootfs: Path, name: str, folder: str = COMPAT) -> Path:
    """A compat file without ELF note (its version is its name's)."""
    where = rootfs / folder.lstrip("/")
    where.mkdir(parents=True, exist_ok=True)
    (where / name).write_bytes(b"\x7fELF not really")
    return where / name


@pytest.mark.parametrize(
    ("name", "used"),
    [
        ("libcuda.so.575.57.08", True),  # a newer branch
        ("libcuda.so.550.54.15", False),  # the host's own version
        ("libcuda.so.550.99.01", False),  # same branch, newer patch: no note, majors decide
        ("libcuda.so.535.230.02", False),  # older
    ],
)
def test_without_note_a_newer_branch_counts(
    tmp_path: Path, impl: Impl, name: str, used: bool
) -> None:
    _plain(tmp_path, name)
    found = _find(tmp_path, impl)
    assert isinstance(found, Compat)
    assert (found.used, found.folder, found.library) == (used, COMPAT, name)
    assert found.cuda_version == CUDA_BY_BRANCH[int(name.split(".")[2])]


@pytest.mark.parametrize(
    ("version", "drivers", "used", "reason"),
    [
        ("575.57.08", (535, 550), True, "whose branch it lists"),
        ("575.57.08", (535, 570), False, "does not list the host's branch 550"),
        ("550.54.15", (550,), False, "not newer than the host driver"),
        ("550.99.01", (550,), True, "whose branch it lists"),  # the note allows same-branch
    ],
)
def test_the_note_decides_when_present(
    tmp_path: Path,
    impl: Impl,
    version: str,
    drivers: tuple[int, ...],
    used: bool,
    reason: str,
) -> None:
    lay_out_compat(tmp_path, profile="dgx-a100", version=version, cuda="12.9", drivers=drivers)
    found = _find(tmp_path, impl)
    assert isinstance(found, Compat)
    assert (found.used, found.cuda_version) == (used, "12.9")
    assert reason in found.reason


def test_names_that_are_not_regular_files_are_not_libraries(tmp_path: Path, impl: Impl) -> None:
    where = tmp_path / COMPAT.lstrip("/")
    where.mkdir(parents=True)
    (where / "libcuda.so.575.1.1").mkdir()
    os.mkfifo(where / "libcuda.so.575.1.2")
    (where / "libcuda.so.575.1.3").symlink_to("libcuda.so.1")
    (where / "libcuda.so.1").write_text("")  # the SONAME link's name: no version
    (where / "libcuda.so.575").write_text("")  # one number only
    assert _find(tmp_path, impl) == f"no libcuda.so.<version> file in {COMPAT}"


def test_names_with_non_ascii_digits_are_not_versions(tmp_path: Path, impl: Impl) -> None:
    """ "²" is a digit to str.isdigit() but not to int(): such a name is no library (the hook
    once died on it with a traceback) and the real one beside it is still found."""
    _plain(tmp_path, "libcuda.so.575.\u00b2")
    _plain(tmp_path, "libcuda.so.\u0665\u0667\u0665.1")  # Arabic-Indic digits
    assert _find(tmp_path, impl) == f"no libcuda.so.<version> file in {COMPAT}"
    _plain(tmp_path, "libcuda.so.575.57.08")
    found = _find(tmp_path, impl)
    assert isinstance(found, Compat) and found.library == "libcuda.so.575.57.08"


def test_two_libraries_are_not_guessed_between(tmp_path: Path, impl: Impl) -> None:
    _plain(tmp_path, "libcuda.so.575.57.08")
    _plain(tmp_path, "libcuda.so.580.65.06")
    found = _find(tmp_path, impl)
    assert isinstance(found, str) and "more than one libcuda" in found


def test_no_folder_and_bad_host_version(tmp_path: Path, impl: Impl) -> None:
    assert "no compat folder" in str(_find(tmp_path, impl))
    _plain(tmp_path, "libcuda.so.575.57.08")
    assert "is not a version" in str(_find(tmp_path, impl, host="550"))
    assert "not an absolute path" in str(_find(tmp_path, impl, folder="usr/local"))


def test_a_symlinked_folder_is_resolved_inside_the_rootfs(tmp_path: Path, impl: Impl) -> None:
    """``/usr/local/cuda -> cuda-12.9`` (as CUDA images have it) is followed inside; a link
    to a host directory holding a newer libcuda finds nothing there, in every form."""
    rootfs = tmp_path / "rootfs"
    _plain(rootfs, "libcuda.so.575.57.08", "/usr/local/cuda-12.9/compat")
    (rootfs / "usr/local/cuda").symlink_to("cuda-12.9")
    found = _find(rootfs, impl)
    assert isinstance(found, Compat) and found.folder == "/usr/local/cuda-12.9/compat"

    host = tmp_path / "host"
    (host / "compat").mkdir(parents=True)
    (host / "compat" / "libcuda.so.999.1.1").write_text("the host's")
    for form in escape_forms(rootfs, host):
        (rootfs / "usr/local/cuda").unlink()
        (rootfs / "usr/local/cuda").symlink_to(form)
        found = _find(rootfs, impl)
        assert not isinstance(found, Compat) or "999" not in found.library, form


def test_a_folder_that_changes_after_it_is_opened_is_no_compat(
    tmp_path: Path, impl: Impl, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An image swapping its compat folder between the hook's open and its next look (what
    tests/e2e/test_hook_race.py does) gets no compat folder, not a traceback."""
    rootfs = tmp_path / "rootfs"
    _plain(rootfs, "libcuda.so.575.57.08", "/usr/local/cuda/compat")
    with open_root(str(rootfs), impl=impl) as root:

        def gone(self: object, path: str) -> str:
            raise FileNotFoundError(2, "No such file or directory", path)

        monkeypatch.setattr(type(root), "realpath", gone)
        found = find_compat(root, "/usr/local/cuda/compat", "550.54.15")
    assert (
        found == "cannot read the compat folder /usr/local/cuda/compat (No such file or directory)"
    )


def _elf64_header(shentsize: int, shnum: int) -> bytes:
    """An ELF64 little-endian header whose section table is at 64 (nothing else)."""
    import struct

    ident = b"\x7fELF\x02\x01\x01" + bytes(9)
    rest = struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, 64, 0, 64, 0, 0, shentsize, shnum, 0)
    return ident + rest


def test_note_reader_never_asks_for_more_than_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A section-header size that is not the ELF64 header's own (64) is "no note" before
    anything is read: honoured, it would let a hostile image make the reader allocate
    65535 x 4096 bytes (a file that large, read whole)."""
    path = tmp_path / "lib"
    path.write_bytes(_elf64_header(65535, 4096) + bytes(1 << 16))
    asked: list[int] = []
    real = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        asked.append(n)
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_fwd_compat_note(fd) is None
    finally:
        os.close(fd)
    assert asked and max(asked) <= 64 << 10, asked


def test_note_reader_refuses_garbage(tmp_path: Path) -> None:
    for content in (b"", b"\x7fELF", b"\x7fELF\x02\x01" + b"\xff" * 200, os.urandom(4096)):
        path = tmp_path / "lib"
        path.write_bytes(content)
        fd = os.open(path, os.O_RDONLY)
        try:
            assert read_fwd_compat_note(fd) is None
        finally:
            os.close(fd)


def _compat_bundle(tmp_path: Path, env: list[str]) -> Path:
    rootfs = tmp_path / "bundle" / "rootfs"
    (rootfs / LIBDIR.lstrip("/")).mkdir(parents=True)
    (rootfs / "etc").mkdir()
    config = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"env": env}}
    (tmp_path / "bundle" / "config.json").write_text(json.dumps(config))
    return rootfs


@pytest.mark.root
@pytest.mark.parametrize(
    ("env", "first"),
    [
        ([], COMPAT),
        (["NVIDIA_DISABLE_CUDA_COMPAT=true"], LIBDIR),
        (["NVIDIA_DISABLE_CUDA_COMPAT=true", "NVIDIA_DISABLE_CUDA_COMPAT=false"], COMPAT),
        (["NVIDIA_CUDA_COMPAT_DIR=/opt/compat"], "/opt/compat"),
    ],
    ids=["default", "opted-out", "last-definition-wins", "image-declared-dir"],
)
def test_hook_lists_the_compat_folder_first(
    run_hook: HookRunner, tmp_path: Path, impl: Impl, env: list[str], first: str
) -> None:
    rootfs = _compat_bundle(tmp_path, env)
    _plain(rootfs, "libcuda.so.575.57.08")
    _plain(rootfs, "libcuda.so.575.57.08", "/opt/compat")
    args = ["create-container", "--folder", LIBDIR, "--cuda-compat", HOST]
    proc = run_hook(args, bundle=rootfs.parent, impl=impl)
    assert proc.returncode == 0, proc.stderr
    conf = (rootfs / "etc/ld.so.conf.d/00-nvhook.conf").read_text().splitlines()
    assert conf[1:] == ([first, LIBDIR] if first != LIBDIR else [LIBDIR])
