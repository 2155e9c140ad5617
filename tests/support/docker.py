"""A private dockerd: its own data root, exec root, socket, containerd namespace and config.

Debian's docker.io 20.10 (``/usr/sbin/dockerd``, client ``/usr/bin/docker``, named by
absolute path: another ``docker`` may come first on PATH). The daemon runs without
iptables rules or a bridge (``--iptables=false --bridge=none``), so containers run with
``--network none``; it starts a containerd of its own under the exec root, with its own
namespace, so nothing of the host's Docker or containerd is touched. The cgroup driver is
dockerd's default (cgroupfs on cgroup v1).

dockerd looks up ``nvidia-container-runtime-hook`` on its PATH once at start-up to decide
whether ``--gpus`` is supported: the harness puts the caller's ``path`` first. The
daemon's environment reaches runc (through containerd and its shim), and so the hooks
that carry no ``env`` (Docker's ``--gpus`` hook), and runtimes named in daemon.json.
:meth:`restart` makes it read daemon.json again (a SIGHUP did not change its default
runtime here).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import pytest

from tests.support.basics import Result, missing, rmdir_if_empty, run_command, unique_id

__all__ = ["DOCKER", "DOCKERD", "Docker", "DockerCommands"]

DOCKERD = "/usr/sbin/dockerd"
DOCKER = "/usr/bin/docker"


class DockerCommands:
    """What a harness's dockerd answers, over its ``cmd`` (``docker -H unix://SOCKET``):
    :class:`Docker` here, ``tests/support/engine_docker.py``'s inside a private root."""

    config: Path

    def cmd(self, *args: str, timeout: float = 120, check: bool = False) -> Result:
        raise NotImplementedError

    def start(self, *, timeout: float = 60) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def load(self, tar: Path) -> None:
        self.cmd("load", "-q", "-i", str(tar), check=True)

    def run(self, image: str, cmd: Sequence[str], *options: str, timeout: float = 60) -> Result:
        """``docker run --rm --network none OPTIONS IMAGE CMD…``."""
        return self.cmd("run", "--rm", "--network", "none", *options, image, *cmd, timeout=timeout)

    def daemon_config(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.config.read_text())
        return loaded

    def restart(self) -> None:
        """Stop and start again: dockerd reads daemon.json (and its PATH) again; images kept."""
        self.stop()
        self.start()

    def remove_containers(self) -> None:
        """``docker rm -f`` every container (a daemon that does not answer: none removed)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            ids = self.cmd("ps", "-aq", timeout=30).stdout.split()
            if ids:
                self.cmd("rm", "-f", *ids, timeout=60)


class Docker(DockerCommands):
    """dockerd under ``workdir``; use as a context manager (start, then stop and clean up)."""

    def __init__(
        self,
        workdir: Path,
        *,
        path: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        for tool in (DOCKERD, DOCKER):
            if not os.access(tool, os.X_OK):
                missing(f"{tool} not found (./dev setup installs docker.io)")
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.socket = workdir / "docker.sock"
        self.config = workdir / "daemon.json"
        self.namespace = unique_id("nvhook-test")
        self.exec_root = Path("/run") / self.namespace  # a short path: unix socket limit
        self.log = workdir / "dockerd.log"
        search = [*path, *os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").split(":")]
        self.env = {**os.environ, **(env or {}), "PATH": ":".join(dict.fromkeys(search))}
        self._proc: subprocess.Popen[bytes] | None = None
        if not self.config.exists():
            self.config.write_text("{}\n")

    def start(self, *, timeout: float = 60) -> None:
        argv = [
            DOCKERD,
            "--data-root", str(self.workdir / "data"),
            "--exec-root", str(self.exec_root),
            "--pidfile", str(self.workdir / "dockerd.pid"),
            "-H", f"unix://{self.socket}",
            "--config-file", str(self.config),
            "--containerd-namespace", self.namespace,
            "--containerd-plugins-namespace", f"{self.namespace}-plugins",
            "--iptables=false", "--ip-masq=false", "--bridge=none",
            "--log-level=warn",
        ]  # fmt: skip
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                pytest.fail(f"dockerd exited at start:\n{self.log.read_text()[-3000:]}")
            if self.socket.exists() and self.cmd("version", timeout=10).returncode == 0:
                return
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"dockerd did not answer within {timeout} s:\n{self.log.read_text()[-3000:]}")

    def cmd(self, *args: str, timeout: float = 120, check: bool = False) -> Result:
        """``docker -H unix://SOCKET ARGS…``."""
        argv = [DOCKER, "-H", f"unix://{self.socket}", *args]
        return run_command(argv, timeout=timeout, check=check, env=self.env)

    def stop(self) -> None:
        """Remove every container, stop dockerd (and its containerd), unmount what it left."""
        if self._proc is None:
            return
        self.remove_containers()
        self._proc.terminate()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._proc = None
        for root in (self.workdir / "data", self.exec_root):
            _unmount_under(root)
        with contextlib.suppress(OSError):
            subprocess.run(["rm", "-rf", str(self.exec_root)], check=False, timeout=60)
        rmdir_if_empty("/run/docker")


def _unmount_under(root: Path) -> None:
    """Lazily unmount every mount under ``root`` (deepest first)."""
    prefix = str(root).rstrip("/") + "/"
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True, timeout=30)
