"""GetPreferredAllocation on hand-built topologies: NVLink island, PCIe switch, NUMA, index."""

from __future__ import annotations

from nvhook.deviceplugin.model import Device, Resource
from nvhook.deviceplugin.preferred import LEVELS, Topology, preferred

NV, SW, HB, NODE, SYS = (
    LEVELS[k] for k in ("nvlink", "pcie-switch", "host-bridge", "numa", "system")
)


def gpus(n: int, replicas: int = 1) -> Resource:
    if replicas == 1:
        return Resource(
            "nvidia.com/gpu", tuple(Device(f"G{i}", f"G{i}", f"G{i}", i) for i in range(n))
        )
    return Resource(
        "nvidia.com/gpu",
        tuple(
            Device(f"G{i}::{r}", f"G{i}", f"G{i}", i, replica=r)
            for i in range(n)
            for r in range(replicas)
        ),
        replicas=replicas,
    )


def links(groups: dict[int, list[list[int]]], n: int) -> tuple[tuple[int, ...], ...]:
    """Pairwise levels: for each level, the groups of GPUs linked at it (closest wins)."""
    out = [[SYS] * n for _ in range(n)]
    for level in sorted(groups, reverse=True):
        for group in groups[level]:
            for a in group:
                for b in group:
                    out[a][b] = level
    return tuple(tuple(row) for row in out)


def ids(n: int) -> list[str]:
    return [f"G{i}" for i in range(n)]


def test_two_numa_nodes_prefers_one_node_then_the_lowest_index() -> None:
    topo = Topology(numa=(0, 0, 0, 0, 1, 1, 1, 1))
    assert preferred(gpus(8), ids(8), [], 2, topo) == ["G0", "G1"]
    assert preferred(gpus(8), ids(8), ["G5"], 2, topo) == ["G5", "G4"]
    assert preferred(gpus(8), ["G0", "G4", "G5", "G6"], [], 3, topo) == ["G4", "G5", "G6"]


def test_nvlink_island_beats_pcie_switch_beats_numa() -> None:
    # 4 GPUs, one NUMA node; G0-G1 behind one PCIe switch, G2-G3 NVLinked
    topo = Topology(
        numa=(0, 0, 0, 0), links=links({NV: [[2, 3]], SW: [[0, 1]], NODE: [[0, 1, 2, 3]]}, 4)
    )
    assert preferred(gpus(4), ids(4), [], 2, topo) == ["G2", "G3"]
    assert preferred(gpus(4), ["G0", "G1", "G3"], [], 2, topo) == ["G0", "G1"]
    assert preferred(gpus(4), ids(4), ["G1"], 2, topo) == ["G1", "G0"]


def test_dgx_like_all_nvswitch_picks_lowest_indices_with_must_include() -> None:
    topo = Topology(numa=(3, 3, 1, 1, 7, 7, 5, 5), links=links({NV: [list(range(8))]}, 8))
    assert preferred(gpus(8), ids(8), ["G6"], 3, topo) == ["G6", "G0", "G1"]
    assert preferred(gpus(8), ids(8), [], 8, topo) == ids(8)
    assert preferred(gpus(8), ["G1", "G2"], [], 4, topo) == ["G1", "G2"]  # fewer available


def test_l40s_like_pairs_on_host_bridges() -> None:
    topo = Topology(numa=(0, 0, 1, 1), links=links({HB: [[0, 1], [2, 3]], NODE: []}, 4))
    assert preferred(gpus(4), ["G1", "G2", "G3"], [], 2, topo) == ["G2", "G3"]


def test_replicas_spread_across_gpus() -> None:
    topo = Topology(numa=(0, 0, 0))
    r = gpus(3, replicas=4)
    every = [d.id for d in r.devices]
    assert preferred(r, every, [], 4, topo) == ["G0::0", "G1::0", "G2::0", "G0::1"]
    fewer_left = [i for i in every if i not in ("G0::0", "G0::1", "G0::2")]
    assert preferred(r, fewer_left, ["G1::2"], 3, topo) == ["G1::2", "G2::0", "G0::3"]


def test_the_path_breaks_ties_within_one_nvlink_island() -> None:
    # 4 GPUs all NVLinked; by PCIe G0-G1 and G2-G3 share a switch, one NUMA node in all
    paths = links({SW: [[0, 1], [2, 3]], NODE: [[0, 1, 2, 3]]}, 4)
    topo = Topology(numa=(0, 0, 0, 0), links=links({NV: [[0, 1, 2, 3]]}, 4), paths=paths)
    assert topo.level(0, 2) == NV and topo.path(0, 2) == NODE and topo.path(1, 1) == 0
    assert preferred(gpus(4), ids(4), ["G3"], 2, topo) == ["G3", "G2"]
    assert preferred(gpus(4), ["G0", "G2", "G3"], [], 2, topo) == ["G2", "G3"]
    # without paths, the NUMA nodes stand in for them
    assert Topology(numa=(0, 1), links=links({NV: [[0, 1]]}, 2)).path(0, 1) == SYS


def test_replicas_of_equally_used_gpus_go_to_the_closest() -> None:
    topo = Topology(numa=(0, 0, 1, 1), paths=links({SW: [[0, 1], [2, 3]]}, 4))
    r = gpus(4, replicas=2)
    every = [d.id for d in r.devices]
    assert preferred(r, every, ["G2::0"], 2, topo) == ["G2::0", "G3::0"]
    # fewest chosen first: a second replica of any GPU only once every GPU has one (then
    # all are equally close and equally used: the lowest index)
    want = ["G2::0", "G3::0", "G0::0", "G1::0", "G0::1"]
    assert preferred(r, every, ["G2::0"], 5, topo) == want
