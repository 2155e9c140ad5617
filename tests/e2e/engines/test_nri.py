"""``nvhook nri-plugin`` with a real containerd as its peer: 2.1 (Debian unstable, NRI 0.8.0, on
by default) and 1.7 (Debian 13, NRI 0.6.1, switched on by ``runtime configure --nri``), each from
its Debian root, run privately (tests/support/engines.py), through CRI as kubelet talks to it
(kubelet itself does not exist here: :mod:`tests.e2e.test_cri`'s helpers stand in for it).

The device plugin (nvhook's, on the mock machine, registered with the kubelet stand-in of
:mod:`nvhook.deviceplugin.server`) allocates 2 GPUs with the ``volume-mounts`` strategy; its
``Allocate`` response becomes the container's CRI config as kubelet's device manager makes it
(``create_container_config``). With no runtime handler, the container sees exactly those two
(the mock's ``nvidia-smi -L``); a pod setting ``NVIDIA_VISIBLE_DEVICES=all`` itself gets none
(stripped), or, with ``nri.refused = "refuse"``, its create fails with the plugin's reason;
with the plugin stopped an allocated pod starts without GPUs (the documented behaviour: nothing
turns the allocation into devices, never other GPUs), and once it is back it is served again;
containerd restarting is survived (the plugin reconnects). With the ``nvidia`` RuntimeClass
handler as well, the shim sees the adjusted spec (``NVIDIA_VISIBLE_DEVICES=void``) and writes
nothing: served once. The device plugin's ``cdi-annotations`` reach the plugin too; a pod's own
annotations get nothing. A pod annotation ``nvidia.cdi.k8s.io/container.NAME`` from an allowed
namespace is passed on 2.1 as a CDI device name, which containerd resolves from ``/etc/cdi``,
and made into edits by the plugin on 1.7.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from nvhook.cli import main
from nvhook.cri.client import CriClient, container_config, pod_config
from nvhook.deviceplugin.model import PluginConfig
from nvhook.deviceplugin.plugin import DevicePlugin
from nvhook.deviceplugin.server import Kubelet, PluginClient, create_container_config
from nvhook.errors import ContainerEngineError
from nvhook.mock import Profile
from nvhook.planner import Host
from tests.e2e.conftest import Shim, expected_smi_uuids, parse_probe
from tests.e2e.engines.conftest import Engine
from tests.e2e.engines.test_containerd import (
    CONTAINERDS,
    LINK_PROBE,
    configure,
    containerds,
    import_pod_images,
    restrict_oom_score_adj,
    sandbox_image,
)
from tests.e2e.test_cri import PATH, run_pod
from tests.support.containers import BUSYBOX_IMAGE, unique_id
from tests.support.engines import CHECKOUT, EngineContainerd

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]

NAMESPACE = "nvhook-test"


@pytest.fixture(scope="module", params=list(CONTAINERDS))
def _containerd(
    request: pytest.FixtureRequest,
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Engine]:
    yield from containerds(request.param, suite_root, tmp_path_factory, "nri-")


class Plugin:
    """``nvhook nri-plugin`` on the host, its log in a file, stopped with SIGTERM."""

    def __init__(self, config: Path, cache: Path, socket: Path, log: Path) -> None:
        self.env = {**os.environ, "NVHOOK_CONFIG": str(config), "NVHOOK_CACHE_DIR": str(cache)}
        self.socket = socket
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(CHECKOUT / ".venv/bin/nvhook"), "nri-plugin", "--socket", str(self.socket)],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )

    def wait_registered(self, count: int, timeout: float = 20) -> None:
        """Until the log says ``registered`` ``count`` times."""
        deadline = time.monotonic() + timeout
        while self.text().count(" registered as ") < count:
            assert self.proc is not None and self.proc.poll() is None, self.text()
            assert time.monotonic() < deadline, f"plugin never registered:\n{self.text()}"
            time.sleep(0.1)

    def stop(self) -> int:
        proc, self.proc = self.proc, None
        assert proc is not None
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=15)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


class Node:
    """containerd with NRI on, the plugin connected, and a CRI client."""

    def __init__(
        self, engine: Engine, daemon: EngineContainerd, plugin: Plugin, client: CriClient
    ) -> None:
        self.engine = engine
        self.daemon = daemon
        self.plugin = plugin
        self.client = client


def nri_config(shim: Shim, engine: Engine, socket: Path) -> Path:
    """nvhook's settings for the plugin: the shim's (the mock machine, its CDI dir) with
    Kubernetes' policy (env from images not trusted, the device plugin's mounts are)."""
    return shim.with_config(
        f"nri-{engine.name}",
        policy={"accept_env_unprivileged": False, "accept_volume_mounts": True},
        nri={"socket": str(socket), "annotation_namespaces": [NAMESPACE]},
    ).config


@pytest.fixture(scope="module")
def node(_containerd: Engine, shim: Shim, busybox_image: Path, dgx: Path) -> Iterator[Node]:
    engine = _containerd
    case = engine.work / "nri"
    case.mkdir()
    config = case / "config.toml"
    shutil.copy(engine.root.lower / "etc/containerd/config.toml", config)
    configure(shim, config, "--nri")  # the nvidia handler too: for the coexistence test
    restrict_oom_score_adj(config)
    socket = engine.root.sockdir / "nri.sock"
    doc = tomlkit.parse(config.read_text())
    doc["plugins"]["io.containerd.nri.v1.nri"]["socket_path"] = str(socket)
    config.write_text(tomlkit.dumps(doc))
    spec = case / "nvidia.json"
    assert main(["cdi", "generate", "--root", str(dgx), "--output", str(spec)]) == 0
    engine.root.run("sh", "-c", f"mkdir -p /etc/cdi && cp {spec} /etc/cdi/nvidia.json")
    shutil.copy(spec, shim.cdi_dir / "nvidia.json")
    daemon = EngineContainerd(engine.root, case, config, env=shim.extra_env)
    dump = daemon.dump()
    assert dump["plugins"]["io.containerd.nri.v1.nri"]["disable"] is False
    sandbox = sandbox_image(dump, engine.major)
    plugin = Plugin(nri_config(shim, engine, socket), shim.cache_dir, socket, case / "plugin.log")
    with daemon:
        import_pod_images(daemon, busybox_image, sandbox, case)
        plugin.start()
        try:
            plugin.wait_registered(1)
            with CriClient(daemon.address) as client:
                yield Node(engine, daemon, plugin, client)
        finally:
            if plugin.proc is not None:
                plugin.stop()
            print(plugin.text())


def device_plugin(shim: Shim, strategy: str) -> Iterator[PluginClient]:
    """nvhook's device plugin on the mock (``strategy``), registered with a kubelet stand-in;
    the client of its ``nvidia.com/gpu``."""
    directory = Path("/tmp") / unique_id("nvh-nri")
    directory.mkdir()
    kubelet = Kubelet(directory)
    kubelet.start()
    config = PluginConfig(mig_strategy="mixed", device_list_strategies=(strategy,))
    dp = DevicePlugin(Host(root=str(shim.machine)), config, str(directory))
    stop = threading.Event()
    thread = threading.Thread(target=dp.run, args=(stop,), daemon=True)
    thread.start()
    try:
        requests = kubelet.wait_registered(3)
        gpu = next(r for r in requests if r.resource_name == "nvidia.com/gpu")
        client = kubelet.client(gpu)
        client.watch()
        yield client
    finally:
        stop.set()
        thread.join(10)
        kubelet.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def gpus(shim: Shim) -> Iterator[PluginClient]:
    yield from device_plugin(shim, "volume-mounts")


@pytest.fixture(scope="module")
def gpus_cdi(shim: Shim) -> Iterator[PluginClient]:
    yield from device_plugin(shim, "cdi-annotations")


def allocate_two(gpus: PluginClient, profile: Profile) -> tuple[list[str], dict[str, Any]]:
    """2 GPUs allocated as kubelet does (preferred, then Allocate); their CRI config part."""
    listed = [d.ID for d in gpus.wait_for(lambda d: len(d) == 6)]
    first = gpus.preferred(listed, [], 2)
    response = gpus.allocate(first)
    [allocation] = (create_container_config(r) for r in response.container_responses)
    if allocation["mounts"]:
        assert [m[0] for m in allocation["mounts"]] == [
            f"/var/run/nvidia-container-devices/{u}" for u in first
        ]
    return first, allocation


def test_an_allocated_container_sees_exactly_its_two_gpus(
    node: Node, gpus: PluginClient, profile: Profile, tmp_path: Path, print_version: Any
) -> None:
    print_version(node.engine)
    first, allocation = allocate_two(gpus, profile)
    _, _, output = run_pod(
        node.client, "", tmp_path / "two", {}, allocation=allocation, command=LINK_PROBE
    )
    probe = parse_probe(output)
    assert probe.gpu_uuids == first
    by_uuid = {g.uuid: g.minor for g in profile.gpus}
    assert probe.gpu_nodes == {f"/dev/nvidia{by_uuid[u]}" for u in first}
    assert probe.env["NVIDIA_VISIBLE_DEVICES"] == "void"
    # made by nvhook-hook, the createContainer hook the adjustment carries, as with the shim
    assert output.split("--- link\n", 1)[1].strip() == "libcuda.so.1"
    assert "container probe: devices " in node.plugin.text()


def test_a_pod_asking_for_every_gpu_itself_gets_none(
    node: Node, tmp_path: Path, print_version: Any
) -> None:
    print_version(node.engine)
    _, _, output = run_pod(node.client, "", tmp_path / "all", {"NVIDIA_VISIBLE_DEVICES": "all"})
    probe = parse_probe(output)
    assert probe.gpu_uuids == [] and probe.gpu_nodes == set()
    assert probe.env["NVIDIA_VISIBLE_DEVICES"] == "void"  # stripped: no other injector honours it
    assert "stripped pod nvhook-test/" in node.plugin.text()
    assert "NVIDIA_VISIBLE_DEVICES=all not honoured" in node.plugin.text()


def test_with_the_runtime_class_too_a_container_is_served_once(
    node: Node, shim: Shim, gpus: PluginClient, profile: Profile, tmp_path: Path, print_version: Any
) -> None:
    print_version(node.engine)
    first, allocation = allocate_two(gpus, profile)
    _, container, output = run_pod(
        node.client, "nvidia", tmp_path / "both", {}, allocation=allocation
    )
    assert parse_probe(output).gpu_uuids == first
    [ours] = shim.log_records(container)
    assert (ours["command"], ours["written"], ours["devices"]) == ("create", False, "")


def test_plugin_stopped_means_no_gpus_and_restarted_serves_again(
    node: Node, gpus: PluginClient, profile: Profile, tmp_path: Path, print_version: Any
) -> None:
    print_version(node.engine)
    assert node.plugin.stop() == 0
    assert node.plugin.text().rstrip().endswith("nvhook nri-plugin: stopped")
    first, allocation = allocate_two(gpus, profile)
    _, _, output = run_pod(node.client, "", tmp_path / "gone", {}, allocation=allocation)
    probe = parse_probe(output)
    assert probe.gpu_uuids == [] and probe.gpu_nodes == set()  # never other GPUs
    node.plugin.start()
    node.plugin.wait_registered(2)
    _, _, output = run_pod(node.client, "", tmp_path / "back", {}, allocation=allocation)
    assert parse_probe(output).gpu_uuids == first


def test_refuse_fails_the_create_with_the_plugin_s_one_line_reason(
    node: Node, shim: Shim, tmp_path: Path, print_version: Any
) -> None:
    """``nri.refused = "refuse"``: containerd fails the CRI create with the plugin's reason
    (what kubelet shows in the pod's events), and starts nothing."""
    print_version(node.engine)
    refusing = shim.with_config(
        f"nri-refuse-{node.engine.name}",
        policy={"accept_env_unprivileged": False, "accept_volume_mounts": True},
        nri={"socket": str(node.plugin.socket), "refused": "refuse"},
    ).config
    registered = node.plugin.text().count(" registered as ")
    assert node.plugin.stop() == 0
    node.plugin.env["NVHOOK_CONFIG"] = str(refusing)
    node.plugin.start()
    node.plugin.wait_registered(registered + 1)
    try:
        pod = pod_config(unique_id("pod"), namespace=NAMESPACE, log_directory=tmp_path)
        sandbox = node.client.run_pod_sandbox(pod, "")
        try:
            config = container_config(
                "probe", BUSYBOX_IMAGE, ["/bin/true"],
                envs={"PATH": PATH, "NVIDIA_VISIBLE_DEVICES": "all"},
            )  # fmt: skip
            with pytest.raises(ContainerEngineError) as refused:
                node.client.create_container(sandbox, config, pod)
        finally:
            node.client.stop_pod_sandbox(sandbox)
            node.client.remove_pod_sandbox(sandbox)
    finally:
        assert node.plugin.stop() == 0
        node.plugin.env["NVHOOK_CONFIG"] = str(nri_config(shim, node.engine, node.plugin.socket))
        node.plugin.start()
        node.plugin.wait_registered(registered + 2)
    message = str(refused.value)
    assert f"nvhook: pod {NAMESPACE}/" in message
    assert "container probe: NVIDIA_VISIBLE_DEVICES=all not honoured" in message
    assert "refused pod nvhook-test/" in node.plugin.text()


def test_the_plugin_reconnects_when_containerd_restarts(
    node: Node, gpus: PluginClient, profile: Profile, tmp_path: Path, print_version: Any
) -> None:
    print_version(node.engine)
    registered = node.plugin.text().count(" registered as ")
    node.daemon.stop()
    node.daemon.start()
    node.plugin.wait_registered(registered + 1)
    first, allocation = allocate_two(gpus, profile)
    _, _, output = run_pod(node.client, "", tmp_path / "again", {}, allocation=allocation)
    assert parse_probe(output).gpu_uuids == first


def test_an_allowed_pod_annotation_is_a_cdi_name_on_2_1_and_edits_on_1_7(
    node: Node, profile: Profile, tmp_path: Path, print_version: Any
) -> None:
    """NVIDIA's NRI plugin's annotation, from a namespace in nri.annotation_namespaces: 2.1's
    NRI (0.8) resolves the CDI name from /etc/cdi itself; 1.7's (0.6.1) cannot, so the plugin
    resolves it and adjusts devices, mounts, env and hooks."""
    print_version(node.engine)
    annotations = {"nvidia.cdi.k8s.io/container.probe": "nvidia.com/gpu=1"}
    _, _, output = run_pod(
        node.client, "", tmp_path / "annotated", {}, namespace=NAMESPACE, annotations=annotations
    )
    probe = parse_probe(output)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [1])
    assert probe.gpu_nodes == {"/dev/nvidia1"}
    how = "CDI names" if node.engine.major == 2 else "edits"
    assert f"container probe: devices nvidia.com/gpu=1 ({how})" in node.plugin.text()


def test_the_device_plugin_s_cdi_annotations_are_served_too(
    node: Node, gpus_cdi: PluginClient, profile: Profile, tmp_path: Path, print_version: Any
) -> None:
    """``cdi-annotations``: kubelet's container annotations reach the plugin (containerd puts
    them in NRI's container), as CDI names on 2.1, as edits on 1.7."""
    print_version(node.engine)
    first, allocation = allocate_two(gpus_cdi, profile)
    [key] = allocation["annotations"]
    assert key.startswith("cdi.k8s.io/nvhook-device-plugin_")
    _, _, output = run_pod(node.client, "", tmp_path / "cdi", {}, allocation=allocation)
    assert parse_probe(output).gpu_uuids == first
    how = "CDI names" if node.engine.major == 2 else "edits"
    wanted = ",".join(f"nvidia.com/gpu={u}" for u in first)
    assert f"container probe: devices {wanted} ({how})" in node.plugin.text()


def test_a_pod_s_own_annotations_get_nothing(
    node: Node, tmp_path: Path, print_version: Any
) -> None:
    """A pod's ``cdi.k8s.io/`` annotation does not reach its containers (containerd keeps pod
    annotations on the sandbox); NVIDIA's ``nvidia.cdi.k8s.io/container.NAME`` from a namespace
    not in ``nri.annotation_namespaces`` is stripped with a line saying so."""
    print_version(node.engine)
    annotations = {
        "cdi.k8s.io/mine": "nvidia.com/gpu=all",
        "nvidia.cdi.k8s.io/container.probe": "management.nvidia.com/gpu=all",
    }
    _, _, output = run_pod(
        node.client, "", tmp_path / "own", {}, namespace="other", annotations=annotations
    )
    probe = parse_probe(output)
    assert probe.gpu_uuids == [] and probe.gpu_nodes == set()
    assert (
        "container probe: pod annotation nvidia.cdi.k8s.io/container.probe not honoured: "
        "namespace other is not in nri.annotation_namespaces"
    ) in node.plugin.text()
