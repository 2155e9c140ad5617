"""Allocate's answer per device-list strategy, for GPUs, MIG devices and replicas."""

from __future__ import annotations

import pytest

from nvhook.deviceplugin.allocate import ContainerAllocation, Mount, allocate
from nvhook.deviceplugin.errors import AllocationError
from nvhook.deviceplugin.model import PluginConfig, TimeSlicedResource
from nvhook.deviceplugin.resources import build_resources
from tests.nvhook.deviceplugin.conftest import gpu

GPUS = (gpu(0, mig=("3g.40gb", "2g.20gb")), gpu(1), gpu(2))


def resource(name: str, config: PluginConfig = PluginConfig(mig_strategy="mixed")):  # noqa: B008
    return next(r for r in build_resources(GPUS, config) if r.name == name)


def test_envvar_names_the_uuids() -> None:
    got = allocate(resource("nvidia.com/gpu"), ["GPU-2", "GPU-1"], PluginConfig())
    assert got == ContainerAllocation(envs=(("NVIDIA_VISIBLE_DEVICES", "GPU-2,GPU-1"),))


def test_volume_mounts_one_dev_null_per_device_and_env_void() -> None:
    config = PluginConfig(device_list_strategies=("volume-mounts",))
    got = allocate(resource("nvidia.com/gpu"), ["GPU-1", "GPU-2"], config)
    assert got.envs == (("NVIDIA_VISIBLE_DEVICES", "void"),)
    assert got.mounts == (
        Mount("/var/run/nvidia-container-devices/GPU-1", "/dev/null", read_only=True),
        Mount("/var/run/nvidia-container-devices/GPU-2", "/dev/null", read_only=True),
    )


def test_cdi_strategies_name_generate_s_devices() -> None:
    config = PluginConfig(device_list_strategies=("cdi-annotations", "cdi-cri"))
    got = allocate(resource("nvidia.com/mig-3g.40gb"), ["MIG-0-0"], config)
    [(key, value)] = got.annotations
    assert key.startswith("cdi.k8s.io/nvhook-device-plugin_") and len(key.split("/")[1]) <= 63
    assert value == "nvidia.com/gpu=MIG-0-0"
    assert got.cdi_devices == ("nvidia.com/gpu=MIG-0-0",)
    other = allocate(resource("nvidia.com/gpu"), ["GPU-1", "GPU-2"], config)
    assert dict(other.annotations).popitem()[1] == "nvidia.com/gpu=GPU-1,nvidia.com/gpu=GPU-2"
    assert dict(other.annotations).keys() != dict(got.annotations).keys()


def test_every_strategy_at_once() -> None:
    config = PluginConfig(
        device_list_strategies=("envvar", "volume-mounts", "cdi-annotations", "cdi-cri"),
        cdi_annotation_prefix="example.com/",
    )
    got = allocate(resource("nvidia.com/gpu"), ["GPU-1"], config)
    assert got.envs == (("NVIDIA_VISIBLE_DEVICES", "GPU-1"),)
    assert [m.container_path for m in got.mounts] == ["/var/run/nvidia-container-devices/GPU-1"]
    assert next(iter(dict(got.annotations))).startswith("example.com/nvhook-device-plugin_")
    assert got.cdi_devices == ("nvidia.com/gpu=GPU-1",)


def test_replicas_name_their_device_once() -> None:
    config = PluginConfig(time_slicing=(TimeSlicedResource("nvidia.com/gpu", 4),))
    shared = resource("nvidia.com/gpu", config)
    got = allocate(shared, ["GPU-1::3", "GPU-1::0", "GPU-2::1"], config)
    assert got.envs == (("NVIDIA_VISIBLE_DEVICES", "GPU-1,GPU-2"),)
    strict = PluginConfig(time_slicing=config.time_slicing, fail_requests_greater_than_one=True)
    assert allocate(shared, ["GPU-1::3"], strict).envs == (("NVIDIA_VISIBLE_DEVICES", "GPU-1"),)
    with pytest.raises(AllocationError, match="failRequestsGreaterThanOne: a container may ask"):
        allocate(shared, ["GPU-1::3", "GPU-2::1"], strict)


def test_unknown_and_unhealthy_ids_are_refused_by_name() -> None:
    gpus = resource("nvidia.com/gpu")
    cases = [
        (gpus, ["GPU-1", "GPU-9"], {}, "device ID 'GPU-9' is not a device of nvidia.com/gpu"),
        (gpus, ["MIG-0-0"], {}, "device ID 'MIG-0-0' is not a device of nvidia.com/gpu"),
        (gpus, ["GPU-1", "GPU-2"], {"GPU-2": "gone"}, "device ID 'GPU-2' of nvidia.com/gpu is "
         "unhealthy (GPU GPU-2: gone)"),
        (resource("nvidia.com/mig-2g.20gb"), ["MIG-0-1"], {"GPU-0": "NVML failed"},
         "device ID 'MIG-0-1' of nvidia.com/mig-2g.20gb is unhealthy (GPU GPU-0: NVML failed)"),
    ]  # fmt: skip
    for r, ids, unhealthy, message in cases:
        with pytest.raises(AllocationError) as e:
            allocate(r, ids, PluginConfig(), unhealthy=unhealthy)
        assert e.value.message.startswith(message), e.value.message


def _key(resource_name: str, ids: list[str], prefix: str = "cdi.k8s.io/") -> str:
    """The annotation's name, derived here as the module's text says: a digest of the
    resource and the IDs kubelet gave, in their order."""
    import hashlib

    digest = hashlib.sha256("\0".join([resource_name, *ids]).encode()).hexdigest()[:12]
    return f"{prefix}nvhook-device-plugin_{digest}"


def _mount(uuid: str) -> Mount:
    return Mount(f"/var/run/nvidia-container-devices/{uuid}", "/dev/null", read_only=True)


TIME_SLICED = PluginConfig(time_slicing=(TimeSlicedResource("nvidia.com/gpu", 4),))
#: name: (resource, its config, the IDs kubelet gave, the strategies, the exact answer)
EXACT: dict[str, tuple[str, PluginConfig, list[str], tuple[str, ...], ContainerAllocation]] = {
    "envvar, kubelet's order": (
        "nvidia.com/gpu", PluginConfig(), ["GPU-2", "GPU-1"], ("envvar",),
        ContainerAllocation(envs=(("NVIDIA_VISIBLE_DEVICES", "GPU-2,GPU-1"),)),
    ),
    "volume-mounts": (
        "nvidia.com/gpu", PluginConfig(), ["GPU-2", "GPU-1"], ("volume-mounts",),
        ContainerAllocation(
            envs=(("NVIDIA_VISIBLE_DEVICES", "void"),), mounts=(_mount("GPU-2"), _mount("GPU-1"))
        ),
    ),
    "cdi-annotations": (
        "nvidia.com/gpu", PluginConfig(), ["GPU-1", "GPU-2"], ("cdi-annotations",),
        ContainerAllocation(
            envs=(("NVIDIA_VISIBLE_DEVICES", "void"),),
            annotations=((_key("nvidia.com/gpu", ["GPU-1", "GPU-2"]),
                          "nvidia.com/gpu=GPU-1,nvidia.com/gpu=GPU-2"),),
        ),
    ),
    "cdi-cri": (
        "nvidia.com/gpu", PluginConfig(), ["GPU-1"], ("cdi-cri",),
        ContainerAllocation(
            envs=(("NVIDIA_VISIBLE_DEVICES", "void"),), cdi_devices=("nvidia.com/gpu=GPU-1",)
        ),
    ),
    "every strategy, a MIG device": (
        "nvidia.com/mig-2g.20gb", PluginConfig(mig_strategy="mixed"), ["MIG-0-1"],
        ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri"),
        ContainerAllocation(
            envs=(("NVIDIA_VISIBLE_DEVICES", "MIG-0-1"),),
            mounts=(_mount("MIG-0-1"),),
            annotations=((_key("nvidia.com/mig-2g.20gb", ["MIG-0-1"]),
                          "nvidia.com/gpu=MIG-0-1"),),
            cdi_devices=("nvidia.com/gpu=MIG-0-1",),
        ),
    ),
    "every strategy, replicas: each device once, in kubelet's order": (
        "nvidia.com/gpu", TIME_SLICED, ["GPU-2::1", "GPU-1::3", "GPU-2::0"],
        ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri"),
        ContainerAllocation(
            envs=(("NVIDIA_VISIBLE_DEVICES", "GPU-2,GPU-1"),),
            mounts=(_mount("GPU-2"), _mount("GPU-1")),
            annotations=((_key("nvidia.com/gpu", ["GPU-2::1", "GPU-1::3", "GPU-2::0"]),
                          "nvidia.com/gpu=GPU-2,nvidia.com/gpu=GPU-1"),),
            cdi_devices=("nvidia.com/gpu=GPU-2", "nvidia.com/gpu=GPU-1"),
        ),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(EXACT))
def test_each_strategy_s_exact_answer(case: str) -> None:
    name, config, ids, strategies, expected = EXACT[case]
    config = PluginConfig(
        mig_strategy=config.mig_strategy,
        time_slicing=config.time_slicing,
        device_list_strategies=strategies,
    )
    assert allocate(resource(name, config), ids, config) == expected


def test_the_annotation_prefix_and_kind_are_the_configured_ones() -> None:
    config = PluginConfig(
        device_list_strategies=("cdi-annotations", "cdi-cri"),
        cdi_annotation_prefix="example.com/",
        cdi_kind="example.com/gpu",
    )
    got = allocate(resource("nvidia.com/gpu", config), ["GPU-1"], config)
    assert got.annotations == (
        (_key("nvidia.com/gpu", ["GPU-1"], "example.com/"), "example.com/gpu=GPU-1"),
    )
    assert got.cdi_devices == ("example.com/gpu=GPU-1",)
