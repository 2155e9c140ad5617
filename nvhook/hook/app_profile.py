"""``--application-profile FILE``: EGL and Vulkan in the container see only its GPUs.

The NVIDIA driver's EGL and Vulkan implementations enumerate every GPU the driver knows, not
only those whose ``/dev/nvidiaN`` node the container has; opening the others then fails
inside the application. The driver reads *application profiles* (JSON, from
``/etc/nvidia/nvidia-application-profiles-rc.d/``), and the setting
``EGLVisibleDGPUDevices`` (a bit mask of device minors) restricts what they enumerate.

This is NVIDIA's ``nvidia-cdi-hook update-application-profile`` (nvidia-container-toolkit
v1.20.0, ``cmd/nvidia-cdi-hook/update-application-profile``), as a step of the
createContainer hook, run after the links and before the ld cache:

1. list the container's ``/dev`` (resolved in the rootfs by :mod:`nvhook.rootfs.safepath`:
   a symlinked ``/dev`` stays inside); every entry named ``nvidia<digits>`` that is a
   character device (``lstat``: a symlink is not one) contributes its minor; no ``/dev``,
   or no such node: nothing is written, as NVIDIA's hook does. The nodes the container
   has are the ones that count, whatever requested them, so one spec-level hook serves
   every device of a generated spec (NVIDIA's is spec-level too);
2. minors above 63 do not fit the mask: each is dropped with a note (NVIDIA logs a warning);
3. ``FILE`` (:data:`PROFILE_PATH` as injected) is written with exactly the bytes NVIDIA's
   hook writes (:func:`profile`: no newline at the end, the mask in lower-case hex), mode
   :data:`FILE_MODE`, owned by the hook's user (root); its missing folders are created
   with :data:`DIR_MODE` (the umask applies to both, as to NVIDIA's). One difference:
   NVIDIA's hook truncates an existing file in place (following a symlink there, inside
   the root); this one replaces it atomically (a temp file renamed over it: a symlink
   there is replaced, never followed), so an existing file always ends up with our
   content and mode. A folder at ``FILE``, or a file where a folder is needed, fails the
   hook as NVIDIA's does.

The native hook (``nvhook/native/nvhook-hook.c``) does this step too, with this module's
values through ``nvhook-contract.h`` (regenerate it after changing one:
``python -m nvhook.native.contract``), and hands every refusal here over.
"""

from __future__ import annotations

import errno
import os
import stat

from nvhook.errors import HookError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from nvhook.rootfs.safepath import RootFd

__all__ = [
    "DEV_DIR",
    "DIR_MODE",
    "FILE_MODE",
    "MASK_PREFIX",
    "MAX_MINOR",
    "NODE_PREFIX",
    "PROFILE_HEAD",
    "PROFILE_PATH",
    "PROFILE_TAIL",
    "check_profile_path",
    "gpu_minors",
    "profile",
    "write_application_profile",
]

#: Where NVIDIA's hook writes the profile (and where nvhook's injected hook names it).
PROFILE_PATH = "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf"
#: The modes NVIDIA's hook asks for (``MkdirAll(…, 0555)``, ``WriteFile(…, 0444)``).
DIR_MODE = 0o555
FILE_MODE = 0o444
#: The mask is 64 bits: a larger minor is dropped.
MAX_MINOR = 63
#: Where the GPU nodes are, in the rootfs, and their names: the prefix, then the minor's digits.
DEV_DIR = "/dev"
NODE_PREFIX = "nvidia"
#: The profile's bytes around the mask (``buildApplicationProfileConfig``), and the mask's
#: prefix (the mask follows in lower-case hex).
PROFILE_HEAD = b'{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",'
MASK_PREFIX = b"0x"
PROFILE_TAIL = b']}],"rules":[{"pattern":[],"profile":"_container_"}]}'


def check_profile_path(path: str) -> str:
    """``path`` when it is a clean absolute file path, else :class:`UsageError`."""
    if (
        not path.startswith("/")
        or os.path.normpath(path) != path
        or path == "/"
        or any(c in path for c in "\0\n")
    ):
        raise UsageError(f"--application-profile must be a clean absolute file path, got {path!r}")
    return path


def profile(mask: int) -> bytes:
    """The profile NVIDIA's hook writes for the minors of ``mask``."""
    return b"%s%s%x%s" % (PROFILE_HEAD, MASK_PREFIX, mask, PROFILE_TAIL)


def _is_gpu_name(name: str) -> bool:
    digits = name[len(NODE_PREFIX) :]
    return name.startswith(NODE_PREFIX) and digits.isdigit() and digits.isascii()


def gpu_minors(root: RootFd) -> list[int]:
    """The minors of the ``nvidia<digits>`` character devices in the root's ``/dev``, sorted."""
    try:
        fd = root.open(DEV_DIR, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise HookError(f"cannot list {DEV_DIR} in {root.path}: {e.strerror}") from None
    try:
        minors = []
        for name in os.listdir(fd):
            if not _is_gpu_name(name):
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone since the listing
            if stat.S_ISCHR(st.st_mode):
                minors.append(os.minor(st.st_rdev))
        return sorted(minors)
    finally:
        os.close(fd)


def write_application_profile(rootfs: str, path: str, *, log: Callable[[str], None]) -> bool:
    """Write the profile of the container's GPUs to ``path`` in ``rootfs``; False (nothing
    written) when the container has no GPU node. Raises :class:`HookError` when the file
    cannot be written."""
    from nvhook.rootfs.safepath import open_root  # ctypes: only when a hook runs

    check_profile_path(path)
    with open_root(rootfs) as root:
        mask = 0
        for minor in gpu_minors(root):
            if minor > MAX_MINOR:
                log(f"note: {DEV_DIR}/{NODE_PREFIX}* minor {minor} does not fit the profile's mask")
            else:
                mask |= 1 << minor
        if not mask:
            return False
        try:
            root.mkdirs(os.path.dirname(path), DIR_MODE)
            root.write_file(path, profile(mask), FILE_MODE, sync=False)
        except OSError as e:
            where = e.filename or path
            why = "a folder is in the way" if e.errno == errno.EISDIR else e.strerror
            raise HookError(
                f"cannot write the application profile {path} in {rootfs}: {where}: {why}"
                " (the image must leave that path to the driver's profiles)"
            ) from None
    return True
