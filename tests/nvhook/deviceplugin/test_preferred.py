"""GetPreferredAllocation on hand-built topologies (NVLink island, PCIe switch, NUMA, index),
and golden on the mock machines, with the topology the plugin reads from the fake NVML.

Each golden case under ``tests/data/preferred/<case>/`` is data: ``case.toml`` (the mock
``profile``, ``replicas`` when ``nvidia.com/gpu`` is time-sliced, and ``[[request]]`` tables
of ``size``, ``available`` (``"all"`` or device names) and ``must_include``, each with a
``why`` that derives the choice from the profile) and ``expected``: the topology as read
(levels: X same GPU, NV NVLink, SW one PCIe switch, HB host bridge, NODE one NUMA node, SYS
across), then one line per request. A device is named by its GPU's NVML index (``2``), a
replica as ``2::1``. Review ``expected`` by eye; ``pytest --update-golden`` rewrites it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvhook.deviceplugin.model import Device, PluginConfig, Resource, TimeSlicedResource
from nvhook.deviceplugin.plugin import DevicePlugin
from nvhook.deviceplugin.preferred import LEVELS, Topology, preferred
from nvhook.planner import Host

DATA = Path(__file__).parents[2] / "data" / "preferred"
CASES = sorted(p.name for p in DATA.iterdir() if (p / "case.toml").is_file())
CODES = {0: "X", 1: "NV", 2: "SW", 3: "HB", 4: "NODE", 5: "SYS"}

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


def test_the_worst_pair_counts_before_the_sum() -> None:
    # G0 NVLinked to G1 and to G2, which are SYS to each other; G0, G3, G4 on host bridges
    topo = Topology(numa=(None,) * 5, links=links({NV: [[0, 1], [0, 2]], HB: [[0, 3, 4]]}, 5))
    # {G0, G1, G2}: NV NV SYS (worst SYS, sum 7); {G0, G3, G4}: HB HB HB (worst HB, sum 9)
    assert preferred(gpus(5), ids(5), ["G0"], 3, topo) == ["G0", "G3", "G4"]


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


# --- golden, on the mock machines -------------------------------------------------------------


def test_the_cases_cover_nvswitch_pcie_switches_numa_and_replicas() -> None:
    assert CASES == ["dgx-a100", "gb200-imex", "l40s-x4", "l40s-x4-replicas"]


def _name(d: Device) -> str:
    return str(d.gpu_index) if d.replica is None else f"{d.gpu_index}::{d.replica}"


def _matrix(title: str, level: Callable[[int, int], int], n: int) -> list[str]:
    rows = [f"{title:<6}" + "".join(f"{j:>6}" for j in range(n))]
    rows += [f"{i:<6}" + "".join(f"{CODES[level(i, j)]:>6}" for j in range(n)) for i in range(n)]
    return rows


def _request_line(request: dict[str, Any], got: list[str]) -> str:
    available = request["available"]
    of = "all" if available == "all" else "[" + " ".join(str(a) for a in available) + "]"
    must = " ".join(str(m) for m in request.get("must_include", []))
    line = f"size {request['size']} of {of}" + (f" must [{must}]" if must else "")
    return f"{line} -> {' '.join(got)}"


@pytest.mark.parametrize("case_name", CASES)
def test_golden(
    case_name: str, mock_machine: Callable[..., Path], request: pytest.FixtureRequest
) -> None:
    case_dir = DATA / case_name
    case = tomllib.loads((case_dir / "case.toml").read_text())
    replicas = case.get("replicas", 1)
    config = PluginConfig(
        time_slicing=(TimeSlicedResource("nvidia.com/gpu", replicas),) if replicas > 1 else ()
    )
    lines: list[str] = []
    plugin = DevicePlugin(Host(root=str(mock_machine(case["profile"]))), config, log=lines.append)
    resources, gpus, topology = plugin.discover()
    assert lines == []  # the topology came from NVML: no warning
    [resource] = [r for r in resources if r.name == "nvidia.com/gpu"]
    by_name = {_name(d): d.id for d in resource.devices}
    name_of = {d.id: _name(d) for d in resource.devices}
    n = len(gpus)
    out = [*_matrix("links", topology.level, n), *_matrix("paths", topology.path, n)]
    out.append("numa  " + "".join(f"{'?' if x is None else x:>6}" for x in topology.numa))
    for r in case["request"]:
        available = (
            [d.id for d in resource.devices]
            if r["available"] == "all"
            else [by_name[str(a)] for a in r["available"]]
        )
        must = [by_name[str(m)] for m in r.get("must_include", [])]
        got = preferred(resource, available, must, r["size"], topology)
        out.append(_request_line(r, [name_of[i] for i in got]))
    text = "\n".join(out) + "\n"
    if request.config.getoption("--update-golden"):
        (case_dir / "expected").write_text(text)
    assert text == (case_dir / "expected").read_text()
