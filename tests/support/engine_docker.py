"""A private dockerd from an engine root (Docker 28.5 in sid, 26.1 in trixie), in a
:class:`tests.support.engines.PrivateRoot`.

Its own ``--data-root`` (under the caller's work dir, on the host's file system: overlay2
needs an upper dir that is not itself on overlayfs, and the root is an overlay), ``--exec-root``
under the namespace's own ``/run`` (short: the managed containerd's socket lives there),
``--pidfile``, ``-H unix://`` socket in the root's socket dir and ``--config-file`` (a
``daemon.json`` of the caller's, which ``nvhook runtime configure --runtime docker`` edits).
No network of its own: ``--bridge=none --iptables=false --ip-masq=false`` (and
``--ip6tables=false``, a flag of both versions, ``dockerd --help``), so containers run with
``--network none``. dockerd starts and manages its containerd (the root's, under the exec
root), and its shims and runc are the root's.

dockerd decides at start which ``--gpus`` drivers it has, by looking its helper programs up
on its ``PATH`` (moby's daemon/devices_nvidia_linux.go): ``path`` comes first on it. Its
environment reaches the hooks Docker adds (``Env: os.Environ()``) and the runtimes it runs.
:meth:`restart` makes it read ``daemon.json`` again.

Images come from a docker-archive tar (:func:`tests.support.images.busybox_image_tar`,
built offline) through ``docker load``: nothing is pulled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.basics import Result
from tests.support.docker import DockerCommands
from tests.support.engines import PATH, PrivateRoot

__all__ = ["EngineDocker"]


class EngineDocker(DockerCommands):
    """dockerd in ``root`` with its files under ``workdir`` (a host path bound inside)."""

    def __init__(
        self,
        root: PrivateRoot,
        workdir: Path,
        *,
        path: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "daemon.json"
        self.socket = root.sockdir / "docker.sock"
        self.exec_root = "/run/nvh-docker"  # the namespace's tmpfs: gone with it
        self.log = workdir / "dockerd.log"
        search = ":".join(dict.fromkeys([*path, *PATH.split(":")]))
        self.env = {**(env or {}), "PATH": search}
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid = 0
        if not self.config.exists():
            self.config.write_text("{}\n")

    def start(self, *, timeout: float = 60) -> None:
        """Start dockerd; return once ``docker version`` answers (fail with its log if not)."""
        argv = [
            "dockerd",
            "--data-root", str(self.workdir / "data"),
            "--exec-root", self.exec_root,
            "--pidfile", str(self.workdir / "dockerd.pid"),
            "-H", f"unix://{self.socket}",
            "--config-file", str(self.config),
            "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
        ]  # fmt: skip
        self._proc, self._pid = self.root.spawn(*argv, log=self.log, env=self.env)
        deadline = time.monotonic() + timeout
        while self.cmd("version", check=False, timeout=10).returncode != 0:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"dockerd did not start:\n{self.log.read_text()[-4000:]}")
            time.sleep(0.2)

    def cmd(self, *args: str, timeout: float = 120, check: bool = False) -> Result:
        """``docker -H unix://SOCKET ARGS…`` (the root's client)."""
        argv = ["docker", "-H", f"unix://{self.socket}", *args]
        return self.root.run(*argv, timeout=timeout, check=check)

    def info(self) -> dict[str, Any]:
        """``docker info`` as JSON."""
        found: dict[str, Any] = json.loads(
            self.cmd("info", "--format", "{{json .}}", check=True).stdout
        )
        return found

    def stop(self) -> None:
        """Remove every container, then SIGTERM dockerd (which stops its containerd), SIGKILL
        after 30 s; what it leaves dies with the namespace."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self.remove_containers()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            proc.wait(timeout=15)
