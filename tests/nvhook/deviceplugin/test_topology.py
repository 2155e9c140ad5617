"""read_topology and build_topology: NVML's answers as link levels, on hand-built answers and
on the mock machines (the golden choices on them are in test_preferred.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.deviceplugin.model import PluginConfig
from nvhook.deviceplugin.plugin import DevicePlugin
from nvhook.deviceplugin.preferred import LEVELS
from nvhook.deviceplugin.topology import build_topology, read_numa_node, read_topology
from nvhook.devices.nvml import GpuTopology, NvLink
from nvhook.errors import DriverError
from nvhook.planner import Host
from tests.nvhook.deviceplugin.conftest import gpu

NV, SW, HB, NODE, SYS = (
    LEVELS[k] for k in ("nvlink", "pcie-switch", "host-bridge", "numa", "system")
)
GPUS = tuple(gpu(i) for i in range(4))  # bus ids 0000:01:00.0 … 0000:04:00.0


def answer(
    index: int, ancestors: tuple[int | None, ...], numa: int | None, *links: tuple[str, str]
) -> GpuTopology:
    return GpuTopology(
        index=index,
        ancestors=ancestors,
        numa_node=numa,
        nvlinks=tuple(NvLink(link=i, remote=k, remote_bus_id=b) for i, (k, b) in enumerate(links)),
    )


def test_direct_nvlinks_switches_and_ancestors() -> None:
    # G0-G1 bridged directly (one side's link suffices), G2-G3 through one NVSwitch; an
    # IBM NPU both reach is no GPU-to-GPU link; PCIe: SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM
    npu = ("ibmnpu", "0000:f0:00.0")
    nvml = (
        answer(0, (0, 10, 30, 50), 0, ("gpu", "0000:02:00.0"), npu),
        answer(1, (10, 0, 40, 50), 0, npu),
        answer(2, (30, 40, 0, 20), 0, ("switch", "0000:C4:00.0")),
        answer(3, (50, 50, 20, 0), 1, ("switch", "0000:c4:00.0"), ("gpu", "0000:99:00.0")),
    )
    t = build_topology(GPUS, nvml)
    assert t.numa == (0, 0, 0, 1)
    assert t.links == (
        (0, NV, HB, SYS),
        (NV, 0, NODE, SYS),
        (HB, NODE, 0, NV),
        (SYS, SYS, NV, 0),
    )
    assert t.paths == (
        (0, SW, HB, SYS),
        (SW, 0, NODE, SYS),
        (HB, NODE, 0, SW),
        (SYS, SYS, SW, 0),
    )


def test_unknown_ancestors_and_numa_nodes_fall_back() -> None:
    # NVML knows no ancestor (NOT_SUPPORTED) and no node for GPU 3: sysfs's node stands in,
    # then the nodes decide the path (one node: NODE, else or unknown: SYSTEM)
    nvml = tuple(answer(i, (None,) * 4, (0, 0, 1, None)[i]) for i in range(4))
    t = build_topology(GPUS, nvml, numa_fallback=(5, 5, 5, 1))
    assert t.numa == (0, 0, 1, 1)
    assert t.paths[0] == (0, NODE, SYS, SYS) and t.paths[2] == (SYS, SYS, 0, NODE)
    t = build_topology(GPUS, nvml)
    assert t.numa == (0, 0, 1, None) and t.paths[2] == (SYS, SYS, 0, SYS)


def test_read_numa_node_from_sysfs(tmp_path: Path) -> None:
    device = tmp_path / "sys/bus/pci/devices/0000:41:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    assert read_numa_node(str(tmp_path), "0000:41:00.0") == 1
    (device / "numa_node").write_text("-1\n")
    assert read_numa_node(str(tmp_path), "0000:41:00.0") is None
    assert read_numa_node(str(tmp_path), "0000:c1:00.0") is None


def test_read_topology_on_the_l40s_mock(mock_machine: Callable[..., Path]) -> None:
    from nvhook.deviceplugin.plugin import read_gpus

    host = Host(root=str(mock_machine("l40s-x4")))
    t = read_topology(host, read_gpus(host))
    assert t.numa == (0, 0, 1, 1)
    assert t.links == ((0, SW, SYS, SYS), (SW, 0, SYS, SYS), (SYS, SYS, 0, SW), (SYS, SYS, SW, 0))
    with pytest.raises(DriverError, match="the GPUs changed"):
        read_topology(host, read_gpus(host)[:3])


def test_the_plugin_serves_without_topology_when_nvml_fails_there(
    mock_machine: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVHOOK_MOCK_NVML_FAIL", "nvmlDeviceGetTopologyCommonAncestor:999")
    lines: list[str] = []
    plugin = DevicePlugin(Host(root=str(mock_machine("l40s-x4"))), PluginConfig(), log=lines.append)
    resources, gpus, topology = plugin.discover()
    assert len(gpus) == 4 and len(resources[0].devices) == 4
    assert topology.numa == (None,) * 4 and topology.links == ()  # the mock has no sysfs
    [line] = lines
    assert line.startswith("warning: GPU topology unknown, preferred allocations by NUMA node: ")
    assert "nvmlDeviceGetTopologyCommonAncestor failed for GPUs 0 and 1" in line
