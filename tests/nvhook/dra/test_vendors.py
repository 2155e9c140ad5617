"""The DRA driver for other vendors (``nvhook dra-plugin --vendor``): each vendor's devices
under its own DRA driver's name and attributes (nvhook/dra/vendors.py cites them), on the
vendor mocks, through the API-server stand-in (which validates every slice against the
``kubernetes`` client's models and ``resource/v1/types.go``'s limits) and the kubelet
stand-in built from kubelet's real protos."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nvhook.dra.inventory import build_slices
from nvhook.dra.plugin import Publisher
from nvhook.dra.prepare import Preparer, host_edits, spec_file
from nvhook.dra.vendors import discover_vendor
from nvhook.mock.vendors import create
from nvhook.planner import Host
from tests.nvhook.dra.conftest import NODE
from tests.nvhook.dra.test_plugin import Daemon, pool_slice, wait_for, withdraw
from tests.support.kubeapi import KubeApiServer

AMD, INTEL, ASCEND = "gpu.amd.com", "gpu.intel.com", "npu.huawei.com"


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A vendor mock's root per profile (file nodes: no root needed), shared read-only."""
    made: dict[str, Path] = {}

    def get(profile: str) -> Path:
        if profile not in made:
            root = tmp_path_factory.mktemp(profile) / "root"
            made[profile] = create(profile, root, nodes="file").root
        return made[profile]

    return get


def attrs(device: dict[str, Any]) -> dict[str, Any]:
    """A published device's attributes as plain values."""
    return {k: next(iter(v.values())) for k, v in device.get("attributes", {}).items()}


def client(kubeapi: KubeApiServer) -> Any:
    """nvhook's API client of the stand-in (a kubeconfig beside the server's own files)."""
    import tempfile

    from nvhook.dra.kubeapi import connect

    with tempfile.TemporaryDirectory(prefix="dra-kubeconfig-") as tmp:
        return connect(str(kubeapi.kubeconfig(Path(tmp) / "kubeconfig")))


def publish(kubeapi: KubeApiServer, root: Path, vendor: str) -> list[dict[str, Any]]:
    """Publish ``vendor``'s devices of the mock at ``root``; the devices the API holds."""
    inventory = discover_vendor(Host(root=str(root)), vendor)
    assert Publisher(client(kubeapi), NODE).publish(inventory)
    assert kubeapi.pool_problems(inventory.driver, NODE) == []
    return [
        d
        for s in kubeapi.list("resourceslices")
        if s["spec"]["driver"] == inventory.driver
        for d in s["spec"].get("devices", [])
    ]


def test_mi300x_cpx_partitions_are_published_as_rocm_s_dra_driver_publishes_them(
    kubeapi: KubeApiServer, machine: Callable[[str], Path]
) -> None:
    devices = publish(kubeapi, machine("mi300x-8"), "amd")
    assert len(devices) == 64  # eight MI300X in CPX: eight partitions each
    first = next(d for d in devices if d["name"] == "gpu-1-128")
    assert attrs(first) == {
        "type": "amdgpu-partition",
        "parentPciAddr": "0000:05:00.0",
        "parentDeviceID": attrs(first)["parentDeviceID"],
        "cardIndex": 1,
        "renderIndex": 128,
        "family": "AI",
        "productName": "AMD_Instinct_MI300X",
        "driverVersion": "6.10.5",
        "driverSrcVersion": attrs(first)["driverSrcVersion"],
        "partitionProfile": "cpx_nps1",
        "resource.kubernetes.io/pcieRoot": "pci0000:05",
    }
    assert first["capacity"] == {
        "memory": {"value": "24Gi"},
        "computeUnits": {"value": "38"},
        "simdUnits": {"value": "152"},
    }
    # every partition of a GPU has its GPU's parentDeviceID (a matchAttribute keeps two
    # partitions on one GPU), eight GPUs eight values
    per_gpu = Counter(attrs(d)["parentDeviceID"] for d in devices)
    assert sorted(per_gpu.values()) == [8] * 8
    assert {d["name"] for d in devices} == {f"gpu-{1 + i}-{128 + i}" for i in range(64)}


def test_a_mi300x_in_spx_is_a_whole_gpu(
    kubeapi: KubeApiServer, machine: Callable[[str], Path]
) -> None:
    devices = [d for d in publish(kubeapi, machine("mixed-h100-mi300x"), "amd")]
    assert len(devices) == 2
    for d in devices:
        a = attrs(d)
        assert a["type"] == "amdgpu" and a["partitionProfile"].startswith("spx_")
        assert "pciAddr" in a and "deviceID" in a and "parentPciAddr" not in a
        assert d["capacity"]["memory"] == {"value": "192Gi"}


def test_max_1550_is_published_as_intel_s_resource_driver_publishes_it(
    kubeapi: KubeApiServer, machine: Callable[[str], Path]
) -> None:
    devices = publish(kubeapi, machine("max-1550"), "intel")
    assert [d["name"] for d in devices][:1] == ["0000-29-00-0-0x0bd5"]
    assert len(devices) == 4
    assert attrs(devices[0]) == {
        "model": "Max 1550",
        "family": "Data Center Max",
        "driver": "xe",
        "sriov": False,
        "type": "gpu",
        "pciId": "0x0bd5",
        "pciAddress": "0000:29:00.0",
        "health": "Unknown",
        "pciRoot": "29",
        "resource.kubernetes.io/pcieRoot": "pci0000:29",
        "resource.kubernetes.io/pciBusID": "0000:29:00.0",
    }
    assert devices[0]["capacity"] == {"memory": {"value": "128Gi"}, "millicores": {"value": "1k"}}


def test_ascend_910b_npus_are_published_under_huawei_s_driver_name(
    kubeapi: KubeApiServer, machine: Callable[[str], Path]
) -> None:
    devices = publish(kubeapi, machine("ascend-910b"), "ascend")
    assert [d["name"] for d in devices] == [f"ascend910-{n}" for n in range(8)]
    assert attrs(devices[3]) == {"deviceType": "Ascend910B", "physicId": 3}


def test_a_vendor_claim_spec_holds_cdi_generate_s_edits_and_only_that_driver_s_results(
    kubeapi: KubeApiServer, machine: Callable[[str], Path], tmp_path: Path
) -> None:
    from tests.nvhook.dra.conftest import allocated_claim

    host = Host(root=str(machine("mi300x-8")))
    inventory = discover_vendor(host, "amd")
    claim = allocated_claim("amd", ["gpu-10-137"], driver=AMD)
    # the claim also holds a result of NVIDIA's driver: not this driver's to prepare
    claim["status"]["allocation"]["devices"]["results"].append(
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0"}
    )
    stored = kubeapi.put("resourceclaims", claim)
    uid = stored["metadata"]["uid"]
    preparer = Preparer(
        node=NODE,
        api=client(kubeapi),
        state_dir=str(tmp_path / "state"),
        cdi_root=str(tmp_path / "cdi"),
        inventory=inventory,
        edits=host_edits(host, inventory),
    )
    os.makedirs(tmp_path / "state")
    from nvhook.dra.prepare import ClaimRef

    (result,) = preparer.prepare([ClaimRef("default", "amd", uid)]).values()
    assert result.error == ""
    assert [(d.device, d.cdi_ids) for d in result.devices] == [
        ("gpu-10-137", (f"k8s.gpu.amd.com/claim={uid}-gpu-10-137",))
    ]
    path = spec_file(str(tmp_path / "cdi"), uid, AMD)
    assert os.path.basename(path) == f"k8s.gpu.amd.com-claim_{uid}.json"
    spec = json.loads(Path(path).read_text())
    assert spec["kind"] == "k8s.gpu.amd.com/claim"
    (device,) = spec["devices"]
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == [
        "/dev/dri/card10",
        "/dev/dri/renderD137",
    ]  # amd.com/gpu=9's nodes, as `nvhook cdi generate --vendor amd` writes them
    assert [n["path"] for n in spec["containerEdits"]["deviceNodes"]] == ["/dev/kfd"]


def test_slices_of_two_drivers_on_one_node_are_two_pools(machine: Callable[[str], Path]) -> None:
    root = machine("mixed-h100-mi300x")
    amd = build_slices(discover_vendor(Host(root=str(root)), "amd"), NODE, 1)
    assert [s["metadata"]["name"] for s in amd] == [f"{NODE}-{AMD}-0"]
    assert {s["spec"]["driver"] for s in amd} == {AMD}


@pytest.fixture
def vendor_daemon(
    tmp_path: Path, kubeapi: KubeApiServer, sockets: Path, machine: Callable[[str], Path]
) -> Iterator[Callable[[str, str], Daemon]]:
    made: list[Daemon] = []

    def make(profile: str, vendor: str) -> Daemon:
        config = tmp_path / f"nvhook-{profile}.toml"
        config.write_text(f'[host]\nroot = "{machine(profile)}"\n')
        d = Daemon(tmp_path / vendor, kubeapi, config, sockets, vendor=vendor)
        made.append(d)
        return d

    for v in ("nvidia", "amd"):
        (tmp_path / v).mkdir()
    yield make
    for d in made:
        if d.proc is not None:
            d.stop(9)


@pytest.fixture
def sockets() -> Iterator[Path]:
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_mixed_node_runs_two_drivers_each_with_its_pool_socket_and_claims(
    vendor_daemon: Callable[[str, str], Daemon],
    kubeapi: KubeApiServer,
    add_claim: Callable[..., tuple[str, str, str]],
) -> None:
    nvidia, amd = (
        vendor_daemon("mixed-h100-mi300x", "nvidia"),
        vendor_daemon("mixed-h100-mi300x", "amd"),
    )
    amd.cdi = nvidia.cdi  # one CDI directory, as on a node
    k_amd = amd.start()
    assert (k_amd.info.name, Path(k_amd.info.endpoint)) == (AMD, amd.plugins / AMD / "dra.sock")
    assert (amd.registry / f"{AMD}-reg.sock").exists()
    claim = add_claim("mi300x", ["gpu-2-129"], driver=AMD)
    (dev,) = k_amd.prepare(claim).claims[claim[2]].devices
    assert list(dev.cdi_device_ids) == [f"k8s.gpu.amd.com/claim={claim[2]}-gpu-2-129"]
    k_nv = nvidia.start()  # NVIDIA's driver starts after: its sweep must leave AMD's spec
    assert k_nv.info.name == "gpu.nvidia.com"
    wait_for(
        lambda: (
            {s["spec"]["driver"] for s in kubeapi.list("resourceslices")} == {AMD, "gpu.nvidia.com"}
        ),
        "both pools",
    )
    for driver, count in ((AMD, 2), ("gpu.nvidia.com", 1)):
        assert kubeapi.pool_problems(driver, NODE) == []
        (s,) = [x for x in kubeapi.list("resourceslices") if x["spec"]["driver"] == driver]
        assert len(s["spec"]["devices"]) == count
    assert os.path.exists(spec_file(str(amd.cdi), claim[2], AMD))
    health = next(iter(k_amd.watch_health()))
    assert {(d.device.device_name, d.health) for d in health.devices} == {
        ("gpu-1-128", 0),
        ("gpu-2-129", 0),
    }  # UNKNOWN: nothing probes an AMD device
    assert k_amd.unprepare(claim).claims[claim[2]].error == ""
    assert not os.path.exists(spec_file(str(amd.cdi), claim[2], AMD))
    for k, d in ((k_amd, amd), (k_nv, nvidia)):
        k.close()
        assert d.stop() == 0


def test_the_amd_driver_refuses_to_run_beside_nvhook_s_amd_device_plugin(
    vendor_daemon: Callable[[str, str], Daemon],
) -> None:
    import subprocess
    import sys

    d = vendor_daemon("mi300x-8", "amd")
    (d.device_plugins / "nvhook-amd.com_gpu.sock").touch()
    (d.device_plugins / "nvhook-nvidia.com_gpu.sock").touch()  # NVIDIA's: not AMD's concern
    proc = subprocess.run(
        [sys.executable, "-m", "nvhook", "dra-plugin", "--vendor", "amd", "--node-name", NODE,
         "--kubeconfig", str(d.kubeconfig), "--plugins-dir", str(d.plugins),
         "--registry-dir", str(d.registry), "--device-plugin-dir", str(d.device_plugins)],
        env={**os.environ, "NVHOOK_CONFIG": str(d.config)}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()
    assert "nvhook-amd.com_gpu.sock: a device plugin of AMD's devices serves this node" in line


def test_an_amd_gpu_without_partitions_is_a_whole_gpu_and_absent_facts_are_left_out() -> None:
    """An MI210 (no partition files) is published as a GPU, where ROCm's driver skips it; an
    in-tree amdgpu (no module version) and a gfx11 part (no libdrm family name ROCm's
    driver knows) leave those attributes out rather than publish "" as a version."""
    from nvhook.dra.vendors import build_vendor_devices
    from nvhook.vendors.model import Accelerator

    common: dict[str, Any] = {
        "vendor": "amd", "kind": "amd.com/gpu", "driver": "amdgpu", "product": "AMD GPU 7448",
        "memory_mib": 49152, "compute_units": 96, "simd_units": 192, "unique_id": "0x1f",
    }  # fmt: skip
    mi210 = Accelerator(
        name="0", index=0, bus_id="0000:03:00.0", family="gfx90a",
        nodes=("/dev/dri/card0", "/dev/dri/renderD128"), **common,
    )  # fmt: skip
    rdna3 = Accelerator(
        name="1", index=1, bus_id="0000:83:00.0", family="gfx1100",
        nodes=("/dev/dri/card1", "/dev/dri/renderD129"), **common,
    )  # fmt: skip
    inventory = build_vendor_devices("amd", [mi210, rdna3])
    assert inventory.driver == AMD
    one, two = (d.api() for d in inventory.devices)
    assert attrs(one) == {
        "type": "amdgpu",
        "pciAddr": "0000:03:00.0",
        "deviceID": "31",
        "cardIndex": 0,
        "renderIndex": 128,
        "family": "AI",
        "productName": "AMD_GPU_7448",
    }
    assert one["capacity"]["memory"] == {"value": "48Gi"}
    assert "family" not in attrs(two) and two["name"] == "gpu-1-129"


def test_withdraw_of_one_vendor_leaves_the_other_driver_s_pool(
    kubeapi: KubeApiServer, machine: Callable[[str], Path], tmp_path: Path
) -> None:

    root = machine("mixed-h100-mi300x")
    api = client(kubeapi)
    assert Publisher(api, NODE).publish(discover_vendor(Host(root=str(root)), "amd"))
    kubeapi.put("resourceslices", pool_slice(NODE, "gpu.nvidia.com"))
    proc = withdraw(kubeapi.kubeconfig(tmp_path / "kubeconfig"), "--vendor", "amd")
    assert proc.returncode == 0, proc.stderr
    assert f"deleted 1 ResourceSlices of {AMD} on node {NODE}" in proc.stdout
    assert [s["spec"]["driver"] for s in kubeapi.list("resourceslices")] == ["gpu.nvidia.com"]


def test_a_gpu_gone_from_amdgpu_republishes_the_amd_pool(
    vendor_daemon: Callable[[str, str], Daemon],
    kubeapi: KubeApiServer,
    tmp_path: Path,
    machine: Callable[[str], Path],
) -> None:
    """The rescan reads the vendor's discovery again: a GPU unbound from amdgpu leaves the
    pool at the next generation, the other stays."""
    root = create("mixed-h100-mi300x", tmp_path / "mixed", nodes="file").root  # its own
    d = vendor_daemon("mixed-h100-mi300x", "amd")
    d.config.write_text(f'[host]\nroot = "{root}"\n')
    kubelet = d.start()

    def devices() -> tuple[int, list[str]]:
        (s,) = [x for x in kubeapi.list("resourceslices") if x["spec"]["driver"] == AMD]
        return s["spec"]["pool"]["generation"], [x["name"] for x in s["spec"]["devices"]]

    wait_for(lambda: [x for x in kubeapi.list("resourceslices")], "the AMD pool")
    generation, names = devices()
    assert len(names) == 2
    (root / "sys/bus/pci/drivers/amdgpu/0000:a6:00.0").unlink()  # unbound from amdgpu
    wait_for(lambda: len(devices()[1]) == 1, "the pool without the unbound GPU")
    assert devices()[0] == generation + 1
    assert kubeapi.pool_problems(AMD, NODE) == []
    kubelet.close()
    assert d.stop() == 0
