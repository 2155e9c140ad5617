"""Other vendors' devices through the device plugin, against the kubelet stand-in
(:class:`nvhook.deviceplugin.server.Kubelet`, built from kubelet's real v1beta1 proto):
advertised under their own plugins' resource names, allocated as nvhook's requests read them."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvhook.deviceplugin.errors import StrategyError
from nvhook.deviceplugin.model import PluginConfig
from nvhook.deviceplugin.plugin import DevicePlugin
from nvhook.deviceplugin.server import Kubelet, create_container_config
from nvhook.deviceplugin.vendors import vendor_resources
from nvhook.mock.vendors import create
from nvhook.planner import Host
from nvhook.vendors.model import Host as VendorHost
from tests.nvhook.deviceplugin.test_server import seen_by_plugin

Run = Callable[[str, PluginConfig], tuple[DevicePlugin, Kubelet]]


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    top = tmp_path_factory.mktemp("dpv")
    names = ("mi300x-8", "max-1550", "ascend-910b", "mixed-h100-mi300x")
    return {n: create(n, top / n, nodes="file").root for n in names}


def test_resource_names_are_the_vendors_plugins(roots: dict[str, Path]) -> None:
    def names(root: Path) -> dict[str, int]:
        found = vendor_resources(VendorHost(str(root), str(root)))
        return {r.name: len(r.devices) for r, _ in found}

    assert names(roots["mi300x-8"]) == {"amd.com/gpu": 64}
    assert names(roots["max-1550"]) == {"gpu.intel.com/xe": 4}
    assert names(roots["ascend-910b"]) == {"huawei.com/Ascend910": 8}
    [(ascend, _)] = vendor_resources(
        VendorHost(str(roots["ascend-910b"]), str(roots["ascend-910b"]))
    )
    # Ascend's plugin lists a 910B as Ascend910-<phy id> (mind-cluster assemblePhyDevices)
    assert [d.id for d in ascend.devices][:2] == ["Ascend910-0", "Ascend910-1"]


def test_amd_mixed_naming_is_rocms_partition_names(roots: dict[str, Path], tmp_path: Path) -> None:
    # ROCm/k8s-device-plugin ed76468 main.go getResourceList: <compute>_<memory>, lowercased
    def names(root: Path, naming: str) -> dict[str, int]:
        found = vendor_resources(VendorHost(str(root), str(root)), naming)
        return {r.name: len(r.devices) for r, _ in found}

    assert names(roots["mi300x-8"], "mixed") == {"amd.com/cpx_nps1": 64}
    assert names(roots["mixed-h100-mi300x"], "mixed") == {"amd.com/spx_nps1": 2}
    assert names(roots["mi300x-8"], "single") == {"amd.com/gpu": 64}
    # one GPU re-partitioned: two kinds, which 'single' cannot name
    root = create("mixed-h100-mi300x", tmp_path / "m", nodes="file").root
    gpu = root / "sys/module/amdgpu/drivers/pci:amdgpu/0000:a6:00.0"
    (gpu / "current_compute_partition").write_text("DPX\n")
    assert names(root, "mixed") == {"amd.com/spx_nps1": 1, "amd.com/dpx_nps1": 1}
    with pytest.raises(StrategyError, match=r"dpx_nps1 \(GPU 0000:a6:00.0\).*mixed"):
        names(root, "single")


@pytest.fixture
def run(roots: dict[str, Path], tmp_path: Path) -> Iterator[Run]:
    directory = Path("/tmp") / f"nvh-dpv-{tmp_path.name[-12:]}"  # unix sockets: short paths
    directory.mkdir()
    stops: list[tuple[threading.Event, threading.Thread, Kubelet]] = []

    def start(name: str, config: PluginConfig) -> tuple[DevicePlugin, Kubelet]:
        kubelet = Kubelet(directory)
        kubelet.start()
        stop = threading.Event()
        plugin = DevicePlugin(
            Host(root=str(roots[name])), config, str(directory), health_interval=0.2
        )
        errors: list[BaseException] = []

        def target() -> None:
            try:
                plugin.run(stop)
            except BaseException as e:
                errors.append(e)

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        stops.append((stop, thread, kubelet))
        assert plugin.ready.wait(20), errors
        return plugin, kubelet

    try:
        yield start
    finally:
        for stop, thread, kubelet in stops:
            stop.set()
            thread.join(10)
            kubelet.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_an_amd_node_without_nvidia_serves_amd_com_gpu(run: Run) -> None:
    _, kubelet = run("mi300x-8", PluginConfig())
    [request] = kubelet.wait_registered(1)
    assert request.resource_name == "amd.com/gpu"
    client = kubelet.client(request)
    client.watch()
    listed = client.wait_for(lambda devices: len(devices) == 64)
    assert listed[9].ID == "9" and {d.health for d in listed} == {"Healthy"}
    response = client.allocate(["9", "10"])
    assert create_container_config(response.container_responses[0])["envs"] == {
        "AMD_VISIBLE_DEVICES": "9,10"
    }
    client.close()


def test_amd_mixed_naming_through_kubelet(run: Run) -> None:
    _, kubelet = run("mi300x-8", PluginConfig(amd_resource_naming="mixed"))
    [request] = kubelet.wait_registered(1)
    assert request.resource_name == "amd.com/cpx_nps1"
    client = kubelet.client(request)
    got = create_container_config(client.allocate(["17"]).container_responses[0])
    assert got["envs"] == {"AMD_VISIBLE_DEVICES": "17"}
    client.close()


def test_a_mixed_node_serves_both_and_cdi_names_for_the_engine(run: Run) -> None:
    config = PluginConfig(device_list_strategies=("envvar", "cdi-cri"))
    _, kubelet = run("mixed-h100-mi300x", config)
    requests = kubelet.wait_registered(2)
    assert sorted(r.resource_name for r in requests) == ["amd.com/gpu", "nvidia.com/gpu"]
    amd = kubelet.client(next(r for r in requests if r.resource_name == "amd.com/gpu"))
    got = create_container_config(amd.allocate(["1"]).container_responses[0])
    assert got["envs"] == {"AMD_VISIBLE_DEVICES": "1"}
    assert got["cdi_devices"] == ["amd.com/gpu=1"]
    amd.close()


def test_ascend_is_allocated_by_its_plugins_ids(run: Run) -> None:
    _, kubelet = run("ascend-910b", PluginConfig())
    [request] = kubelet.wait_registered(1)
    assert request.resource_name == "huawei.com/Ascend910"
    client = kubelet.client(request)
    got = create_container_config(
        client.allocate(["Ascend910-2", "Ascend910-5"]).container_responses[0]
    )
    assert got["envs"] == {"ASCEND_VISIBLE_DEVICES": "2,5"}  # what its plugin sets too
    client.close()


def test_intel_has_no_variable_so_it_gets_the_cdi_annotation(run: Run) -> None:
    _, kubelet = run("max-1550", PluginConfig())
    [request] = kubelet.wait_registered(1)
    assert request.resource_name == "gpu.intel.com/xe"
    client = kubelet.client(request)
    got = create_container_config(client.allocate(["0000-29-00-0-0x0bd5"]).container_responses[0])
    assert got["envs"] == {}
    [(key, value)] = got["annotations"].items()
    assert key.startswith("cdi.k8s.io/nvhook-device-plugin_")
    assert value == "intel.com/gpu=0000-29-00-0-0x0bd5"
    client.close()


def test_amd_naming_flag_reaches_the_plugin(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runs = [[], ["--amd-resource-naming", "mixed"], ["--resource-naming-strategy=single"]]
    seen = seen_by_plugin(monkeypatch, tmp_path, lambda p: p.config.amd_resource_naming, runs)
    assert seen == ["single", "mixed", "single"]


def test_amd_health_reaches_list_and_watch_and_doctor(
    run: Run, roots: dict[str, Path], tmp_path: Path
) -> None:
    """A partition's render node gone: ListAndWatch lists it Unhealthy (the others stay
    Healthy), the health state file names it, and ``nvhook doctor``'s check fails on it."""
    from nvhook.deviceplugin.xid import XidPolicy
    from nvhook.tools.doctor.base import Options
    from nvhook.tools.doctor.gpuhealth import check_gpu_health

    roots["mi300x-8-health"] = create("mi300x-8", tmp_path / "amd", nodes="file").root
    state = tmp_path / "health.json"
    _, kubelet = run("mi300x-8-health", PluginConfig(health=XidPolicy(state_file=str(state))))
    [request] = kubelet.wait_registered(1)
    client = kubelet.client(request)
    client.watch()
    client.wait_for(lambda devices: len(devices) == 64)
    (roots["mi300x-8-health"] / "dev/dri/renderD137").unlink()
    listed = client.wait_for(lambda devices: devices[9].health == "Unhealthy")
    assert [d.ID for d in listed if d.health != "Healthy"] == ["9"]
    client.close()
    [check] = check_gpu_health(Options(root="/", health_state_file=str(state)))
    assert check.status == "fail"
    assert check.message == (
        "amd.com/gpu=9 is unhealthy for the device plugin: its device node /dev/dri/renderD137 "
        "is gone"
    )
