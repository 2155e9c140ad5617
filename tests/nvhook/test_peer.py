"""Who the shim server serves (nvhook/peer.py, through nvhook/server.py's child; D12).

Each refusal is made real: a forked client changes one thing about itself (its gid, its
uid, a namespace, a capability, no_new_privs, a seccomp filter), connects and sends a
whole request with its four descriptors; the server's own child code
(:func:`nvhook.server._child`) then runs on the accepted connection in a fork. The test
keeps a duplicate of that connection, so after the child exits it reads back what the
child left unread: a refused peer leaves every byte and descriptor of its request there,
and the refusal line on the child's stderr names the reason. A root peer like the
server is the control: its request is read (and the call stopped before it runs).

Every case runs twice: pinned by ``SO_PEERPIDFD`` as this kernel allows, and with the
option forced unknown (``ENOPROTOOPT``: a kernel before 6.5), the unpinned fallback. The
pid-reuse race itself is played in a private pid namespace, where the test can hand the
peer's pid to a process of its own (``ns_last_pid``) after the pin, before the reads.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import nvhook.peer
import nvhook.server
from nvhook.peer import peer_problem
from tests.support.basics import require, require_root

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.root

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER = 0x00020000, 0x20000000, 0x10000000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
CAP_NET_RAW = 13


def _check(result: int) -> None:
    if result != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def _unshare(flags: int) -> None:
    _check(_libc.unshare(flags))


def _in_new_pid_namespace() -> None:
    """The rest runs in a child that is pid 1 of a new pid namespace; this one waits."""
    _unshare(CLONE_NEWPID)
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        os._exit(0)


def _drop_effective_capability() -> None:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    _check(_libc.capget(ctypes.byref(header), data))
    data[0].effective &= ~(1 << CAP_NET_RAW)
    _check(_libc.capset(ctypes.byref(header), data))


def _no_new_privs() -> None:
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))


def _allow_all_seccomp_filter() -> None:
    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]  # fmt: skip

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    allow = (Filter * 1)(Filter(0x06, 0, 0, 0x7FFF0000))  # BPF_RET|BPF_K SECCOMP_RET_ALLOW
    program = Program(1, allow)
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0))


#: case: (what the client does to itself, the refusal the child must give; None: served)
CASES: dict[str, tuple[Callable[[], None], str | None]] = {
    "root like the server": (lambda: None, None),
    "uid 0 gid 1000": (lambda: os.setresgid(1000, 1000, 1000), "the peer is uid 0 gid 1000"),
    "uid 1000 gid 0": (lambda: os.setresuid(1000, 1000, 1000), "the peer is uid 1000 gid 0"),
    "effective uid 1000 only": (lambda: os.setresuid(0, 1000, 0), "the peer is uid 1000 gid 0"),
    "another mount namespace": (lambda: _unshare(CLONE_NEWNS), "in another mnt namespace"),
    "another pid namespace": (_in_new_pid_namespace, "in another pid namespace"),
    "another user namespace": (lambda: _unshare(CLONE_NEWUSER), "in another user namespace"),
    "one capability fewer": (_drop_effective_capability, "CapEff differs"),
    "no_new_privs": (_no_new_privs, "NoNewPrivs differs"),
    "a seccomp filter": (_allow_all_seccomp_filter, "Seccomp differs"),
}


def _request() -> bytes:
    fields = [b"1", b"22", b"/x/nvhook-runtime", b"2", b"state", b"x", b"1", b"PATH=/bin"]
    return nvhook.server.frame(b"".join(f + b"\0" for f in fields))


@pytest.fixture(params=["pinned", "unpinned"])
def pinning(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``SO_PEERPIDFD`` as the kernel has it, or forced unknown (the fallback)."""
    if request.param == "unpinned":
        monkeypatch.setattr(nvhook.peer, "SO_PEERPIDFD", 0x7FFF)
    return str(request.param)


class Served:
    def __init__(self, status: int, stderr: str, unread: bytes, fds: int) -> None:
        self.status, self.stderr, self.unread, self.fds = status, stderr, unread, fds


def _client(address: str, setup: Callable[[], None], sent: int) -> None:
    """In a forked child: become the peer, send a whole request, wait for the server."""
    try:
        setup()
        fds = [os.open("/", os.O_RDONLY)] + [os.open(os.devnull, os.O_RDWR) for _ in range(3)]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(address)
            s.sendmsg(
                [_request()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("4i", *fds))]
            )
            os.write(sent, b"s")
            s.settimeout(60)
            while s.recv(4096):  # until the test closes the connection
                pass
        os._exit(0)
    except BaseException as e:
        os.write(sent, f"client: {e!r}".encode())
        os._exit(1)


def _left_in(conn: socket.socket) -> tuple[bytes, int]:
    """What waits unread in ``conn`` (closed): the bytes, and how many descriptors."""
    with conn:
        try:
            data, ancillary, _, _ = conn.recvmsg(
                1 << 16, socket.CMSG_SPACE(16), socket.MSG_DONTWAIT
            )
        except BlockingIOError:
            return b"", 0
    fds = [fd for *_, payload in ancillary for fd in struct.unpack("4i", payload)]
    for fd in fds:
        os.close(fd)
    return data, len(fds)


def _serve_one(setup: Callable[[], None], server_side: Callable[[], None]) -> Served:
    """A client set up by ``setup`` sends a request; the server's child code takes it."""
    address = f"\0nvhook-test-peer-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(address)
        listener.listen(1)
        sent_r, sent_w = os.pipe()
        client = os.fork()
        if client == 0:
            os.close(sent_r)
            _client(address, setup, sent_w)
        os.close(sent_w)
        try:
            conn, _ = listener.accept()
            said = os.read(sent_r, 4096)
            assert said == b"s", said.decode()  # the whole request waits in the socket
            keep = conn.dup()
            err_r, err_w = os.pipe()
            child = os.fork()
            if child == 0:
                os.dup2(err_w, 2)
                server_side()
                nvhook.server._become = lambda *a: os._exit(4)  # never run the call itself
                nvhook.server._child(conn)
                os._exit(5)
            os.close(err_w)
            conn.close()
            _, status = os.waitpid(child, 0)
            with os.fdopen(err_r, "rb") as f:
                stderr = f.read().decode()
            unread, fds = _left_in(keep)
        finally:
            os.close(sent_r)
            os.waitpid(client, 0)
    return Served(os.waitstatus_to_exitcode(status), stderr, unread, fds)


@pytest.mark.parametrize("case", list(CASES))
def test_each_peer_that_is_not_the_server_is_refused_unread(case: str, pinning: str) -> None:
    require_root()
    setup, refusal = CASES[case]
    served = _serve_one(setup, lambda: None)
    if refusal is None:  # the control: read, acknowledged, about to run
        assert (served.status, served.unread, served.fds) == (4, b"", 0), served.stderr
    else:
        assert served.status == 0
        assert "refused a request: " in served.stderr and refusal in served.stderr
        assert (served.unread, served.fds) == (_request(), 4), "the child read the request"


def test_another_security_label_is_refused_unread(pinning: str) -> None:
    """No LSM here (``attr/current`` unreadable): the peer's label is given to the check."""
    require_root()

    def labelled() -> None:
        labels = {"self": b"system_u:system_r:unconfined_service_t:s0"}
        nvhook.peer._label = lambda pid: labels.get(str(pid), b"container_t")

    served = _serve_one(lambda: None, labelled)
    assert served.status == 0 and "runs under another security label" in served.stderr
    assert (served.unread, served.fds) == (_request(), 4)


def test_the_peer_is_pinned_by_a_pidfd_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """This kernel (6.5+) has SO_PEERPIDFD: the check takes the pinned path."""
    checked: list[int] = []
    original = nvhook.peer._pidfd_pid

    def spy(fd: int) -> int:
        checked.append(fd)
        return original(fd)

    monkeypatch.setattr(nvhook.peer, "_pidfd_pid", spy)
    a, b = socket.socketpair()
    with a, b:
        assert peer_problem(a) == (os.getpid(), None)
    assert len(checked) == 1


def test_unpinned_the_check_still_serves_and_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvhook.peer, "SO_PEERPIDFD", 0x7FFF)  # ENOPROTOOPT, as before 6.5
    monkeypatch.setattr(nvhook.peer, "_pidfd_pid", lambda fd: pytest.fail("pinned"))
    a, b = socket.socketpair()
    with a, b:
        assert nvhook.peer._peer_pidfd(a) is None
        assert peer_problem(a) == (os.getpid(), None)
        monkeypatch.setattr(nvhook.peer, "_label", lambda pid: str(pid).encode())
        assert "security label" in str(peer_problem(a)[1])


REUSE = r"""
import json, os, socket, sys, time
sys.path.insert(0, sys.argv[2])
import nvhook.peer as peer
if sys.argv[1] == "unpinned":
    peer.SO_PEERPIDFD = 0x7FFF
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind("\0nvhook-test-reuse")
listener.listen(1)
go_r, go_w = os.pipe()
first = os.fork()
if first == 0:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.connect("\0nvhook-test-reuse")
        os.read(go_r, 1)
    os._exit(0)
conn, _ = listener.accept()
compare, taker = peer._compare, []
def reuse_then_compare(pid):
    os.write(go_w, b"x")
    os.waitpid(first, 0)  # the peer exits and is reaped: its pid is free
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(first - 1))
    child = os.fork()  # root, this namespace, these privileges: all the check compares
    if child == 0:
        time.sleep(60)
        os._exit(0)
    taker.append(child)
    return compare(pid)  # reads /proc/<pid>: the taker's now
peer._compare = reuse_then_compare
pid, problem = peer.peer_problem(conn)
os.kill(taker[0], 9)
print(json.dumps({"peer": first, "checked": pid, "taker": taker[0], "problem": problem}))
"""


@pytest.mark.parametrize("mode", ["pinned", "unpinned"])
def test_a_reused_pid_does_not_pass_where_the_peer_is_pinned(mode: str) -> None:
    require_root()
    unshare = require("unshare")  # a private pid namespace
    out = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", sys.executable, "-I", "-c", REUSE, mode,
         str(REPO)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    seen = json.loads(out.stdout)
    assert seen["checked"] == seen["peer"] == seen["taker"], seen  # the pid was reused
    if mode == "pinned":
        assert seen["problem"] == f"the peer (pid {seen['peer']}) exited while it was checked"
    else:  # what remains without SO_PEERPIDFD (docs/architecture.md D12)
        assert seen["problem"] is None


def test_a_peer_that_cannot_be_pinned_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel that has SO_PEERPIDFD but will not give one (6.5-6.8 once the peer is
    reaped: EINVAL) is a refusal, not the unpinned fallback."""
    import errno

    def refuse(conn: socket.socket) -> int:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    monkeypatch.setattr(nvhook.peer, "_peer_pidfd", refuse)
    a, b = socket.socketpair()
    with a, b:
        assert peer_problem(a) == (
            os.getpid(),
            f"cannot pin the peer (pid {os.getpid()}) with a pidfd: Invalid argument",
        )


def test_only_an_unknown_option_is_the_fallback() -> None:
    """An unconnected socket has no peer: the kernel's ENODATA is raised, not taken for a
    kernel without SO_PEERPIDFD."""
    import errno

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as lone, pytest.raises(OSError) as e:
        nvhook.peer._peer_pidfd(lone)
    assert e.value.errno == errno.ENODATA


def test_the_servers_side_is_read_once_before_the_children(monkeypatch: pytest.MonkeyPatch) -> None:
    """``remember_self`` (the server, before it forks): each check reads only the peer."""
    monkeypatch.setattr(nvhook.peer, "_ours", None)
    nvhook.peer.remember_self()
    reads: list[int | str] = []
    real = nvhook.peer._status

    def status(pid: int | str) -> dict[bytes, bytes]:
        reads.append(pid)
        return real(pid)

    monkeypatch.setattr(nvhook.peer, "_status", status)
    a, b = socket.socketpair()
    with a, b:
        assert nvhook.peer.peer_problem(a) == (os.getpid(), None)
    assert reads == [os.getpid()]
