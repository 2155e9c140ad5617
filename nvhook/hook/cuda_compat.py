"""CUDA forward compatibility: the image's newer ``libcuda`` first in the container's ld cache.

A CUDA image may ship the user-mode driver of a newer branch than the host's in
``/usr/local/cuda/compat`` (the ``cuda-compat`` package: ``libcuda.so.<version>``, its
``libcuda.so.1`` link, ``libnvidia-ptxjitcompiler``…). CUDA's forward compatibility lets
that newer ``libcuda`` run over an older kernel module of a supported (datacenter) branch,
so the container gets the newer CUDA version. It works only when the loader finds the
compat folder before the driver's own folder, which the ``create-container`` step
``--cuda-compat HOST_DRIVER_VERSION`` arranges: :func:`find_compat` picks the folder, and
the ld cache step lists it first in ``/etc/ld.so.conf.d/00-nvhook.conf``.

When the folder counts, as NVIDIA's ``nvidia-cdi-hook enable-cuda-compat`` decides it
(``cmd/nvidia-cdi-hook/cudacompat`` of the NVIDIA Container Toolkit) and libnvidia-container
before it (``src/cli/compat_mode.c``: a library whose major is not above the kernel
module's is dropped):

- the folder is ``/usr/local/cuda/compat``, or the one the image names in
  :data:`~nvhook.constants.ENV_CUDA_COMPAT_DIR` (an absolute path, resolved *inside* the
  rootfs like every other path, :mod:`nvhook.rootfs.safepath`);
- it holds exactly one ``libcuda.so.<X.Y[.Z]>`` that is a regular file (a directory, a
  FIFO, a device or a symlink of that name is not a library; two are ambiguous: skipped);
- when the library carries NVIDIA's ``.note.cuda.fwd_compatibility`` ELF note (JSON:
  ``"CUDA version"``, the host ``"driver"`` branches it supports; compat packages since
  CUDA 12.9 have it), it counts when the host's branch is listed and the library's version
  is above the host driver's; without the note, when its major is above the host's (an
  equal or older one would only replace the host's own ``libcuda``).

The CUDA version the container then gets is the note's, else the one NVIDIA's CUDA
release notes give the branch (:data:`CUDA_BY_BRANCH`, "CUDA Toolkit and Corresponding
Driver Versions"), else unknown; :mod:`nvhook.planner` checks ``NVIDIA_REQUIRE_CUDA`` against
it. A container that sets :data:`~nvhook.constants.ENV_DISABLE_CUDA_COMPAT` to true, or a
node with ``hook.cuda_compat = false``, keeps the host's ``libcuda``.

Everything here reads the image's files as data: nothing of the image is executed, the
library is read with ``pread`` through an fd opened in-root, at most :data:`_MAX_NOTE`
bytes of it, and anything malformed just means "no note".
"""

from __future__ import annotations

import os
import stat

from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from nvhook.rootfs.safepath import RootFd

__all__ = [
    "CUDA_BY_BRANCH",
    "DEFAULT_DIR",
    "Compat",
    "compat_dir_of",
    "compat_in",
    "disabled_by",
    "find_compat",
    "read_fwd_compat_note",
]

#: Where CUDA images put the compat libraries (the ``cuda-compat-<X>-<Y>`` package).
DEFAULT_DIR = "/usr/local/cuda/compat"
_PREFIX = "libcuda.so."
_NOTE_SECTION = b".note.cuda.fwd_compatibility"
_NOTE_OWNER = b"NVIDIA Corporation"
_MAX_NOTE = 64 << 10
_MAX_SECTIONS = 4096

#: The CUDA version of each driver branch, from NVIDIA's CUDA Toolkit release notes (table
#: "CUDA Toolkit and Corresponding Driver Versions"; 565 is what its nvidia-smi reports).
#: Only for compat libraries without the note; the note wins.
CUDA_BY_BRANCH: dict[int, str] = {
    450: "11.0", 455: "11.1", 460: "11.2", 465: "11.3", 470: "11.4", 495: "11.5",
    510: "11.6", 515: "11.7", 520: "11.8", 525: "12.0", 530: "12.1", 535: "12.2",
    545: "12.3", 550: "12.4", 555: "12.5", 560: "12.6", 565: "12.7", 570: "12.8",
    575: "12.9", 580: "13.0", 590: "13.1",
}  # fmt: skip


class Compat(Frozen):
    """The image's compat ``libcuda`` and whether it is used.

    ``folder`` is where it is inside the rootfs (symlinks resolved), ``library`` its file
    name, ``version`` its driver version, ``cuda_version`` the CUDA version it provides
    (``""``: unknown), ``used`` whether it comes first, and ``reason`` why (for people).
    """

    folder: str
    library: str
    version: str
    cuda_version: str
    used: bool
    reason: str


def _true(value: str | None) -> bool:
    """Go's ``strconv.ParseBool`` true, as ``NVIDIA_DISABLE_REQUIRE`` is read."""
    return value is not None and value.strip() in ("1", "t", "T", "TRUE", "true", "True")


def disabled_by(env: Mapping[str, str]) -> bool:
    """Whether the container's env turns forward compatibility off."""
    from nvhook.constants import ENV_DISABLE_CUDA_COMPAT

    return _true(env.get(ENV_DISABLE_CUDA_COMPAT))


def compat_dir_of(env: Mapping[str, str]) -> str:
    """The compat folder the image names (:data:`DEFAULT_DIR` when it names none)."""
    from nvhook.constants import ENV_CUDA_COMPAT_DIR

    return env.get(ENV_CUDA_COMPAT_DIR) or DEFAULT_DIR


def compat_in(rootfs: str, env: Mapping[str, str], host_driver: str) -> Compat | str | None:
    """What ``--cuda-compat HOST_DRIVER`` finds in the container at ``rootfs`` whose env is
    ``env`` (:func:`find_compat` in the folder it names); None when the env opts out. Errors
    opening the rootfs propagate (the hook fails on them; ``explain`` and the shim report
    them)."""
    if disabled_by(env):
        return None
    from nvhook.rootfs.safepath import open_root

    with open_root(rootfs) as root:
        return find_compat(root, compat_dir_of(env), host_driver)


def _version(text: str) -> tuple[int, ...] | None:
    parts = text.split(".")
    # ASCII digits only: str.isdigit() is also true of "²", which int() refuses
    ok = all(p.isascii() and p.isdigit() and len(p) < 10 for p in parts)
    if len(parts) < 2 or len(parts) > 4 or not ok:
        return None
    return tuple(int(p) for p in parts)


def find_compat(root: RootFd, folder: str, host_driver: str) -> Compat | str:
    """The compat ``libcuda`` of ``folder`` in ``root`` for a host driver ``host_driver``;
    a sentence saying why there is none (no folder, no library, two…) otherwise."""
    host = _version(host_driver)
    if host is None:
        return f"the host driver version {host_driver!r} is not a version"
    if not folder.startswith("/") or any(c in folder for c in "\0\n"):
        return f"the compat folder {folder!r} is not an absolute path"
    try:
        fd = root.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        return f"no compat folder {folder} ({e.strerror})"
    try:
        return _find_in(root, folder, fd, host, host_driver)
    except OSError as e:  # the folder changed under the hook (an image swapping it): no compat
        return f"cannot read the compat folder {folder} ({e.strerror})"
    finally:
        os.close(fd)


def _find_in(
    root: RootFd, folder: str, fd: int, host: tuple[int, ...], host_driver: str
) -> Compat | str:
    """:func:`find_compat` once ``folder`` is open as ``fd``."""
    where = root.realpath(folder)
    found = []
    for name in os.listdir(fd):
        version = _version(name[len(_PREFIX) :]) if name.startswith(_PREFIX) else None
        if version is None:
            continue
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            found.append((name, version))
    if not found:
        return f"no libcuda.so.<version> file in {where}"
    if len(found) > 1:
        names = ", ".join(sorted(n for n, _ in found))
        return f"more than one libcuda in {where} ({names}): not choosing"
    (name, version), text = found[0], found[0][0][len(_PREFIX) :]
    note = _note_of(fd, name)
    branch = CUDA_BY_BRANCH.get(version[0], "")
    cuda = str(note.get("CUDA version") or "") if note else branch
    supported = note.get("driver") if note is not None else None
    if isinstance(supported, list):
        if host[0] not in supported:
            used, why = False, f"its note does not list the host's branch {host[0]}"
        elif version <= host:
            used, why = False, f"it is not newer than the host driver {host_driver}"
        else:
            used, why = True, f"newer than the host driver {host_driver}, whose branch it lists"
    elif version[0] > host[0]:
        used, why = True, f"branch {version[0]} is newer than the host's {host[0]}"
    else:
        used, why = False, f"branch {version[0]} is not newer than the host's {host[0]}"
    return Compat(where, name, text, cuda if _version(cuda + ".0") else "", used, why)


def _note_of(dir_fd: int, name: str) -> dict[str, object] | None:
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return read_fwd_compat_note(fd)
    finally:
        os.close(fd)


def read_fwd_compat_note(fd: int) -> dict[str, object] | None:
    """The JSON of the ``.note.cuda.fwd_compatibility`` section of the ELF file ``fd``
    (owner ``NVIDIA Corporation``), as a dict; None when there is none or it is malformed.
    What ``readelf -p .note.cuda.fwd_compatibility`` shows, read with a few ``pread``s."""
    import struct

    try:
        ident = os.pread(fd, 64, 0)
        if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2):
            return None
        wide, end = ident[4] == 2, "<" if ident[5] == 1 else ">"
        if wide:
            shoff, shentsize, shnum, shstrndx = struct.unpack_from(end + "40xQ10xHHH", ident)
            shdr = end + "IIQQQQIIQQ"
        else:
            shoff, shentsize, shnum, shstrndx = struct.unpack_from(end + "32xI10xHHH", ident)
            shdr = end + "IIIIIIIIII"
        size = struct.calcsize(shdr)
        # e_shentsize is the header's own size in every real file; a larger one would let
        # a hostile image make this read up to 65535 x 4096 bytes
        if not shoff or shentsize != size or not 0 < shnum <= _MAX_SECTIONS or shstrndx >= shnum:
            return None
        table = os.pread(fd, shentsize * shnum, shoff)
        if len(table) < shentsize * shnum:
            return None
        sections = [struct.unpack_from(shdr, table, i * shentsize) for i in range(shnum)]
        names = sections[shstrndx]
        strtab = os.pread(fd, min(names[5], _MAX_NOTE), names[4])
        for sh_name, sh_type, _, _, offset, length, *_ in sections:
            if sh_type != 7 or strtab[sh_name : sh_name + len(_NOTE_SECTION) + 1] != (
                _NOTE_SECTION + b"\0"
            ):
                continue  # 7: SHT_NOTE
            data = os.pread(fd, min(length, _MAX_NOTE), offset)
            namesz, descsz, _ = struct.unpack_from(end + "III", data)
            owner = data[12 : 12 + namesz].rstrip(b"\0")
            start = 12 + ((namesz + 3) & ~3)
            if owner != _NOTE_OWNER or start + descsz > len(data):
                return None
            from oci.jsoncodec import loadb

            value = loadb(data[start : start + descsz].rstrip(b"\0"))
            return value if isinstance(value, dict) else None
    except (OSError, ValueError, struct.error, IndexError):
        return None
    return None
