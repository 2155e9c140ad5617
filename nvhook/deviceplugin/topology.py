"""The host's GPU topology as a :class:`~nvhook.deviceplugin.preferred.Topology` value.

:func:`read_topology` is the one place the plugin learns how GPUs are linked. Today it
reads each GPU's NUMA node from sysfs (``<root>/sys/bus/pci/devices/<bus id>/numa_node``;
``-1`` or a missing file: unknown) and no pairwise links, so
:func:`~nvhook.deviceplugin.preferred.preferred` ranks by NUMA node, then index.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from nvhook.deviceplugin.preferred import Topology

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.devices.nvml import GpuInfo
    from nvhook.edits import Host

__all__ = ["read_numa_node", "read_topology"]


def read_numa_node(root: str, bus_id: str) -> int | None:
    """The NUMA node sysfs gives the PCI device ``bus_id`` (None: unknown)."""
    path = os.path.join(root, "sys/bus/pci/devices", bus_id.lower(), "numa_node")
    try:
        with open(path, encoding="ascii") as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def read_topology(host: Host, gpus: Sequence[GpuInfo]) -> Topology:
    """The topology of ``gpus`` (NVML index order) on ``host``."""
    return Topology(numa=tuple(read_numa_node(host.root, g.bus_id) for g in gpus))
