"""Paths inside a container's rootfs, resolved inside it (docs/architecture.md D7).

A hook runs as root on the host while the rootfs under it belongs to the image,
and so to whoever built it: any directory on a path may be a symlink to
``/etc`` of the host, to ``../../../..``, or to a ``/proc/<pid>/root`` magic
link. Every file a hook creates, writes or reads in a rootfs goes through a
:class:`RootFd`, which resolves each path *inside* the root, the way the
kernel would after ``chroot(rootfs)``: ``..`` stops at the root, an absolute
symlink target starts again at the root, magic links are refused.

Two implementations, both working on file descriptors from the root down (a
path string is never joined onto the rootfs path and handed to the kernel, so
a directory swapped for a symlink between a check and a use changes nothing):

- ``openat2``: the kernel resolves the whole path atomically with
  ``RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`` (Linux 5.6+), called through
  ``syscall(2)`` because the C library has no wrapper;
- ``walk``: a component-by-component walk with ``O_PATH | O_NOFOLLOW`` opens
  that reads each symlink and resolves its target itself (``..`` pops a stack
  of directory fds held open, so it never asks the kernel for ``..``), and
  refuses to follow any symlink that lives on procfs.

``auto`` (the default) uses ``openat2`` where the kernel has it; the env
variable ``NVHOOK_SAFEPATH`` (``auto`` | ``openat2`` | ``walk``) or the
``impl`` argument of :func:`open_root` choose one, so tests run both.

Why one module of some 530 lines: it is one security argument. Both implementations
and every :class:`RootFd` method rely on the same rules (fds from the root down, no
path string handed to the kernel, no ``..``, procfs symlinks refused); kept in one
file, a reviewer checks them against each other without chasing imports.

Errors: a path that cannot be resolved safely (a symlink loop, a magic link,
a directory to create through a dangling symlink) raises
:class:`~nvhook.errors.HookError`; ordinary failures raise :class:`OSError`
with ``filename`` set to the path inside the root (``ENOENT``, ``EROFS``…).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

from nvhook.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing's import (bench/figures.py) a hook would pay on every container
    from collections.abc import Callable
    from typing import Any, Literal, TypeAlias, TypeVar

    _T = TypeVar("_T")
    #: A safepath implementation: ``auto`` picks openat2 where the kernel has it.
    Impl: TypeAlias = Literal["auto", "openat2", "walk"]

__all__ = [
    "ENV_IMPL",
    "IMPLS",
    "RootFd",
    "open_root",
    "openat2_available",
]

#: The accepted values of ``impl`` and of :data:`ENV_IMPL`.
IMPLS: tuple[str, ...] = ("auto", "openat2", "walk")
#: Env variable choosing the implementation (tests; hooks run with a fixed env without it).
ENV_IMPL = "NVHOOK_SAFEPATH"

# <linux/openat2.h>
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
# RESOLVE_IN_ROOT implies "no magic links" today (openat2(2): "this may change in the
# future"), so asking for it explicitly keeps the guarantee if the kernel ever relaxes that.
_RESOLVE = _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS
# openat2 has the same number on every architecture that joined the common syscall table
# (it is 437 there); the others would need their own offsets, so they get the walk.
_SYS_OPENAT2 = 437
_OPENAT2_MACHINES = frozenset(
    {"x86_64", "aarch64", "arm64", "armv7l", "armv8l", "i386", "i686", "ppc64le", "ppc64"}
    | {"s390x", "riscv64", "loongarch64"}
)
_PROC_SUPER_MAGIC = 0x9FA0
_MAXSYMLINKS = 40  # the kernel's limit, so both implementations agree on loops
_EAGAIN_TRIES = 16  # openat2 says EAGAIN when a rename raced with a `..` lookup
_RACE_TRIES = 8  # the walk's name lookups that lost a race (ELOOP on a fresh symlink)


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


class _Statfs(ctypes.Structure):
    # f_type comes first in struct statfs on every Linux ABI; the rest is room to spare.
    _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 248)]


_libc: ctypes.CDLL | None = None
_openat2_ok: bool | None = None


def _get_libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc


def _openat2(dirfd: int, path: str, flags: int, mode: int, resolve: int) -> int:
    how = _OpenHow(flags, mode, resolve)
    fd = _get_libc().syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_long(dirfd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def openat2_available() -> bool:
    """Whether this kernel (and seccomp profile) lets us call openat2 with RESOLVE_IN_ROOT."""
    global _openat2_ok
    if _openat2_ok is None:
        if os.uname().machine not in _OPENAT2_MACHINES:
            _openat2_ok = False
        else:
            try:
                os.close(_openat2(-100, "/", os.O_PATH | os.O_CLOEXEC, 0, _RESOLVE))
                _openat2_ok = True
            except OSError:  # ENOSYS: too old; EPERM: filtered by seccomp; E2BIG, EINVAL
                _openat2_ok = False
    return _openat2_ok


def _on_procfs(fd: int) -> bool:
    buf = _Statfs()
    if _get_libc().fstatfs(ctypes.c_int(fd), ctypes.byref(buf)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return bool((int(buf.f_type) & 0xFFFFFFFF) == _PROC_SUPER_MAGIC)


def _split(path: str) -> list[str]:
    if not isinstance(path, str) or "\0" in path:
        raise ValueError(f"not a path: {path!r}")
    return [p for p in path.split("/") if p]


def _join(parts: list[str]) -> str:
    return "/" + "/".join(parts)


def _at(path: str, func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Call an ``*at`` function; an OSError names ``path`` (inside the root), not the component."""
    try:
        return func(*args, **kwargs)
    except OSError as e:
        raise OSError(e.errno, e.strerror, path) from None


def _close(fd: int) -> None:
    # not contextlib.suppress: contextlib imports functools and collections, ~3 ms of every
    # hook's start (docs/architecture.md D5)
    try:  # noqa: SIM105
        os.close(fd)
    except OSError:
        pass


class RootFd:
    """An open directory that is the root for every path given to its methods.

    Paths are inside the root: ``/etc/ld.so.conf`` and ``etc/ld.so.conf`` are the same file.
    Methods returning an fd hand it over (``O_CLOEXEC``; the caller closes it).
    """

    __slots__ = ("_fd", "impl", "path")

    def __init__(self, fd: int, path: str, impl: Literal["openat2", "walk"]) -> None:
        self._fd = fd
        self.path = path
        self.impl = impl

    # ---------------------------------------------------------------- lifecycle

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            _close(self._fd)
            self._fd = -1

    def __enter__(self) -> RootFd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RootFd({self.path!r}, impl={self.impl!r})"

    # ---------------------------------------------------------------- public API

    def open(self, path: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
        """``open(2)`` of ``path`` resolved inside the root; returns the fd.

        The last component is followed when it is a symlink unless ``flags`` has
        ``O_NOFOLLOW``; ``O_CREAT`` through a dangling symlink creates its target (inside).
        """
        follow = not flags & os.O_NOFOLLOW and not (flags & os.O_CREAT and flags & os.O_EXCL)
        if self.impl == "openat2":
            return self._openat2_retry(
                path, flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0
            )
        return self._walk_open(path, flags, mode, follow=follow)

    def open_dir(self, path: str) -> int:
        """An ``O_PATH`` fd of the directory ``path`` (every symlink followed, inside)."""
        return self.open(path, os.O_PATH | os.O_DIRECTORY)

    def stat(self, path: str) -> os.stat_result:
        """``stat`` of ``path`` (symlinks followed, inside the root)."""
        fd = self.open(path, os.O_PATH)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def lstat(self, path: str) -> os.stat_result:
        """``lstat`` of ``path``: its directories resolved inside, the last component as is."""
        dfd, name = self._parent(path)
        try:
            return _at(path, os.stat, name, dir_fd=dfd, follow_symlinks=False)
        finally:
            os.close(dfd)

    def lexists(self, path: str) -> bool:
        """Whether ``path`` names anything, a dangling symlink included."""
        try:
            self.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def readlink(self, path: str) -> str:
        """The target of the symlink ``path`` (its directories resolved inside)."""
        dfd, name = self._parent(path)
        try:
            return str(_at(path, os.readlink, name, dir_fd=dfd))
        finally:
            os.close(dfd)

    def realpath(self, path: str) -> str:
        """The path inside the root that ``path`` resolves to (it must exist)."""
        if self.impl == "walk":
            dfd, name, parts = self._walk(path, follow_final=True)
            try:
                if name != ".":
                    _at(path, os.stat, name, dir_fd=dfd, follow_symlinks=False)
                    parts = [*parts, name]
                return _join(parts)
            finally:
                os.close(dfd)
        fd = self.open(path, os.O_PATH)
        try:
            return self._inside(os.readlink(f"/proc/self/fd/{fd}"), path)
        finally:
            os.close(fd)

    def read_file(self, path: str, *, limit: int = 1 << 20) -> bytes:
        """The content of the regular file ``path`` (at most ``limit`` bytes).

        Anything but a regular file (a FIFO, a device node) is refused without being opened
        (``OSError`` ``EINVAL``).
        """
        fd = self.open(path, os.O_PATH)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
            rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
        finally:
            os.close(fd)
        with os.fdopen(rfd, "rb") as f:
            return f.read(limit)

    def mkdirs(self, path: str, mode: int = 0o755) -> None:
        """Create the directory ``path`` and its missing parents, one ``mkdirat`` at a time.

        Each parent is opened through the root first, so a symlinked directory on the way is
        followed inside the root; a dangling symlink where a directory is needed is refused
        (it would otherwise be a way to create a directory at a place of the image's choice).
        """
        parts = _split(path)
        for i in range(len(parts)):
            prefix = _join(parts[: i + 1])
            for _ in range(_RACE_TRIES):
                try:
                    os.close(self.open_dir(prefix))
                    break
                except FileNotFoundError:
                    pass
                pfd = self.open_dir(_join(parts[:i]))
                try:
                    os.mkdir(parts[i], mode, dir_fd=pfd)
                    continue  # created: open it through the root on the next turn
                except FileExistsError:
                    pass
                except OSError as e:
                    raise OSError(e.errno, e.strerror, prefix) from None
                finally:
                    os.close(pfd)
                # it exists but does not resolve: a dangling symlink (or a lost race)
                try:
                    target = self.readlink(prefix)
                except OSError:
                    continue
                raise HookError(
                    f"refusing to create {path} in {self.path}: {prefix} is a symlink to "
                    f"{target}, which does not exist"
                )
            else:
                raise HookError(f"cannot create {prefix} in {self.path}: it keeps changing")

    def write_file(self, path: str, data: bytes, mode: int = 0o644, *, sync: bool = True) -> None:
        """Replace ``path`` with ``data`` atomically: a temp file, then ``renameat``.

        Both are in the same parent directory fd; a symlink at ``path`` is replaced, never
        followed. The parent directory must exist. ``sync=False`` skips the ``fsync`` (a file
        rewritten on every container start needs no durability; the fsync costs ms).
        """
        dfd, name = self._parent(path)
        try:
            if name in (".", ".."):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            tmp = f".{name[:200]}.{os.urandom(6).hex()}.nvhook"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = _at(path, os.open, tmp, flags, 0o600, dir_fd=dfd)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fchmod(fd, mode)
                    if sync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                _at(path, os.rename, tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                try:  # noqa: SIM105 (no contextlib: see _close)
                    os.unlink(tmp, dir_fd=dfd)
                except OSError:
                    pass
                raise
        finally:
            os.close(dfd)

    def symlink(self, target: str, path: str) -> None:
        """Create the symlink ``path`` -> ``target`` (``target`` is written as given)."""
        dfd, name = self._parent(path)
        try:
            if name in (".", ".."):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
            _at(path, os.symlink, target, name, dir_fd=dfd)
        finally:
            os.close(dfd)

    # ---------------------------------------------------------------- helpers

    def _parent(self, path: str) -> tuple[int, str]:
        """(O_PATH fd of the resolved parent directory, last component as written)."""
        parts = _split(path)
        if not parts or parts[-1] in (".", ".."):
            return self.open_dir(path), "."
        return self.open_dir(_join(parts[:-1])), parts[-1]

    def _inside(self, host_path: str, path: str) -> str:
        root = os.readlink(f"/proc/self/fd/{self._fd}")
        if host_path == root:
            return "/"
        prefix = root.rstrip("/") + "/"
        if host_path.startswith(prefix):
            return "/" + host_path[len(prefix) :]
        raise HookError(f"{path} in {self.path} resolved to {host_path}, outside the root")

    def _refuse(self, path: str, e: OSError) -> HookError:
        if e.errno == errno.ELOOP:
            why = "a symlink loop or a /proc magic link (ELOOP)"
        else:
            why = e.strerror or str(e)
        return HookError(f"refusing {path} in {self.path}: {why}")

    def _openat2_retry(self, path: str, flags: int, mode: int) -> int:
        for _ in range(_EAGAIN_TRIES):
            try:
                return _openat2(self._fd, path, flags, mode, _RESOLVE)
            except OSError as e:
                if e.errno == errno.EAGAIN:
                    continue
                if e.errno in (errno.ELOOP, errno.EXDEV) and not (
                    flags & os.O_NOFOLLOW and not flags & os.O_PATH and self._is_link(path)
                ):
                    raise self._refuse(path, e) from None
                raise OSError(e.errno, e.strerror, path) from None
        raise HookError(f"cannot resolve {path} in {self.path}: it keeps changing (EAGAIN)")

    def _is_link(self, path: str) -> bool:
        try:
            return stat.S_ISLNK(self.lstat(path).st_mode)
        except (OSError, HookError):
            return False

    # ---------------------------------------------------------------- the walk

    def _walk(self, path: str, *, follow_final: bool) -> tuple[int, str, list[str]]:
        """Resolve ``path`` inside the root by hand.

        Returns an O_PATH fd of the physical directory holding the last component, that
        component (``"."`` when the path ends at a directory through ``.``/``..`` or is the
        root) and the in-root path of that directory as components. The last component is
        not looked up unless it is a symlink to follow; it may not exist.
        """
        pending = _split(path)
        stack: list[tuple[int, str]] = [(os.dup(self._fd), "")]
        links = 0
        try:
            while pending:
                comp = pending.pop(0)
                last = not pending
                if comp == ".":
                    if last:
                        return self._walk_result(stack, ".")
                    continue
                if comp == "..":
                    if len(stack) > 1:
                        _close(stack.pop()[0])
                    if last:
                        return self._walk_result(stack, ".")
                    continue
                cur = stack[-1][0]
                try:
                    fd = os.open(comp, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
                except FileNotFoundError:
                    if last:
                        return self._walk_result(stack, comp)
                    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from None
                mode = os.fstat(fd).st_mode
                if stat.S_ISLNK(mode):
                    if last and not follow_final:
                        _close(fd)
                        return self._walk_result(stack, comp)
                    try:
                        if _on_procfs(cur):
                            raise HookError(
                                f"refusing {path} in {self.path}: "
                                f"{_join(self._names(stack, comp))} is a symlink on procfs "
                                "(a magic link can point anywhere)"
                            )
                        target = os.readlink("", dir_fd=fd)
                    finally:
                        _close(fd)
                    links += 1
                    if links > _MAXSYMLINKS:
                        raise self._refuse(path, OSError(errno.ELOOP, os.strerror(errno.ELOOP)))
                    if target.startswith("/"):
                        while len(stack) > 1:
                            _close(stack.pop()[0])
                    pending[:0] = _split(target) or ["."]
                    continue
                if last:
                    _close(fd)
                    return self._walk_result(stack, comp)
                if not stat.S_ISDIR(mode):
                    _close(fd)
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
                stack.append((fd, comp))
            return self._walk_result(stack, ".")
        except BaseException:
            for fd, _ in stack:
                _close(fd)
            raise

    @staticmethod
    def _names(stack: list[tuple[int, str]], comp: str | None = None) -> list[str]:
        names = [name for _, name in stack[1:]]
        return [*names, comp] if comp is not None else names

    @staticmethod
    def _walk_result(stack: list[tuple[int, str]], name: str) -> tuple[int, str, list[str]]:
        """Hand over the current directory's fd, close the rest of the stack."""
        names = [n for _, n in stack[1:]]
        fd = stack.pop()[0]
        for other, _ in stack:
            _close(other)
        stack.clear()
        return fd, name, names

    def _walk_open(self, path: str, flags: int, mode: int, *, follow: bool) -> int:
        for _ in range(_RACE_TRIES):
            dfd, name, _parts = self._walk(path, follow_final=follow)
            try:
                return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
            except OSError as e:
                if e.errno == errno.ELOOP and follow and not flags & os.O_PATH:
                    continue  # became a symlink after the walk looked: walk again
                raise OSError(e.errno, e.strerror, path) from None
            finally:
                os.close(dfd)
        raise HookError(f"cannot open {path} in {self.path}: it keeps changing")


def open_root(path: str, *, impl: Impl | None = None) -> RootFd:
    """Open the directory ``path`` (a host path, trusted) as the root of a :class:`RootFd`.

    ``impl`` defaults to ``$NVHOOK_SAFEPATH`` or ``auto``: openat2 where the kernel has it.
    """
    choice = impl or os.environ.get(ENV_IMPL) or "auto"
    if choice not in IMPLS:
        raise ValueError(f"{ENV_IMPL} must be one of {', '.join(IMPLS)}, got {choice!r}")
    if choice == "auto":
        choice = "openat2" if openat2_available() else "walk"
    elif choice == "openat2" and not openat2_available():
        raise HookError("openat2 with RESOLVE_IN_ROOT is not available on this kernel")
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise HookError(f"cannot open the container rootfs {path}: {e.strerror}") from None
    return RootFd(fd, path, "openat2" if choice == "openat2" else "walk")
