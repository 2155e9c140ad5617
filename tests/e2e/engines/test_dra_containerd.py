"""End to end: the DRA driver's claims reach containers through real containerd 2.1's CRI.

``nvhook dra-plugin`` runs as a process on the dgx-a100 mock (char nodes), the API-server
stand-in holds two allocated claims (two whole GPUs; one MIG device), and the kubelet
stand-in registers the driver and prepares both, then does what kubelet does with the
answers: creates a CRI pod per claim on containerd 2.1 (Debian unstable's, in a private
root) with ``CDIDevices`` = the returned CDI ids, under plain runc: no nvhook-runtime in the
path, containerd's own CDI resolves the driver's transient specs (its ``cdi_spec_dirs`` is
the driver's CDI directory). Each container's mock ``nvidia-smi -L`` lists exactly its
claim's devices; after unprepare the specs are gone. Then on a mock of its own, re-laid
while the driver runs (``nvhook.mock.mutate``): a claim of a new MIG device runs with exactly
that device (its new UUID), and the claim of a destroyed one is refused a repeat, unprepared.

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
from nvhook.mock.mutate import current_profile, relayout_mig
from nvhook.mock.vendors import RENDER_GID
from nvhook.mock.vendors import create as create_vendor_mock
from tests.e2e.conftest import PROBE, Shim, expected_smi_uuids, parse_probe
from tests.e2e.engines.conftest import Engine, private_root
from tests.e2e.engines.test_containerd import (
    configure,
    import_pod_images,
    restrict_oom_score_adj,
    sandbox_image,
)
from tests.e2e.test_cri import run_pod
from tests.nvhook.dra.conftest import allocated_claim
from tests.nvhook.dra.test_plugin import Daemon, wait_for
from tests.support.engines import EngineContainerd
from tests.support.kubeapi import KubeApiServer

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]


@pytest.fixture(scope="module")
def containerd2(
    suite_root: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    yield from private_root(
        suite_root, tmp_path_factory, "containerd2-dra", "sid", ("containerd", "--version"), 2
    )


def cdi_config(containerd2: Engine, shim: Shim, tmp_path: Path) -> tuple[Path, Path]:
    """The driver's CDI directory and a containerd config whose own CDI reads it."""
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    config = tmp_path / "config.toml"
    shutil.copy(containerd2.root.lower / "etc/containerd/config.toml", config)
    configure(shim, config, "--enable-cdi")
    restrict_oom_score_adj(config)
    doc = tomlkit.parse(config.read_text())
    doc["plugins"]["io.containerd.grpc.v1.cri"]["cdi_spec_dirs"] = [str(cdi)]
    config.write_text(tomlkit.dumps(doc))
    return cdi, config


def run_claim_pods(
    containerd2: Engine,
    shim: Shim,
    config: Path,
    busybox_image: Path,
    tmp_path: Path,
    ids: dict[str, list[str]],
    command: str | None = None,
) -> dict[str, str]:
    """One CRI pod per claim (uid → its CDI ids) on a private containerd, running ``command``
    (None: the probe); each one's output."""
    daemon = EngineContainerd(containerd2.root, tmp_path, config, env=shim.extra_env)
    dump = daemon.dump()
    sandbox = sandbox_image(dump, containerd2.major)
    with daemon:
        import_pod_images(daemon, busybox_image, sandbox, tmp_path)
        with CriClient(daemon.address) as client:
            return {
                uid: run_pod(
                    client,
                    "",
                    tmp_path / uid,
                    {},
                    allocation={"cdi_devices": cdis},
                    command=PROBE if command is None else command,
                )[2]
                for uid, cdis in ids.items()
            }


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
    cdi, config = cdi_config(containerd2, shim, tmp_path)
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
            outputs = run_claim_pods(containerd2, shim, config, busybox_image, tmp_path, ids)
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


def test_after_a_mig_relayout_a_claim_of_a_new_device_runs_it_in_containerd_2(
    containerd2: Engine,
    shim: Shim,
    make_mock_machine: Callable[..., Path],
    busybox_image: Path,
    tmp_path: Path,
    print_version: Callable[[Engine], None],
) -> None:
    """The driver follows a re-layout of a live mock (its own, with char nodes): the API's
    pool moves to a new generation with the new MIG devices, a claim of one of them runs
    under containerd 2.1's own CDI with exactly that MIG device, and the claim prepared on a
    destroyed one is refused a repeat but unprepares."""
    print_version(containerd2)
    root = make_mock_machine("dgx-a100", as_root_nodes=True)
    cdi, config = cdi_config(containerd2, shim, tmp_path)
    settings = tmp_path / "nvhook.toml"
    settings.write_text(f'[host]\nroot = "{root}"\n')

    def pool(kubeapi: KubeApiServer) -> tuple[int, list[str]]:
        slices = kubeapi.list("resourceslices")
        if len(slices) != 1:
            return -1, []
        spec = slices[0]["spec"]
        return spec["pool"]["generation"], [d["name"] for d in spec.get("devices", ())]

    with KubeApiServer() as kubeapi:
        sockets = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
        driver = Daemon(tmp_path, kubeapi, settings, sockets)
        driver.cdi = cdi
        kubelet = driver.start()
        try:
            old = kubeapi.put("resourceclaims", allocated_claim("old-mig", ["gpu-0-mig-4-0"]))
            old_ref = (
                old["metadata"]["namespace"],
                old["metadata"]["name"],
                old["metadata"]["uid"],
            )
            assert kubelet.prepare(old_ref).claims[old_ref[2]].error == ""
            before = wait_for(lambda: pool(kubeapi)[0] > 0 and pool(kubeapi), "the first pool")
            relayout_mig(root, 0, ["1g.10gb"] * 7)
            remade = {f"gpu-0-mig-{gi}-0" for gi in range(7, 14)}
            wait_for(
                lambda: (
                    (p := pool(kubeapi))[0] > before[0]
                    and {n for n in p[1] if n.startswith("gpu-0-")} == remade
                ),
                "the re-laid pool",
            )
            new = kubeapi.put("resourceclaims", allocated_claim("new-mig", ["gpu-0-mig-9-0"]))
            uid = new["metadata"]["uid"]
            answer = kubelet.prepare(("default", "new-mig", uid)).claims[uid]
            assert answer.error == ""
            ids = {uid: [i for d in answer.devices for i in d.cdi_device_ids]}
            outputs = run_claim_pods(containerd2, shim, config, busybox_image, tmp_path, ids)
            gpu0 = current_profile(root).gpu_by_minor(0)
            assert gpu0 is not None
            (mig,) = [m for m in gpu0.mig_devices if m.gi == 9 and m.ci == 0]
            seen = parse_probe(outputs[uid])
            assert seen.gpu_uuids == [gpu0.uuid]
            assert seen.mig_uuids == [mig.uuid]  # the new instance, by its new UUID
            refused = kubelet.prepare(old_ref).claims[old_ref[2]].error
            assert "device gpu-0-mig-4-0 is gone from node" in refused
            unprepared = kubelet.unprepare(old_ref, ("default", "new-mig", uid)).claims
            assert [c.error for c in unprepared.values()] == ["", ""]
            assert not any(os.path.exists(spec_file(str(cdi), u)) for u in (old_ref[2], uid))
            assert kubeapi.rejected == []
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
    cdi, config = cdi_config(containerd2, shim, tmp_path)
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
            outputs = run_claim_pods(
                containerd2, shim, config, busybox_image, tmp_path, {claim[2]: ids}, look
            )
            listing, _, rest = outputs[claim[2]].partition("--- gids\n")
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
