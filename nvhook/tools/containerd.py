"""A private containerd: its own config, root, state and sockets, driven with ``ctr`` or CRI.

``nvhook demo --kubernetes`` and the test harness (``tests/support/containerd.py``, which
only turns a missing tool into a skip and an error into a test failure) both start
containerd through :class:`Containerd`, so the set-up this VM needs is written once
(docs/facts.md):

- without ``cri`` the CRI plugin is disabled; with it, ``restrict_oom_score_adj = true``
  (root lacks ``CAP_SYS_RESOURCE`` here), ``default_runtime_name = "runc"`` with a ``runc``
  runtime declared, CNI directories of its own (pods use the host's network), and the
  sandbox (pause) image given;
- the gRPC and ttrpc sockets live in a short temp directory (a unix socket's path has at
  most 107 bytes);
- containerd 1.6 puts its shims' sockets under ``/run/containerd/s`` whatever its state
  directory: :meth:`Containerd.stop` removes those this one made, then the directories under
  ``/run/containerd`` it left empty.

``env`` is added to containerd's environment, which its shims, and so the runtime they call,
inherit (``NVHOOK_CONFIG`` for nvhook-runtime).
"""

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

from nvhook.errors import ContainerEngineError

__all__ = ["Containerd", "rmdir_if_empty"]

Result = subprocess.CompletedProcess[str]
SHIM_SOCKETS = "/run/containerd/s"


class Containerd:
    """A private containerd under ``workdir`` (``config.toml``, ``root``, ``state``, log).

    ``runtimes`` maps extra runtime-class names to binaries (with ``cri``); ``extra_config``
    is appended to the TOML as is. The config is written at construction, so that ``nvhook
    runtime configure`` can edit it before :meth:`start`.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        cri: bool = False,
        runtimes: Mapping[str, str] | None = None,
        sandbox_image: str = "",
        namespace: str = "default",
        extra_config: str = "",
        env: Mapping[str, str] | None = None,
        binary: str = "containerd",
        ctr_binary: str = "ctr",
    ) -> None:
        self.binary = _which(binary)
        self.ctr_binary = _which(ctr_binary)
        self.env = dict(env or {})
        self.workdir = workdir
        self.namespace = namespace
        workdir.mkdir(parents=True, exist_ok=True)
        self.sockdir = Path(tempfile.mkdtemp(prefix="nvh-ctrd-"))
        self.address = str(self.sockdir / "c.sock")
        self.config = workdir / "config.toml"
        self.log = workdir / "containerd.log"
        self.config.write_text(
            config_text(
                workdir,
                self.address,
                cri=cri,
                runtimes=runtimes or {},
                sandbox_image=sandbox_image,
            )
            + extra_config
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._shim_sockets: set[str] = set()

    def __enter__(self) -> Containerd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, timeout: float = 20) -> None:
        """Start it and wait until ``ctr version`` answers; on failure, stop and raise with its
        log."""
        self._shim_sockets = set(_listdir(SHIM_SOCKETS))
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
                raise ContainerEngineError(
                    f"containerd exited at start ({self.log}):\n{self.log.read_text()}"
                )
            probe = subprocess.run(
                [self.ctr_binary, "-a", self.address, "version"],
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=10,
                check=False,
            )
            if probe.returncode == 0:
                return
            if time.monotonic() > deadline:
                self.stop()
                raise ContainerEngineError(
                    f"containerd not ready in {timeout}s ({self.log}):\n{self.log.read_text()}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM (then SIGKILL after 15 s), then remove the sockets and empty directories it
        left under ``/run/containerd``. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for name in set(_listdir(SHIM_SOCKETS)) - self._shim_sockets:
            with contextlib.suppress(OSError):
                os.unlink(f"{SHIM_SOCKETS}/{name}")
        rmdir_if_empty(
            f"/run/containerd/runc/{self.namespace}",
            "/run/containerd/runc/k8s.io",
            "/run/containerd/runc",
            SHIM_SOCKETS,
            "/run/containerd",
        )
        shutil.rmtree(self.sockdir, ignore_errors=True)

    def ctr(
        self, *args: str, namespace: str | None = None, timeout: float = 120, check: bool = True
    ) -> Result:
        """``ctr -a SOCK -n NS ARGS…``; with ``check`` a failure raises with its output."""
        argv = [self.ctr_binary, "-a", self.address, "-n", namespace or self.namespace, *args]
        return _run(argv, timeout=timeout, check=check)

    def import_image(self, tar: Path, *, namespace: str | None = None) -> None:
        """``ctr images import TAR`` (a docker-archive)."""
        self.ctr("images", "import", str(tar), namespace=namespace)

    def run(
        self,
        image: str,
        id: str,
        cmd: Sequence[str],
        *,
        runc_binary: str | None = None,
        env: Mapping[str, str] | None = None,
        options: Sequence[str] = (),
        namespace: str | None = None,
        timeout: float = 60,
        check: bool = False,
    ) -> Result:
        """``ctr run --rm`` with private fifo and runc roots; ``runc_binary`` is the runtime."""
        argv = ["run", "--rm", "--fifo-dir", str(self.workdir / "fifo")]
        argv += ["--runc-root", str(self.workdir / "runc")]
        if runc_binary:
            argv += ["--runc-binary", runc_binary]
        for k, v in (env or {}).items():
            argv += ["--env", f"{k}={v}"]
        argv += [*options, image, id, *cmd]
        return self.ctr(*argv, namespace=namespace, timeout=timeout, check=check)


def config_text(
    workdir: Path,
    address: str,
    *,
    cri: bool,
    runtimes: Mapping[str, str],
    sandbox_image: str,
) -> str:
    """containerd's config (version 2) for a private instance under ``workdir``."""
    lines = ["version = 2", f'root = "{workdir}/root"', f'state = "{workdir}/state"']
    if not cri:
        lines.append('disabled_plugins = ["io.containerd.grpc.v1.cri"]')
    lines += [
        "[grpc]",
        f'  address = "{address}"',
        "[ttrpc]",
        f'  address = "{address}.ttrpc"',
        '[plugins."io.containerd.internal.v1.opt"]',
        f'  path = "{workdir}/opt"',
    ]
    if cri:
        cri_key = '[plugins."io.containerd.grpc.v1.cri"'
        lines += [f"{cri_key}]"]
        if sandbox_image:
            lines += [f"  sandbox_image = {json.dumps(sandbox_image)}"]
        lines += [
            "  restrict_oom_score_adj = true",
            f"{cri_key}.cni]",
            f'  bin_dir = "{workdir}/cni/bin"',
            f'  conf_dir = "{workdir}/cni/conf"',
            f"{cri_key}.containerd]",
            '  default_runtime_name = "runc"',
            f"{cri_key}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
        ]
        for name, binary in runtimes.items():
            lines += [
                f"{cri_key}.containerd.runtimes.{name}]",
                '  runtime_type = "io.containerd.runc.v2"',
                f"{cri_key}.containerd.runtimes.{name}.options]",
                f"  BinaryName = {json.dumps(binary)}",
            ]
    return "\n".join(lines) + "\n"


def rmdir_if_empty(*paths: str) -> None:
    """Remove each directory that is empty (deepest first); leave anything in use alone."""
    for p in paths:
        with contextlib.suppress(OSError):
            os.rmdir(p)


def _which(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise ContainerEngineError(f"{tool} not found on PATH (./dev setup installs it)")
    return os.path.realpath(path)


def _run(argv: Sequence[str], *, timeout: float, check: bool) -> Result:
    proc = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if check and proc.returncode != 0:
        raise ContainerEngineError(
            f"command failed with exit status {proc.returncode}: {' '.join(argv)}\n"
            f"--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"
        )
    return proc


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
