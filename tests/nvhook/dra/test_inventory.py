"""The node's devices as ResourceSlices: NVIDIA's attribute names and types, the API's limits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.devices.nvml import DriverInfo
from nvhook.dra.inventory import (
    MAX_DEVICES_PER_SLICE,
    build_devices,
    build_slices,
    discover,
    quantity,
    semver,
)
from nvhook.planner import Host
from tests.nvhook.deviceplugin.conftest import gpu
from tests.support.kubeapi import slice_problems, validate_model

DRIVER = DriverInfo(driver_version="580.65.06", cuda_version="13.0", nvml_version="13.580.65.06")


def test_versions_are_strict_semver_as_nvidia_s_driver_writes_them() -> None:
    assert semver("8.0") == "8.0.0"
    assert semver("580.65.06") == "580.65.6"  # Masterminds/semver's String(): no leading zero
    assert semver("12") == "12.0.0"


def test_memory_is_a_canonical_binary_quantity() -> None:
    assert quantity(80 << 30) == "80Gi"
    assert quantity(42144366592) == "40192Mi"
    assert quantity(1000) == "1000"


def test_a_gpu_carries_nvidia_s_attribute_names_and_types() -> None:
    inv = build_devices([gpu(0)], DRIVER, numa={"GPU-0": 1})
    (d,) = inv.devices
    api = d.api()
    assert api["name"] == "gpu-0"
    assert api["attributes"] == {
        "type": {"string": "gpu"},
        "uuid": {"string": "GPU-0"},
        "productName": {"string": "NVIDIA A100-SXM4-80GB"},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Ampere"},
        "cudaComputeCapability": {"version": "8.0.0"},
        "driverVersion": {"version": "580.65.6"},
        "cudaDriverVersion": {"version": "13.0.0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:01:00.0"},
        "resource.kubernetes.io/numaNode": {"int": 1},
    }
    assert api["capacity"] == {"memory": {"value": "80Gi"}}


def test_a_gpu_in_mig_mode_is_published_through_its_mig_devices_only() -> None:
    inv = build_devices([gpu(0, mig=("3g.40gb", "1g.10gb")), gpu(1, mig=())], DRIVER)
    assert [d.name for d in inv.devices] == ["gpu-0-mig-1-0", "gpu-0-mig-2-0"]
    attrs = inv.devices[0].api()["attributes"]
    assert attrs["type"] == {"string": "mig"}
    assert attrs["profile"] == {"string": "3g.40gb"}
    assert attrs["parentUUID"] == {"string": "GPU-0"}
    assert attrs["uuid"] == {"string": "MIG-0-0"}


def test_more_devices_than_a_slice_holds_make_a_pool_of_several_slices() -> None:
    inv = build_devices([], DRIVER, channels=range(2 * MAX_DEVICES_PER_SLICE + 1))
    slices = build_slices(inv, "node-a", 3)
    assert [len(s["spec"].get("devices", [])) for s in slices] == [128, 128, 1]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    assert {s["spec"]["pool"]["generation"] for s in slices} == {3}
    for s in slices:
        assert slice_problems(s) == [] and validate_model(s, "V1ResourceSlice") == []


def test_the_stand_in_refuses_what_types_go_refuses() -> None:
    """The validator is not vacuous: each planted mistake is caught."""
    inv = build_devices([gpu(0)], DRIVER)
    good = build_slices(inv, "node-a", 1)[0]
    assert slice_problems(good) == []
    bad = build_slices(inv, "node-a", 1)[0]
    dev = bad["spec"]["devices"][0]
    dev["attributes"]["driverVersion"] = {"version": "580.65.06"}
    dev["attributes"]["bad name"] = {"string": "x", "int": 1}
    dev["name"] = "GPU_0"
    bad["spec"]["devices"] = [dev] * 129
    problems = " | ".join(slice_problems(bad))
    for needle in ("not strict semver", "C identifier", "exactly one value", "DNS label", "129"):
        assert needle in problems
    typo = build_slices(inv, "node-a", 1)[0]
    typo["spec"]["devices"][0]["capacities"] = typo["spec"]["devices"][0].pop("capacity")
    assert validate_model(typo, "V1ResourceSlice") != []


@pytest.mark.parametrize(
    ("profile", "names"),
    [
        # dgx-a100: GPU 0 in MIG mode with 3 MIG devices, GPU 1 in MIG mode without any
        (
            "dgx-a100",
            ["gpu-0-mig-2-0", "gpu-0-mig-3-0", "gpu-0-mig-4-0"] + [f"gpu-{i}" for i in range(2, 8)],
        ),
        ("gb200-imex", ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "channel-0", "channel-1"]),
        # l40s-x4: NVML's index order is not the minors' (named by minor, as NVIDIA does)
        ("l40s-x4", ["gpu-1", "gpu-2", "gpu-3", "gpu-0"]),
    ],
)
def test_the_mock_machines_devices_make_valid_slices(
    profile: str, names: list[str], mock_machine: Callable[..., Path]
) -> None:
    inv = discover(Host(root=str(mock_machine(profile))))
    assert [d.name for d in inv.devices] == names
    (s,) = build_slices(inv, "node-a", 1)
    assert slice_problems(s) == []
    assert validate_model(s, "V1ResourceSlice") == []
    if profile == "gb200-imex":
        channel = s["spec"]["devices"][-1]
        assert channel["attributes"] == {"type": {"string": "channel"}, "id": {"int": 1}}
