"""The Kubernetes chain for another vendor: the device plugin on the ``mi300x-8`` mock (no
NVIDIA driver) → the kubelet stand-in (built from kubelet's real v1beta1 proto) allocates
``amd.com/gpu`` → CRI → containerd 1.6 → nvhook-runtime (jit) → a container that sees exactly
``/dev/kfd`` and its partition's card and render nodes, which open as far as the driver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nvhook.cri.client import CriClient
from nvhook.deviceplugin.model import PluginConfig
from nvhook.deviceplugin.server import create_container_config
from nvhook.mock.vendors import create
from tests.e2e.conftest import Shim
from tests.e2e.test_cri import containerd_with_nvidia, run_pod
from tests.nvhook.deviceplugin.test_server import serving
from tests.support.containers import Containerd, require_root

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]


@pytest.fixture(scope="module")
def amd_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_root()
    return create("mi300x-8", tmp_path_factory.mktemp("k8s-amd") / "root", nodes="char").root


@pytest.fixture(scope="module")
def amd_containerd(
    shim: Shim, amd_root: Path, tmp_path_factory: pytest.TempPathFactory, busybox_image: Path
) -> Iterator[Containerd]:
    config = shim.with_config("k8s-amd", host={"root": str(amd_root)})
    with containerd_with_nvidia(config, tmp_path_factory.mktemp("k8s"), busybox_image) as helper:
        yield helper


def test_allocated_amd_partition_is_the_containers(
    amd_containerd: Containerd, amd_root: Path, tmp_path: Path
) -> None:
    with serving(amd_root, PluginConfig(), prefix="nvh-k8s-amd-") as served:
        [request] = served.kubelet.wait_registered(1)
        assert request.resource_name == "amd.com/gpu"
        client = served.kubelet.client(request)
        client.watch()
        assert len(client.wait_for(lambda d: len(d) == 64)) == 64
        allocation = create_container_config(client.allocate(["9"]).container_responses[0])
        client.close()
    assert allocation["envs"] == {"AMD_VISIBLE_DEVICES": "9"}
    look = "ls /dev /dev/dri; echo '--- open'; cat /dev/dri/renderD137 2>&1; true"
    with CriClient(amd_containerd.address) as cri:
        *_, output = run_pod(
            cri, "nvidia", tmp_path / "amd", {}, allocation=allocation, command=look
        )
    listing, _, opened = output.partition("--- open\n")
    names = set(listing.split())
    assert "kfd" in names
    assert {n for n in names if n.startswith(("card", "renderD"))} == {"card10", "renderD137"}
    assert "No such device or address" in opened, opened
