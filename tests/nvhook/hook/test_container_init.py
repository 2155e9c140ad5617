"""The check of hook mode's pid (:mod:`nvhook.hook.container_init`), on real processes.

The victims are this test's own children: ``sleep`` (the host's mount namespace) and
``unshare -m sleep`` (a mount namespace of its own, as a container's init has). The hook's
parent is played by this process (``os.getppid`` made to answer this pid), so a child of
the test counts as a child of the runtime. What prestart does with the held process, and
that a refused one is left as it was, is in ``tests/e2e/test_prestart_refusals.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from nvhook.errors import HookError
from nvhook.hook import container_init
from nvhook.hook.container_init import check_init
from tests.support.basics import require

pytestmark = [pytest.mark.root]


def _start(*argv: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(argv)
    # wait until it is the program (unshare has exec'd sleep): its mount ns is then final
    for _ in range(500):
        try:
            if os.readlink(f"/proc/{child.pid}/exe").endswith("/sleep"):
                return child
        except OSError:
            pass
        time.sleep(0.01)
    child.kill()
    child.wait()
    pytest.fail(f"{argv[0]} did not start", pytrace=False)


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process plays the runtime that started the hook."""
    monkeypatch.setattr(os, "getppid", os.getpid)


@pytest.fixture
def init() -> Iterator[subprocess.Popen[bytes]]:
    """A container's init, as far as the check can tell: our child, in a mount ns of its own."""
    child = _start(require("unshare"), "--mount", require("sleep"), "600")
    try:
        yield child
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def host_child() -> Iterator[subprocess.Popen[bytes]]:
    child = _start(require("sleep"), "600")
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def test_the_init_is_held_with_its_cgroup_and_mount_namespace(
    runtime: None, init: subprocess.Popen[bytes]
) -> None:
    with open(f"/proc/{init.pid}/cgroup") as f:
        cgroup = f.read()
    ns = os.stat(f"/proc/{init.pid}/ns/mnt")
    with check_init(init.pid) as held:
        assert held.pid == init.pid
        assert held.cgroup == cgroup
        st = os.fstat(held.mount_ns)
        assert (st.st_dev, st.st_ino) == (ns.st_dev, ns.st_ino)
        fd = held.mount_ns
        assert held.net_ns == -1  # not asked for
    with pytest.raises(OSError):  # closed on leaving
        os.fstat(fd)
    net = os.stat(f"/proc/{init.pid}/ns/net")
    with check_init(init.pid, net=True) as held:
        st = os.fstat(held.net_ns)
        assert (st.st_dev, st.st_ino) == (net.st_dev, net.st_ino)
        fds = (held.mount_ns, held.net_ns)
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


@pytest.mark.parametrize("pid", [None, 0, -1])
def test_no_pid_is_refused(pid: int | None) -> None:
    with pytest.raises(HookError, match=r"^the container state has no pid: run nvhook-hook"):
        check_init(pid)


def test_a_process_not_a_child_of_the_runtime_is_refused(init: subprocess.Popen[bytes]) -> None:
    # no `runtime` fixture: the hook's parent is pytest's parent, not this process
    with pytest.raises(
        HookError,
        match=rf"^pid {init.pid} of the container state is not a child of the runtime that "
        "started this hook: run nvhook-hook prestart as a prestart or createRuntime hook$",
    ):
        check_init(init.pid)


def test_a_process_in_the_hooks_mount_namespace_is_refused(
    runtime: None, host_child: subprocess.Popen[bytes]
) -> None:
    pid = host_child.pid
    with pytest.raises(
        HookError, match=rf"^pid {pid} shares this hook's mount namespace: not a container's init$"
    ):
        check_init(pid)


def test_a_reaped_process_is_refused_as_gone(runtime: None) -> None:
    child = _start(require("sleep"), "600")
    child.kill()
    child.wait()
    with pytest.raises(HookError, match=rf"^pid {child.pid} of the container state is gone"):
        check_init(child.pid)


def test_a_process_that_exits_during_the_check_is_refused(
    runtime: None, init: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed and reaped right after its last /proc entry is read: the pidfd's poll sees it
    (its pid may already be another process's, which the later steps must never reach)."""
    read = container_init._read

    def read_then_die(proc_fd: int, name: str, pid: int, use: str) -> str:
        text = read(proc_fd, name, pid, use)
        if name == "cgroup":
            init.kill()
            init.wait()
        return text

    monkeypatch.setattr(container_init, "_read", read_then_die)
    with pytest.raises(HookError, match=rf"^pid {init.pid} of the container state is gone"):
        check_init(init.pid)


def test_without_pidfd_an_exited_process_is_still_refused(
    runtime: None, init: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where pidfd_open is missing: a zombie (exited, not reaped) has no mount namespace left."""
    monkeypatch.setattr(container_init, "_pidfd_open", lambda pid, use: None)
    os.kill(init.pid, signal.SIGKILL)
    os.waitid(os.P_PID, init.pid, os.WEXITED | os.WNOWAIT)  # a zombie now, not reaped
    with pytest.raises(HookError, match=rf"^pid {init.pid} of the container state is gone"):
        check_init(init.pid)


def test_a_thread_is_not_a_process() -> None:
    import threading

    done = threading.Event()
    tids: list[int] = []

    def run() -> None:
        tids.append(threading.get_native_id())
        done.wait(30)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        while not tids:
            os.sched_yield()
        with pytest.raises(HookError, match=rf"^cannot hold pid {tids[0]} of the container"):
            check_init(tids[0])
    finally:
        done.set()
        thread.join()
