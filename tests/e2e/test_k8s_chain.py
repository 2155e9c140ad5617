"""The Kubernetes chain, end to end: device plugin → kubelet stand-in → CRI → containerd 1.6
→ nvhook-runtime → a container that sees exactly the GPUs allocated to it.

On the ``dgx-a100`` mock (real char nodes), ``nvhook device-plugin``'s server
(:class:`~nvhook.deviceplugin.plugin.DevicePlugin`, in a thread, ``migStrategy: mixed``,
``deviceListStrategy: cdi-annotations``: containerd 1.6 has no CDI support of its own)
registers with the kubelet stand-in of :mod:`nvhook.deviceplugin.server`. The stand-in
reads the device list, asks ``GetPreferredAllocation`` for 2 GPUs and allocates them, then
builds the CRI ``CreateContainer`` request from the ``AllocateResponse`` as kubelet does (envs,
mounts, devices, annotations, CDI devices). containerd runs it with runtime handler
``nvidia`` (added by ``nvhook runtime configure``, whose ``container_annotations =
["cdi.k8s.io/*"]`` lets the annotation reach config.json), so nvhook-runtime resolves the
annotation's CDI names through the spec ``nvhook cdi generate`` wrote for the mock. The
container's ``nvidia-smi -L`` lists exactly the two allocated GPUs; a second container
allocated the other four sees only those.

A renamed, MPS-shared resource takes the same chain: ``resources.gpus`` renames the A100s
``nvidia.com/a100``, ``sharing.mps`` shares GPU 2 as two replicas of ``nvidia.com/a100.mps``
through the mock's ``nvidia-cuda-mps-control`` daemon; the container given one replica sees
that GPU only, its ``CUDA_MPS_PIPE_DIRECTORY`` and limits, and the daemon's pipe directory.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.cri.client import CriClient
from nvhook.deviceplugin.model import NamedResource, PluginConfig, TimeSlicedResource
from nvhook.deviceplugin.server import Kubelet, PluginClient, create_container_config
from nvhook.mock import Profile
from tests.e2e.conftest import PROBE, Shim, parse_probe
from tests.e2e.test_cri import containerd_with_nvidia, run_pod
from tests.nvhook.deviceplugin.test_server import serving as plugin_serving
from tests.support.containers import Containerd

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]


@pytest.fixture(scope="module")
def k8s_shim(shim: Shim) -> Shim:
    """The session shim with a CDI spec directory of its own, holding the mock's generated spec."""
    spec_dir = shim.workdir / "k8s-cdi"
    spec_dir.mkdir(exist_ok=True)
    output = spec_dir / "nvidia.json"
    assert main(["cdi", "generate", "--root", str(shim.machine), "--output", str(output)]) == 0
    return shim.with_config("k8s", cdi={"spec_dirs": [str(spec_dir)]})


@pytest.fixture(scope="module")
def k8s_containerd(
    k8s_shim: Shim, tmp_path_factory: pytest.TempPathFactory, busybox_image: Path
) -> Iterator[Containerd]:
    with containerd_with_nvidia(k8s_shim, tmp_path_factory.mktemp("k8s"), busybox_image) as helper:
        yield helper


@contextlib.contextmanager
def serving(
    shim: Shim, config: PluginConfig, count: int, resource: str
) -> Iterator[tuple[Kubelet, PluginClient]]:
    """The device plugin on the mock with ``config``, registered with a kubelet stand-in
    (``count`` resources); the client of ``resource``."""
    with plugin_serving(shim.machine, config, prefix="nvh-k8s-") as served:
        requests = served.kubelet.wait_registered(count)
        wanted = next(r for r in requests if r.resource_name == resource)
        yield served.kubelet, served.kubelet.client(wanted)


@pytest.fixture
def plugin(k8s_shim: Shim) -> Iterator[tuple[Kubelet, PluginClient]]:
    """The device plugin on the mock, registered with a kubelet stand-in; its GPU client."""
    config = PluginConfig(mig_strategy="mixed", device_list_strategies=("cdi-annotations",))
    with serving(k8s_shim, config, 3, "nvidia.com/gpu") as served:
        yield served


def test_allocated_gpus_are_the_container_s_gpus(
    k8s_containerd: Containerd,
    plugin: tuple[Kubelet, PluginClient],
    profile: Profile,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    _, gpus = plugin
    gpus.watch()
    listed = [d.ID for d in gpus.wait_for(lambda d: len(d) == 6)]
    whole = [g.uuid for g in profile.gpus if not g.mig_enabled]
    assert listed == whole  # GPUs 0 and 1 are in MIG mode: mixed advertises them as MIG
    first = gpus.preferred(listed, [], 2)
    assert first == whole[:2]
    rest = [u for u in listed if u not in first]
    response = gpus.allocate(first, rest)
    one, two = (create_container_config(r) for r in response.container_responses)
    [(key, value)] = one["annotations"].items()
    assert key.startswith("cdi.k8s.io/nvhook-device-plugin_")
    assert value == ",".join(f"nvidia.com/gpu={u}" for u in first)
    assert one["envs"] == {"NVIDIA_VISIBLE_DEVICES": "void"}

    with CriClient(k8s_containerd.address) as client:
        *_, out_one = run_pod(client, "nvidia", tmp_path / "one", {}, allocation=one)
        *_, out_two = run_pod(client, "nvidia", tmp_path / "two", {}, allocation=two)
    seen_one, seen_two = parse_probe(out_one), parse_probe(out_two)
    assert seen_one.gpu_uuids == first
    assert seen_two.gpu_uuids == rest
    by_uuid = {g.uuid: g.minor for g in profile.gpus}
    assert seen_one.gpu_nodes == {f"/dev/nvidia{by_uuid[u]}" for u in first}
    assert seen_two.gpu_nodes == {f"/dev/nvidia{by_uuid[u]}" for u in rest}
    print(f"k8s chain: {time.monotonic() - started:.1f}s")


def test_a_renamed_mps_shared_resource_reaches_the_container(
    k8s_containerd: Containerd, k8s_shim: Shim, profile: Profile, tmp_path: Path
) -> None:
    mps_root = Path(tempfile.mkdtemp(prefix="nvh-mps-", dir="/tmp"))  # unix sockets: short
    shared = TimeSlicedResource("nvidia.com/a100", 2, "nvidia.com/a100.mps", devices=("2",))
    config = PluginConfig(
        device_list_strategies=("cdi-annotations",),
        gpu_resources=(NamedResource("*A100*", "nvidia.com/a100"),),
        sharing_strategy="mps",
        mps_root=str(mps_root),
        time_slicing=(shared,),
        fail_requests_greater_than_one=True,
    )
    gpu2 = profile.gpus[2].uuid
    try:
        with serving(k8s_shim, config, 2, "nvidia.com/a100.mps") as (kubelet, replicas):
            assert sorted(r.resource_name for r in kubelet.requests) == [
                "nvidia.com/a100",
                "nvidia.com/a100.mps",
            ]
            replicas.watch()
            ids = [d.ID for d in replicas.wait_for(lambda d: len(d) == 2)]
            assert ids == [f"{gpu2}::0", f"{gpu2}::1"]
            allocation = create_container_config(replicas.allocate(ids[:1]).container_responses[0])
            assert allocation["annotations"] == {
                next(iter(allocation["annotations"])): f"nvidia.com/gpu={gpu2}"
            }
            command = f"{PROBE}; echo '--- mps'; ls \"$CUDA_MPS_PIPE_DIRECTORY\""
            with CriClient(k8s_containerd.address) as client:
                *_, out = run_pod(
                    client, "nvidia", tmp_path / "mps", {}, allocation=allocation, command=command
                )
        seen = parse_probe(out)
        assert seen.gpu_uuids == [gpu2]
        assert seen.env["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/a100.mps/pipe"
        assert seen.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
        assert seen.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40960M"
        assert out.split("--- mps\n", 1)[1].split() == ["control", "nvidia-cuda-mps-control.pid"]
    finally:
        shutil.rmtree(mps_root, ignore_errors=True)
