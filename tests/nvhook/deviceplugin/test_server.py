"""The plugin against a kubelet stand-in (:class:`nvhook.deviceplugin.server.Kubelet`), on a
dgx-a100 mock of its own: registration, the device list, Allocate for every strategy,
preferred allocation, health transitions (the fake NVML's fault knob, a GPU gone from /proc),
kubelet restarts, stop, every socket's mode under umask 000 and 077."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from nvhook.deviceplugin.model import PluginConfig
from nvhook.deviceplugin.plugin import DevicePlugin
from nvhook.deviceplugin.server import Kubelet, PluginClient, create_container_config
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
def run_plugin(dgx: Path, tmp_path: Path) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []
    directory = Path("/tmp") / f"nvh-dp-{os.getpid()}-{tmp_path.name[-12:]}"  # short: sockets
    directory.mkdir()

    def start(config: PluginConfig, health_interval: float = 0.2) -> Running:
        stop = threading.Event()
        kubelet = Kubelet(directory)
        kubelet.start()
        lines: list[str] = []
        plugin = DevicePlugin(
            Host(root=str(dgx)),
            config,
            str(directory),
            health_interval=health_interval,
            log=lines.append,
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


class Served:
    """What :func:`serving` started: the plugin, its thread, the kubelet stand-in it registers
    with and the directory of their sockets."""

    def __init__(
        self, plugin: DevicePlugin, kubelet: Kubelet, directory: Path, thread: threading.Thread
    ) -> None:
        self.plugin, self.kubelet, self.directory, self.thread = plugin, kubelet, directory, thread


@contextlib.contextmanager
def serving(root: Path, config: PluginConfig, *, prefix: str, **options: Any) -> Iterator[Served]:
    """``DevicePlugin(Host(root), config, directory, **options)`` run on a thread against a
    started kubelet stand-in, ``directory`` a new one under /tmp named from ``prefix`` (unix
    sockets: short paths). On leaving: the plugin stopped and joined, the stand-in stopped, the
    directory removed; after a body that passed, the thread is checked gone."""
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    kubelet = Kubelet(directory)
    kubelet.start()
    plugin = DevicePlugin(Host(root=str(root)), config, str(directory), **options)
    stop = threading.Event()
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield Served(plugin, kubelet, directory, thread)
    finally:
        stop.set()
        thread.join(10)
        kubelet.stop()
        shutil.rmtree(directory, ignore_errors=True)
    assert not thread.is_alive()


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

    def expected(ids: list[str]) -> dict[str, object]:
        """Exactly what kubelet copies into the container's config, every strategy on."""
        digest = hashlib.sha256("\0".join(["nvidia.com/gpu", *ids]).encode()).hexdigest()[:12]
        names = ",".join(f"nvidia.com/gpu={u}" for u in ids)
        return {
            "envs": {"NVIDIA_VISIBLE_DEVICES": ",".join(ids)},
            "mounts": [(f"/var/run/nvidia-container-devices/{u}", "/dev/null", True) for u in ids],
            "devices": [],
            "annotations": {f"cdi.k8s.io/nvhook-device-plugin_{digest}": names},
            "cdi_devices": [f"nvidia.com/gpu={u}" for u in ids],
        }

    assert create_container_config(first) == expected([UUIDS[3], UUIDS[5]])
    assert create_container_config(second) == expected([UUIDS[2]])
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


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_every_socket_is_0600_whatever_the_umask_and_never_wider(
    run_plugin: Callable[[PluginConfig], Running], tmp_path: Path, umask: int
) -> None:
    """The plugin's sockets and the kubelet stand-in's: 0600 from the moment they are at
    their path (a watcher lstat()s both directories while they start), none left staged."""
    kubelet_only = Path("/tmp") / f"nvh-dp-umask-{os.getpid()}"
    plugin_dir = Path("/tmp") / f"nvh-dp-{os.getpid()}-{tmp_path.name[-12:]}"  # run_plugin's
    seen: dict[str, set[int]] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for directory in (kubelet_only, plugin_dir):
                with contextlib.suppress(FileNotFoundError):
                    for entry in list(directory.iterdir()):
                        if entry.is_socket():
                            mode = stat.S_IMODE(entry.lstat().st_mode)
                            seen.setdefault(f"{directory.name}/{entry.name}", set()).add(mode)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    old = os.umask(umask)
    try:
        kubelet_only.mkdir()
        kubelet = Kubelet(kubelet_only)
        kubelet.start()
        try:
            assert stat.S_IMODE(kubelet.socket.lstat().st_mode) == 0o600
            deadline = time.monotonic() + 5
            while f"{kubelet_only.name}/kubelet.sock" not in seen:  # the watcher's look at it
                assert time.monotonic() < deadline
                time.sleep(0.01)
        finally:
            kubelet.stop()
            shutil.rmtree(kubelet_only)
        running = run_plugin(PluginConfig(mig_strategy="mixed"))
        requests = running.kubelet.wait_registered(3)
        running.kubelet.restart()  # the plugin's sockets made again, under the same umask
        requests += running.kubelet.wait_registered(6)[3:]
    finally:
        os.umask(old)
        stop.set()
        watcher.join(5)
    endpoints = {r.endpoint for r in requests}
    assert len(endpoints) == 3
    modes = {p.name: stat.S_IMODE(p.lstat().st_mode) for p in plugin_dir.iterdir()}
    assert modes == {"kubelet.sock": 0o600} | {e: 0o600 for e in endpoints}
    assert all(mode == {0o600} for mode in seen.values()), seen
    assert f"{kubelet_only.name}/kubelet.sock" in seen and f"{plugin_dir.name}/kubelet.sock" in seen
    client = running.client("nvidia.com/gpu")  # and each serves at its path
    assert client.options().get_preferred_allocation_available


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_a_socket_reaches_its_path_0600_and_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int
) -> None:
    """What a watcher may miss: at the rename into place, the staged socket is 0600 in a
    0700 directory, and it already accepts connections."""
    import socket

    at_rename: list[tuple[int, int]] = []
    real_rename = os.rename

    def rename(src: str, dst: str) -> None:
        at_rename.append(
            (
                stat.S_IMODE(os.lstat(src).st_mode),
                stat.S_IMODE(os.stat(os.path.dirname(src)).st_mode),
            )
        )
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(src)  # listening already
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    directory = Path("/tmp") / f"nvh-dp-rename-{os.getpid()}"
    directory.mkdir()
    old = os.umask(umask)
    try:
        kubelet = Kubelet(directory)
        kubelet.start()
        kubelet.stop()
    finally:
        os.umask(old)
        shutil.rmtree(directory)
    assert at_rename == [(0o600, 0o700)]


def test_pass_device_specs_index_ids_and_features_in_allocate(
    run_plugin: Callable[[PluginConfig], Running],
) -> None:
    config = PluginConfig(
        mig_strategy="mixed",
        device_id_strategy="index",
        pass_device_specs=True,
        dev_root="/run/nvidia/driver",
        features=("NVIDIA_GDS",),
    )
    running = run_plugin(config)
    running.kubelet.wait_registered(3)
    got = create_container_config(
        running.client("nvidia.com/gpu").allocate([UUIDS[3]]).container_responses[0]
    )
    assert got["envs"] == {"NVIDIA_VISIBLE_DEVICES": "3", "NVIDIA_GDS": "enabled"}
    assert got["devices"] == [("/dev/nvidia3", "/run/nvidia/driver/dev/nvidia3", "rw")]
    mig = running.client("nvidia.com/mig-3g.40gb").allocate([MIG_3G]).container_responses[0]
    assert dict(mig.envs)["NVIDIA_VISIBLE_DEVICES"] == "0:0"
    # the parent GPU's node, then its GPU and compute instance's access nodes (mig-minors)
    paths = [d.container_path for d in mig.devices]
    assert paths[0] == "/dev/nvidia0" and len(paths) == 3, paths
    assert all(p.startswith("/dev/nvidia-caps/nvidia-cap") for p in paths[1:]), paths


def test_fail_on_init_error_false_serves_nothing_and_stays_up(tmp_path: Path) -> None:
    from nvhook.errors import DriverError
    from nvhook.mock import create

    root = tmp_path / "root"
    create("no-gpu", root, nodes="file")
    lines: list[str] = []
    stop = threading.Event()
    plugin = DevicePlugin(
        Host(root=str(root)),
        PluginConfig(fail_on_init_error=False),
        str(tmp_path),
        log=lines.append,
    )
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    thread.start()
    assert plugin.ready.wait(10)
    time.sleep(0.3)
    assert thread.is_alive() and plugin.servers == []
    assert not any(p.suffix == ".sock" for p in tmp_path.iterdir())
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    assert "failOnInitError is false: serving nothing" in lines[0]
    with pytest.raises(DriverError, match="Driver Not Loaded"):
        DevicePlugin(Host(root=str(root)), PluginConfig(), str(tmp_path)).run(threading.Event())


def seen_by_plugin(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    what: Callable[[DevicePlugin], object],
    runs: list[list[str]],
) -> list[object]:
    """``what(plugin)`` of the plugin each ``nvhook device-plugin [run]`` made (its run
    replaced: nothing served), on a config file of every default."""
    from click.testing import CliRunner

    from nvhook.cli.deviceplugin import device_plugin

    seen: list[object] = []
    monkeypatch.setattr(DevicePlugin, "run", lambda self, stop: seen.append(what(self)))
    (tmp_path / "config.toml").write_text("")  # every default
    monkeypatch.setenv("NVHOOK_CONFIG", str(tmp_path / "config.toml"))
    runner = CliRunner()
    for args in runs:
        result = runner.invoke(device_plugin, ["--device-plugin-path", str(tmp_path), *args])
        assert result.exit_code == 0, result.output
    return seen
