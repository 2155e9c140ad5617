"""Other vendors' device health on their mocks: what each vendor's own plugin checks (sysfs and
/dev), per device, with the reason naming what is gone."""

from __future__ import annotations

import shutil
from pathlib import Path

from nvhook.mock.vendors import create
from nvhook.vendors.health import unhealthy
from nvhook.vendors.model import Accelerator, Host
from nvhook.vendors.registry import discover_all


def _devices(host: Host) -> list[Accelerator]:
    return [d for ds in discover_all(host).values() for d in ds]


def test_amd_device_health_follows_its_nodes_and_the_kfd_topology(tmp_path: Path) -> None:
    root = create("mi300x-8", tmp_path / "amd", nodes="file").root
    host = Host(str(root), str(root))
    names = _devices(host)
    assert len(names) == 64 and unhealthy(host, names) == {}
    (root / "dev/dri/renderD137").unlink()  # device 9's render node
    # the KFD topology drops partition 2 of GPU 0 (device 2, topology node 3), as ROCm's
    # simpleHealthCheck reads it: a GPU node no more (and the devices after it, discovered
    # again, shift down one index: matched by their nodes, they stay healthy)
    shutil.rmtree(root / "sys/class/kfd/kfd/topology/nodes/3")
    assert unhealthy(host, names) == {
        "amd.com/gpu=9": "its device node /dev/dri/renderD137 is gone",
        "amd.com/gpu=2": "no longer found: amdgpu's sysfs or the KFD topology no longer lists it",
    }
    (root / "dev/kfd").unlink()
    found = unhealthy(host, names)
    assert len(found) == 64 and found["amd.com/gpu=0"] == "/dev/kfd is gone"


def test_ascend_and_intel_health(tmp_path: Path) -> None:
    root = create("ascend-910b", tmp_path / "npu", nodes="file").root
    host = Host(str(root), str(root))
    names = _devices(host)
    (root / "dev/davinci3").unlink()
    assert unhealthy(host, names) == {"huawei.com/npu=3": "its device node /dev/davinci3 is gone"}
    (root / "dev/davinci_manager").unlink()
    assert unhealthy(host, names)["huawei.com/npu=0"] == "/dev/davinci_manager is gone"
    root = create("max-1550", tmp_path / "xe", nodes="file").root
    host = Host(str(root), str(root))
    names = _devices(host)
    assert unhealthy(host, names) == {}
    render = sorted((root / "dev/dri").glob("renderD*"))[0]
    render.unlink()
    [(name, why)] = unhealthy(host, names).items()
    assert name.startswith("intel.com/gpu=") and why.endswith(f"/dev/dri/{render.name} is gone")
