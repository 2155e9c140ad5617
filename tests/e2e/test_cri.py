"""Kubernetes' path: containerd's CRI plugin runs a pod with ``runtime_handler = "nvidia"``
through ``nvhook-runtime``, after ``nvhook runtime configure --runtime containerd`` has added
that runtime to its config.

The test talks CRI v1 as the kubelet does, with a client generated at test time by
grpcio-tools from ``tests/data/cri/nvhook_cri.proto`` (a field-exact subset of the
upstream API). containerd 1.6 is set up as docs/architecture.md section 6 says for this VM
(the harness's
``Containerd(cri=True)``: ``restrict_oom_score_adj``, ``default_runtime_name = "runc"``),
with a sandbox image whose entrypoint sleeps, host-network pods without a hostname, and the
shim's config in its environment (its shims, and so nvhook-runtime, inherit it).

A pod with the nvidia handler asking for GPU 1 sees exactly that GPU (the mock machine's
``nvidia-smi -L``, read from the container's CRI log); a pod with the default handler and
the same request sees none, and the shim never hears of it.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nvhook.cli import main
from nvhook.mock import Profile
from tests.e2e.conftest import PROBE, Shim, expected_smi_uuids, parse_probe
from tests.support.containers import (
    BUSYBOX_IMAGE,
    Containerd,
    in_ci,
    require,
    unique_id,
)

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]

PROTO = Path(__file__).parents[1] / "data" / "cri" / "nvhook_cri.proto"
PAUSE_IMAGE = "localhost/nvhook-pause:latest"
K8S = "k8s.io"
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # the busybox image sets none; kubelet adds none


@pytest.fixture(scope="module")
def cri(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, ModuleType]:
    """(messages, stubs) generated from the proto into a temp dir."""
    try:
        importlib.import_module("grpc")
        importlib.import_module("grpc_tools")
    except ImportError:
        reason = "grpcio and grpcio-tools are needed (pip install -e .[test])"
        if in_ci():
            pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)")
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("cri-stubs")
    subprocess.run(
        [
            sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO.parent}",
            f"--python_out={out}", f"--grpc_python_out={out}", PROTO.name,
        ],
        check=True,
    )  # fmt: skip
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("nvhook_cri_pb2"), importlib.import_module(
            "nvhook_cri_pb2_grpc"
        )
    finally:
        sys.path.remove(str(out))


def pause_image_tar(busybox_tar: Path, directory: Path) -> Path:
    """The busybox image with ``/bin/sleep 3600`` as entrypoint, as ``PAUSE_IMAGE``."""
    skopeo, umoci = require("skopeo"), require("umoci")
    directory.mkdir(parents=True, exist_ok=True)
    layout = directory / "oci"
    tar = directory / "pause.tar"
    for argv in (
        [skopeo, "--insecure-policy", "copy", "-q", f"docker-archive:{busybox_tar}",
         f"oci:{layout}:pause"],
        [umoci, "config", "--image", f"{layout}:pause", "--config.entrypoint", "/bin/sleep",
         "--config.cmd", "3600"],
        [skopeo, "--insecure-policy", "copy", "-q", f"oci:{layout}:pause",
         f"docker-archive:{tar}:{PAUSE_IMAGE}"],
    ):  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"{argv}: {done.stderr}"
    shutil.rmtree(layout)
    return tar


@pytest.fixture(scope="module")
def cri_containerd(
    shim: Shim, tmp_path_factory: pytest.TempPathFactory, busybox_image: Path
) -> Iterator[Containerd]:
    """containerd with CRI, its config given the ``nvidia`` runtime by ``nvhook runtime
    configure``, started with the shim's config in its environment."""
    require("runc")
    workdir = tmp_path_factory.mktemp("cri")
    pause = pause_image_tar(busybox_image, workdir / "pause")
    helper = Containerd(
        workdir / "containerd", cri=True, sandbox_image=PAUSE_IMAGE, env=shim.extra_env
    )
    args = ["--runtime", "containerd", "--config", str(helper.config), "--name", "nvidia"]
    args += ["--runtime-path", shim.binary, "--backup-dir", str(workdir / "backups")]
    assert main(["runtime", "configure", *args]) == 0
    with helper:
        helper.import_image(busybox_image, namespace=K8S)
        helper.import_image(pause, namespace=K8S)
        yield helper


class Cri:
    """A CRI v1 RuntimeService client on containerd's socket."""

    def __init__(self, address: str, modules: tuple[ModuleType, ModuleType]) -> None:
        import grpc

        self.pb, stubs = modules
        self.channel = grpc.insecure_channel(f"unix://{address}")
        self.stub: Any = stubs.RuntimeServiceStub(self.channel)

    def run_probe(self, handler: str, env: dict[str, str], logs: Path) -> tuple[str, str, str]:
        """Run a host-network pod with ``handler`` and one container running ``PROBE``;
        returns (sandbox id, container id, the container's output)."""
        pb = self.pb
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
        sandbox = self.stub.RunPodSandbox(
            pb.RunPodSandboxRequest(config=pod, runtime_handler=handler), timeout=60
        ).pod_sandbox_id
        try:
            config = pb.ContainerConfig(
                metadata=pb.ContainerMetadata(name="probe"),
                image=pb.ImageSpec(image=BUSYBOX_IMAGE),
                command=["/bin/sh", "-c", PROBE],
                envs=[pb.KeyValue(key=k, value=v) for k, v in {**env, "PATH": PATH}.items()],
                log_path="probe.log",
            )
            request = pb.CreateContainerRequest(
                pod_sandbox_id=sandbox, config=config, sandbox_config=pod
            )
            container = self.stub.CreateContainer(request, timeout=60).container_id
            self.stub.StartContainer(pb.StartContainerRequest(container_id=container), timeout=60)
            status = self._wait_exited(container)
            assert status.exit_code == 0, status
            return sandbox, container, _cri_log(logs / "probe.log")
        finally:
            self.stub.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sandbox), timeout=60)
            self.stub.RemovePodSandbox(
                pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox), timeout=60
            )

    def _wait_exited(self, container: str, timeout: float = 30) -> Any:
        pb = self.pb
        deadline = time.monotonic() + timeout
        while True:
            request = pb.ContainerStatusRequest(container_id=container)
            status = self.stub.ContainerStatus(request, timeout=30).status
            if status.state == pb.CONTAINER_EXITED:
                return status
            if time.monotonic() > deadline:
                pytest.fail(f"container {container} still not exited after {timeout}s: {status}")
            time.sleep(0.05)


def _cri_log(path: Path) -> str:
    """What the container wrote to stdout, from its CRI log file (``<time> <stream> <P|F>
    <text>`` lines, P for a partial line)."""
    out = []
    for line in path.read_text().splitlines():
        _, stream, tag, text = [*line.split(" ", 3), "", ""][:4]
        if stream == "stdout":
            out.append(text + ("\n" if tag == "F" else ""))
    return "".join(out)


@pytest.fixture
def client(cri_containerd: Containerd, cri: tuple[ModuleType, ModuleType]) -> Iterator[Cri]:
    helper = Cri(cri_containerd.address, cri)
    try:
        yield helper
    finally:
        helper.channel.close()


def test_runtime_handler_gives_the_pod_its_gpu(
    client: Cri, shim: Shim, profile: Profile, tmp_path: Path
) -> None:
    version = client.stub.Version(client.pb.VersionRequest(version="v1"), timeout=30)
    assert (version.runtime_name, version.runtime_api_version) == ("containerd", "v1")
    request = {"NVIDIA_VISIBLE_DEVICES": "1"}

    sandbox, container, output = client.run_probe("nvidia", request, tmp_path / "gpu")
    probe = parse_probe(output)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [1])
    assert probe.gpu_nodes == {"/dev/nvidia1"}
    assert "/dev/nvidiactl" in probe.nodes
    # both containers of the pod went through nvhook-runtime: the sandbox (pause) container
    # unchanged, ours with GPU 1
    [pause] = shim.log_records(sandbox)
    assert (pause["command"], pause["written"]) == ("create", False)
    [ours] = shim.log_records(container)
    assert (ours["command"], ours["written"], ours["devices"]) == ("create", True, "1")

    sandbox, container, output = client.run_probe("", request, tmp_path / "plain")
    probe = parse_probe(output)
    assert probe.gpu_uuids == [] and probe.gpu_nodes == set()
    assert probe.env["NVIDIA_VISIBLE_DEVICES"] == "1"  # asked, but runc does not listen
    assert shim.log_records(sandbox) == shim.log_records(container) == []
