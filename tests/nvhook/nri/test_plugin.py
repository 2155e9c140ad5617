"""The NRI plugin's decisions (nvhook/nri/inject.py) and calls (nvhook/nri/plugin.py), on the
mock DGX A100, with NRI's messages built from the vendored api.proto; the daemon against a
runtime stand-in on a socketpair (the real containerd: tests/e2e/engines/test_nri.py)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvhook.nri.inject import decide_container
from nvhook.nri.pb import api_pb2, ttrpc_pb2
from nvhook.nri.plugin import PLUGIN_SERVICE, NriPlugin, applies_cdi_names, runtime_nri
from nvhook.nri.ttrpc import (
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    Code,
    RpcError,
    encode_message,
    mux_frames,
)
from nvhook.settings import Settings, defaults

api: Any = api_pb2
tt: Any = ttrpc_pb2
DEVICE_LIST = "/var/run/nvidia-container-devices"


@pytest.fixture
def settings(mock_machine: Callable[..., Path]) -> Settings:
    """Kubernetes' policy on the mock: image env not trusted, the device plugin's mounts are."""
    return defaults()._replace(
        host_root=str(mock_machine("dgx-a100")),
        policy_accept_env_unprivileged=False,
        policy_accept_volume_mounts=True,
        nri_annotation_namespaces=("trusted",),
        nri_management_namespaces=("monitoring",),
    )


def pod(namespace: str = "team", annotations: dict[str, str] | None = None) -> Any:
    return api.PodSandbox(id="p1", name="job", namespace=namespace, annotations=annotations or {})


def container(env: tuple[str, ...] = (), mounts: tuple[str, ...] = (), **kw: Any) -> Any:
    return api.Container(
        id="c1",
        name="cuda",
        env=["PATH=/bin", *env],
        mounts=[
            api.Mount(destination=f"{DEVICE_LIST}/{m}", source="/dev/null", type="bind")
            for m in mounts
        ],
        **kw,
    )


def env_of(adjust: Any) -> dict[str, str]:
    return {kv.key: kv.value for kv in adjust.env}


def test_an_allocation_becomes_device_mount_env_and_hook_adjustments(settings: Settings) -> None:
    verdict = decide_container(pod(), container(mounts=("0", "3")), settings, cdi_capable=True)
    adjust = verdict.adjust
    assert not verdict.refused and verdict.stripped == ()
    nodes = {d.path: (d.type, d.major, d.minor) for d in adjust.linux.devices}
    assert nodes["/dev/nvidia0"] == ("c", 195, 0) and nodes["/dev/nvidia3"] == ("c", 195, 3)
    assert "/dev/nvidia1" not in nodes and "/dev/nvidiactl" in nodes
    assert env_of(adjust)["NVIDIA_VISIBLE_DEVICES"] == "void"  # a shim behind adds nothing
    assert any("libcuda.so" in m.destination for m in adjust.mounts)
    [hook] = adjust.hooks.create_container
    assert hook.path.endswith("nvhook-hook")
    assert list(adjust.CDI_devices) == []  # jit: plain ids, not CDI names


def test_nothing_asked_adjusts_nothing(settings: Settings) -> None:
    verdict = decide_container(pod(), container(), settings, cdi_capable=True)
    assert verdict.adjust == api.ContainerAdjustment() and verdict.stripped == ()
    assert verdict.devices == ""


def test_a_pod_s_own_visible_devices_is_stripped_with_a_reason(settings: Settings) -> None:
    verdict = decide_container(
        pod(), container(("NVIDIA_VISIBLE_DEVICES=all",)), settings, cdi_capable=True
    )
    assert list(verdict.adjust.linux.devices) == []
    assert env_of(verdict.adjust) == {"NVIDIA_VISIBLE_DEVICES": "void"}
    [line] = verdict.stripped
    assert line.startswith("pod team/job container cuda: NVIDIA_VISIBLE_DEVICES=all not honoured")


def test_refuse_fails_the_create_instead(settings: Settings) -> None:
    refusing = settings._replace(nri_refused="refuse")
    verdict = decide_container(
        pod(), container(("NVIDIA_VISIBLE_DEVICES=0",)), refusing, cdi_capable=True
    )
    assert verdict.refused.startswith("pod team/job container cuda: NVIDIA_VISIBLE_DEVICES=0")
    assert verdict.adjust == api.ContainerAdjustment()


def test_the_allocation_wins_over_the_image_s_env_without_complaint(settings: Settings) -> None:
    verdict = decide_container(
        pod(), container(("NVIDIA_VISIBLE_DEVICES=all",), mounts=("2",)), settings, cdi_capable=True
    )
    assert verdict.stripped == ()
    gpus = {d.path for d in verdict.adjust.linux.devices if d.path[11:].isdigit()}
    assert gpus == {"/dev/nvidia2"}


def test_nvidia_s_pod_annotation_only_from_an_allowed_namespace(settings: Settings) -> None:
    key = "nvidia.cdi.k8s.io/container.cuda"
    tuple_spec = {key: "nvidia.com/gpu=1"}
    verdict = decide_container(pod("team", tuple_spec), container(), settings, cdi_capable=True)
    assert verdict.adjust.CDI_devices == [] and list(verdict.adjust.linux.devices) == []
    assert "namespace team is not in nri.annotation_namespaces" in verdict.stripped[0]
    cdi_dir = Path(settings.host_root) / "cdi"
    cdi_dir.mkdir(exist_ok=True)
    from nvhook.cli import main

    assert (
        main(["cdi", "generate", "--root", settings.host_root, "--output", str(cdi_dir / "n.json")])
        == 0
    )
    with_specs = settings._replace(cdi_spec_dirs=(str(cdi_dir),))
    verdict = decide_container(
        pod("trusted", tuple_spec), container(), with_specs, cdi_capable=True
    )
    assert [d.name for d in verdict.adjust.CDI_devices] == ["nvidia.com/gpu=1"]
    assert verdict.stripped == ()
    # a runtime that cannot apply CDI names gets the spec's edits instead
    verdict = decide_container(
        pod("trusted", tuple_spec), container(), with_specs, cdi_capable=False
    )
    assert verdict.adjust.CDI_devices == []
    assert "/dev/nvidia1" in {d.path for d in verdict.adjust.linux.devices}


def test_every_gpu_asked_by_the_pod_itself_only_from_management_namespaces(
    settings: Settings,
) -> None:
    trusting = settings._replace(policy_accept_env_unprivileged=True)
    verdict = decide_container(
        pod("team"), container(("NVIDIA_VISIBLE_DEVICES=all",)), trusting, cdi_capable=False
    )
    assert list(verdict.adjust.linux.devices) == []
    assert "namespace team is not in nri.management_namespaces" in verdict.stripped[0]
    verdict = decide_container(
        pod("monitoring"), container(("NVIDIA_VISIBLE_DEVICES=all",)), trusting, cdi_capable=False
    )
    assert {"/dev/nvidia0", "/dev/nvidia7"} <= {d.path for d in verdict.adjust.linux.devices}


def test_a_request_that_cannot_be_served_refuses_with_the_shim_s_error(
    settings: Settings,
) -> None:
    verdict = decide_container(pod(), container(mounts=("99",)), settings, cdi_capable=True)
    assert verdict.refused.startswith("pod team/job container cuda: ")
    assert "99" in verdict.refused


def test_runtime_versions_give_the_nri_of_nri_s_table() -> None:
    assert runtime_nri("containerd", "1.7.24~ds1", "") == (0, 6)
    assert runtime_nri("containerd", "2.1.9+unknown", "") == (0, 8)
    assert runtime_nri("containerd", "v2.2.0", "") == (0, 10)
    assert runtime_nri("cri-o", "1.34.0", "v0.11.0") == (0, 11)
    assert runtime_nri("other", "9", "") == (0, 0)
    assert applies_cdi_names("containerd", "2.1.9+unknown")
    assert not applies_cdi_names("containerd", "2.0.5")
    assert not applies_cdi_names("containerd", "1.7.30")


def call(plugin: NriPlugin, method: str, message: Any) -> bytes:
    return plugin.handlers()[f"{PLUGIN_SERVICE}/{method}"](message.SerializeToString())


def configured(settings: Settings, name: str, version: str, nri: str = "") -> tuple[NriPlugin, Any]:
    plugin = NriPlugin(settings, log=lambda line: None)
    reply = api.ConfigureResponse()
    request = api.ConfigureRequest(runtime_name=name, runtime_version=version, NRI_version=nri)
    reply.ParseFromString(call(plugin, "Configure", request))
    return plugin, reply


def test_configure_subscribes_only_to_events_the_runtime_knows(settings: Settings) -> None:
    create = 1 << (api.CREATE_CONTAINER - 1)
    validate = 1 << (api.VALIDATE_CONTAINER_ADJUSTMENT - 1)
    plugin, reply = configured(settings, "containerd", "1.7.24~ds1")
    assert reply.events == create and not plugin.cdi_capable
    plugin, reply = configured(settings, "containerd", "2.1.9+unknown")
    assert reply.events == create and plugin.cdi_capable
    _, reply = configured(settings, "containerd", "2.2.1", "v0.11.0")
    assert reply.events == create | validate


def test_create_container_answers_the_adjustment_or_refuses(settings: Settings) -> None:
    lines: list[str] = []
    plugin = NriPlugin(settings._replace(nri_refused="refuse"), log=lines.append)
    reply = api.CreateContainerResponse()
    request = api.CreateContainerRequest(pod=pod(), container=container(mounts=("1",)))
    reply.ParseFromString(call(plugin, "CreateContainer", request))
    assert "/dev/nvidia1" in {d.path for d in reply.adjust.linux.devices}
    request = api.CreateContainerRequest(
        pod=pod(), container=container(("NVIDIA_VISIBLE_DEVICES=all",))
    )
    with pytest.raises(RpcError) as refused:
        call(plugin, "CreateContainer", request)
    assert refused.value.code == Code.PERMISSION_DENIED
    assert refused.value.message.startswith("nvhook: pod team/job container cuda: ")
    assert lines[-1].startswith("refused pod team/job")


def test_validation_refuses_nvidia_nodes_the_allocation_did_not_grant(settings: Settings) -> None:
    plugin, _ = configured(settings, "containerd", "2.2.1", "v0.11.0")
    other = api.ContainerAdjustment()
    other.linux.devices.append(api.LinuxDevice(path="/dev/nvidia5", type="c", major=195, minor=5))
    reply = api.ValidateContainerAdjustmentResponse()
    request = api.ValidateContainerAdjustmentRequest(
        pod=pod(), container=container(mounts=("1",)), adjust=other
    )
    reply.ParseFromString(call(plugin, "ValidateContainerAdjustment", request))
    assert reply.reject and "adds /dev/nvidia5, which the allocation did not grant" in reply.reason
    granted = api.ContainerAdjustment()
    granted.linux.devices.append(api.LinuxDevice(path="/dev/nvidia1", type="c", major=195, minor=1))
    request.adjust.CopyFrom(granted)
    reply.ParseFromString(call(plugin, "ValidateContainerAdjustment", request))
    assert not reply.reject
    # another plugin's CDI names: NVIDIA's refused unless granted, others none of its business
    names = api.ContainerAdjustment()
    names.CDI_devices.append(api.CDIDevice(name="management.nvidia.com/gpu=all"))
    names.CDI_devices.append(api.CDIDevice(name="vendor.example/nic=0"))
    request.adjust.CopyFrom(names)
    reply.ParseFromString(call(plugin, "ValidateContainerAdjustment", request))
    assert reply.reject and reply.reason.endswith(
        "adds management.nvidia.com/gpu=all, which the allocation did not grant"
    )


def test_every_plugin_method_is_answered(settings: Settings) -> None:
    plugin = NriPlugin(settings, log=lambda line: None)
    methods = {m.name for m in api.DESCRIPTOR.services_by_name["Plugin"].methods}
    assert {k.split("/")[1] for k in plugin.handlers()} == methods
    assert call(plugin, "StopContainer", api.StopContainerRequest()) == b""
    # a split sync (NRI 0.8's "more"): answered with the same flag and no updates, or the
    # runtime closes the plugin ("plugin does not handle split sync requests")
    for more in (True, False):
        reply = api.SynchronizeResponse()
        reply.ParseFromString(call(plugin, "Synchronize", api.SynchronizeRequest(more=more)))
        assert (reply.more, list(reply.update)) == (more, [])


def test_a_bad_index_or_socket_is_a_config_error(settings: Settings) -> None:
    from nvhook.errors import ConfigError

    with pytest.raises(ConfigError, match=r"nri\.plugin_index must be two digits"):
        NriPlugin(settings._replace(nri_plugin_index="7"), log=print)
    with pytest.raises(ConfigError, match=r"nri\.socket is empty"):
        NriPlugin(settings._replace(nri_socket=""), log=print)


class Runtime:
    """The runtime's side of one connection, by hand: register, configure, hang up."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        sock.settimeout(5)

    def read(self) -> tuple[int, int, int, bytes]:
        import struct

        while True:
            if len(self.buffer) >= 18:
                conn, length = struct.unpack(">II", self.buffer[:8])
                size, stream, type_, _ = struct.unpack(">IIBB", self.buffer[8:18])
                assert size + 10 == length  # small messages: one frame each
                if len(self.buffer) >= 8 + length:
                    payload = self.buffer[18 : 8 + length]
                    self.buffer = self.buffer[8 + length :]
                    return conn, stream, type_, payload
            data = self.sock.recv(65536)
            assert data
            self.buffer += data

    def serve_registration(self) -> Any:
        conn, stream, type_, payload = self.read()
        assert (conn, type_) == (RUNTIME_SERVICE_CONN, TYPE_REQUEST)
        request = tt.Request()
        request.ParseFromString(payload)
        assert (request.service, request.method) == (
            "nri.pkg.api.v1alpha1.Runtime",
            "RegisterPlugin",
        )
        register = api.RegisterPluginRequest()
        register.ParseFromString(request.payload)
        answer = tt.Response(status=tt.Status(code=0), payload=b"")
        self.sock.sendall(
            mux_frames(
                RUNTIME_SERVICE_CONN,
                encode_message(stream, TYPE_RESPONSE, 0, answer.SerializeToString()),
            )
        )
        configure = api.ConfigureRequest(runtime_name="containerd", runtime_version="2.1.9")
        body = tt.Request(
            service=PLUGIN_SERVICE, method="Configure", payload=configure.SerializeToString()
        )
        self.sock.sendall(
            mux_frames(
                PLUGIN_SERVICE_CONN, encode_message(1, TYPE_REQUEST, 1, body.SerializeToString())
            )
        )
        conn, stream, type_, payload = self.read()
        assert (conn, stream, type_) == (PLUGIN_SERVICE_CONN, 1, TYPE_RESPONSE)
        return register


def test_the_daemon_registers_and_reconnects_after_the_runtime_goes_away(
    settings: Settings,
) -> None:
    peers: list[socket.socket] = []

    def connect(path: str) -> socket.socket:
        assert path == "/run/test-nri.sock"
        ours, theirs = socket.socketpair()
        peers.append(theirs)
        return ours

    lines: list[str] = []
    plugin = NriPlugin(
        settings._replace(nri_socket="/run/test-nri.sock"), log=lines.append, connect=connect
    )
    stop = threading.Event()
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    thread.start()
    for round_ in range(2):
        while len(peers) <= round_:
            stop.wait(0.02)
        register = Runtime(peers[round_]).serve_registration()
        assert (register.plugin_name, register.plugin_idx) == ("nvhook", "10")
        peers[round_].close()  # the runtime restarts
    while plugin.registrations < 2:
        stop.wait(0.02)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    assert sum("registered as 10-nvhook on /run/test-nri.sock" in line for line in lines) == 2
    assert any(
        line.startswith("the runtime closed the NRI connection; reconnecting") for line in lines
    )


def test_a_socket_another_user_listens_on_is_refused(tmp_path: Path) -> None:
    """The runtime's NRI socket is root's: the plugin does not serve a socket of uid 65534."""
    import subprocess
    import sys

    from nvhook.nri.plugin import _unix_connect
    from nvhook.nri.ttrpc import ProtocolError
    from tests.support.basics import require_root

    require_root()
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="nvh-nri-"))  # pytest's tmp is root's, 0700
    shared.chmod(0o777)
    path = shared / "nri.sock"
    listen = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); "
        "s.listen(); print('up', flush=True); s.accept(); sys.stdin.read()"
    )
    argv = [sys.executable, "-c", listen, str(path)]
    opts: dict[str, Any] = {"stdout": subprocess.PIPE, "stdin": subprocess.PIPE, "text": True}
    try:
        with subprocess.Popen(argv, user=65534, **opts) as server:
            try:
                assert server.stdout is not None and server.stdout.readline() == "up\n"
                with pytest.raises(ProtocolError, match="is served by uid 65534, not root"):
                    _unix_connect(str(path))
            finally:
                server.kill()
    finally:
        shutil.rmtree(shared)
    ours = socket.socket(socket.AF_UNIX)
    ours.bind(str(tmp_path / "ours.sock"))
    ours.listen()
    _unix_connect(str(tmp_path / "ours.sock")).close()  # root's (ours): served
    ours.close()
