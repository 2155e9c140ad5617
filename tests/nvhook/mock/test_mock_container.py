"""The mock nvidia-smi inside a real container sees exactly the GPUs the container may open."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.mock import load_profile
from tests.support.containers import (
    Runc,
    allow_device,
    char_device,
    make_bundle,
    require_root,
)

pytestmark = [pytest.mark.root, pytest.mark.runtime]


def test_nvidia_smi_lists_the_allowed_gpus_only(
    mock_machine: Callable[..., Path], tmp_path: Path
) -> None:
    require_root()
    prof = load_profile("dgx-a100")
    allowed = [prof.gpu_by_minor(0), prof.gpu_by_minor(3)]
    present_but_denied = prof.gpu_by_minor(1)
    assert all(allowed) and present_but_denied is not None
    devices = [
        char_device("/dev/nvidia0", 195, 0),
        char_device("/dev/nvidia3", 195, 3),
        char_device("/dev/nvidia1", 195, 1),  # the node is there, the cgroup denies it
    ]
    rules = [allow_device(195, 0), allow_device(195, 3)]
    bundle = make_bundle(
        tmp_path / "smi", ["nvidia-smi", "-L"], devices=devices, device_rules=rules
    )
    shutil.copy2(mock_machine("dgx-a100") / "usr/bin/nvidia-smi", bundle / "rootfs/usr/bin")
    probe = make_bundle(
        tmp_path / "probe",
        ["sh", "-c", "cat /dev/nvidia0; cat /dev/nvidia1; cat /dev/nvidia2; true"],
        devices=devices,
        device_rules=rules,
    )
    runc = Runc(tmp_path / "runc-root")
    try:
        result = runc.run(bundle)
        errors = runc.run(probe).stderr
    finally:
        runc.cleanup()
    # the three cases of the rule, as this kernel reports them
    assert "/dev/nvidia0': No such device or address" in errors  # ENXIO: visible
    assert "/dev/nvidia1': Operation not permitted" in errors  # EPERM: not visible
    assert "/dev/nvidia2': No such file or directory" in errors  # ENOENT: not visible
    assert result.returncode == 0, result.stderr
    # numbered from 0 inside the container, as NVML would; GPU 0's MIG devices need caps nodes
    assert result.stdout == "".join(
        f"GPU {n}: {g.name} (UUID: {g.uuid})\n" for n, g in enumerate(allowed) if g is not None
    )
    assert present_but_denied.uuid not in result.stdout
