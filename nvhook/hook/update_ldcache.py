"""``update-ldcache``: put the driver's library folders into the container's ld cache.

A createContainer hook: it runs in the container's mount namespace before
``pivot_root``, with the rootfs (and every mount the runtime made in it) at the
bundle's root path. Steps:

1. write ``/etc/ld.so.conf.d/00-nvhook.conf`` (one folder a line; ``00-`` so the
   driver's folders come before the image's own, e.g. a CUDA compat folder),
   creating ``/etc/ld.so.conf.d`` if missing, and ``/etc/ld.so.conf`` with
   ``include /etc/ld.so.conf.d/*.conf`` when the image has none (busybox,
   distroless); every write goes through :mod:`nvhook.rootfs.safepath`;
2. run the *host's* ``ldconfig -r ROOTFS -C /etc/ld.so.cache -f /etc/ld.so.conf``
   with an empty environment (when the image's own ld.so.conf does not include
   ``ld.so.conf.d``, the folders are also given on the command line).

Why ``ldconfig -r`` is safe here, checked with strace on glibc 2.36: as root,
``-r`` makes ldconfig ``chroot(ROOTFS)`` and ``chdir("/")`` before it reads
anything, so its own lookups of ld.so.conf, of the folders and of the cache stay
in the rootfs whatever symlinks it meets; it writes the cache as
``/etc/ld.so.cache~`` (``O_CREAT|O_NOFOLLOW``) renamed over ``/etc/ld.so.cache``,
so a symlink planted at the cache path is replaced, not followed; and it creates
the SONAME links (``symlink("libz.so.1.2.13", "/lib/libz.so.1")``) by path, inside
the chroot. A chroot has one hole: **procfs magic links**. At createContainer
time the rootfs holds the container's own ``/proc``, where ``/proc/1/root`` is
runc init's root, i.e. the host's filesystem; an image whose ld.so.conf lists
``/proc/1/root/usr/lib`` would make a chrooted ldconfig create links in the
host's ``/usr/lib`` (tested: it does). So when any procfs is mounted under the
rootfs, ldconfig runs in a private mount namespace of its own where those procfs
mounts are detached (the container's namespace is not touched), and the hook
checks that none is left before it execs ldconfig.

An image whose ld cache cannot be set up (a read-only or odd ``/etc``, ldconfig
failing on the image's files) does not fail the container: the hook says on
stderr why it skipped and exits 0. A path that would resolve outside the rootfs
(a magic link, a symlink loop, a symlink to a missing directory where ``/etc`` or
``ld.so.conf.d`` should be) is refused with an error naming it (exit 11).
"""

from __future__ import annotations

import errno
import os
import sys
import time

from nvhook.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from nvhook.rootfs.safepath import Impl, RootFd

__all__ = [
    "CONF_DIR",
    "CONF_HEADER",
    "CONF_PATH",
    "DIR_MODE",
    "FILE_MODE",
    "INCLUDE_LINE",
    "LDCONFIG_CANDIDATES",
    "LDCONFIG_MAX_DATA",
    "LDCONFIG_TIMEOUT_S",
    "LD_SO_CACHE",
    "LD_SO_CONF",
    "check_folder",
    "default_ldconfig",
    "procfs_mounts_under",
    "unescape_mountinfo",
    "update_ldcache",
]

LD_SO_CONF = "/etc/ld.so.conf"
LD_SO_CACHE = "/etc/ld.so.cache"
CONF_DIR = "/etc/ld.so.conf.d"
#: The file this hook owns in the rootfs (rewritten whole on every run: idempotent).
CONF_PATH = f"{CONF_DIR}/00-nvhook.conf"
INCLUDE_LINE = f"include {CONF_DIR}/*.conf"
#: The first line of the conf file.
CONF_HEADER = "# written by nvhook-hook update-ldcache\n"
#: The modes of what the ld cache step makes: the conf folder, the conf file and ld.so.conf.
DIR_MODE = 0o755
FILE_MODE = 0o644
#: Where the host's ldconfig is looked for, in order. Ubuntu's /sbin/ldconfig is a shell
#: script around /sbin/ldconfig.real; Debian's is the binary itself.
LDCONFIG_CANDIDATES: tuple[str, ...] = (
    "/sbin/ldconfig.real",
    "/sbin/ldconfig",
    "/usr/sbin/ldconfig",
)
LDCONFIG_TIMEOUT_S = 60.0
#: ldconfig's memory (RLIMIT_DATA, set in the child before exec). It reads files the image
#: chose: a ``*.conf`` in ld.so.conf.d that is (a link to) ``/dev/zero`` is one "line" that
#: never ends, and ldconfig would grow until the container's memory limit or the host's OOM
#: killer stopped it. glibc's ldconfig treats the failed allocation as the end of that file.
#: It needs a few MiB for thousands of libraries.
LDCONFIG_MAX_DATA = 256 << 20

_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_MNT_DETACH = 0x2
_UMOUNT_NOFOLLOW = 0x8
# characters that would break an ld.so.conf line (comments, separators, a second line)
_BAD_FOLDER_CHARS = frozenset("\0\n\r\t #,:=\\")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def default_ldconfig() -> str:
    """The host's ldconfig binary: the first of :data:`LDCONFIG_CANDIDATES` that exists."""
    for path in LDCONFIG_CANDIDATES:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise HookError(f"no ldconfig on the host (looked for {', '.join(LDCONFIG_CANDIDATES)})")


def check_folder(folder: str) -> None:
    """A library folder must be an absolute, clean path that fits on an ld.so.conf line."""
    from nvhook.errors import UsageError

    if not folder.startswith("/") or any(c in _BAD_FOLDER_CHARS for c in folder):
        raise UsageError(f"--folder must be an absolute path without spaces, got {folder!r}")
    if any(part in (".", "..") for part in folder.split("/")):
        raise UsageError(f"--folder must not contain . or .. components, got {folder!r}")


def update_ldcache(
    rootfs: str,
    folders: Sequence[str],
    *,
    ldconfig: str | None = None,
    impl: Impl | None = None,
    log: Callable[[str], None] = _stderr,
) -> bool:
    """Add ``folders`` to the ld cache of the container at ``rootfs``.

    Returns True when ldconfig rebuilt the cache, False when the step was skipped (the
    reason went to ``log``). Raises :class:`HookError` when a path is unsafe.
    """
    wanted = list(dict.fromkeys(folders))
    for folder in wanted:
        check_folder(folder)
    if ldconfig is None:
        ldconfig = default_ldconfig()
    elif not os.path.isabs(ldconfig):
        raise HookError(f"--ldconfig must be an absolute path, got {ldconfig!r}")
    elif not (os.path.isfile(ldconfig) and os.access(ldconfig, os.X_OK)):
        raise HookError(f"--ldconfig {ldconfig} is not an executable file on the host")

    from nvhook.rootfs.safepath import open_root  # ctypes: only when a hook runs

    with open_root(rootfs, impl=impl) as root:
        try:
            included = _prepare(root, wanted, log)
        except OSError as e:
            log(f"skipped: cannot set up the ld cache in {rootfs}: {_describe(e)}")
            return False

    argv = [ldconfig, "-r", rootfs, "-C", LD_SO_CACHE, "-f", LD_SO_CONF]
    if not included:
        argv += wanted
    detach = procfs_mounts_under(rootfs)
    status, output = _run(argv, rootfs=rootfs, detach=detach, timeout=LDCONFIG_TIMEOUT_S)
    if status != 0:
        lines = output.strip().splitlines()
        detail = lines[-1] if lines else "no output"
        log(f"skipped: {ldconfig} exited with status {status} for {rootfs}: {detail}")
        return False
    return True


def _prepare(root: RootFd, folders: list[str], log: Callable[[str], None]) -> bool:
    """Write our conf file (and ld.so.conf if missing); return whether ld.so.conf includes it."""
    for folder in folders:
        try:
            root.stat(folder)
        except (OSError, HookError):
            log(f"note: {folder} does not resolve in the rootfs; ldconfig will find nothing there")
    root.mkdirs(CONF_DIR, DIR_MODE)
    body = "".join(f"{folder}\n" for folder in folders)
    # no fsync: the file is rewritten whole on every start, and ldconfig reads it right away
    conf = f"{CONF_HEADER}{body}".encode()
    root.write_file(CONF_PATH, conf, FILE_MODE, sync=False)
    try:
        text = root.read_file(LD_SO_CONF).decode("utf-8", "replace")
    except FileNotFoundError:
        root.write_file(LD_SO_CONF, f"{INCLUDE_LINE}\n".encode(), FILE_MODE)
        return True
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and words[0] == "include" and CONF_DIR in words[1]:
            return True
    log(
        f"note: {LD_SO_CONF} in the rootfs does not include {CONF_DIR}; a later ldconfig in the "
        "container will drop the driver's folders"
    )
    return False


def _describe(e: OSError) -> str:
    where = f"{e.filename}: " if e.filename else ""
    return f"{where}{e.strerror or e}"


def procfs_mounts_under(rootfs: str) -> list[str]:
    """Mount points of procfs at or under ``rootfs`` in this mount namespace (from mountinfo)."""
    real = os.path.realpath(rootfs)
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read().decode("utf-8", "surrogateescape").splitlines()
    except OSError as e:
        raise HookError(f"cannot read /proc/self/mountinfo: {e.strerror}") from None
    found = []
    for line in lines:
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        point = unescape_mountinfo(fields[4])
        if fields[sep + 1] == "proc" and (
            point == real or point.startswith(real.rstrip("/") + "/")
        ):
            found.append(point)
    return found


def unescape_mountinfo(field: str) -> str:
    """A field of /proc/PID/mountinfo as written: space, tab, newline and backslash are \\ooo."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _run(argv: list[str], *, rootfs: str, detach: list[str], timeout: float) -> tuple[int, str]:
    """Run ``argv`` with an empty environment; return (exit status, output).

    With ``detach``, the child first enters a private mount namespace and detaches those
    mounts there (and checks that no procfs is left under the rootfs) before exec. A plain
    fork and exec either way: ``subprocess`` (with the ``preexec_fn`` the memory limit
    needs) costs the hook more to import (``bench/figures.py``) and run (``bench/hooks.py``).
    """
    return _run_isolated(argv, detach=detach, rootfs=rootfs, timeout=timeout)


def _run_isolated(
    argv: list[str], *, detach: list[str], rootfs: str, timeout: float
) -> tuple[int, str]:
    limit_memory = _memory_limiter()
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child execs or reports through err_w
        try:
            os.close(err_r)
            os.close(out_r)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            if detach:
                _private_mounts(detach)
                left = procfs_mounts_under(rootfs)
                if left:
                    raise OSError(errno.EBUSY, f"procfs still mounted at {', '.join(left)}")
            limit_memory()
            os.execve(argv[0], argv, {})
        except BaseException as e:
            text = e.strerror if isinstance(e, OSError) and not detach and e.strerror else f"{e}"
            try:
                os.write(err_w, text.encode()[:4000] or b"failed")
            finally:
                os._exit(127)
    os.close(err_w)
    os.close(out_w)
    try:
        with os.fdopen(err_r, "rb") as f:
            failure = f.read()
        output = _read_until(out_r, timeout)
    finally:
        os.close(out_r)
    if output is None:
        import signal

        os.kill(pid, signal.SIGKILL)
    _, wstatus = os.waitpid(pid, 0)
    if failure:
        how = " with the container's /proc detached" if detach else ""
        raise HookError(f"cannot run {argv[0]}{how}: {failure.decode('utf-8', 'replace')}")
    if output is None:
        return -1, f"timed out after {timeout:.0f}s"
    return os.waitstatus_to_exitcode(wstatus), output


def _read_until(fd: int, timeout: float) -> str | None:
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        import select

        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks).decode("utf-8", "replace")
        chunks.append(chunk)


def _memory_limiter() -> Callable[[], None]:
    """A function for the child, before exec: lower RLIMIT_DATA to :data:`LDCONFIG_MAX_DATA`
    (never raise it). Everything is imported and read here, in the parent, before the fork."""
    import resource

    def capped(value: int) -> int:
        if value == resource.RLIM_INFINITY or value > LDCONFIG_MAX_DATA:
            return LDCONFIG_MAX_DATA
        return value

    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limits = (capped(soft), capped(hard))

    def apply() -> None:  # pragma: no cover - runs in the child
        resource.setrlimit(resource.RLIMIT_DATA, limits)

    return apply


def _private_mounts(detach: list[str]) -> None:  # pragma: no cover - runs in the child
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    check(libc.unshare(ctypes.c_int(_CLONE_NEWNS)), "unshare(CLONE_NEWNS)")
    check(
        libc.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None),
        "making / private",
    )
    for point in sorted(detach, key=len, reverse=True):
        result = libc.umount2(os.fsencode(point), ctypes.c_int(_MNT_DETACH | _UMOUNT_NOFOLLOW))
        if result != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
            check(result, f"detaching {point}")
