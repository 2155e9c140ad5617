"""Kubernetes' path: containerd's CRI plugin runs a pod with ``runtime_handler = "nvidia"``
through ``nvhook-runtime``, after ``nvhook runtime configure --runtime containerd`` has added
that runtime to its config.

The test talks CRI v1 as the kubelet does, with :class:`nvhook.cri.client.CriClient` (the
checked-in subset of the upstream API, ``nvhook/cri/v1/``, which ``nvhook demo --kubernetes``
uses too). containerd 1.6 is set up as docs/facts.md says for this VM
(:class:`nvhook.tools.containerd.Containerd` with ``cri=True``: ``restrict_oom_score_adj``,
``default_runtime_name = "runc"``), with a sandbox image whose entrypoint sleeps, host-network
pods without a hostname, and the shim's config in its environment (its shims, and so
nvhook-runtime, inherit it).

A pod with the nvidia handler asking for GPU 1 sees exactly that GPU (the mock machine's
``nvidia-smi -L``, read from the container's CRI log); a pod with the default handler and
the same request sees none, and the shim never hears of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from nvhook.cli import main
from nvhook.cri.client import CriClient, container_config, pod_config, read_log
from nvhook.mock import Profile
from tests.e2e.conftest import PROBE, Shim, expected_smi_uuids, parse_probe
from tests.support.basics import fail_on_engine_error
from tests.support.containers import BUSYBOX_IMAGE, Containerd, require, unique_id
from tests.support.images import PAUSE_IMAGE, pause_image_tar

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]

K8S = "k8s.io"
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # the busybox image sets none; kubelet adds none


@contextlib.contextmanager
def containerd_with_nvidia(shim: Shim, workdir: Path, busybox_image: Path) -> Iterator[Containerd]:
    """containerd with CRI, its config given the ``nvidia`` runtime by ``nvhook runtime
    configure``, started with the shim's config in its environment, the busybox and pause
    images imported into the CRI namespace."""
    require("runc")
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


@pytest.fixture(scope="module")
def cri_containerd(
    shim: Shim, tmp_path_factory: pytest.TempPathFactory, busybox_image: Path
) -> Iterator[Containerd]:
    with containerd_with_nvidia(shim, tmp_path_factory.mktemp("cri"), busybox_image) as helper:
        yield helper


def run_pod(
    client: CriClient,
    handler: str,
    logs: Path,
    envs: dict[str, str],
    *,
    allocation: Mapping[str, Any] | None = None,
    command: str = PROBE,
    namespace: str = "nvhook-test",
    annotations: Mapping[str, str] | None = None,
) -> tuple[str, str, str]:
    """Run a host-network pod (in ``namespace``, with ``annotations``) with ``handler`` and
    one container running ``command`` (its CRI config given ``envs`` and, as kubelet adds
    them, a device plugin's ``allocation``); returns (sandbox id, container id, the
    container's output)."""
    pod = pod_config(unique_id("pod"), namespace=namespace, log_directory=logs)
    pod.annotations.update(annotations or {})
    with fail_on_engine_error():
        sandbox = client.run_pod_sandbox(pod, handler)
        try:
            config = container_config(
                "probe",
                BUSYBOX_IMAGE,
                ["/bin/sh", "-c", command],
                envs={**envs, "PATH": PATH},
                allocation=allocation,
                log_path="probe.log",
            )
            container = client.create_container(sandbox, config, pod)
            client.start_container(container)
            status = client.wait_exited(container)
            assert status.exit_code == 0, status
            return sandbox, container, read_log(logs / "probe.log")
        finally:
            client.stop_pod_sandbox(sandbox)
            client.remove_pod_sandbox(sandbox)


@pytest.fixture
def client(cri_containerd: Containerd) -> Iterator[CriClient]:
    with CriClient(cri_containerd.address) as helper:
        yield helper


def test_runtime_handler_gives_the_pod_its_gpu(
    client: CriClient, shim: Shim, profile: Profile, tmp_path: Path
) -> None:
    version = client.version()
    assert (version.runtime_name, version.runtime_api_version) == ("containerd", "v1")
    request = {"NVIDIA_VISIBLE_DEVICES": "1"}

    sandbox, container, output = run_pod(client, "nvidia", tmp_path / "gpu", request)
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

    sandbox, container, output = run_pod(client, "", tmp_path / "plain", request)
    probe = parse_probe(output)
    assert probe.gpu_uuids == [] and probe.gpu_nodes == set()
    assert probe.env["NVIDIA_VISIBLE_DEVICES"] == "1"  # asked, but runc does not listen
    assert shim.log_records(sandbox) == shim.log_records(container) == []
