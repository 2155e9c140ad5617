"""MPS sharing against the kubelet stand-in on a dgx-a100 mock, with the mock's
nvidia-cuda-mps-control: one control daemon per shared GPU with its limits, the Allocate
response (pipe directory, /dev/shm, limits) as NVIDIA's plugin gives it, a daemon that dies
makes its GPU's replicas Unhealthy and is started again, the daemons stop with the plugin, and
a configuration change or a re-discovery of the GPUs keeps the daemons still wanted running
(not restarted: a marker default set on one survives) and stops only the others."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from nvhook.deviceplugin.model import PluginConfig, TimeSlicedResource
from nvhook.deviceplugin.mps import MpsDaemons, limits
from nvhook.deviceplugin.plugin import DevicePlugin
from nvhook.deviceplugin.selector import ConfigSelector
from nvhook.deviceplugin.server import create_container_config
from nvhook.mock import create
from nvhook.mock.mutate import remove_gpu
from nvhook.planner import Host
from tests.nvhook.deviceplugin.test_server import (  # noqa: F401 (fixtures)
    DGX,
    UUIDS,
    Running,
    dgx,
    run_plugin,
    serving,
)

SHARED = "nvidia.com/gpu.mps"


@pytest.fixture
def mps_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="nvh-mps-", dir="/tmp"))  # unix sockets: short paths
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_limits_are_nvidias() -> None:
    assert limits(80 << 30, 4) == ("20480M", 25)
    assert limits(80 << 30, 3) == ("27306M", 33)


def _control(dgx: Path, pipe: Path, command: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    return subprocess.run(
        [str(dgx / "usr/bin/nvidia-cuda-mps-control")],
        input=command + "\n",
        env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe)},
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def test_a_daemon_per_shared_gpu_allocate_and_health(
    run_plugin: Callable[..., Running],  # noqa: F811
    dgx: Path,  # noqa: F811
    mps_root: Path,
) -> None:
    shared = TimeSlicedResource("nvidia.com/gpu", 4, SHARED, devices=("2", "3"))
    config = PluginConfig(sharing_strategy="mps", mps_root=str(mps_root), time_slicing=(shared,))
    running = run_plugin(config, 0.5)
    requests = running.kubelet.wait_registered(2)
    assert sorted(r.resource_name for r in requests) == ["nvidia.com/gpu", SHARED]
    pipes = {i: mps_root / SHARED / f"gpu{i}" / "pipe" for i in (2, 3)}
    assert sorted(p.name for p in (mps_root / SHARED).iterdir()) == ["gpu2", "gpu3"]
    for pipe in pipes.values():  # each daemon has its GPU's defaults
        assert _control(dgx, pipe, "get_default_active_thread_percentage").stdout == "25.0\n"
        assert _control(dgx, pipe, "get_default_device_pinned_mem_limit 0").stdout == "20480M\n"
        assert (pipe.parent / ".started").read_text() == f"{UUIDS[int(pipe.parent.name[3:])]}\n"
    client = running.client(SHARED)
    client.watch()
    devices = client.wait_for(lambda d: len(d) == 8)
    assert [d.ID for d in devices][:2] == [f"{UUIDS[2]}::0", f"{UUIDS[2]}::1"]
    got = create_container_config(client.allocate([f"{UUIDS[2]}::1"]).container_responses[0])
    assert got["envs"] == {
        "NVIDIA_VISIBLE_DEVICES": UUIDS[2],
        "CUDA_MPS_PIPE_DIRECTORY": f"/mps/{SHARED}/pipe",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M",
    }
    assert got["mounts"] == [
        (f"/mps/{SHARED}/pipe", str(pipes[2]), False),
        ("/dev/shm", str(mps_root / "shm"), False),
    ]
    with pytest.raises(grpc.RpcError) as e:  # MPS's default: one replica a container
        client.allocate([f"{UUIDS[2]}::0", f"{UUIDS[3]}::0"])
    assert "replicas must be of one GPU" in e.value.details()
    # GPU 3's daemon dies: its replicas go Unhealthy, it is started again, they come back
    assert _control(dgx, pipes[3], "quit").returncode == 0
    client.wait_for(lambda d: {x.health for x in d[4:]} == {"Unhealthy"}, timeout=2)
    assert {x.health for x in client.wait_for(lambda d: True)[:4]} == {"Healthy"}
    client.wait_for(lambda d: {x.health for x in d} == {"Healthy"}, timeout=3)
    assert _control(dgx, pipes[3], "get_default_active_thread_percentage").stdout == "25.0\n"
    died = f"GPU {UUIDS[3]} is unhealthy: MPS control daemon in {pipes[3]}"
    assert any(line.startswith(died) for line in running.lines)
    running.stop()
    for pipe in pipes.values():  # stopped with the plugin
        assert _control(dgx, pipe, "get_default_active_thread_percentage").returncode == 1


MPS_CONFIG = """version: v1
flags: {{mpsRoot: {root}}}
sharing:
  mps:
    resources:
    - {{name: nvidia.com/gpu, rename: nvidia.com/gpu.mps, replicas: {replicas}, devices: {devices}}}
"""


def _pid(pipe: Path) -> str:
    """The mock daemon's pid file: the same pid, the same daemon (not restarted)."""
    return (pipe / "nvidia-cuda-mps-control.pid").read_text()


def _until(predicate: Callable[[], bool], what: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_config_change_keeps_the_daemons_still_wanted(
    dgx: Path,  # noqa: F811
    mps_root: Path,
    tmp_path: Path,
) -> None:
    """A mounted config directory's file changes twice: GPU 3 is no longer shared (its daemon
    stops), GPU 2's share is kept (its daemon is not restarted: the marker survives, the pid
    is the same); then GPU 2's replicas change: still not restarted, its new defaults sent."""
    configs = tmp_path / "configs"
    configs.mkdir()
    write = (configs / "mps").write_text
    write(MPS_CONFIG.format(root=mps_root, replicas=4, devices='["2", "3"]'))
    lines: list[str] = []
    selector = ConfigSelector(str(configs), default="mps", log=lines.append)
    initial = selector()
    assert initial is not None and initial.sharing_strategy == "mps"
    pipes = {i: mps_root / SHARED / f"gpu{i}" / "pipe" for i in (2, 3)}
    with serving(
        dgx,
        initial,
        prefix="nvh-mk-",
        health_interval=0.2,
        log=lines.append,
        config_source=selector,
        config_interval=0.1,
    ) as served:
        kubelet, thread = served.kubelet, served.thread
        assert served.plugin.ready.wait(20)
        assert len(kubelet.wait_registered(2)) == 2
        pid = _pid(pipes[2])
        for pipe in pipes.values():  # a marker: the daemon's defaults are never re-sent
            assert _control(dgx, pipe, "set_default_active_thread_percentage 7").returncode == 0
        client = kubelet.client(kubelet.requests[-1])
        assert client.allocate([f"{UUIDS[2]}::0"]).container_responses  # a running allocation

        write(MPS_CONFIG.format(root=mps_root, replicas=4, devices='["2"]'))  # GPU 3 unshared
        _until(lambda: len(kubelet.requests) >= 4, lines)
        _until(lambda: _control(dgx, pipes[3], "get_server_list").returncode == 1, lines)
        kept = _control(dgx, pipes[2], "get_default_active_thread_percentage")
        assert (kept.returncode, kept.stdout) == (0, "7.0\n")  # not restarted, not re-sent
        assert _pid(pipes[2]) == pid and (pipes[2].parent / ".started").exists()
        assert not (pipes[3].parent / ".started").exists()
        mode = "cannot set compute mode DEFAULT"  # the mock's nvidia-smi has no -c: warned
        assert [x for x in lines if mode in x and "GPU 3:" in x], lines
        assert not [x for x in lines if mode in x and "GPU 2:" in x], lines
        assert any("GPU 2 (nvidia.com/gpu.mps) kept running as it is" in x for x in lines)
        shared = kubelet.client(next(r for r in kubelet.requests[2:] if r.resource_name == SHARED))
        shared.watch()
        assert len(shared.wait_for(lambda d: len(d) == 4)) == 4

        since = len(kubelet.requests)
        write(MPS_CONFIG.format(root=mps_root, replicas=2, devices='["2"]'))  # GPU 2: 2 replicas
        _until(lambda: any("4 -> 2 replicas" in x for x in lines), lines)
        _until(lambda: len(kubelet.requests) >= since + 2, lines)
        again = _control(dgx, pipes[2], "get_default_active_thread_percentage")
        assert (again.stdout, _pid(pipes[2])) == ("50.0\n", pid)  # new defaults, same daemon
        assert thread.is_alive()
    assert _control(dgx, pipes[2], "get_server_list").returncode == 1  # stopped with the plugin


def test_a_rediscovery_leaves_the_shared_gpus_daemons_alone(mps_root: Path, tmp_path: Path) -> None:
    """GPU 7 (not shared) falls off a live mock: the plugin re-registers its resources and
    the daemons of the shared GPUs 2 and 3 run on as they were."""
    root = tmp_path / "root"
    create("dgx-a100", root, nodes="file")
    lines: list[str] = []
    shared = TimeSlicedResource("nvidia.com/gpu", 4, SHARED, devices=("2", "3"))
    config = PluginConfig(sharing_strategy="mps", mps_root=str(mps_root), time_slicing=(shared,))
    pipes = [mps_root / SHARED / f"gpu{i}" / "pipe" for i in (2, 3)]
    with serving(
        root, config, prefix="nvh-mf-", health_interval=0.2, log=lines.append, follow_interval=0.1
    ) as served:
        kubelet, plugin, thread = served.kubelet, served.plugin, served.thread
        assert plugin.ready.wait(20)
        assert len(kubelet.wait_registered(2)) == 2
        pids = [_pid(p) for p in pipes]
        for pipe in pipes:
            assert _control(root, pipe, "set_default_active_thread_percentage 7").returncode == 0
        remove_gpu(root, 7)
        _until(lambda: any("nvidia.com/gpu: 6 -> 5 devices" in x for x in lines), lines)
        _until(lambda: len(kubelet.requests) >= 4 and all(s.serving for s in plugin.servers), lines)
        for pipe, pid in zip(pipes, pids, strict=True):
            kept = _control(root, pipe, "get_default_active_thread_percentage")
            assert (kept.returncode, kept.stdout, _pid(pipe)) == (0, "7.0\n", pid), lines
        assert not any("compute mode DEFAULT" in x for x in lines), lines
        assert thread.is_alive()
    for pipe in pipes:
        assert _control(root, pipe, "get_server_list").returncode == 1  # stopped with the plugin


def test_a_kept_daemon_that_died_gets_its_new_replicas_started_again(
    dgx: Path,  # noqa: F811
    mps_root: Path,
) -> None:
    """A daemon kept across a replicas change that is not answering any more (it died between
    two health checks) is started again with its new defaults, instead of failing the change."""
    host = Host(root=str(dgx))

    def daemons(replicas: int) -> MpsDaemons:
        shared = TimeSlicedResource("nvidia.com/gpu", replicas, SHARED, devices=("2",))
        config = PluginConfig(
            sharing_strategy="mps", mps_root=str(mps_root), time_slicing=(shared,)
        )
        resources, _, _ = DevicePlugin(host, config, str(mps_root)).discover()
        return MpsDaemons(host, str(mps_root), resources)

    pipe = mps_root / SHARED / "gpu2" / "pipe"
    old = daemons(4)
    old.start()
    try:
        assert _control(dgx, pipe, "quit").returncode == 0  # died
        new = daemons(2)
        new.start(old)
        assert _control(dgx, pipe, "get_default_active_thread_percentage").stdout == "50.0\n"
    finally:
        old.stop()
    assert _control(dgx, pipe, "get_server_list").returncode == 1
