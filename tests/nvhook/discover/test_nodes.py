"""Device nodes: features whose nodes come from the host's /dev (GDS, MOFED, GDRCopy)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.discover.nodes import feature_nodes
from nvhook.planner import Host, plan
from nvhook.requests.parse import parse_requests
from nvhook.requests.policy import Policy


def _mknod(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o20666, os.makedev(major, minor))


@pytest.mark.root
def test_enabled_features_get_the_nodes_the_host_has(
    make_mock_machine: Callable[..., Path],
) -> None:
    root = make_mock_machine("h100-pcie")
    _mknod(root / "dev/nvidia-fs0", 240, 0)
    _mknod(root / "dev/nvidia-fs1", 240, 1)
    _mknod(root / "dev/gdrdrv", 241, 0)
    _mknod(root / "dev/infiniband/uverbs0", 231, 192)
    _mknod(root / "dev/infiniband/rdma_cm", 10, 58)
    (root / "dev/infiniband/not-a-node").write_text("")
    spec = {
        "process": {
            "env": [
                "NVIDIA_VISIBLE_DEVICES=0",
                "NVIDIA_GDS=enabled",
                "NVIDIA_MOFED=enabled",
                "NVIDIA_DRIVER_CAPABILITIES=utility",
            ]
        }
    }
    edits = plan(parse_requests(spec, Policy()), Host(root=str(root))).edits
    found = {(n.path, n.major, n.minor) for n in edits.device_nodes}
    assert {
        ("/dev/nvidia-fs0", 240, 0),
        ("/dev/nvidia-fs1", 240, 1),
        ("/dev/infiniband/rdma_cm", 10, 58),
        ("/dev/infiniband/uverbs0", 231, 192),
    } <= found
    assert not any("gdrdrv" in p or "not-a-node" in p for p, _, _ in found)  # GDRCopy not asked


def test_a_feature_the_host_lacks_adds_nothing(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    assert feature_nodes(["gds", "mofed", "gdrcopy"], dev_root=str(tmp_path)).device_nodes == ()


def test_dri_links_follow_the_bus_id_and_stay_in_dev_dri(
    make_mock_machine: Callable[..., Path],
) -> None:
    """L40S x4: GPU 0 is bus 01:00.0 whose nodes are card2/renderD129 (not card0: the BMC's);
    a host link written absolute still gives a relative ``../<node>`` in the container."""
    from nvhook.devices.gpus import from_procfs, resolve
    from nvhook.devices.procfs import read_driver
    from nvhook.discover.nodes import dri_links
    from nvhook.errors import DriverError
    from nvhook.requests.ids import Devices, Index

    root = make_mock_machine("l40s-x4")
    gpus = from_procfs(read_driver(str(root)))
    selected = resolve(Devices((Index(0),)), gpus)
    by_path = root / "dev/dri/by-path"
    (by_path / "pci-0000:01:00.0-render").unlink()
    (by_path / "pci-0000:01:00.0-render").symlink_to("/dev/dri/renderD129")
    assert dri_links(selected, gpus, dev_root=str(root)) == (
        ("../card2", "/dev/dri/by-path/pci-0000:01:00.0-card"),
        ("../renderD129", "/dev/dri/by-path/pci-0000:01:00.0-render"),
    )
    (by_path / "pci-0000:01:00.0-card").unlink()
    assert dri_links(selected, gpus, dev_root=str(root)) == (
        ("../renderD129", "/dev/dri/by-path/pci-0000:01:00.0-render"),
    )
    (by_path / "pci-0000:01:00.0-card").symlink_to("../fb0")
    with pytest.raises(DriverError, match=r"pci-0000:01:00.0-card: points to '\.\./fb0'"):
        dri_links(selected, gpus, dev_root=str(root))
