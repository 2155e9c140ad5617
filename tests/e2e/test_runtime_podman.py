"""nvhook-runtime as podman 4.3's runtime (``podman --runtime SHIM run``), on the mock.

podman does not hand its environment to the runtime: the shim's config reaches the
``create`` call through containers.conf's ``conmon_env_vars`` (see ``ShimPodman``); the
``start`` and cleanup ``delete`` calls (the latter without PATH) pass through on defaults.
"""

from __future__ import annotations

import pytest

from nvhook.mock import Profile
from tests.e2e.conftest import (
    ELF_MAGIC,
    PROBE_ARGS,
    ShimPodman,
    expected_smi_uuids,
    parse_probe,
)
from tests.support.containers import BUSYBOX_IMAGE, Podman

pytestmark = [pytest.mark.root, pytest.mark.runtime]


def test_podman_run_one_gpu(shim_podman: ShimPodman, podman: Podman, profile: Profile) -> None:
    result = shim_podman.run(
        "run", "--rm", "--pull=never", "-e", "NVIDIA_VISIBLE_DEVICES=2", BUSYBOX_IMAGE, *PROBE_ARGS
    )
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [2])
    assert probe.gpu_nodes == {"/dev/nvidia2"}
    assert "/dev/nvidiactl" in probe.nodes
    assert probe.env["NVIDIA_VISIBLE_DEVICES"] == "void"  # served: a second injector adds nothing
    assert probe.lib_magic == ELF_MAGIC
    assert podman.cmd("ps", "-aq", check=True).stdout == ""  # --rm worked through the shim


def test_podman_unknown_gpu_fails_with_our_message(shim_podman: ShimPodman) -> None:
    result = shim_podman.run(
        "run", "--rm", "--pull=never", "-e", "NVIDIA_VISIBLE_DEVICES=9", BUSYBOX_IMAGE, "true"
    )
    assert result.returncode != 0
    assert "GPU 9 does not exist" in result.stderr, result.stderr
