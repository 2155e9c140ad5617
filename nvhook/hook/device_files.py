"""``--params``: the container's ``/proc/driver/nvidia/params`` says ``ModifyDeviceFiles: 0``.

The NVIDIA driver creates (and fixes the modes of) ``/dev/nvidia*`` nodes itself when a
process opens the driver and the module parameter ``ModifyDeviceFiles`` is 1, as
``nvidia-modprobe`` and libcuda do from ``/proc/driver/nvidia/params``. In a privileged
container that would bring back the nodes of GPUs the container was not given. As
libnvidia-container does, the container gets a private copy of the host's params file
with that line set to 0, bind-mounted read-only over its own.

A step of the createContainer hook (``create-container --params HOSTFILE``), first of its
steps. runc refuses spec mounts onto ``/proc`` paths other than a few lxcfs files, hence a
hook; at createContainer it runs in the container's mount namespace before
``pivot_root``, with the container's procfs mounted in the rootfs. Steps:

1. read ``HOSTFILE`` (the host's params, a host path: before ``pivot_root`` the host's tree
   is still this namespace's) and set ``ModifyDeviceFiles: 0`` in it;
2. resolve ``/proc/driver/nvidia/params`` in the rootfs with :mod:`nvhook.rootfs.safepath`
   (a symlinked ``/proc`` or ``/proc/driver`` stays inside the root, a magic link is
   refused, exit 11) to an ``O_PATH`` fd, which must be a regular file; when it does not
   exist (no driver's procfs in the container) the step says so on stderr and is skipped;
3. write the copy to a new file (``O_EXCL|O_NOFOLLOW``, an unguessable name) in the
   host's ``/run`` (else ``/tmp``), clone it as a detached mount (``open_tree``), make that
   ``ro,nosuid,nodev,noexec``, attach it with ``move_mount`` onto the fd of step 2
   (:mod:`nvhook.hook.mountns`), and unlink the name, whatever happened: the mount keeps
   the file, which goes with the container's mount namespace; nothing is left to clean up
   (a hook killed between the create and the unlink leaves ``/run/.nvhook-params.*``).
   The name must exist while the mount is attached: the kernel refuses to attach a clone
   of an unlinked file (``ENOENT``: an ``O_TMPFILE`` or memfd cannot be the source).
"""

from __future__ import annotations

import errno
import os
import stat

from nvhook.errors import HookError

__all__ = [
    "MOUNT_OPTIONS",
    "PARAMS_PATH",
    "TMPFILE_DIRS",
    "disable_device_file_modification",
    "private_params",
]

#: Where the container's procfs shows the driver's module parameters.
PARAMS_PATH = "/proc/driver/nvidia/params"
#: Where the private copy is created (the first that takes it), and unlinked once mounted.
TMPFILE_DIRS: tuple[str, ...] = ("/run", "/tmp")
MOUNT_OPTIONS: tuple[str, ...] = ("ro", "nosuid", "nodev", "noexec")
_PREFIX = ".nvhook-params."
#: The params file is a few hundred bytes; more is not a params file.
_MAX_PARAMS = 64 << 10
_KEY = b"ModifyDeviceFiles:"
#: What follows :data:`_KEY` in the private copy: the driver leaves device files alone.
_OFF = b" 0"


def private_params(host: bytes) -> bytes:
    """``host``'s params with ``ModifyDeviceFiles: 0`` (added at the end when missing).

    Plain bytes work, no ``re``: this runs on every container's start, and importing ``re``
    would cost the hook a ``bench/figures.py`` row."""
    lines = host.split(b"\n")
    for i, line in enumerate(lines):
        if line.startswith(_KEY):
            lines[i] = _KEY + _OFF
            return b"\n".join(lines)
    text = host if not host or host.endswith(b"\n") else host + b"\n"
    return text + _KEY + _OFF + b"\n"


def _read_host(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_PARAMS + 1)
    except OSError as e:
        raise HookError(f"cannot read the host's {path}: {e.strerror}") from None
    if len(data) > _MAX_PARAMS:
        raise HookError(f"the host's {path} is over {_MAX_PARAMS} bytes: not a params file")
    return data


def _private_file(data: bytes) -> tuple[int, str]:
    """A new file holding ``data`` (fd, host path), under an unguessable name."""
    errors: list[str] = []
    for directory in TMPFILE_DIRS:
        # os.urandom, not secrets: that imports hashlib and hmac (~3 ms a start)
        path = f"{directory}/{_PREFIX}{os.getpid()}.{os.urandom(8).hex()}"
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(path, flags, 0o444)
        except OSError as e:
            errors.append(f"{directory}: {e.strerror}")
            continue
        try:
            os.fchmod(fd, 0o444)  # whatever the umask: every user of the container reads it
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError as e:
            os.close(fd)
            os.unlink(path)
            errors.append(f"{directory}: {e.strerror}")
            continue
        return fd, path
    raise HookError(f"cannot create the private params file ({'; '.join(errors)})")


def disable_device_file_modification(
    rootfs: str,
    host_params: str,
    *,
    target: str = PARAMS_PATH,
) -> bool:
    """Mount a copy of ``host_params`` with ``ModifyDeviceFiles: 0`` over ``target`` in
    ``rootfs``; False, silently, when the container has no such file."""
    from nvhook.hook.mountns import attach, clone_fd
    from nvhook.rootfs.safepath import open_root

    data = private_params(_read_host(host_params))
    with open_root(rootfs) as root:
        try:
            dest = root.open(target, os.O_PATH)
        except (FileNotFoundError, NotADirectoryError):
            # no driver's procfs in the container (a driverless or mock host): nothing to
            # protect, and nothing said, since runc shows a hook's output only on failure,
            # where a note here would only bury the real message
            return False
        except OSError as e:
            raise HookError(f"cannot open {target} in {rootfs}: {e.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(dest).st_mode):
            raise HookError(f"refusing {target} in {rootfs}: not a regular file")
        source, path = _private_file(data)
        try:
            tree = clone_fd(source, MOUNT_OPTIONS, target)
            try:
                attach(tree, dest)
            except OSError as e:
                why = e.strerror or errno.errorcode.get(e.errno or 0, str(e))
                raise HookError(
                    f"cannot mount the private params on {target} in {rootfs}: {why}"
                ) from None
            finally:
                os.close(tree)
        finally:
            os.close(source)
            os.unlink(path)  # the mount keeps the file; its name goes now
    finally:
        os.close(dest)
    return True
