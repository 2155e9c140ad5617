"""Check that a pid is the created container's init, and hold it, before hook mode acts.

The state runc hands a prestart hook names the container's init by its host pid. Before
the hook writes a device cgroup (:mod:`nvhook.hook.cgroups`) or enters a mount namespace
(:mod:`nvhook.hook.mountns`), :func:`check_init` makes sure the pid is that process:

1. a child of the runtime that started the hook (its ``PPid`` is the hook's parent: runc
   init is runc's child at prestart; a createContainer hook would be handed ``pid: 1``),
2. in another mount namespace than the hook's (the host's),

and reads everything the later steps need while it is held: its mount namespace (an open
descriptor, which :mod:`.mountns` enters), its network namespace when asked (the one
:mod:`.netdev` moves interfaces into) and its ``/proc/<pid>/cgroup`` (from which
:mod:`.cgroups` finds the cgroup to write). After the check nothing looks the pid up
again, so a pid reused between the check and the writes is never the target.

How it is held: a pidfd (``pidfd_open``, Linux 5.3) is opened first, then the
``/proc/<pid>`` directory; every entry is read through that directory's descriptor, which
stays bound to the process it was opened for (once that process is reaped, reads through it
fail with ``ESRCH``; a new process with the same number has a ``/proc`` entry of its own).
The pidfd is polled after the directory is opened (so the directory is the pidfd's process)
and again after the last read: a process that has exited by then is refused as gone.
Without ``pidfd_open`` (older kernels, or a Python built without it) the directory
descriptor alone ties the reads to one process, and an exited process not yet reaped is
not noticed by a poll; its mount namespace cannot be opened any more, so it is still
refused, at that step.
"""

from __future__ import annotations

import os
import select

from nvhook.errors import HookError

__all__ = ["ContainerInit", "check_init"]

_USE = "run nvhook-hook prestart as a prestart or createRuntime hook"


class ContainerInit:
    """A container's init process, checked by :func:`check_init` and held open.

    ``cgroup`` is its ``/proc/<pid>/cgroup`` as read during the check; ``mount_ns`` an
    ``O_RDONLY`` descriptor of its mount namespace, ``net_ns`` of its network namespace
    (-1 unless asked for). :meth:`close` (or ``with``) releases them.
    """

    __slots__ = ("_pidfd", "cgroup", "mount_ns", "net_ns", "pid")

    def __init__(
        self, pid: int, cgroup: str, mount_ns: int, pidfd: int | None, net_ns: int = -1
    ) -> None:
        self.pid = pid
        self.cgroup = cgroup
        self.mount_ns = mount_ns
        self.net_ns = net_ns
        self._pidfd = pidfd

    def close(self) -> None:
        for fd in (self.mount_ns, self.net_ns, self._pidfd):
            if fd is not None and fd >= 0:
                os.close(fd)
        self.mount_ns, self.net_ns, self._pidfd = -1, -1, None

    def __enter__(self) -> ContainerInit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gone(pid: int, use: str) -> HookError:
    return HookError(f"pid {pid} of the container state is gone (it exited): {use}")


def _pidfd_open(pid: int, use: str) -> int | None:
    """A pidfd of ``pid``; None where the kernel or this Python has no ``pidfd_open``."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError as e:
        if e.errno == 38:  # ENOSYS: Linux < 5.3
            return None
        if e.errno == 3:  # ESRCH
            raise _gone(pid, use) from None
        # EINVAL: a thread of a process, not a process
        raise HookError(f"cannot hold pid {pid} of the container state: {e.strerror}") from None


def _exited(pidfd: int | None) -> bool:
    if pidfd is None:
        return False
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)  # readable once the process has exited
    return bool(poller.poll(0))


def _read(proc_fd: int, name: str, pid: int, use: str) -> str:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    except OSError as e:
        if e.errno in (2, 3):  # ENOENT, ESRCH: reaped since the directory was opened
            raise _gone(pid, use) from None
        raise HookError(f"cannot read /proc/{pid}/{name}: {e.strerror}") from None
    with open(fd, encoding="utf-8", errors="surrogateescape") as f:
        try:
            return f.read()
        except OSError as e:
            if e.errno == 3:
                raise _gone(pid, use) from None
            raise HookError(f"cannot read /proc/{pid}/{name}: {e.strerror}") from None


def _parent(status: str) -> int:
    for line in status.splitlines():
        if line.startswith("PPid:"):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                break
    return -1


def check_init(pid: int | None, *, net: bool = False, use: str = _USE) -> ContainerInit:
    """``pid`` checked to be the container's init (see the module), held; else HookError.

    ``net``: hold its network namespace too. ``use`` ends a refusal: how the hook must be
    run. Nothing is changed anywhere: it only opens and reads ``pid``'s ``/proc`` entries."""
    if pid is None or pid <= 0:
        raise HookError(f"the container state has no pid: {use}")
    pidfd = _pidfd_open(pid, use)
    proc_fd = -1
    ns_fd = -1
    net_fd = -1
    try:
        try:
            proc_fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise _gone(pid, use) from None
        except OSError as e:
            raise HookError(f"cannot open /proc/{pid}: {e.strerror}") from None
        if _exited(pidfd):  # the directory may be of a process that reused the number
            raise _gone(pid, use)
        if _parent(_read(proc_fd, "status", pid, use)) != os.getppid():
            raise HookError(
                f"pid {pid} of the container state is not a child of the runtime that "
                f"started this hook: {use}"
            )
        try:
            ns_fd = os.open("ns/mnt", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
        except OSError as e:
            if e.errno in (2, 3):  # a zombie has no namespaces any more
                raise _gone(pid, use) from None
            raise HookError(f"cannot read the mount namespace of pid {pid}: {e.strerror}") from None
        theirs, mine = os.fstat(ns_fd), os.stat("/proc/self/ns/mnt")
        if (theirs.st_dev, theirs.st_ino) == (mine.st_dev, mine.st_ino):
            raise HookError(f"pid {pid} shares this hook's mount namespace: not a container's init")
        if net:
            try:
                net_fd = os.open("ns/net", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
            except OSError as e:
                if e.errno in (2, 3):
                    raise _gone(pid, use) from None
                raise HookError(
                    f"cannot read the network namespace of pid {pid}: {e.strerror}"
                ) from None
        cgroup = _read(proc_fd, "cgroup", pid, use)
        if _exited(pidfd):
            raise _gone(pid, use)
    except BaseException:
        for fd in (ns_fd, net_fd, pidfd):
            if fd is not None and fd >= 0:
                os.close(fd)
        raise
    finally:
        if proc_fd >= 0:
            os.close(proc_fd)
    return ContainerInit(pid, cgroup, ns_fd, pidfd, net_fd)
