"""``GetPreferredAllocation``: the best set of available device IDs for a container.

The topology is a small value (:class:`Topology`): per pair of GPUs (NVML indices) how
they are linked, as a :data:`LEVELS` number where lower is closer (``links``: NVLink where
there is one, else the PCIe path), how their PCIe path runs whatever NVLink adds (``paths``),
and each GPU's NUMA node. :func:`nvhook.deviceplugin.topology.read_topology` fills it from
NVML; :func:`preferred` only reads it, so it is tested on hand-built topologies.

Whole devices (no time-slicing): the must-include IDs, plus the other available IDs that
make the set closest: the lowest worst-pair link level first (every pair on one
NVLink/NVSwitch island beats a set that crosses PCIe, one PCIe switch beats one NUMA node,
which beats the whole system), then the lowest sum of link levels, then the same two over
the PCIe paths (on an all-NVSwitch machine every set is one island: the path picks GPUs
behind one PCIe switch, on one NUMA node), then the lowest GPU indices. MIG devices of one
GPU are level 0 to each other. Every combination is scored when there are at most
:data:`EXHAUSTIVE` of them, else devices are added greedily, closest first.

Replicas (time-slicing): spread across GPUs: each next ID is a replica of the GPU with the
fewest replicas chosen so far, then with the most replicas still available, then the
closest to the GPUs chosen so far (scored as above), then the lowest index.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from nvhook.deviceplugin.model import Device, Resource
from oci._frozen import Frozen

__all__ = ["EXHAUSTIVE", "LEVELS", "Topology", "preferred"]

#: How two GPUs are linked, closest first (NVML's topology levels, NVLink before them).
LEVELS = {
    "same": 0,  # one GPU (MIG devices or replicas of it)
    "nvlink": 1,  # NVLink, directly or through NVSwitches
    "pcie-switch": 2,  # NVML SINGLE / MULTIPLE: behind one PCIe switch tree
    "host-bridge": 3,  # NVML HOSTBRIDGE
    "numa": 4,  # NVML NODE: one NUMA node (CPU socket)
    "system": 5,  # NVML SYSTEM: across sockets, or unknown
}
EXHAUSTIVE = 20_000


class Topology(Frozen):
    """Pairwise link levels and NUMA nodes of a host's GPUs, by NVML index."""

    numa: tuple[int | None, ...]
    links: tuple[tuple[int, ...], ...] = ()  # links[i][j]: LEVELS value; () = by paths
    paths: tuple[tuple[int, ...], ...] = ()  # paths[i][j]: LEVELS value, no NVLink; () = NUMA

    def level(self, a: int, b: int) -> int:
        """How ``a`` and ``b`` are linked: NVLink if they are, else their PCIe path."""
        if a != b and _has(self.links, a, b):
            return self.links[a][b]
        return self.path(a, b)

    def path(self, a: int, b: int) -> int:
        """How the PCIe path between ``a`` and ``b`` runs (never ``nvlink``)."""
        if a == b:
            return LEVELS["same"]
        if _has(self.paths, a, b):
            return self.paths[a][b]
        na = self.numa[a] if a < len(self.numa) else None
        nb = self.numa[b] if b < len(self.numa) else None
        return LEVELS["numa"] if na is not None and na == nb else LEVELS["system"]


def _has(matrix: tuple[tuple[int, ...], ...], a: int, b: int) -> bool:
    return a < len(matrix) and b < len(matrix[a])


def preferred(
    resource: Resource,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    topology: Topology,
) -> list[str]:
    """``size`` IDs from ``available`` including ``must_include`` (see the module docstring);
    fewer when not enough are available. IDs that are not the resource's are ignored."""
    must = [d for d in (resource.device(i) for i in must_include) if d is not None]
    pool = [
        d
        for d in (resource.device(i) for i in dict.fromkeys(available))
        if d is not None and d not in must
    ]
    need = max(0, size - len(must))
    if resource.replicas > 1:
        chosen = must + _spread(must, pool, need, topology)
    else:
        chosen = must + _closest(must, pool, need, topology)
    return [d.id for d in chosen[:size] if size > 0]


def _closeness(devices: Sequence[Device], topology: Topology) -> tuple[int, int, int, int]:
    """Worst and summed link levels over the pairs of ``devices``, then the same for paths."""
    pairs = [(a.gpu_index, b.gpu_index) for a, b in itertools.combinations(devices, 2)]
    links = [topology.level(a, b) for a, b in pairs]
    paths = [topology.path(a, b) for a, b in pairs]
    return max(links, default=0), sum(links), max(paths, default=0), sum(paths)


def _score(devices: Sequence[Device], topology: Topology) -> tuple[int, int, int, int, list[int]]:
    return *_closeness(devices, topology), sorted(d.gpu_index for d in devices)


def _closest(must: list[Device], pool: list[Device], need: int, topology: Topology) -> list[Device]:
    if need >= len(pool):
        return pool
    if need == 0:
        return []
    if math.comb(len(pool), need) <= EXHAUSTIVE:
        best = min(
            itertools.combinations(pool, need),
            key=lambda extra: (*_score([*must, *extra], topology), [d.id for d in extra]),
        )
        return sorted(best, key=lambda d: (d.gpu_index, d.id))
    chosen: list[Device] = []
    rest = list(pool)
    for _ in range(need):
        pick = min(rest, key=lambda d: (*_score([*must, *chosen, d], topology), d.id))
        chosen.append(pick)
        rest.remove(pick)
    return sorted(chosen, key=lambda d: (d.gpu_index, d.id))


def _spread(must: list[Device], pool: list[Device], need: int, topology: Topology) -> list[Device]:
    taken: dict[str, int] = {}
    for d in must:
        taken[d.gpu_uuid] = taken.get(d.gpu_uuid, 0) + 1
    rest = list(pool)
    chosen: list[Device] = []
    for _ in range(min(need, len(rest))):
        left: dict[str, int] = {}
        for d in rest:
            left[d.gpu_uuid] = left.get(d.gpu_uuid, 0) + 1
        pick = min(
            rest,
            key=lambda d: (
                taken.get(d.gpu_uuid, 0),
                -left[d.gpu_uuid],
                _closeness([*must, *chosen, d], topology),
                d.gpu_index,
                d.replica or 0,
                d.id,
            ),
        )
        chosen.append(pick)
        rest.remove(pick)
        taken[pick.gpu_uuid] = taken.get(pick.gpu_uuid, 0) + 1
    return chosen
