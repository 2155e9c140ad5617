"""podman runs containers through ``nvhook-runtime`` once ``nvhook runtime configure
--runtime podman`` has written ``[engine.runtimes] nvidia = [...]`` into its containers.conf.

The containers.conf is a copy of the harness's private one (runc, cgroupfs, …) with
``conmon_env_vars`` naming the shim's config (podman hands the runtime no environment of its
own, see ``ShimPodman``); configure edits that file, as it would /etc/containers/containers.conf.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.mock import Profile
from tests.e2e.conftest import PROBE_ARGS, Shim, expected_smi_uuids, parse_probe
from tests.support.containers import BUSYBOX_IMAGE, Podman

pytestmark = [pytest.mark.root, pytest.mark.runtime]


def _podman(podman: Podman, conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [podman.binary, *args],
        env={**podman.env, "CONTAINERS_CONF": str(conf)},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _run(podman: Podman, conf: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return _podman(
        podman, conf, *options, "run", "--rm", "--pull=never",
        "-e", "NVIDIA_VISIBLE_DEVICES=2", BUSYBOX_IMAGE, *PROBE_ARGS,
    )  # fmt: skip


def test_podman_runtime_configured_by_nvhook(
    shim: Shim, podman: Podman, profile: Profile, tmp_path: Path
) -> None:
    conf = tmp_path / "containers.conf"
    pairs = json.dumps([f"{k}={v}" for k, v in shim.extra_env.items()])
    original = podman.containers_conf.read_text().replace(
        "[engine]\n", f"[engine]\nconmon_env_vars = {pairs}\n", 1
    )
    conf.write_text(original)
    base = ["--runtime", "podman", "--config", str(conf), "--backup-dir", str(tmp_path / "b")]
    configure = ["runtime", "configure", *base, "--runtime-path", shim.binary]
    assert main(configure) == 0
    assert f'nvidia = ["{shim.binary}"]' in conf.read_text()

    # podman --runtime NAME: the name resolves through [engine.runtimes] to the shim
    result = _run(podman, conf, "--runtime", "nvidia")
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [2])
    assert probe.gpu_nodes == {"/dev/nvidia2"}

    # the default runtime (runc) is still known, and gives no GPU for the same request
    result = _run(podman, conf)
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == [] and probe.gpu_nodes == set()
    assert probe.env["NVIDIA_VISIBLE_DEVICES"] == "2"

    # --set-as-default: every container goes through the shim
    assert main([*configure, "--set-as-default"]) == 0
    result = _run(podman, conf)
    assert result.returncode == 0, result.stderr
    assert parse_probe(result.stdout).gpu_uuids == expected_smi_uuids(profile, [2])

    assert main(["runtime", "unconfigure", *base]) == 0
    assert conf.read_text() == original
    gone = _podman(podman, conf, "--runtime", "nvidia", "run", "--rm", BUSYBOX_IMAGE, "true")
    assert gone.returncode != 0
    assert 'OCI runtime "nvidia" not found' in gone.stderr, gone.stderr
