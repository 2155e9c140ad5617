"""End to end: the DRA driver's claims reach containers through real containerd 2.1's CRI.

``nvhook dra-plugin`` runs as a process on the dgx-a100 mock (char nodes), the API-server
stand-in holds two allocated claims (two whole GPUs; one MIG device), and the kubelet
stand-in registers the driver and prepares both, then does what kubelet does with the
answers: creates a CRI pod per claim on containerd 2.1 (Debian unstable's, in a private
root) with ``CDIDevices`` = the returned CDI ids, under plain runc: no nvhook-runtime in the
path, containerd's own CDI resolves the driver's transient specs (its ``cdi_spec_dirs`` is
the driver's CDI directory). Each container's mock ``nvidia-smi -L`` lists exactly its
claim's devices; after unprepare the specs are gone.

The same for AMD: ``nvhook dra-plugin --vendor amd`` on the ``mi300x-8`` mock (CPX
partitions, char nodes) prepares a ``gpu.amd.com`` claim of one partition; the container
started with the returned CDI id sees exactly ``/dev/kfd`` and that partition's card and
render nodes (which open as far as the missing driver: ENXIO), and runs with the render
group the spec's ``additionalGids`` carries.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tomlkit

from nvhook.cri.client import CriClient
from nvhook.dra.prepare import spec_file
from nvhook.mock import Profile
from nvhook.mock.vendors import RENDER_GID
from nvhook.mock.vendors import create as create_vendor_mock
from tests.e2e.conftest import Shim, expected_smi_uuids, parse_probe
from tests.e2e.engines.conftest import Engine, private_root
from tests.e2e.engines.test_containerd import configure, restrict_oom_score_adj
from tests.e2e.test_cri import run_pod
from tests.nvhook.dra.conftest import allocated_claim
from tests.nvhook.dra.test_plugin import Daemon
from tests.support.engines import EngineContainerd
from tests.support.images import PAUSE_IMAGE, pause_image_tar
from tests.support.kubeapi import KubeApiServer

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]


@pytest.fixture(scope="module")
def containerd2(
    suite_root: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    yield from private_root(
        suite_root, tmp_path_factory, "containerd2-dra", "sid", ("containerd", "--version"), 2
    )


def test_claims_prepared_by_the_driver_run_in_containerd_2_through_cdi_devices(
    containerd2: Engine,
    shim: Shim,
    dgx: Path,
    profile: Profile,
    busybox_image: Path,
    tmp_path: Path,
    print_version: Callable[[Engine], None],
) -> None:
    print_version(containerd2)
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    config = tmp_path / "config.toml"
    shutil.copy(containerd2.root.lower / "etc/containerd/config.toml", config)
    configure(shim, config, "--enable-cdi")
    restrict_oom_score_adj(config)
    doc = tomlkit.parse(config.read_text())
    doc["plugins"]["io.containerd.grpc.v1.cri"]["cdi_spec_dirs"] = [str(cdi)]
    config.write_text(tomlkit.dumps(doc))
    settings = tmp_path / "nvhook.toml"
    settings.write_text(f'[host]\nroot = "{dgx}"\n')
    gpu0 = profile.gpu_by_minor(0)
    assert gpu0 is not None
    (mig,) = [m for m in gpu0.mig_devices if m.gi == 3 and m.ci == 0]

    with KubeApiServer() as kubeapi:
        two = kubeapi.put("resourceclaims", allocated_claim("two-gpus", ["gpu-2", "gpu-3"]))
        one = kubeapi.put("resourceclaims", allocated_claim("a-mig", ["gpu-0-mig-3-0"]))
        claims = [(c["metadata"]["namespace"], c["metadata"]["name"], c["metadata"]["uid"])
                  for c in (two, one)]  # fmt: skip
        sockets = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
        driver = Daemon(tmp_path, kubeapi, settings, sockets)
        driver.cdi = cdi
        kubelet = driver.start()
        try:
            answer = kubelet.prepare(*claims).claims
            ids = {
                uid: [i for d in answer[uid].devices for i in d.cdi_device_ids]
                for _, _, uid in claims
            }
            daemon = EngineContainerd(containerd2.root, tmp_path, config, env=shim.extra_env)
            dump = daemon.dump()
            sandbox = dump["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"]
            pause = pause_image_tar(busybox_image, tmp_path / "pause")
            with daemon:
                daemon.ctr("images", "import", str(busybox_image))
                daemon.ctr("images", "import", str(pause))
                daemon.ctr("images", "tag", PAUSE_IMAGE, sandbox)
                with CriClient(daemon.address) as client:
                    outputs = {
                        uid: run_pod(
                            client, "", tmp_path / uid, {}, allocation={"cdi_devices": ids[uid]}
                        )[2]
                        for _, _, uid in claims
                    }
            gpus = parse_probe(outputs[claims[0][2]])
            assert gpus.gpu_uuids == expected_smi_uuids(profile, [2, 3])
            assert gpus.gpu_nodes == {"/dev/nvidia2", "/dev/nvidia3"}
            assert gpus.mig_uuids == []
            migs = parse_probe(outputs[claims[1][2]])
            assert migs.gpu_uuids == [gpu0.uuid]
            assert migs.mig_uuids == [mig.uuid]
            assert kubeapi.rejected == []
            unprepared = kubelet.unprepare(*claims).claims
            assert all(unprepared[uid].error == "" for _, _, uid in claims)
            assert not any(os.path.exists(spec_file(str(cdi), uid)) for _, _, uid in claims)
        finally:
            kubelet.close()
            driver.stop()
            shutil.rmtree(sockets, ignore_errors=True)


def test_an_amd_claim_prepared_by_the_amd_driver_runs_in_containerd_2_through_cdi_devices(
    containerd2: Engine,
    shim: Shim,
    busybox_image: Path,
    tmp_path: Path,
    print_version: Callable[[Engine], None],
) -> None:
    print_version(containerd2)
    root = create_vendor_mock("mi300x-8", tmp_path / "amd", nodes="char").root
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    config = tmp_path / "config.toml"
    shutil.copy(containerd2.root.lower / "etc/containerd/config.toml", config)
    configure(shim, config, "--enable-cdi")
    restrict_oom_score_adj(config)
    doc = tomlkit.parse(config.read_text())
    doc["plugins"]["io.containerd.grpc.v1.cri"]["cdi_spec_dirs"] = [str(cdi)]
    config.write_text(tomlkit.dumps(doc))
    settings = tmp_path / "nvhook.toml"
    settings.write_text(f'[host]\nroot = "{root}"\n')
    look = (
        "ls /dev /dev/dri; echo '--- gids'; id -G; echo '--- open'; "
        "cat /dev/dri/renderD137 2>&1; true"
    )

    with KubeApiServer() as kubeapi:
        stored = kubeapi.put(
            "resourceclaims", allocated_claim("a-partition", ["gpu-10-137"], driver="gpu.amd.com")
        )
        claim = (stored["metadata"]["namespace"], "a-partition", stored["metadata"]["uid"])
        sockets = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
        driver = Daemon(tmp_path, kubeapi, settings, sockets, vendor="amd")
        driver.cdi = cdi
        kubelet = driver.start()
        try:
            assert kubelet.info.name == "gpu.amd.com"
            (device,) = kubelet.prepare(claim).claims[claim[2]].devices
            ids = list(device.cdi_device_ids)
            assert ids == [f"k8s.gpu.amd.com/claim={claim[2]}-gpu-10-137"]
            daemon = EngineContainerd(containerd2.root, tmp_path, config, env=shim.extra_env)
            dump = daemon.dump()
            sandbox = dump["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"]
            pause = pause_image_tar(busybox_image, tmp_path / "pause")
            with daemon:
                daemon.ctr("images", "import", str(busybox_image))
                daemon.ctr("images", "import", str(pause))
                daemon.ctr("images", "tag", PAUSE_IMAGE, sandbox)
                with CriClient(daemon.address) as client:
                    *_, output = run_pod(
                        client, "", tmp_path / "pod", {}, allocation={"cdi_devices": ids},
                        command=look,
                    )  # fmt: skip
            listing, _, rest = output.partition("--- gids\n")
            gids, _, opened = rest.partition("--- open\n")
            names = set(listing.split())
            assert "kfd" in names
            assert {n for n in names if n.startswith(("card", "renderD"))} == {
                "card10",
                "renderD137",
            }
            assert str(RENDER_GID) in gids.split()  # the spec's additionalGids
            assert "No such device or address" in opened, opened
            assert kubeapi.rejected == []
            assert kubelet.unprepare(claim).claims[claim[2]].error == ""
            assert not os.path.exists(spec_file(str(cdi), claim[2], "gpu.amd.com"))
        finally:
            kubelet.close()
            driver.stop()
            shutil.rmtree(sockets, ignore_errors=True)
