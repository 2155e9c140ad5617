"""The DRA driver follows the node's GPUs without a restart (``--follow-gpus``): a dgx-a100 mock
of its own changed in place (:mod:`nvhook.mock.mutate`) while the driver serves the kubelet
stand-in (:class:`nvhook.dra.server.Kubelet`, from kubelet's real protos) and publishes to the
API-server stand-in (``tests/support/kubeapi.py``; neither kubelet nor kube-apiserver runs
here)."""

from __future__ import annotations

import functools
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nvhook.dra.inventory import DraDevice, Inventory
from nvhook.dra.kubeapi import connect
from nvhook.dra.plugin import DraPlugin, Publisher
from nvhook.dra.prepare import spec_file
from nvhook.dra.server import HEALTHY, UNHEALTHY, Kubelet
from nvhook.mock import create, load_profile
from nvhook.mock.mutate import add_gpu, relayout_mig, remove_gpu, set_driver
from nvhook.planner import Host
from tests.nvhook.dra.conftest import DRIVER, NODE
from tests.nvhook.dra.test_plugin import wait_for as plugin_wait_for
from tests.support.kubeapi import KubeApiServer

AddClaim = Callable[..., tuple[str, str, str]]
WHOLE = [f"gpu-{i}" for i in range(2, 8)]  # GPU 1 is in MIG mode without instances
UUID7 = load_profile("dgx-a100").gpus[7].uuid


def _pool(kubeapi: KubeApiServer) -> tuple[int, dict[str, str]]:
    """The stored pool's generation and devices (name → "uuid driverVersion"); -1 when torn
    or absent."""
    slices = [s for s in kubeapi.list("resourceslices") if s["spec"]["pool"]["name"] == NODE]
    if not slices or kubeapi.pool_problems(DRIVER, NODE):
        return -1, {}
    devices = {
        d["name"]: " ".join(
            (d["attributes"]["uuid"]["string"], d["attributes"]["driverVersion"]["version"])
        )
        for s in slices
        for d in s["spec"].get("devices", ())
    }
    return slices[0]["spec"]["pool"]["generation"], devices


class Health:
    """kubelet's side of ``NodeWatchResources``, read on a thread: the last complete list."""

    def __init__(self, kubelet: Kubelet) -> None:
        self.stream: Any = kubelet.watch_health()
        self.last: dict[str, tuple[Any, str]] = {}
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for message in self.stream:
                self.last = {d.device.device_name: (d.health, d.message) for d in message.devices}
        except Exception:  # cancelled at the end
            return

    def close(self) -> None:
        self.stream.cancel()
        self._thread.join(5)


#: asked more often than the daemon tests do: how soon a change is published is measured
wait_for = functools.partial(plugin_wait_for, timeout=10, poll=0.02)


@pytest.fixture
def sockets() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="draf-", dir="/tmp"))  # short: unix socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_relayout_gpu_loss_and_return_publish_new_pool_generations_without_restart(
    tmp_path: Path, sockets: Path, kubeapi: KubeApiServer, add_claim: AddClaim
) -> None:
    root = tmp_path / "root"
    create("dgx-a100", root, nodes="file")
    lines: list[str] = []
    plugin = DraPlugin(
        Host(root=str(root)),
        node=NODE,
        api=connect(str(kubeapi.kubeconfig(tmp_path / "kubeconfig"))),
        plugins_dir=str(sockets / "plugins"),
        registry_dir=str(sockets / "registry"),
        cdi_root=str(tmp_path / "cdi"),
        health_interval=0.2,
        rescan_interval=3600,  # not the way a change is seen here
        follow_interval=0.1,
        device_plugin_dir="",
        log=lines.append,
    )
    (sockets / "registry").mkdir()
    stop = threading.Event()
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    thread.start()
    kubelet = Kubelet(str(sockets / "registry"))
    health: Health | None = None
    seen: list[float] = []  # seconds from each mutation's end to its slices in the API
    whole: list[float] = []  # … from its start (the mock lays the changed machine out first)

    def follow(
        mutate: Callable[[], object], names: set[str], old: int, driver: str = "550.54.15"
    ) -> dict[str, str]:
        began = time.monotonic()
        mutate()  # the mock's renames are done when it returns (a driver: seconds of build)
        started = time.monotonic()
        gen, devices = wait_for(
            lambda: (
                (p := _pool(kubeapi))[0] > old
                and set(p[1]) == names
                and all(v.endswith(f" {driver}") for v in p[1].values())
                and p
            ),
            f"pool generation > {old} with {sorted(names)}, driver {driver}",
        )
        seen.append(time.monotonic() - started)
        whole.append(time.monotonic() - began)
        time.sleep(0.5)  # settled: no later generation, nothing else stored
        assert _pool(kubeapi) == (gen, devices), lines
        assert len(kubeapi.list("resourceslices")) == 1  # the pool's one slice, no other
        return devices

    try:
        kubelet.register(timeout=30)
        g0, first = wait_for(lambda: (p := _pool(kubeapi))[0] > 0 and p, "the first pool")
        assert set(first) == {"gpu-0-mig-2-0", "gpu-0-mig-3-0", "gpu-0-mig-4-0", *WHOLE}
        remade, lost, last = (
            add_claim("remade", ["gpu-0-mig-3-0"]),
            add_claim("lost", ["gpu-0-mig-4-0"]),
            add_claim("last", ["gpu-7"]),
        )
        answer = kubelet.prepare(remade, lost, last).claims
        assert [answer[c[2]].error for c in (remade, lost, last)] == ["", "", ""]
        health = Health(kubelet)
        wait_for(lambda: health.last.get("gpu-7") == (HEALTHY, ""), "gpu-7 healthy")

        # 2g.20gb (gi 3) + 3g.40gb (gi 2): gi 4 destroyed, gi 2 and 3 re-made: new UUIDs
        second = follow(
            lambda: relayout_mig(root, 0, ["2g.20gb", "3g.40gb"]),
            {"gpu-0-mig-2-0", "gpu-0-mig-3-0", *WHOLE},
            g0,
        )
        assert second["gpu-0-mig-3-0"] != first["gpu-0-mig-3-0"]
        assert any(
            "the node's GPUs changed: " in x and "MIG layout 2.0,3.0,4.0 -> 2.0,3.0" in x
            for x in lines
        ), lines
        assert any(
            "the node's devices changed: removed gpu-0-mig-4-0; "
            "changed gpu-0-mig-2-0, gpu-0-mig-3-0" in x
            for x in lines
        ), lines
        # kubelet asks again only after losing its state: the claims' devices are not theirs
        again = kubelet.prepare(remade, lost).claims
        assert "device gpu-0-mig-3-0 was re-created as another device" in again[remade[2]].error
        assert f"device gpu-0-mig-4-0 is gone from node {NODE}" in again[lost[2]].error
        gone = wait_for(
            lambda: health.last.get("gpu-0-mig-4-0", (None, ""))[0] == UNHEALTHY and health.last,
            "the lost MIG device reported unhealthy",
        )
        assert gone["gpu-0-mig-3-0"][0] == UNHEALTHY
        assert f"prepared for claim default/lost (uid {lost[2]})" in gone["gpu-0-mig-4-0"][1]
        for claim in (remade, lost):  # unprepare works for them: spec and state go
            assert kubelet.unprepare(claim).claims[claim[2]].error == ""
            assert not Path(spec_file(str(tmp_path / "cdi"), claim[2])).exists()
        wait_for(lambda: "gpu-0-mig-4-0" not in health.last, "the unprepared device's health")
        assert health.last["gpu-0-mig-3-0"] == (HEALTHY, "")  # the new device of that name

        third = follow(
            lambda: relayout_mig(root, 0, ["1g.10gb"] * 7),
            {*(f"gpu-0-mig-{gi}-0" for gi in range(7, 14)), *WHOLE},
            _pool(kubeapi)[0],
        )
        assert len(third) == 13

        follow(lambda: remove_gpu(root, 7), set(third) - {"gpu-7"}, _pool(kubeapi)[0])
        assert "is gone from node" in kubelet.prepare(last).claims[last[2]].error
        wait_for(
            lambda: health.last.get("gpu-7", (None, ""))[0] == UNHEALTHY, "gpu-7 reported gone"
        )
        assert kubelet.unprepare(last).claims[last[2]].error == ""

        fifth = follow(lambda: add_gpu(root, 7), set(third), _pool(kubeapi)[0])
        assert fifth["gpu-7"] == first["gpu-7"]  # the same GPU back
        assert not [x for x in lines if "still disagree" in x], lines  # each change settled

        # a driver upgrade under the same root: every device's driverVersion follows
        sixth = follow(
            lambda: set_driver(root, "550.90.07"), set(third), _pool(kubeapi)[0], "550.90.7"
        )
        assert sixth["gpu-7"] == first["gpu-7"].replace("550.54.15", "550.90.7")
        assert thread.is_alive()  # the same driver all along
        print(f"\nmutation's end -> new slices: {[round(s, 2) for s in seen]} s, median "
              f"{statistics.median(seen):.2f} s; from its start {[round(s, 2) for s in whole]}"
              )  # fmt: skip
        assert max(seen) < 3.0
    finally:
        if health is not None:
            health.close()
        kubelet.close()
        stop.set()
        thread.join(15)
    assert not thread.is_alive()


def _channels(n: int) -> Inventory:
    return Inventory(
        tuple(
            DraDevice(
                name=f"channel-{i}",
                kind="channel",
                channel=i,
                attributes={"type": {"string": "channel"}, "id": {"int": i}},
            )
            for i in range(n)
        )
    )


def test_the_inventory_must_agree_with_what_the_watcher_saw(tmp_path: Path) -> None:
    """During a re-layout /proc and NVML are read at different moments: the inventory is
    read again until NVML's view is the watcher's."""
    from nvhook.dra.inventory import discover
    from nvhook.dra.plugin import disagreement
    from nvhook.watch import snapshot

    root = tmp_path / "root"
    create("dgx-a100", root, nodes="file")
    host = Host(root=str(root))
    before = discover(host)
    assert disagreement(before, snapshot(host, nvml=True)) == ""
    relayout_mig(root, 0, ["1g.10gb"] * 7)
    now = snapshot(host, nvml=True)
    assert "NVML has 3 MIG devices, /proc 7" in disagreement(before, now)
    seven = discover(host)
    assert disagreement(seven, now) == ""
    relayout_mig(root, 0, ["1g.10gb"] * 7)  # the same ids re-made: new UUIDs
    remade = snapshot(host, nvml=True)
    assert "MIG UUIDs" in disagreement(seven, remade)
    # the watcher's NVML answer of an older layout (asked before NVML's list changed) is
    # not held against the inventory: /proc's layout decides
    older = remade._replace(
        gpus=(remade.gpus[0]._replace(mig_uuids=("MIG-old",)), *remade.gpus[1:])
    )
    assert disagreement(discover(host), older) == ""
    current = discover(host)
    remove_gpu(root, 7)
    assert f"GPU {UUID7}: not in /proc" == disagreement(current, snapshot(host))


def test_a_pool_that_shrinks_moves_every_slice_to_the_new_generation_then_deletes(
    kubeapi: KubeApiServer, tmp_path: Path
) -> None:
    """types.go ResourcePool: a change moves all the pool's slices to a new generation; a
    slice the pool no longer has goes after the new ones are written."""
    publisher = Publisher(connect(str(kubeapi.kubeconfig(tmp_path / "kc"))), NODE)
    assert publisher.publish(_channels(200))  # 128 + 72: two slices
    assert {s["spec"]["pool"]["generation"] for s in kubeapi.list("resourceslices")} == {1}
    kubeapi.requests.clear()
    assert publisher.publish(_channels(100))
    (kept,) = kubeapi.list("resourceslices")
    assert kept["spec"]["pool"] == {"name": NODE, "generation": 2, "resourceSliceCount": 1}
    assert len(kept["spec"]["devices"]) == 100
    writes = [(m, p.rsplit("/", 1)[-1]) for m, p in kubeapi.requests if m in ("PUT", "DELETE")]
    assert writes == [("PUT", f"{NODE}-{DRIVER}-0"), ("DELETE", f"{NODE}-{DRIVER}-1")]
    assert not publisher.publish(_channels(100))  # unchanged: nothing written
    assert kubeapi.pool_problems(DRIVER, NODE) == []


def test_follow_flags_reach_the_driver(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kubeapi: KubeApiServer
) -> None:
    from nvhook.cli.draplugin import dra_plugin

    seen: list[float | None] = []
    monkeypatch.setattr(DraPlugin, "run", lambda self, stop: seen.append(self.follow_interval))
    (tmp_path / "config.toml").write_text("")
    monkeypatch.setenv("NVHOOK_CONFIG", str(tmp_path / "config.toml"))
    base = ["--node-name", NODE, "--kubeconfig", str(kubeapi.kubeconfig(tmp_path / "kc"))]
    runner = CliRunner()
    for args in ([], ["--follow-interval", "2"], ["--no-follow-gpus"]):
        result = runner.invoke(dra_plugin, [*base, *args])
        assert result.exit_code == 0, result.output
    assert seen == [0.5, 2.0, None]


def test_a_read_that_fails_mid_change_is_tried_again_then_keeps_the_slices(
    tmp_path: Path, kubeapi: KubeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upgrade's libraries being replaced fail NVML for a moment: while the change settles
    the inventory is read again; after it, the published slices stay, logged."""
    import nvhook.dra.plugin as plugin_module
    from nvhook.dra.inventory import discover
    from nvhook.dra.prepare import Preparer, host_edits
    from nvhook.errors import DriverError
    from nvhook.watch import Watcher

    root = tmp_path / "root"
    create("dgx-a100", root, nodes="file")
    host = Host(root=str(root))
    lines: list[str] = []
    plugin = DraPlugin(
        host, node=NODE, api=connect(str(kubeapi.kubeconfig(tmp_path / "kc"))), log=lines.append
    )
    inventory = discover(host)
    (tmp_path / "state").mkdir()
    plugin.preparer = Preparer(
        node=NODE,
        api=plugin.api,
        state_dir=str(tmp_path / "state"),
        cdi_root=str(tmp_path / "cdi"),
        inventory=inventory,
        edits=host_edits(host, inventory),
    )
    plugin.watcher = Watcher(host, log=lines.append)

    def failing(host: Host) -> Inventory:
        raise DriverError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setattr(plugin_module, "discover", failing)
    assert plugin._rediscover(inventory, final=False) is inventory  # look again next tick
    assert lines == []
    assert plugin._rediscover(inventory, final=True) is None
    assert lines == [
        "cannot read the devices: libnvidia-ml.so.1: cannot open shared object file "
        "(keeping the published slices)"
    ]
    monkeypatch.setattr(plugin_module, "discover", discover)
    relayout_mig(root, 0, ["1g.10gb"] * 7)
    assert plugin._rediscover(inventory, final=False) is inventory  # the watcher saw nothing
    fresh = plugin._rediscover(inventory, final=True)  # the settle is over: NVML's, warned
    assert fresh is not None and fresh is not inventory
    assert plugin.preparer.inventory is fresh
    assert "warning: NVML and /proc still disagree (GPU GPU-ac376f35" in lines[-2]
    assert "the node's devices changed: added gpu-0-mig-7-0" in lines[-1]
    plugin.watcher.poll()  # now it has seen the re-layout: they agree, nothing more to do
    assert plugin._rediscover(fresh, final=False) is None
    assert lines[-1] == "the published devices are unchanged"
