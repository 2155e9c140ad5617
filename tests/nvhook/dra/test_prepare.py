"""Prepare and unprepare: idempotent, crash-safe, one transient CDI spec per claim."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.dra.inventory import discover
from nvhook.dra.kubeapi import connect
from nvhook.dra.prepare import ClaimRef, Preparer, host_edits, spec_file
from nvhook.dra.state import load
from nvhook.planner import Host
from tests.nvhook.dra.conftest import NODE
from tests.support.kubeapi import KubeApiServer

AddClaim = Callable[..., tuple[str, str, str]]


@pytest.fixture
def make_preparer(
    tmp_path: Path, kubeapi: KubeApiServer, mock_machine: Callable[..., Path]
) -> Callable[..., Preparer]:
    """A Preparer on a mock machine (one per call: a new one is a restarted process)."""
    api = connect(str(kubeapi.kubeconfig(tmp_path / "kubeconfig")))
    made: dict[str, tuple[Host, object, object]] = {}

    def make(profile: str = "dgx-a100") -> Preparer:
        if profile not in made:
            host = Host(root=str(mock_machine(profile)))
            inventory = discover(host)
            made[profile] = (host, inventory, host_edits(host, inventory))
        _, inventory, edits = made[profile]
        (tmp_path / "state").mkdir(exist_ok=True)
        return Preparer(
            node=NODE,
            api=api,
            state_dir=str(tmp_path / "state"),
            cdi_root=str(tmp_path / "cdi"),
            inventory=inventory,  # type: ignore[arg-type]
            edits=edits,  # type: ignore[arg-type]
        )

    return make


def ref(claim: tuple[str, str, str]) -> ClaimRef:
    return ClaimRef(*claim)


def spec_of(p: Preparer, uid: str) -> dict[str, object]:
    return json.loads(Path(spec_file(p.cdi_root, uid)).read_text())  # type: ignore[no-any-return]


def test_one_gpu_claim_gets_its_transient_spec_and_cdi_id(
    make_preparer: Callable[..., Preparer], add_claim: AddClaim
) -> None:
    p = make_preparer()
    claim = add_claim("one", ["gpu-2"])
    uid = claim[2]
    result = p.prepare([ref(claim)])[uid]
    assert result.error == ""
    (d,) = result.devices
    assert (d.request, d.pool, d.device) == ("gpus", NODE, "gpu-2")
    assert d.cdi_ids == (f"k8s.gpu.nvidia.com/claim={uid}-gpu-2",)
    path = spec_file(p.cdi_root, uid)
    assert os.path.basename(path) == f"k8s.gpu.nvidia.com-claim_{uid}.json"
    assert os.stat(path).st_mode & 0o777 == 0o644
    spec = spec_of(p, uid)
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    (device,) = spec["devices"]  # type: ignore[misc]
    assert device["name"] == f"{uid}-gpu-2"
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == ["/dev/nvidia2"]
    assert spec["containerEdits"]["mounts"]  # type: ignore[index]  # the driver's files
    assert uid in load(p.state_dir).prepared  # checkpointed before the answer


def test_two_gpus_and_a_mig_device(
    make_preparer: Callable[..., Preparer], add_claim: AddClaim
) -> None:
    p = make_preparer()
    two, mig = add_claim("two", ["gpu-3", "gpu-4"]), add_claim("mig", ["gpu-0-mig-3-0"])
    results = p.prepare([ref(two), ref(mig)])
    assert [d.device for d in results[two[2]].devices] == ["gpu-3", "gpu-4"]
    devices = spec_of(p, two[2])["devices"]
    assert {
        d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]]  # type: ignore[index]
        for d in devices  # type: ignore[attr-defined]
    } == {f"{two[2]}-gpu-3": ["/dev/nvidia3"], f"{two[2]}-gpu-4": ["/dev/nvidia4"]}
    nodes = spec_of(p, mig[2])["devices"][0]["containerEdits"]["deviceNodes"]  # type: ignore[index]
    paths = [n["path"] for n in nodes]
    assert "/dev/nvidia0" in paths and any(x.startswith("/dev/nvidia-caps/") for x in paths)


def test_an_imex_channel_claim(make_preparer: Callable[..., Preparer], add_claim: AddClaim) -> None:
    p = make_preparer("gb200-imex")
    claim = add_claim("imex", ["channel-1"], request="channel")
    assert p.prepare([ref(claim)])[claim[2]].error == ""
    spec = spec_of(p, claim[2])
    nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]  # type: ignore[index]
    assert [n["path"] for n in nodes] == ["/dev/nvidia-caps-imex-channels/channel1"]
    assert "containerEdits" not in spec  # a channel comes with a GPU, whose spec has the driver


def test_a_repeated_prepare_gets_the_same_answer_without_the_api(
    make_preparer: Callable[..., Preparer], add_claim: AddClaim, kubeapi: KubeApiServer
) -> None:
    p = make_preparer()
    claim = add_claim("one", ["gpu-2"])
    first = p.prepare([ref(claim)])
    kubeapi.fail("GET", "/resourceclaims/", times=5)
    assert p.prepare([ref(claim)]) == first
    assert make_preparer().prepare([ref(claim)]) == first  # and from a new process


def test_unprepare_removes_exactly_that_claim_also_after_a_restart(
    make_preparer: Callable[..., Preparer], add_claim: AddClaim
) -> None:
    p = make_preparer()
    a, b = add_claim("a", ["gpu-2"]), add_claim("b", ["gpu-3"])
    p.prepare([ref(a), ref(b)])
    restarted = make_preparer()
    assert restarted.unprepare([ref(a)])[a[2]].error == ""
    assert not os.path.exists(spec_file(p.cdi_root, a[2]))
    assert os.path.exists(spec_file(p.cdi_root, b[2]))
    assert set(load(p.state_dir).prepared) == {b[2]}


def test_an_unknown_claim_unprepares_and_a_prepare_after_unprepare_is_refused(
    make_preparer: Callable[..., Preparer], add_claim: AddClaim
) -> None:
    p = make_preparer()
    claim = add_claim("late", ["gpu-2"])
    assert p.unprepare([ref(claim)])[claim[2]].error == ""  # never prepared: fine
    late = p.prepare([ref(claim)])[claim[2]]
    assert "unprepared" in late.error and claim[2] in late.error
    assert not os.path.exists(spec_file(p.cdi_root, claim[2]))
    again = add_claim("again", ["gpu-3"])
    p.prepare([ref(again)])
    p.unprepare([ref(again)])
    assert "unprepared" in make_preparer().prepare([ref(again)])[again[2]].error


def test_two_claims_for_one_exclusive_device_the_second_is_refused_naming_both(
    make_preparer: Callable[..., Preparer], add_claim: AddClaim
) -> None:
    p = make_preparer()
    first, second = add_claim("first", ["gpu-5"]), add_claim("second", ["gpu-5"])
    assert p.prepare([ref(first)])[first[2]].error == ""
    error = p.prepare([ref(second)])[second[2]].error
    assert "default/first" in error and "default/second" in error and "gpu-5" in error
    assert not os.path.exists(spec_file(p.cdi_root, second[2]))
    monitor = add_claim("monitor", ["gpu-5"], admin=True)  # adminAccess does not count
    (d,) = p.prepare([ref(monitor)])[monitor[2]].devices
    assert d.admin


def test_a_claim_for_another_node_or_device_is_refused(
    make_preparer: Callable[..., Preparer], add_claim: AddClaim
) -> None:
    p = make_preparer()
    other = add_claim("other", ["gpu-2"], pool="node-b")
    unknown = add_claim("unknown", ["gpu-1"])  # GPU 1 is in MIG mode: not published
    results = p.prepare([ref(other), ref(unknown)])
    assert "node-b" in results[other[2]].error and NODE in results[other[2]].error
    assert "gpu-1 is not a device" in results[unknown[2]].error
    assert not os.path.exists(p.cdi_root) or os.listdir(p.cdi_root) == []
    assert load(p.state_dir).prepared == {}


def test_a_claim_recreated_under_its_name_is_another_claim(
    make_preparer: Callable[..., Preparer], add_claim: AddClaim
) -> None:
    p = make_preparer()
    ns, name, _ = add_claim("x", ["gpu-2"])
    error = p.prepare([ClaimRef(ns, name, "0000-stale-uid")])["0000-stale-uid"].error
    assert "deleted and recreated" in error


def test_an_api_error_mid_prepare_leaves_nothing_half_written(
    make_preparer: Callable[..., Preparer], add_claim: AddClaim, kubeapi: KubeApiServer
) -> None:
    p = make_preparer()
    a, b = add_claim("a", ["gpu-2"]), add_claim("b", ["gpu-3"])
    kubeapi.fail("GET", "/resourceclaims/b", status=503)
    results = p.prepare([ref(a), ref(b)])
    assert set(results) == {a[2], b[2]}  # every claim answered
    assert results[a[2]].error == ""
    assert "503" in results[b[2]].error and "/resourceclaims/b" in results[b[2]].error
    assert not os.path.exists(spec_file(p.cdi_root, b[2]))
    assert set(load(p.state_dir).prepared) == {a[2]}
    assert p.prepare([ref(b)])[b[2]].error == ""  # kubelet's retry succeeds


def test_a_spec_the_checkpoint_does_not_know_is_swept_at_start(
    make_preparer: Callable[..., Preparer], tmp_path: Path
) -> None:
    p = make_preparer()
    os.makedirs(p.cdi_root)
    orphan = spec_file(p.cdi_root, "crashed-before-checkpoint")
    Path(orphan).write_text("{}")
    other = Path(p.cdi_root, "nvidia.json")
    other.write_text("{}")
    assert p.sweep() == [orphan]
    assert other.exists()


def test_a_claim_with_no_device_of_this_driver_prepares_to_nothing(
    make_preparer: Callable[..., Preparer], kubeapi: KubeApiServer
) -> None:
    from tests.nvhook.dra.conftest import allocated_claim

    p = make_preparer()
    body = allocated_claim("nic", ["eth0"])
    body["status"]["allocation"]["devices"]["results"][0]["driver"] = "net.example.com"
    meta = kubeapi.put("resourceclaims", body)["metadata"]
    claim = ClaimRef(meta["namespace"], meta["name"], meta["uid"])
    result = p.prepare([claim])[claim.uid]
    assert (result.error, result.devices) == ("", ())
    assert not os.path.exists(spec_file(p.cdi_root, claim.uid))
    assert claim.uid in load(p.state_dir).prepared


def test_a_device_remade_under_its_name_refuses_the_repeat_also_after_a_restart(
    make_preparer: Callable[..., Preparer], add_claim: AddClaim
) -> None:
    """The checkpoint keeps each device's UUID: a MIG device re-made under its name (a
    re-layout) is another device, and a repeated prepare must not hand it out."""
    p = make_preparer()
    claim = add_claim("mig", ["gpu-0-mig-3-0"])
    (prepared,) = p.prepare([ref(claim)])[claim[2]].devices
    assert prepared.uuid == p.inventory.device("gpu-0-mig-3-0").uuid  # type: ignore[union-attr]
    restarted = make_preparer()
    remade = tuple(
        d._replace(uuid="MIG-00000000-0000-4000-8000-000000000000")
        if d.name == "gpu-0-mig-3-0"
        else d
        for d in restarted.inventory.devices
    )
    restarted.update(restarted.inventory._replace(devices=remade), restarted.edits)
    (line,) = restarted.prepare([ref(claim)])[claim[2]].error.splitlines()
    assert "device gpu-0-mig-3-0 was re-created as another device (MIG-00000000-" in line
    assert f"was {prepared.uuid}) since the claim was prepared" in line
    assert set(restarted.gone()) == {"gpu-0-mig-3-0"}
    assert restarted.unprepare([ref(claim)])[claim[2]].error == ""
    assert restarted.gone() == {}
