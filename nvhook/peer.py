"""Who may ask ``nvhook-shim-server`` for a call: the peer check (docs/architecture.md D12).

The server's child serves a connection only if the process at its other end could have
run the Python shim itself with the same effect: root (uid and gid 0) in the server's
mount, pid and user namespaces, with its effective capabilities, seccomp mode,
no_new_privs flag and LSM label. :func:`peer_problem` says why not, read from
``/proc/<pid>`` while the peer waits on the socket, before a byte of the request is read.

The pid is ``SO_PEERCRED``'s, and a pid may be reused: a peer that dies after connecting
leaves its number free for the next process, which ``/proc/<pid>`` would then describe.
Where the kernel has ``SO_PEERPIDFD`` (Linux 6.5) the check holds a pidfd of the peer
(the process, not its number) from before the first read of ``/proc`` and, after the
last, reads that pidfd's ``Pid:`` in ``/proc/self/fdinfo``: the pid still, so the reads
described the peer itself; ``-1`` once it has exited, refused. Without it (``ENOPROTOOPT``)
the check is unpinned: a uid-0 peer with less than the server that exits, and whose pid
a process with all the server has takes before the reads, would pass (docs/architecture.md
D12).
"""

from __future__ import annotations

import errno
import os
import socket
import struct

from oci.bundle import read_regular_file

__all__ = ["SO_PEERPIDFD", "peer_problem", "remember_self"]

#: ``getsockopt`` for a pidfd of a unix socket's peer (include/uapi/asm-generic/socket.h,
#: Linux 6.5; the same on x86-64 and arm64); Python's socket module may not export it.
SO_PEERPIDFD: int = getattr(socket, "SO_PEERPIDFD", 77)


def _status(pid: int | str) -> dict[bytes, bytes]:
    lines = read_regular_file(f"/proc/{pid}/status")[0].splitlines()
    return dict((k, v.strip()) for k, _, v in (line.partition(b":") for line in lines))


#: What must be the same for the peer as for the server: namespaces, and status fields.
_NAMESPACES = ("mnt", "pid", "user")
_STATUS = (b"CapEff", b"Seccomp", b"NoNewPrivs")


def peer_problem(conn: socket.socket) -> tuple[int, str | None]:
    """The peer's pid, and why it may not be served (None: it may).

    Only root (uid and gid 0) in this server's mount, pid and user namespaces, with its
    effective capabilities, seccomp mode, no_new_privs flag and LSM label: anything the
    child does for it, the Python shim would have done in the caller's own process. The
    peer is pinned by a pidfd where the kernel has ``SO_PEERPIDFD``.
    """
    pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    if uid != 0 or gid != 0:
        return pid, f"the peer is uid {uid} gid {gid}, not root"
    try:
        pidfd = _peer_pidfd(conn)
    except OSError as e:
        return pid, f"cannot pin the peer (pid {pid}) with a pidfd: {e.strerror}"
    try:
        problem = _compare(pid)
        if problem is None and pidfd is not None and _pidfd_pid(pidfd) != pid:
            problem = f"the peer (pid {pid}) exited while it was checked"
    finally:
        if pidfd is not None:
            os.close(pidfd)
    return pid, problem


def _peer_pidfd(conn: socket.socket) -> int | None:
    """A pidfd of ``conn``'s peer; None where the kernel has no ``SO_PEERPIDFD``."""
    try:
        return conn.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    except OSError as e:
        if e.errno == errno.ENOPROTOOPT:
            return None
        raise


def _pidfd_pid(pidfd: int) -> int:
    """The pid ``pidfd`` refers to (``/proc/self/fdinfo``); -1 once that process exited."""
    try:
        for line in read_regular_file(f"/proc/self/fdinfo/{pidfd}")[0].splitlines():
            if line.startswith(b"Pid:"):
                return int(line[4:])
    except (OSError, ValueError):
        pass
    return -1


#: This process's side of the comparison, (namespaces, status fields, label), once
#: :func:`remember_self` has read it: the server reads it before it forks, so that each
#: child reads only the peer's side (its own cannot change: no exec, setns or setcon).
_ours: tuple[tuple[tuple[int, int], ...], dict[bytes, bytes], bytes | None] | None = None


def _own() -> tuple[tuple[tuple[int, int], ...], dict[bytes, bytes], bytes | None]:
    namespaces = tuple(
        (st.st_dev, st.st_ino) for st in (os.stat(f"/proc/self/ns/{ns}") for ns in _NAMESPACES)
    )
    return namespaces, _status("self"), _label("self")


def remember_self() -> None:
    """Read this process's side of :func:`peer_problem` once, for it and its children."""
    global _ours
    _ours = _own()


def _compare(pid: int) -> str | None:
    """Why the process ``pid`` differs from this one (None: it does not)."""
    try:
        namespaces, ours_status, label = _ours if _ours is not None else _own()
        for ns, ours in zip(_NAMESPACES, namespaces, strict=True):
            theirs = os.stat(f"/proc/{pid}/ns/{ns}")
            if (theirs.st_dev, theirs.st_ino) != ours:
                return f"the peer (pid {pid}) is in another {ns} namespace"
        theirs_status = _status(pid)
    except OSError as e:
        return f"cannot inspect the peer (pid {pid}): {e.strerror}"
    for key in _STATUS:
        if theirs_status.get(key) != ours_status.get(key):
            return f"the peer's (pid {pid}) {key.decode()} differs from the server's"
    if _label(pid) != label:  # SELinux/AppArmor: files would be made in our domain
        return f"the peer (pid {pid}) runs under another security label"
    return None


def _label(pid: int | str) -> bytes | None:
    """The LSM label of ``pid`` (``/proc/PID/attr/current``); None without an LSM."""
    try:
        return read_regular_file(f"/proc/{pid}/attr/current")[0].rstrip(b"\0\n")
    except OSError:
        return None
