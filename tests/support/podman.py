"""A private podman: its own containers.conf, storage and runtime, nothing of the host's."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.basics import Result, require, rmdir_if_empty, run_command
from tests.support.images import BUSYBOX_IMAGE

__all__ = ["Podman", "run_args"]


def run_args(
    cmd: Sequence[str],
    *,
    image: str = BUSYBOX_IMAGE,
    devices: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    options: Sequence[str] = (),
) -> list[str]:
    """``run --rm --pull=never [--device D]… [-e K=V]… OPTIONS IMAGE CMD…``: podman's
    arguments, for this harness and ``tests/support/engine_podman.py``'s."""
    argv = ["run", "--rm", "--pull=never"]
    for d in devices:
        argv += ["--device", d]
    for k, v in (env or {}).items():
        argv += ["-e", f"{k}={v}"]
    return [*argv, *options, image, *cmd]


class Podman:
    """podman with a private configuration and storage under ``workdir``.

    Configured for the test machines: runc (crun 1.8.1 fails on every container there:
    ``cgroups in hybrid mode not supported``), cgroupfs, file events, no network namespace
    set-up, and nofile/nproc limits of 1024 (root there lacks CAP_SYS_RESOURCE, so raising a
    limit fails). ``static_dir`` is left at its default (graphroot/libpod): podman's cleanup
    process is started with ``--root`` and would otherwise look in another database, making
    every ``run --rm`` wait 20 s for it. CDI specs are read only from /etc/cdi and /var/run/cdi
    (podman 4.3): see :func:`tests.support.cdi.cdi_spec`.
    """

    def __init__(self, workdir: Path, *, runtime: str = "runc") -> None:
        self.binary = require("podman")
        self.runtime = runtime
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.containers_conf = workdir / "containers.conf"
        self.storage_conf = workdir / "storage.conf"
        self.containers_conf.write_text(
            "[containers]\n"
            'netns = "none"\n'
            'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
            'log_driver = "k8s-file"\n'
            "[engine]\n"
            f"runtime = {json.dumps(runtime)}\n"
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'events_logfile_path = "{workdir}/events.log"\n'
            f'tmp_dir = "{workdir}/tmp"\n'
            "[network]\n"
            f'network_config_dir = "{workdir}/networks"\n'
        )
        self.storage_conf.write_text(
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{workdir}/graph"\n'
            f'runroot = "{workdir}/run"\n'
        )
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(self.containers_conf),
            "CONTAINERS_STORAGE_CONF": str(self.storage_conf),
        }

    def cmd(
        self,
        *args: str,
        runtime: str | None = None,
        timeout: float = 120,
        check: bool = False,
    ) -> Result:
        """``podman [--runtime R] ARGS…`` under the private configuration."""
        argv = [self.binary, *(["--runtime", runtime] if runtime else []), *args]
        return run_command(argv, timeout=timeout, check=check, env=self.env)

    def load(self, tar: Path) -> None:
        self.cmd("load", "-q", "-i", str(tar), check=True)

    def run(
        self,
        cmd: Sequence[str],
        *,
        image: str = BUSYBOX_IMAGE,
        runtime: str | None = None,
        devices: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        options: Sequence[str] = (),
        timeout: float = 60,
        check: bool = False,
    ) -> Result:
        """``podman [--runtime R] run --rm --pull=never [--device D]… [-e K=V]… OPTS IMAGE CMD``."""
        argv = run_args(cmd, image=image, devices=devices, env=env, options=options)
        return self.cmd(*argv, runtime=runtime, timeout=timeout, check=check)

    def cleanup(self) -> None:
        """Remove its containers and images, and the shared /run dirs it left empty."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.cmd("rm", "--all", "--force", "--time", "0", timeout=60)
            self.cmd("rmi", "--all", "--force", timeout=60)
        # podman runs runc with its default state root, /run/runc
        rmdir_if_empty("/run/containers/networks", "/run/containers", "/run/libpod", "/run/runc")
