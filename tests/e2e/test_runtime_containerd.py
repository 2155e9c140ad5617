"""nvhook-runtime as containerd 1.6's runc binary (``ctr run --runc-binary``), on the mock.

containerd starts ``containerd-shim-runc-v2``, which calls our shim with containerd's
environment: the session containerd is started with ``NVHOOK_CONFIG``/``NVHOOK_CACHE_DIR``.
"""

from __future__ import annotations

import pytest

from nvhook.mock import Profile
from tests.e2e.conftest import (
    ELF_MAGIC,
    PROBE_ARGS,
    Shim,
    expected_smi_uuids,
    parse_probe,
)
from tests.support.containers import BUSYBOX_IMAGE, Containerd, unique_id

pytestmark = [pytest.mark.root, pytest.mark.runtime]


def test_ctr_run_one_gpu(shim: Shim, shim_containerd: Containerd, profile: Profile) -> None:
    cid = unique_id("ctrd")
    result = shim_containerd.run(
        BUSYBOX_IMAGE,
        cid,
        PROBE_ARGS,
        runc_binary=shim.binary,
        env={"NVIDIA_VISIBLE_DEVICES": "1"},
    )
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [1])
    assert probe.gpu_nodes == {"/dev/nvidia1"}
    assert "/dev/nvidiactl" in probe.nodes
    assert probe.env["NVIDIA_VISIBLE_DEVICES"] == "void"  # served: a second injector adds nothing
    assert probe.lib_magic == ELF_MAGIC
    # containerd's calls, as docs/facts.md lists them: only the create did any work
    commands = [r["command"] for r in shim.log_records(cid)]
    assert commands == ["create"]


def test_ctr_run_unknown_gpu_shows_our_message(shim: Shim, shim_containerd: Containerd) -> None:
    cid = unique_id("ctrd9")
    result = shim_containerd.run(
        BUSYBOX_IMAGE,
        cid,
        ["true"],
        runc_binary=shim.binary,
        env={"NVIDIA_VISIBLE_DEVICES": "9"},
    )
    assert result.returncode != 0
    # containerd reads runc's --log file: our message, in runc's JSON format, reaches ctr
    assert "nvhook-runtime: GPU 9 does not exist" in result.stderr, result.stderr
    listed = shim_containerd.ctr("containers", "list", "-q").stdout.split()
    assert cid not in listed
