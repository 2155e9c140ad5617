"""A private containerd (own config, root, state and sockets), driven with ``ctr``."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.basics import Result, require, rmdir_if_empty, run_command, unique_id
from tests.support.images import BUSYBOX_IMAGE

__all__ = ["Containerd"]


class Containerd:
    """A private containerd (own root, state, sockets) for ``ctr`` or CRI tests.

    Without ``cri`` the CRI plugin is disabled. With ``cri=True`` it is configured for this VM
    (``restrict_oom_score_adj``, ``default_runtime_name = "runc"``) and ``runtimes`` maps extra
    runtime-class names to binaries; ``extra_config`` is appended to the TOML as is.
    ``env`` is added to containerd's environment, which its shims and the runtime they call
    inherit (e.g. ``NVHOOK_CONFIG`` for the nvhook shim).
    containerd 1.6 puts shim sockets under /run/containerd/s whatever its state dir:
    :meth:`stop` removes those it made and the directories it left empty.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        cri: bool = False,
        runtimes: Mapping[str, str] | None = None,
        sandbox_image: str = BUSYBOX_IMAGE,
        namespace: str = "nvhook-test",
        extra_config: str = "",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.binary = require("containerd")
        self.env = dict(env or {})
        self.ctr_binary = require("ctr")
        self.workdir = workdir
        self.namespace = namespace
        workdir.mkdir(parents=True, exist_ok=True)
        # unix socket paths are limited to 108 bytes: keep them short whatever tmp_path is
        self.sockdir = Path(tempfile.mkdtemp(prefix="nvh-ctrd-"))
        self.address = str(self.sockdir / "c.sock")
        self.config = workdir / "config.toml"
        self.log = workdir / "containerd.log"
        lines = [
            "version = 2",
            f'root = "{workdir}/root"',
            f'state = "{workdir}/state"',
        ]
        if not cri:
            lines.append('disabled_plugins = ["io.containerd.grpc.v1.cri"]')
        lines += [
            "[grpc]",
            f'  address = "{self.address}"',
            "[ttrpc]",
            f'  address = "{self.address}.ttrpc"',
            '[plugins."io.containerd.internal.v1.opt"]',
            f'  path = "{workdir}/opt"',
        ]
        if cri:
            cri_key = '[plugins."io.containerd.grpc.v1.cri"'
            lines += [
                f"{cri_key}]",
                f'  sandbox_image = "{sandbox_image}"',
                "  restrict_oom_score_adj = true",
                f"{cri_key}.cni]",
                f'  bin_dir = "{workdir}/cni/bin"',
                f'  conf_dir = "{workdir}/cni/conf"',
                f"{cri_key}.containerd]",
                '  default_runtime_name = "runc"',
                f"{cri_key}.containerd.runtimes.runc]",
                '  runtime_type = "io.containerd.runc.v2"',
            ]
            for name, binary in (runtimes or {}).items():
                lines += [
                    f"{cri_key}.containerd.runtimes.{name}]",
                    '  runtime_type = "io.containerd.runc.v2"',
                    f"{cri_key}.containerd.runtimes.{name}.options]",
                    f"  BinaryName = {json.dumps(binary)}",
                ]
        self.config.write_text("\n".join(lines) + "\n" + extra_config)
        self._proc: subprocess.Popen[bytes] | None = None
        self._shim_sockets: set[str] = set()

    def __enter__(self) -> Containerd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, timeout: float = 20) -> None:
        self._shim_sockets = set(_listdir("/run/containerd/s"))
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                [self.binary, "--config", str(self.config)],
                env={**os.environ, **self.env} if self.env else None,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                self.stop()
                pytest.fail(f"containerd exited at start:\n{self.log.read_text()}", pytrace=False)
            probe = run_command(
                [self.ctr_binary, "-a", self.address, "version"], timeout=10, check=False
            )
            if probe.returncode == 0:
                return
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"containerd not ready in {timeout}s:\n{self.log.read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for name in set(_listdir("/run/containerd/s")) - self._shim_sockets:
            with contextlib.suppress(OSError):
                os.unlink(f"/run/containerd/s/{name}")
        rmdir_if_empty(
            f"/run/containerd/runc/{self.namespace}",
            "/run/containerd/runc/k8s.io",
            "/run/containerd/runc",
            "/run/containerd/s",
            "/run/containerd",
        )
        shutil.rmtree(self.sockdir, ignore_errors=True)

    def ctr(
        self, *args: str, namespace: str | None = None, timeout: float = 120, check: bool = True
    ) -> Result:
        """``ctr -a SOCK -n NS ARGS…``."""
        argv = [self.ctr_binary, "-a", self.address, "-n", namespace or self.namespace, *args]
        return run_command(argv, timeout=timeout, check=check)

    def import_image(self, tar: Path, *, namespace: str | None = None) -> None:
        self.ctr("images", "import", str(tar), namespace=namespace)

    def run(
        self,
        image: str,
        id: str | None,
        cmd: Sequence[str],
        *,
        runc_binary: str | None = None,
        env: Mapping[str, str] | None = None,
        options: Sequence[str] = (),
        namespace: str | None = None,
        timeout: float = 60,
        check: bool = False,
    ) -> Result:
        """``ctr run --rm`` with private fifo and runc roots; ``runc_binary`` is the shim."""
        cid = id or unique_id("ctrd")
        argv = [
            "run",
            "--rm",
            "--fifo-dir",
            str(self.workdir / "fifo"),
            "--runc-root",
            str(self.workdir / "runc"),
        ]
        if runc_binary:
            argv += ["--runc-binary", runc_binary]
        for k, v in (env or {}).items():
            argv += ["--env", f"{k}={v}"]
        argv += [*options, image, cid, *cmd]
        return self.ctr(*argv, namespace=namespace, timeout=timeout, check=check)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
