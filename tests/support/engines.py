"""Today's engines, from Debian 13 (trixie) and Debian unstable (sid) roots, run privately.

A root (:func:`engine_root`) is made by :func:`tests.packaging.debianroot.debian_root` (mmdebstrap,
cached under ``$NVHOOK_TEST_CACHE`` on this machine; a cold build is ~40 s) with
:data:`PACKAGES`. An engine runs from an overlay of it inside a :class:`PrivateRoot`: a mount and
pid namespace of its own (``unshare --mount --propagation private --pid --fork``), whose pid 1 is
a small reaper on the root's Python; in it the overlay, a fresh ``/proc`` (of that pid
namespace), ``/sys`` and ``/dev`` rbound from the host, tmpfs on ``/run`` and ``/tmp``, and the
host paths a test needs (nvhook's checkout with its venv, pytest's temp dir with the mock
machine and the work dirs, a short socket dir) bound at the same paths, so that the absolute
paths of nvhook's launchers, configs and CDI specs hold inside. Optionally a cgroup2-only view:
``mount -t cgroup2 none ROOT/sys/fs/cgroup``. Then the overlay is made the namespace's root
(``pivot_root``, the host's root unmounted): a process that enters a container's mount
namespace (``setns``, as nvhook's hook mode does) has its root reset to that namespace's root,
which under a ``chroot`` would be the host's ``/``, not the engine's. Commands run there with
``nsenter`` (mount and pid namespaces; entering makes the overlay their root). Nothing of the
host's ``/etc``, ``/run/containerd`` or the cached root is written: everything the engine writes
goes to the overlay's upper dir or its work dirs.

Leaving a :class:`PrivateRoot` (also on an exception) kills its pid 1: the kernel then kills
every process of the namespace (the engine, its shims, containers) before pid 1 is reaped, and
the mount namespace, with every mount made in it, goes with its last process. The caller sees
this as ``unshare`` exiting.

:class:`EngineContainerd` is a containerd there, with its own ``--root``, ``--state`` and
``--address`` (its shims' sockets go under the namespace's ``/run``), started with a given config
file and stopped with SIGTERM. The root's Python (3.13 in trixie, 3.14 in sid) is the one that
runs nvhook's launchers inside, since the venv's ``python`` is a link to ``/usr/bin/python3``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.packaging.debianroot import NO_VALID_UNTIL, debian_root
from tests.support.basics import Result, require

__all__ = [
    "CHECKOUT",
    "PACKAGES",
    "PATH",
    "SUITES",
    "EngineContainerd",
    "PrivateRoot",
    "Suite",
    "engine_root",
]

#: What every engine root holds: containerd, Docker (dockerd and its client, a Recommends that
#: mmdebstrap does not install), podman (rootless too: uidmap, passt,
#: slirp4netns, fuse-overlayfs), runc and crun, and the Python that runs nvhook inside.
PACKAGES = (
    "ca-certificates", "containerd", "crun", "docker-cli", "docker.io", "fuse-overlayfs",
    "iproute2", "passt", "podman", "python3", "runc", "slirp4netns", "uidmap",
)  # fmt: skip
#: nvhook's checkout (with its .venv): bound at the same path inside every private root.
CHECKOUT = Path(__file__).resolve().parents[2]
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Suite:
    """A Debian suite the harness makes a root of, with the apt options its mirror needs."""

    def __init__(self, name: str, aptopts: tuple[str, ...] = ()) -> None:
        self.name = name
        self.aptopts = aptopts


SUITES = {"trixie": Suite("trixie"), "sid": Suite("sid", (NO_VALID_UNTIL,))}

#: pid 1 of the namespace: reap whatever is reparented to it, exit on SIGTERM.
_REAPER = """
import os, signal
def reap(*_):
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return
signal.signal(signal.SIGCHLD, reap)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
print("ready", flush=True)
while True:
    signal.pause()
"""


def engine_root(suite: str) -> Path:
    """The cached root of ``suite`` (``trixie`` or ``sid``) with :data:`PACKAGES`."""
    found = SUITES[suite]
    return debian_root(found.name, PACKAGES, aptopts=found.aptopts)


class PrivateRoot:
    """An overlay of ``lower`` in a private mount and pid namespace (see the module docstring).

    ``work`` holds the overlay's upper and work dirs; ``binds`` are host directories bound at
    the same paths inside (besides :data:`CHECKOUT` and :attr:`sockdir`, a short directory for
    unix sockets). ``cgroup2`` mounts a cgroup2 hierarchy on the root's ``/sys/fs/cgroup``.
    """

    def __init__(
        self, lower: Path, work: Path, binds: Sequence[Path] = (), *, cgroup2: bool = False
    ) -> None:
        self.lower = lower
        self.work = work
        self.merged = work / "merged"
        self.sockdir = Path(tempfile.mkdtemp(prefix="nvh-eng-"))
        self.binds = [CHECKOUT, self.sockdir, *binds]
        self.cgroup2 = cgroup2
        self._unshare: subprocess.Popen[str] | None = None
        self._spawned: list[subprocess.Popen[bytes]] = []
        self.pid1 = 0

    def __enter__(self) -> PrivateRoot:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _script(self) -> str:
        m = shlex.quote(str(self.merged))
        upper, scratch = self.work / "upper", self.work / "ovl-work"
        lines = [
            "set -e",
            f"mount -t overlay overlay -o lowerdir={self.lower},upperdir={upper},"
            f"workdir={scratch} {m}",
            f"mount -t proc proc {m}/proc",
            f"mount --rbind /sys {m}/sys",
            f"mount --rbind /dev {m}/dev",
            f"mount -t tmpfs tmpfs {m}/run",
            f"mount -t tmpfs tmpfs {m}/tmp",
        ]
        for path in self.binds:
            inside = shlex.quote(f"{self.merged}{path}")
            lines += [f"mkdir -p {inside}", f"mount --bind {shlex.quote(str(path))} {inside}"]
        if self.cgroup2:
            lines.append(f"mount -t cgroup2 none {m}/sys/fs/cgroup")
        # the overlay becomes the namespace's root: setns into a container's mount namespace
        # (nvhook's hook mode) then resolves paths as the engine does, as on a node
        lines += [
            f"mkdir -p {m}/.oldroot",
            f"cd {m}",
            f"{shlex.quote(require('pivot_root'))} . .oldroot",
            "umount -l /.oldroot",
            "rmdir /.oldroot",
            f"exec /usr/bin/python3 -I -S -c {shlex.quote(_REAPER)}",
        ]
        return "\n".join(lines)

    def _start(self) -> None:
        for d in ("upper", "ovl-work", "merged"):
            (self.work / d).mkdir(parents=True, exist_ok=True)
        argv = [require("unshare"), "--mount", "--propagation", "private", "--pid", "--fork"]
        argv += ["--kill-child", "--", "/bin/sh", "-c", self._script()]
        self._unshare = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={"PATH": PATH},
        )
        assert self._unshare.stdout is not None
        line = self._unshare.stdout.readline()
        if line != "ready\n":
            self._unshare.wait(timeout=30)
            err = self._unshare.stderr.read() if self._unshare.stderr else ""
            pytest.fail(f"private root over {self.lower} did not start: {line}{err}", pytrace=False)
        self.pid1 = _children(self._unshare.pid)[0]

    def close(self) -> None:
        """Kill pid 1 (and so every process of the namespace), wait until it is gone, and
        reap the ``nsenter`` of each :meth:`spawn`."""
        proc, self._unshare = self._unshare, None
        if proc is not None:
            if self.pid1:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid1, signal.SIGKILL)
            else:
                proc.kill()
            proc.wait(timeout=60)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        for spawned in self._spawned:  # their programs died with the namespace
            spawned.wait(timeout=60)
        self._spawned.clear()
        shutil.rmtree(self.sockdir, ignore_errors=True)

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` (a path inside the root) as a host command that runs it there."""
        if self._unshare is None:
            raise RuntimeError("the private root is not started")
        # entering the mount namespace makes its root, the overlay, this program's root
        return [require("nsenter"), "--target", str(self.pid1), "--mount", "--pid", "--", *argv]

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", **(extra or {})}

    def run(
        self,
        *argv: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 120,
        check: bool = True,
        input: str | None = None,
    ) -> Result:
        """Run ``argv`` inside; with ``check`` a failure fails the test with its output."""
        proc = subprocess.run(
            self.argv(argv),
            capture_output=True,
            text=True,
            env=self.env(env),
            timeout=timeout,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            check=False,
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"in {self.lower.name}: {shlex.join(argv)}: exit {proc.returncode}\n"
                f"--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}",
                pytrace=False,
            )
        return proc

    def spawn(
        self, *argv: str, log: Path, env: Mapping[str, str] | None = None
    ) -> tuple[subprocess.Popen[bytes], int]:
        """Start ``argv`` inside, output to ``log``; (the nsenter process, the program's host
        pid): nsenter forwards no signal, so signal the program itself."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                self.argv(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(env),
            )
        self._spawned.append(proc)
        deadline = time.monotonic() + 10
        while not (children := _children(proc.pid)):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{shlex.join(argv)} did not start:\n{log.read_text()}")
            time.sleep(0.01)
        return proc, children[0]

    def version(self, *argv: str) -> str:
        """The first line ``argv`` prints (a ``--version``), also printed for the test's log."""
        line = self.run(*argv).stdout.splitlines()[0]
        print(f"{self.lower.name}: {line}")
        return line


class EngineContainerd:
    """containerd from a :class:`PrivateRoot`, with ``config`` (a path valid inside, e.g. under
    a bound work dir), its own root and state under ``workdir`` and its socket in the root's
    socket dir; ``env`` reaches its shims and the runtimes they run."""

    def __init__(
        self,
        root: PrivateRoot,
        workdir: Path,
        config: Path,
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root
        self.workdir = workdir
        self.config = config
        self.env = dict(env or {})
        self.address = str(root.sockdir / "containerd.sock")
        self.log = workdir / "containerd.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid = 0

    def __enter__(self) -> EngineContainerd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def dump(self) -> dict[str, Any]:
        """``containerd config dump`` of :attr:`config`: the config as this containerd loads
        it (imports merged, a version 2 file migrated by 2.x)."""
        out = self.root.run("containerd", "--config", str(self.config), "config", "dump").stdout
        return tomllib.loads(out)

    def start(self, *, timeout: float = 30) -> None:
        """Start it; return once ``ctr version`` answers (fail with its log if it exits)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = ["containerd", "--config", str(self.config), "--address", self.address]
        argv += ["--root", str(self.workdir / "root"), "--state", str(self.workdir / "state")]
        self._proc, self._pid = self.root.spawn(*argv, log=self.log, env=self.env)
        deadline = time.monotonic() + timeout
        while self.ctr("version", check=False).returncode != 0:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"containerd did not start:\n{self.log.read_text()[-4000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s; what it leaves running dies with the namespace."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            proc.wait(timeout=15)

    def ctr(self, *args: str, namespace: str = "k8s.io", check: bool = True) -> Result:
        return self.root.run("ctr", "-a", self.address, "-n", namespace, *args, check=check)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]
