"""Each vendor's discovery over its mock machine, and the edits it gives (jit mode)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from nvhook.errors import UnknownDeviceError
from nvhook.mock.devnodes import VIDEO_GID
from nvhook.mock.vendors import ASCEND_GID, RENDER_GID, create, list_vendor_profiles
from nvhook.requests.vendors import VENDOR_ENV, VENDOR_KINDS
from nvhook.vendors import amd, ascend, intel
from nvhook.vendors.model import Host
from nvhook.vendors.registry import VENDORS, discover_all, resolve

HOOK = "/usr/bin/nvhook-hook"


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Host]:
    top = tmp_path_factory.mktemp("vendors")
    found = {}
    for name in list_vendor_profiles():
        root = create(name, top / name, nodes="file").root
        found[name] = Host(str(root), str(root))
    return found


def test_the_tables_agree() -> None:
    assert tuple(v.kind for v in VENDORS) == VENDOR_KINDS
    assert {v.env: v.kind for v in VENDORS if v.env} == VENDOR_ENV


def test_amd_cpx_partitions_are_devices_in_amd_ctk_order(machines: dict[str, Host]) -> None:
    gpus = amd.discover(machines["mi300x-8"])
    assert len(gpus) == 64  # 8 GPUs x 8 CPX partitions
    assert [g.name for g in gpus] == [str(i) for i in range(64)]
    first, ninth = gpus[0], gpus[8]
    assert first.nodes == ("/dev/dri/card1", "/dev/dri/renderD128")
    assert first.bus_id == "0000:05:00.0" and ninth.bus_id == "0000:26:00.0"
    assert {g.bus_id for g in gpus[:8]} == {"0000:05:00.0"}
    assert [g.nodes[1] for g in gpus[:8]] == [f"/dev/dri/renderD{128 + i}" for i in range(8)]
    assert first.partition == "cpx_nps1" and gpus[7].partition == "cpx_nps1"
    assert first.product == "AMD Instinct MI300X" and first.family == "gfx942"
    assert (first.memory_mib, first.compute_units) == (24576, 38)


def test_amd_render_nodes_outside_the_kfd_topology_are_not_devices(tmp_path: Path) -> None:
    root = create("mixed-h100-mi300x", tmp_path / "m", nodes="file").root
    shutil.rmtree(root / "sys/class/kfd/kfd/topology/nodes/2")  # the second GPU's node
    gpus = amd.discover(Host(str(root), str(root)))
    assert [g.bus_id for g in gpus] == ["0000:85:00.0"]


def test_intel_cards_with_links_and_resource_driver_names(machines: dict[str, Host]) -> None:
    gpus = intel.discover(machines["max-1550"])
    assert [g.name for g in gpus][:2] == ["0000-29-00-0-0x0bd5", "0000-3a-00-0-0x0bd5"]
    assert gpus[0].driver == "xe" and gpus[0].memory_mib == 131072
    assert gpus[0].nodes == ("/dev/dri/card0", "/dev/dri/renderD128")
    assert gpus[0].links == (
        ("../card0", "/dev/dri/by-path/pci-0000:29:00.0-card"),
        ("../renderD128", "/dev/dri/by-path/pci-0000:29:00.0-render"),
    )


def test_intel_skips_a_function_with_virtual_functions(tmp_path: Path) -> None:
    root = create("max-1550", tmp_path / "m", nodes="file").root
    (root / "sys/devices/pci0000:29/0000:29:00.0/sriov_numvfs").write_text("4\n")
    buses = [g.bus_id for g in intel.discover(Host(str(root), str(root)))]
    assert buses == ["0000:3a:00.0", "0000:9a:00.0", "0000:ca:00.0"]


def test_ascend_npus_manager_nodes_and_driver_trees(machines: dict[str, Host]) -> None:
    host = machines["ascend-910b"]
    npus = ascend.discover(host)
    assert [n.name for n in npus] == [str(i) for i in range(8)]
    assert npus[3].nodes == ("/dev/davinci3",) and npus[0].product == "Ascend 910B3"
    assert ascend.VENDOR.shared_nodes(host) == ascend.MANAGER_NODES
    assert ascend.VENDOR.mounts(host) == ascend.DRIVER_TREES


def test_a_mixed_node_has_only_its_vendors(machines: dict[str, Host]) -> None:
    assert set(discover_all(machines["mixed-h100-mi300x"])) == {"amd"}
    assert discover_all(Host("/nonexistent", "/nonexistent")) == {}


def test_resolve_amd_gives_the_nodes_kfd_and_the_render_group(machines: dict[str, Host]) -> None:
    host = machines["mi300x-8"]
    edits = resolve(("amd.com/gpu=9",), host, hook_path=HOOK)
    paths = [n.path for n in edits.device_nodes]
    assert paths == ["/dev/dri/card10", "/dev/dri/renderD137", "/dev/kfd"]
    assert edits.device_nodes[0].host_path == os.path.join(host.dev_root, "dev/dri/card10")
    assert edits.device_nodes[2].file_mode == 0o660
    if os.geteuid() == 0:  # the mock's groups are given only where it runs as root
        assert edits.additional_gids == tuple(sorted({VIDEO_GID, RENDER_GID}))
    assert not edits.hooks and not edits.mounts


def test_resolve_amd_unique_id_is_every_partition(machines: dict[str, Host]) -> None:
    gpus = amd.discover(machines["mi300x-8"])
    edits = resolve((f"amd.com/gpu={gpus[8].unique_id}",), machines["mi300x-8"], hook_path=HOOK)
    renders = [n.path for n in edits.device_nodes if "renderD" in n.path]
    assert renders == [f"/dev/dri/renderD{136 + i}" for i in range(8)]


def test_resolve_ascend_adds_manager_nodes_and_driver_mounts(machines: dict[str, Host]) -> None:
    host = machines["ascend-910b"]
    edits = resolve(("huawei.com/npu=1", "huawei.com/npu=5"), host, hook_path=HOOK)
    paths = [n.path for n in edits.device_nodes]
    assert paths == ["/dev/davinci1", "/dev/davinci5", *ascend.MANAGER_NODES]
    assert [m.container_path for m in edits.mounts] == list(ascend.DRIVER_TREES)
    assert all("ro" in m.options for m in edits.mounts)
    if os.geteuid() == 0:
        assert edits.additional_gids == (ASCEND_GID,)


def test_resolve_intel_makes_the_by_path_links_in_one_hook(machines: dict[str, Host]) -> None:
    host = machines["max-1550"]
    names = ("intel.com/gpu=0000-29-00-0-0x0bd5", "intel.com/gpu=0000-3a-00-0-0x0bd5")
    edits = resolve(names, host, hook_path=HOOK)
    assert len(edits.hooks) == 1
    args = edits.hooks[0].args
    assert args.count("--device-link") == 4
    assert "../card0::/dev/dri/by-path/pci-0000:29:00.0-card" in args


def test_resolve_names_what_the_host_has(machines: dict[str, Host]) -> None:
    with pytest.raises(UnknownDeviceError, match=r"amd.com/gpu=64: no such amd device.*0, 1"):
        resolve(("amd.com/gpu=64",), machines["mi300x-8"], hook_path=HOOK)
    with pytest.raises(UnknownDeviceError, match="no such ascend device"):
        resolve(("huawei.com/npu=0",), machines["mi300x-8"], hook_path=HOOK)
