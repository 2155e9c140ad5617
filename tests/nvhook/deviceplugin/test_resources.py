"""What the plugin advertises per MIG strategy and under time-slicing (resources.py)."""

from __future__ import annotations

from typing import Any

import pytest

from nvhook.deviceplugin.errors import StrategyError
from nvhook.deviceplugin.model import PluginConfig, TimeSlicedResource
from nvhook.deviceplugin.resources import build_resources
from nvhook.devices.nvml import GpuInfo
from tests.nvhook.deviceplugin.conftest import gpu

# like the dgx-a100 mock: GPU 0 in MIG mode (3g.40gb, 2g.20gb x2), GPU 1 in MIG mode without
# devices, GPUs 2-3 plain
DGX = (gpu(0, mig=("3g.40gb", "2g.20gb", "2g.20gb")), gpu(1, mig=()), gpu(2), gpu(3))


def ids(config: PluginConfig, gpus: tuple[GpuInfo, ...] = DGX, **kw: Any) -> dict[str, list[str]]:
    return {r.name: [d.id for d in r.devices] for r in build_resources(gpus, config, **kw)}


def test_none_advertises_every_gpu_by_uuid_with_its_numa_node() -> None:
    resources = build_resources(DGX, PluginConfig(), numa={"GPU-2": 1})
    assert [r.name for r in resources] == ["nvidia.com/gpu"]
    [r] = resources
    assert [d.id for d in r.devices] == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]
    assert [d.numa_node for d in r.devices] == [None, None, 1, None]
    assert all(d.uuid == d.gpu_uuid == d.id for d in r.devices)


def test_mixed_splits_whole_gpus_and_mig_profiles_and_skips_empty_mig_gpus() -> None:
    warnings: list[str] = []
    got = ids(PluginConfig(mig_strategy="mixed"), warnings=warnings)
    assert got == {
        "nvidia.com/gpu": ["GPU-2", "GPU-3"],
        "nvidia.com/mig-2g.20gb": ["MIG-0-1", "MIG-0-2"],
        "nvidia.com/mig-3g.40gb": ["MIG-0-0"],
    }
    assert warnings == [
        "GPU 1 (GPU-1) is in MIG mode without MIG devices: advertised under no resource "
        "(create MIG instances, or disable MIG mode)"
    ]
    mig = build_resources(DGX, PluginConfig(mig_strategy="mixed"))[2].devices[0]
    assert (mig.uuid, mig.gpu_uuid, mig.gpu_index) == ("MIG-0-0", "GPU-0", 0)


def test_single_advertises_mig_devices_as_gpus() -> None:
    gpus = (gpu(0, mig=("1g.10gb", "1g.10gb")), gpu(1, mig=("1g.10gb",)))
    assert ids(PluginConfig(mig_strategy="single"), gpus) == {
        "nvidia.com/gpu": ["MIG-0-0", "MIG-0-1", "MIG-1-0"]
    }


def test_single_without_mig_is_none() -> None:
    gpus = (gpu(0), gpu(1))
    assert ids(PluginConfig(mig_strategy="single"), gpus) == {"nvidia.com/gpu": ["GPU-0", "GPU-1"]}


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        (
            (gpu(0, mig=("1g.10gb",)), gpu(1)),
            "migStrategy single: GPU 1 (GPU-1) is not in MIG mode while GPU 0 is",
        ),
        (
            (gpu(0, mig=("1g.10gb",)), gpu(1, mig=())),
            "migStrategy single: GPU 1 (GPU-1) is in MIG mode without MIG devices",
        ),
        (
            (gpu(0, mig=("1g.10gb",)), gpu(1, mig=("1g.10gb", "2g.20gb"))),
            "migStrategy single: GPU 1 (GPU-1) has MIG device 1 with profile 2g.20gb, "
            "others 1g.10gb",
        ),
    ],
)
def test_single_refuses_a_node_that_does_not_fit_naming_the_gpu(
    gpus: tuple[GpuInfo, ...], message: str
) -> None:
    with pytest.raises(StrategyError) as e:
        build_resources(gpus, PluginConfig(mig_strategy="single"))
    assert e.value.message.startswith(message)


def test_time_slicing_replicates_ids_and_renames() -> None:
    config = PluginConfig(
        time_slicing=(TimeSlicedResource("nvidia.com/gpu", 3, "nvidia.com/gpu.shared"),)
    )
    [r] = build_resources((gpu(0), gpu(1)), config)
    assert r.name == "nvidia.com/gpu.shared" and r.replicas == 3
    assert [d.id for d in r.devices] == [
        "GPU-0::0", "GPU-0::1", "GPU-0::2", "GPU-1::0", "GPU-1::1", "GPU-1::2",
    ]  # fmt: skip
    assert {d.uuid for d in r.devices} == {"GPU-0", "GPU-1"}
    by_default = PluginConfig(
        rename_by_default=True, time_slicing=(TimeSlicedResource("nvidia.com/gpu", 2),)
    )
    assert [r.name for r in build_resources((gpu(0),), by_default)] == ["nvidia.com/gpu.shared"]


def test_time_slicing_of_a_mig_profile_and_of_an_absent_resource() -> None:
    warnings: list[str] = []
    config = PluginConfig(
        mig_strategy="mixed",
        time_slicing=(
            TimeSlicedResource("nvidia.com/mig-3g.40gb", 2),
            TimeSlicedResource("nvidia.com/mig-7g.80gb", 2),
        ),
    )
    got = ids(config, warnings=warnings)
    assert got["nvidia.com/mig-3g.40gb"] == ["MIG-0-0::0", "MIG-0-0::1"]
    assert got["nvidia.com/mig-2g.20gb"] == ["MIG-0-1", "MIG-0-2"]
    assert warnings[-1].startswith(
        "sharing.timeSlicing: resource nvidia.com/mig-7g.80gb is not advertised on this node"
    )
