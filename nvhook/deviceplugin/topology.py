"""The host's GPU topology as a :class:`~nvhook.deviceplugin.preferred.Topology` value.

:func:`read_topology` is the one place the plugin learns how GPUs are linked. It asks NVML
(:meth:`nvhook.devices.nvml.Nvml.topology`) and :func:`build_topology` turns the answers into
:data:`~nvhook.deviceplugin.preferred.LEVELS`:

- two GPUs are NVLinked (``nvlink``) when an active NVLink of one ends at the other's bus id,
  or when both have an active NVLink to the same NVSwitch (one NVSwitch island: on a DGX A100
  every GPU reaches all six switches, so every pair);
- else, and for the PCIe paths in any case, NVML's common ancestor: ``SINGLE`` or
  ``MULTIPLE`` (behind one PCIe switch tree) is ``pcie-switch``, ``HOSTBRIDGE``
  ``host-bridge``, ``NODE`` ``numa``, ``SYSTEM`` ``system``; where NVML does not say, the
  NUMA nodes do (``numa`` on one node, else ``system``);
- each GPU's NUMA node is its NVML memory affinity (node scope) when that is exactly one
  node, else sysfs's (``<root>/sys/bus/pci/devices/<bus id>/numa_node``; ``-1`` or a
  missing file: unknown).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from nvhook.deviceplugin.preferred import LEVELS, Topology
from nvhook.errors import DriverError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.devices.nvml import GpuInfo, GpuTopology
    from nvhook.planner import Host

__all__ = ["ANCESTOR_LEVELS", "build_topology", "read_numa_node", "read_topology"]

#: NVML's ``nvmlGpuTopologyLevel_t`` values as :data:`LEVELS` values.
ANCESTOR_LEVELS = {
    0: LEVELS["same"],  # INTERNAL
    10: LEVELS["pcie-switch"],  # SINGLE: one PCIe switch
    20: LEVELS["pcie-switch"],  # MULTIPLE: several switches, no host bridge between
    30: LEVELS["host-bridge"],  # HOSTBRIDGE
    40: LEVELS["numa"],  # NODE: one NUMA node (CPU)
    50: LEVELS["system"],  # SYSTEM: across the CPUs' interconnect
}


def read_numa_node(root: str, bus_id: str) -> int | None:
    """The NUMA node sysfs gives the PCI device ``bus_id`` (None: unknown)."""
    path = os.path.join(root, "sys/bus/pci/devices", bus_id.lower(), "numa_node")
    try:
        with open(path, encoding="ascii") as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def build_topology(
    gpus: Sequence[GpuInfo],
    nvml: Sequence[GpuTopology],
    numa_fallback: Sequence[int | None] = (),
) -> Topology:
    """The topology of ``gpus`` (NVML index order) from NVML's answers for them;
    ``numa_fallback[i]``: GPU i's NUMA node where NVML does not know it."""
    bus_ids = {g.bus_id.lower(): g.index for g in gpus}
    numa = tuple(
        t.numa_node
        if t.numa_node is not None
        else (numa_fallback[i] if i < len(numa_fallback) else None)
        for i, t in enumerate(nvml)
    )
    direct: list[set[int]] = []  # GPUs at the far end of a GPU's NVLinks
    switches: list[set[str]] = []  # the NVSwitches a GPU's NVLinks reach
    for t in nvml:
        ends = [(link.remote, link.remote_bus_id.lower()) for link in t.nvlinks]
        direct.append({bus_ids[bus] for kind, bus in ends if kind == "gpu" and bus in bus_ids})
        switches.append({bus for kind, bus in ends if kind == "switch"})
    paths = tuple(
        tuple(
            _path(i, j, t.ancestors[j] if j < len(t.ancestors) else None, numa)
            for j in range(len(nvml))
        )
        for i, t in enumerate(nvml)
    )
    links = tuple(
        tuple(
            LEVELS["nvlink"]
            if i != j and (j in direct[i] or i in direct[j] or switches[i] & switches[j])
            else paths[i][j]
            for j in range(len(nvml))
        )
        for i in range(len(nvml))
    )
    return Topology(numa=numa, links=links, paths=paths)


def _path(a: int, b: int, ancestor: int | None, numa: Sequence[int | None]) -> int:
    if a == b:
        return LEVELS["same"]
    if ancestor is not None and ancestor in ANCESTOR_LEVELS:
        return ANCESTOR_LEVELS[ancestor]
    same_node = numa[a] is not None and numa[a] == numa[b]
    return LEVELS["numa"] if same_node else LEVELS["system"]


def read_topology(host: Host, gpus: Sequence[GpuInfo]) -> Topology:
    """The topology of ``gpus`` (NVML index order) on ``host``, from NVML (loaded from the
    driver root) and sysfs; raises :class:`~nvhook.errors.DriverError` when NVML fails."""
    from nvhook.devices.nvml import open_nvml
    from nvhook.planner import nvml_library_dir

    with open_nvml(nvml_library_dir(host.driver_root)) as nvml:
        answers = nvml.topology()
    if [t.index for t in answers] != [g.index for g in gpus]:
        raise DriverError(
            f"NVML lists {len(answers)} GPUs for their topology, {len(gpus)} before: "
            "the GPUs changed while the plugin started"
        )
    sysfs = [read_numa_node(host.root, g.bus_id) for g in gpus]
    return build_topology(gpus, answers, sysfs)
