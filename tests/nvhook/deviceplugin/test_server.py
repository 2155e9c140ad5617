"""The plugin against a kubelet stand-in (:class:`nvhook.deviceplugin.server.Kubelet`), on a
dgx-a100 mock of its own: registration, the device list, Allocate for every strategy,
preferred allocation, health transitions (the fake NVML's fault knob, a GPU gone from /proc),
kubelet restarts, stop."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from nvhook.deviceplugin.model import PluginConfig
from nvhook.deviceplugin.plugin import DevicePlugin
from nvhook.deviceplugin.server import Kubelet, PluginClient
from nvhook.mock import load_profile
from nvhook.planner import Host

DGX = load_profile("dgx-a100")
UUIDS = [g.uuid for g in DGX.gpus]
MIG_3G = DGX.gpus[0].mig_devices[0].uuid
EVERY = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")


@pytest.fixture(scope="module")
def dgx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dgx-a100 mock these tests may change (and put back)."""
    from nvhook.mock import create

    root = tmp_path_factory.mktemp("dp-dgx") / "root"
    create("dgx-a100", root, nodes="file")
    return root


class Running:
    def __init__(
        self,
        plugin: DevicePlugin,
        kubelet: Kubelet,
        thread: threading.Thread,
        stop: threading.Event,
    ) -> None:
        self.plugin, self.kubelet, self.thread, self.stop_event = plugin, kubelet, thread, stop
        self.lines: list[str] = []

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(10)
        assert not self.thread.is_alive()

    def client(self, resource: str) -> PluginClient:
        request = next(r for r in self.kubelet.requests if r.resource_name == resource)
        return self.kubelet.client(request)


@pytest.fixture
def run_plugin(dgx: Path, tmp_path: Path) -> Iterator[Callable[[PluginConfig], Running]]:
    started: list[Running] = []
    directory = Path("/tmp") / f"nvh-dp-{tmp_path.name[-12:]}"  # unix sockets: short paths
    directory.mkdir()

    def start(config: PluginConfig) -> Running:
        stop = threading.Event()
        kubelet = Kubelet(directory)
        kubelet.start()
        lines: list[str] = []
        plugin = DevicePlugin(
            Host(root=str(dgx)), config, str(directory), health_interval=0.2, log=lines.append
        )
        errors: list[BaseException] = []

        def target() -> None:
            try:
                plugin.run(stop)
            except BaseException as e:  # shown by the test that waits for readiness
                errors.append(e)

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        assert plugin.ready.wait(20) or not errors, errors
        assert not errors, errors
        running = Running(plugin, kubelet, thread, stop)
        running.lines = lines
        started.append(running)
        return running

    try:
        yield start
    finally:
        for r in started:
            r.stop()
            r.kubelet.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_registers_one_server_per_resource_and_lists_devices(
    run_plugin: Callable[[PluginConfig], Running],
) -> None:
    running = run_plugin(PluginConfig(mig_strategy="mixed"))
    requests = running.kubelet.wait_registered(3)
    assert sorted((r.version, r.resource_name, r.endpoint) for r in requests) == [
        ("v1beta1", "nvidia.com/gpu", "nvhook-nvidia.com_gpu.sock"),
        ("v1beta1", "nvidia.com/mig-2g.20gb", "nvhook-nvidia.com_mig-2g.20gb.sock"),
        ("v1beta1", "nvidia.com/mig-3g.40gb", "nvhook-nvidia.com_mig-3g.40gb.sock"),
    ]
    assert all(r.options.get_preferred_allocation_available for r in requests)
    client = running.client("nvidia.com/gpu")
    assert client.options().get_preferred_allocation_available
    client.watch()
    devices = client.wait_for(lambda d: len(d) == 6)
    assert [d.ID for d in devices] == UUIDS[2:]  # GPUs 0 and 1 are in MIG mode
    assert {d.health for d in devices} == {"Healthy"}
    mig = running.client("nvidia.com/mig-3g.40gb")
    mig.watch()
    assert [d.ID for d in mig.wait_for(lambda d: len(d) == 1)] == [MIG_3G]


def test_allocate_for_every_strategy(run_plugin: Callable[[PluginConfig], Running]) -> None:
    running = run_plugin(PluginConfig(mig_strategy="mixed", device_list_strategies=EVERY))
    running.kubelet.wait_registered(3)
    gpus = running.client("nvidia.com/gpu")
    response = gpus.allocate([UUIDS[3], UUIDS[5]], [UUIDS[2]])
    first, second = response.container_responses
    assert dict(first.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{UUIDS[3]},{UUIDS[5]}"}
    assert [(m.container_path, m.host_path, m.read_only) for m in first.mounts] == [
        (f"/var/run/nvidia-container-devices/{u}", "/dev/null", True) for u in UUIDS[3:6:2]
    ]
    [(key, value)] = dict(first.annotations).items()
    assert key.startswith("cdi.k8s.io/nvhook-device-plugin_")
    assert value == f"nvidia.com/gpu={UUIDS[3]},nvidia.com/gpu={UUIDS[5]}"
    assert [c.name for c in first.cdi_devices] == [f"nvidia.com/gpu={u}" for u in UUIDS[3:6:2]]
    assert dict(second.envs) == {"NVIDIA_VISIBLE_DEVICES": UUIDS[2]}
    mig = running.client("nvidia.com/mig-3g.40gb").allocate([MIG_3G])
    assert [c.name for c in mig.container_responses[0].cdi_devices] == [f"nvidia.com/gpu={MIG_3G}"]
    with pytest.raises(grpc.RpcError) as e:
        gpus.allocate([UUIDS[2], "GPU-nope"])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "device ID 'GPU-nope' is not a device of nvidia.com/gpu" in e.value.details()


def test_preferred_allocation_and_replicas(run_plugin: Callable[[PluginConfig], Running]) -> None:
    from nvhook.deviceplugin.model import TimeSlicedResource

    config = PluginConfig(time_slicing=(TimeSlicedResource("nvidia.com/gpu", 2),))
    running = run_plugin(config)
    [request] = running.kubelet.wait_registered(1)
    client = running.kubelet.client(request)
    client.watch()
    ids = [d.ID for d in client.wait_for(lambda d: len(d) == 16)]
    assert ids[:4] == [f"{UUIDS[0]}::0", f"{UUIDS[0]}::1", f"{UUIDS[1]}::0", f"{UUIDS[1]}::1"]
    # replicas spread over GPUs, the must-include one first; then GPU 5, behind GPU 4's PCIe
    # switches (the topology the plugin read from the fake NVML), then the lowest index
    got = client.preferred(ids, [f"{UUIDS[4]}::1"], 3)
    assert got == [f"{UUIDS[4]}::1", f"{UUIDS[5]}::0", f"{UUIDS[0]}::0"]
    response = client.allocate([f"{UUIDS[4]}::1", f"{UUIDS[4]}::0"])
    assert dict(response.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": UUIDS[4]}


def test_health_follows_nvml_faults_and_gpus_gone_from_proc(
    run_plugin: Callable[[PluginConfig], Running], dgx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = run_plugin(PluginConfig())
    [request] = running.kubelet.wait_registered(1)
    client = running.kubelet.client(request)
    client.watch()
    client.wait_for(lambda d: {x.health for x in d} == {"Healthy"})
    # NVML starts failing: every GPU unhealthy within a few seconds, then back
    monkeypatch.setenv("NVHOOK_MOCK_NVML_FAIL", "nvmlDeviceGetUUID:999")
    client.wait_for(lambda d: {x.health for x in d} == {"Unhealthy"}, timeout=5)
    with pytest.raises(grpc.RpcError) as e:
        client.allocate([UUIDS[2]])
    assert "unhealthy" in e.value.details() and "nvmlDeviceGetUUID" in e.value.details()
    monkeypatch.delenv("NVHOOK_MOCK_NVML_FAIL")
    client.wait_for(lambda d: {x.health for x in d} == {"Healthy"}, timeout=5)
    # GPU 7 disappears from the driver's /proc, then comes back
    gpu7 = dgx / "proc/driver/nvidia/gpus" / DGX.gpus[7].bus_id
    aside = gpu7.with_name("gone")
    gpu7.rename(aside)
    try:
        devices = client.wait_for(lambda d: d[7].health == "Unhealthy", timeout=5)
        assert [x.health for x in devices[:7]] == ["Healthy"] * 7
    finally:
        aside.rename(gpu7)
    client.wait_for(lambda d: {x.health for x in d} == {"Healthy"}, timeout=5)
    assert any(f"GPU {UUIDS[7]} is unhealthy: " in line for line in running.lines)
    assert any(f"GPU {UUIDS[7]} is healthy again" in line for line in running.lines)


def test_kubelet_restart_means_registering_again(
    run_plugin: Callable[[PluginConfig], Running],
) -> None:
    running = run_plugin(PluginConfig())
    [request] = running.kubelet.wait_registered(1)
    running.kubelet.restart()  # deletes the plugin's socket, recreates kubelet.sock
    again = running.kubelet.wait_registered(2)[1]
    assert (again.resource_name, again.endpoint) == (request.resource_name, request.endpoint)
    client = running.kubelet.client(again)
    client.watch()
    assert len(client.wait_for(lambda d: len(d) == 8)) == 8


def test_stop_ends_streams_and_removes_sockets(
    run_plugin: Callable[[PluginConfig], Running],
) -> None:
    running = run_plugin(PluginConfig())
    [request] = running.kubelet.wait_registered(1)
    client = running.kubelet.client(request)
    client.watch()
    client.wait_for(lambda d: len(d) == 8)
    socket = running.kubelet.directory / request.endpoint
    assert socket.is_socket()
    running.stop()
    assert client.stream_ended()
    assert not socket.exists()
    assert running.lines[-1] == "stopped; sockets removed"
