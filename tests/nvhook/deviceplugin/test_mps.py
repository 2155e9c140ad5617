"""MPS sharing against the kubelet stand-in on a dgx-a100 mock, with the mock's
nvidia-cuda-mps-control: one control daemon per shared GPU with its limits, the Allocate
response (pipe directory, /dev/shm, limits) as NVIDIA's plugin gives it, a daemon that dies
makes its GPU's replicas Unhealthy and is started again, and the daemons stop with the plugin."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from nvhook.deviceplugin.model import PluginConfig, TimeSlicedResource
from nvhook.deviceplugin.mps import limits
from nvhook.deviceplugin.server import create_container_config
from tests.nvhook.deviceplugin.test_server import (  # noqa: F401 (fixtures)
    DGX,
    UUIDS,
    Running,
    dgx,
    run_plugin,
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
