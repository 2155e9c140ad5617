"""Inject device nodes and bind mounts into a created container's mount namespace.

The prestart hook (:mod:`nvhook.hook.prestart`) runs on the host while runc init waits
in the container's namespaces, the rootfs fully mounted (``/dev`` already a tmpfs of
the container's) but not yet ``pivot_root``-ed. What it adds must land in *that* mount
namespace and inside the rootfs, never in the host's:

1. every bind-mount source is cloned on the host first, as a detached mount
   (``open_tree(OPEN_TREE_CLONE)``), and made read-only/nosuid/nodev/noexec as its
   options say (``mount_setattr``): the source is resolved in the host's namespace,
   where the hook's paths mean what they say;
2. a forked child enters the container's mount namespace through the descriptor that
   :func:`nvhook.hook.container_init.check_init` opened while it checked the pid (a child
   of the runtime that started the hook, in another mount namespace), never by the pid
   again (``setns``; the child is single-threaded, as ``setns`` needs);
3. there, the rootfs is opened and every target resolved inside it by
   :mod:`nvhook.rootfs.safepath` (a symlinked ``/dev`` or library folder stays inside);
   device nodes are ``mknodat``-ed in their resolved parent directory, mount points
   created the same way, and each detached mount is attached with
   ``move_mount`` onto the ``O_PATH`` descriptor of its target: no path string is
   ever joined onto the rootfs and handed to the kernel;
4. then the caller's remaining steps (ld cache, links) run in the same child.

The work is bounded, since dockerd gives the hook no OCI ``timeout`` and runc would wait
for it forever: at most :data:`MAX_DEVICES` nodes and :data:`MAX_MOUNTS` mounts (checked
before anything is done), and the child is killed when it has not finished within
:data:`INJECT_TIMEOUT_S` (ldconfig has its own, shorter, time box inside it).

Why the new mount API: a classic ``mount(MS_BIND)`` refuses a source from another
mount namespace (``EINVAL``), so sources opened on the host could not be bind-mounted
after ``setns``; a detached tree from ``open_tree`` can be attached in any namespace
the caller has entered. It needs Linux 5.12 (``mount_setattr``); older kernels get an
error saying to use the runtime shim instead.
"""

from __future__ import annotations

import ctypes
import os
import posixpath
import select
import stat
import sys
import time

from nvhook.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from nvhook.hook.container_init import ContainerInit

__all__ = [
    "INJECT_TIMEOUT_S",
    "MAX_DEVICES",
    "MAX_MOUNTS",
    "MOUNT_FLAGS",
    "attach",
    "check_bounds",
    "clone_fd",
    "clone_mount",
    "inject",
    "mount_attributes",
]

#: The most device nodes and bind mounts one injection makes (all 8 GPUs of a DGX with
#: every MIG instance need a few hundred): a bound, not a policy.
MAX_DEVICES = 4096
MAX_MOUNTS = 4096
#: How long the injecting child may take, ldconfig (LDCONFIG_TIMEOUT_S, 60 s) included;
#: packaging/oci-hooks.d's ``timeout`` is above it.
INJECT_TIMEOUT_S = 90.0

# <linux/mount.h>, the same numbers on every architecture of the common syscall table
_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442
_OPEN_TREE_CLONE = 1
_AT_EMPTY_PATH = 0x1000
_AT_RECURSIVE = 0x8000
_MOVE_MOUNT_F_EMPTY_PATH = 0x04
_MOVE_MOUNT_T_EMPTY_PATH = 0x40
_CLONE_NEWNS = 0x00020000
_MOUNT_ATTR_RDONLY = 0x1

#: Mount options a bind mount may carry, and the ``MOUNT_ATTR_*`` bit each sets.
MOUNT_FLAGS: dict[str, int] = {"ro": 0x1, "nosuid": 0x2, "nodev": 0x4, "noexec": 0x8}
#: Options that need no attribute: the bind itself, rw, and propagation (the clone is private).
_NEUTRAL = frozenset(
    {"bind", "rbind", "rw", "private", "rprivate", "slave", "rslave", "shared", "rshared"}
)


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


_libc: ctypes.CDLL | None = None


def _syscall(number: int, *args: Any) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    result = int(_libc.syscall(ctypes.c_long(number), *args))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def mount_attributes(options: Sequence[str], destination: str) -> tuple[int, bool]:
    """The ``MOUNT_ATTR_*`` bits of a bind mount's options, and whether it is recursive."""
    bits = 0
    for option in options:
        if option in MOUNT_FLAGS:
            bits |= MOUNT_FLAGS[option]
        elif option not in _NEUTRAL:
            raise HookError(
                f"mount {destination}: option {option!r} is not supported in hook mode "
                "(use nvhook-runtime as the runtime to inject this mount)"
            )
    return bits, "rbind" in options


def clone_mount(source: str, options: Sequence[str], destination: str) -> int:
    """A detached copy of the host's ``source`` (an fd) with ``options`` applied."""
    return _clone(-100, source, 0, options, destination)  # AT_FDCWD: a host path


def clone_fd(fd: int, options: Sequence[str], destination: str) -> int:
    """A detached bind mount of the open file ``fd`` with ``options`` applied.

    The file's mount must be in the caller's mount namespace (the kernel clones only those:
    a memfd's internal mount is refused, an ``O_TMPFILE`` on a visible tmpfs is not)."""
    return _clone(fd, "", _AT_EMPTY_PATH, options, destination)


def _clone(dirfd: int, source: str, at: int, options: Sequence[str], destination: str) -> int:
    bits, recursive = mount_attributes(options, destination)
    flags = _OPEN_TREE_CLONE | os.O_CLOEXEC | at | (_AT_RECURSIVE if recursive else 0)
    what = source or f"the file of fd {dirfd}"
    try:
        fd = _syscall(
            _SYS_OPEN_TREE,
            ctypes.c_int(dirfd),
            ctypes.c_char_p(os.fsencode(source)),
            ctypes.c_uint(flags),
        )
    except OSError as e:
        if e.errno == 38:  # ENOSYS
            raise HookError(
                "this kernel lacks open_tree (Linux 5.2+, mount_setattr 5.12+): hook mode "
                "cannot mount the driver; use nvhook-runtime as the runtime"
            ) from None
        raise HookError(f"cannot clone {what} for {destination}: {e.strerror}") from None
    if bits:
        attr = _MountAttr(bits, 0, 0, 0)
        try:
            _syscall(
                _SYS_MOUNT_SETATTR,
                ctypes.c_int(fd),
                ctypes.c_char_p(b""),
                ctypes.c_uint(_AT_EMPTY_PATH | (_AT_RECURSIVE if recursive else 0)),
                ctypes.byref(attr),
                ctypes.c_size_t(ctypes.sizeof(attr)),
            )
        except OSError as e:
            os.close(fd)
            raise HookError(
                f"cannot set {','.join(options)} on the mount of {what}: {e.strerror} "
                "(mount_setattr needs Linux 5.12; else use nvhook-runtime as the runtime)"
            ) from None
    return fd


def attach(tree: int, target: int) -> None:
    """``move_mount`` the detached ``tree`` onto the ``O_PATH`` fd ``target`` (OSError)."""
    _syscall(
        _SYS_MOVE_MOUNT,
        ctypes.c_int(tree),
        ctypes.c_char_p(b""),
        ctypes.c_int(target),
        ctypes.c_char_p(b""),
        ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH | _MOVE_MOUNT_T_EMPTY_PATH),
    )


def check_bounds(devices: Sequence[object], mounts: Sequence[object]) -> None:
    """Refuse more than :data:`MAX_DEVICES` nodes or :data:`MAX_MOUNTS` mounts."""
    for what, items, most in (
        ("device nodes", devices, MAX_DEVICES),
        ("mounts", mounts, MAX_MOUNTS),
    ):
        if len(items) > most:
            raise HookError(f"refusing to inject {len(items)} {what} (at most {most})")


def inject(
    init: ContainerInit,
    rootfs: str,
    *,
    devices: Sequence[dict[str, Any]],
    mounts: Sequence[dict[str, Any]],
    then: Callable[[], None] | None = None,
) -> None:
    """Create ``devices`` and attach ``mounts`` (OCI spec entries) in ``init``'s rootfs.

    ``init`` was checked and is held by :func:`nvhook.hook.container_init.check_init`: its
    mount namespace is entered through the descriptor opened then, never by its pid.
    ``then`` runs afterwards in the same child, inside the container's mount namespace.
    Raises :class:`HookError` naming what failed; what was done before stays (runc
    destroys a container whose prestart hook fails).
    """
    check_bounds(devices, mounts)
    trees: list[tuple[dict[str, Any], int]] = []
    try:
        for mount in mounts:
            source, destination = mount["source"], mount["destination"]
            trees.append((mount, clone_mount(source, mount.get("options") or (), destination)))
        _in_child(lambda: _inside(init.mount_ns, rootfs, devices, trees, then))
    finally:
        for _, fd in trees:
            os.close(fd)


def _in_child(work: Callable[[], None], *, timeout: float = INJECT_TIMEOUT_S) -> None:
    """Run ``work`` in a forked child; its :class:`HookError` is raised here.

    A child still running after ``timeout`` seconds is killed (SIGKILL) and reported."""
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its outcome is checked by the parent
        status = 0
        try:
            os.close(read_end)
            work()
        except HookError as e:
            os.write(write_end, str(e).encode())
            status = 1
        except BaseException as e:
            os.write(write_end, f"internal error: {type(e).__name__}: {e}".encode())
            status = 2
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # the child exits with its status whatever
                pass
            os._exit(status)
    os.close(write_end)
    try:
        chunks = _read_until_eof(read_end, time.monotonic() + timeout)
    finally:
        os.close(read_end)
    if chunks is None:
        import signal  # here: it imports enum (bench/figures.py), which the params step never needs

        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise HookError(f"the injection did not finish within {timeout:g}s: killed it")
    _, wait_status = os.waitpid(pid, 0)
    message = b"".join(chunks).decode(errors="replace")
    if os.waitstatus_to_exitcode(wait_status) != 0:
        raise HookError(message or f"the injecting child failed (wait status {wait_status})")


def _read_until_eof(fd: int, deadline: float) -> list[bytes] | None:
    """What ``fd`` gives until its end; None when ``deadline`` (monotonic) comes first."""
    chunks: list[bytes] = []
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(max(1, int(left * 1000))):
            if time.monotonic() >= deadline:
                return None
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return chunks
        chunks.append(chunk)


def _setns(fd: int) -> None:
    setns = getattr(os, "setns", None)  # Python 3.12+
    if setns is not None:
        setns(fd, _CLONE_NEWNS)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(ctypes.c_int(fd), ctypes.c_int(_CLONE_NEWNS)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _inside(  # pragma: no cover - runs in the child
    ns_fd: int,
    rootfs: str,
    devices: Sequence[dict[str, Any]],
    trees: Sequence[tuple[dict[str, Any], int]],
    then: Callable[[], None] | None,
) -> None:
    # imported on the host's side: after setns, paths are looked up in the container's
    # mount namespace
    from nvhook.rootfs.safepath import open_root

    try:
        _setns(ns_fd)
    except OSError as e:
        raise HookError(f"cannot enter the container's mount namespace: {e.strerror}") from None
    os.umask(0)

    with open_root(rootfs) as root:
        for device in devices:
            try:
                _mknod(root, device)
            except OSError as e:
                raise HookError(
                    f"cannot create {device['path']} in {rootfs}: {e.strerror}"
                ) from None
        for mount, tree in trees:
            try:
                _attach(root, mount, tree)
            except OSError as e:
                raise HookError(
                    f"cannot mount {mount['source']} on {mount['destination']} in {rootfs}: "
                    f"{e.strerror}"
                ) from None
    if then is not None:
        then()


def _clean(path: object, what: str) -> str:
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or posixpath.normpath(path) != path
        or path == "/"
    ):
        raise HookError(f"{what} must be a clean absolute path, got {path!r}")
    return path


_NODE_TYPES = {"c": stat.S_IFCHR, "u": stat.S_IFCHR, "b": stat.S_IFBLK, "p": stat.S_IFIFO}


def _mknod(root: Any, device: dict[str, Any]) -> None:  # pragma: no cover - in the child
    path = _clean(device.get("path"), "a device path")
    kind = _NODE_TYPES.get(device.get("type") or "")
    if kind is None:
        raise HookError(f"device {path}: unknown type {device.get('type')!r}")
    rdev = os.makedev(int(device.get("major") or 0), int(device.get("minor") or 0))
    mode = int(device.get("fileMode") or 0o666) & 0o777
    parent, name = posixpath.split(path)
    root.mkdirs(parent, 0o755)
    dfd = root.open_dir(parent)
    try:
        try:
            os.mknod(name, kind | mode, rdev, dir_fd=dfd)
        except FileExistsError:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if stat.S_IFMT(st.st_mode) != kind or (kind != stat.S_IFIFO and st.st_rdev != rdev):
                raise HookError(
                    f"{path} in {root.path} exists and is not the device "
                    f"{os.major(rdev)}:{os.minor(rdev)}; refusing to replace it"
                ) from None
            return
        os.chown(
            name,
            int(device.get("uid") or 0),
            int(device.get("gid") or 0),
            dir_fd=dfd,
            follow_symlinks=False,
        )
    finally:
        os.close(dfd)


def _attach(root: Any, mount: dict[str, Any], tree: int) -> None:  # pragma: no cover - child
    destination = _clean(mount.get("destination"), "a mount destination")
    is_dir = stat.S_ISDIR(os.fstat(tree).st_mode)
    if is_dir:
        root.mkdirs(destination, 0o755)
    else:
        parent, name = posixpath.split(destination)
        root.mkdirs(parent, 0o755)
        dfd = root.open_dir(parent)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            os.close(os.open(name, flags, 0o644, dir_fd=dfd))
        except FileExistsError:
            pass
        finally:
            os.close(dfd)
    target = root.open(destination, os.O_PATH)
    try:
        if stat.S_ISDIR(os.fstat(target).st_mode) != is_dir:
            kind = "a directory" if is_dir else "a file"
            raise HookError(
                f"cannot mount {mount['source']} on {destination} in {root.path}: "
                f"the target is not {kind}"
            )
        attach(tree, target)
    finally:
        os.close(target)
