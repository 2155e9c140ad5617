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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nvhook.cli import main
from nvhook.deviceplugin.model import PluginConfig
from nvhook.deviceplugin.plugin import DevicePlugin
from nvhook.deviceplugin.server import Kubelet, PluginClient, create_container_config
from nvhook.edits import Host
from nvhook.mock import Profile
from tests.e2e.conftest import PROBE, Shim, parse_probe
from tests.e2e.test_cri import K8S, PATH, PAUSE_IMAGE, Cri, _cri_log, cri, pause_image_tar
from tests.support.containers import BUSYBOX_IMAGE, Containerd, require, unique_id

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]

__all__ = ["cri"]  # the CRI stubs fixture, shared with test_cri


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
    require("runc")
    workdir = tmp_path_factory.mktemp("k8s")
    pause = pause_image_tar(busybox_image, workdir / "pause")
    helper = Containerd(
        workdir / "containerd", cri=True, sandbox_image=PAUSE_IMAGE, env=k8s_shim.extra_env
    )
    args = ["--runtime", "containerd", "--config", str(helper.config), "--name", "nvidia"]
    args += ["--runtime-path", k8s_shim.binary, "--backup-dir", str(workdir / "backups")]
    assert main(["runtime", "configure", *args]) == 0
    with helper:
        helper.import_image(busybox_image, namespace=K8S)
        helper.import_image(pause, namespace=K8S)
        yield helper


@pytest.fixture
def plugin(k8s_shim: Shim) -> Iterator[tuple[Kubelet, PluginClient]]:
    """The device plugin on the mock, registered with a kubelet stand-in; its GPU client."""
    directory = Path("/tmp") / unique_id("nvh-k8s")
    directory.mkdir()
    kubelet = Kubelet(directory)
    kubelet.start()
    config = PluginConfig(mig_strategy="mixed", device_list_strategies=("cdi-annotations",))
    dp = DevicePlugin(Host(root=str(k8s_shim.machine)), config, str(directory))
    stop = threading.Event()
    thread = threading.Thread(target=dp.run, args=(stop,), daemon=True)
    thread.start()
    try:
        requests = kubelet.wait_registered(3)
        gpu = next(r for r in requests if r.resource_name == "nvidia.com/gpu")
        yield kubelet, kubelet.client(gpu)
    finally:
        stop.set()
        thread.join(10)
        kubelet.stop()
        for entry in directory.iterdir():
            entry.unlink()
        directory.rmdir()


def run_allocated(cri_client: Cri, allocation: dict[str, Any], logs: Path) -> str:
    """A pod with handler ``nvidia`` and one container running ``PROBE``, its CRI config
    carrying ``allocation`` (:func:`create_container_config`); the container's output."""
    pb, stub = cri_client.pb, cri_client.stub
    name = unique_id("pod")
    pod = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=name, namespace="nvhook-test"),
        log_directory=str(logs),
        linux=pb.LinuxPodSandboxConfig(
            security_context=pb.LinuxSandboxSecurityContext(
                namespace_options=pb.NamespaceOption(network=pb.NODE)
            )
        ),
    )
    sandbox = stub.RunPodSandbox(
        pb.RunPodSandboxRequest(config=pod, runtime_handler="nvidia"), timeout=60
    ).pod_sandbox_id
    try:
        envs = {**allocation["envs"], "PATH": PATH}
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="probe"),
            image=pb.ImageSpec(image=BUSYBOX_IMAGE),
            command=["/bin/sh", "-c", PROBE],
            envs=[pb.KeyValue(key=k, value=v) for k, v in envs.items()],
            mounts=[
                pb.Mount(container_path=c, host_path=h, readonly=ro)
                for c, h, ro in allocation["mounts"]
            ],
            devices=[
                pb.Device(container_path=c, host_path=h, permissions=p)
                for c, h, p in allocation["devices"]
            ],
            annotations=allocation["annotations"],
            CDI_devices=[pb.CDIDevice(name=n) for n in allocation["cdi_devices"]],
            log_path="probe.log",
        )
        request = pb.CreateContainerRequest(
            pod_sandbox_id=sandbox, config=config, sandbox_config=pod
        )
        container = stub.CreateContainer(request, timeout=60).container_id
        stub.StartContainer(pb.StartContainerRequest(container_id=container), timeout=60)
        status = cri_client._wait_exited(container)
        assert status.exit_code == 0, status
        return _cri_log(logs / "probe.log")
    finally:
        stub.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sandbox), timeout=60)
        stub.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox), timeout=60)


def test_allocated_gpus_are_the_container_s_gpus(
    k8s_containerd: Containerd,
    cri: tuple[ModuleType, ModuleType],
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

    client = Cri(k8s_containerd.address, cri)
    try:
        seen_one = parse_probe(run_allocated(client, one, tmp_path / "one"))
        seen_two = parse_probe(run_allocated(client, two, tmp_path / "two"))
    finally:
        client.channel.close()
    assert seen_one.gpu_uuids == first
    assert seen_two.gpu_uuids == rest
    by_uuid = {g.uuid: g.minor for g in profile.gpus}
    assert seen_one.gpu_nodes == {f"/dev/nvidia{by_uuid[u]}" for u in first}
    assert seen_two.gpu_nodes == {f"/dev/nvidia{by_uuid[u]}" for u in rest}
    print(f"k8s chain: {time.monotonic() - started:.1f}s")
