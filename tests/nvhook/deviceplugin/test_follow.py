"""The plugin follows the node's GPUs without a restart (``--follow-gpus``): a dgx-a100 mock of
its own changed in place (:mod:`nvhook.mock.mutate`) while the plugin serves the kubelet
stand-in (:class:`nvhook.deviceplugin.server.Kubelet`; kubelet itself does not run here)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from nvhook.deviceplugin.model import PluginConfig
from nvhook.deviceplugin.plugin import DevicePlugin
from nvhook.deviceplugin.server import Kubelet
from nvhook.mock import create
from nvhook.mock.mutate import (
    current_profile,
    load_driver,
    relayout_mig,
    remove_gpu,
    unload_driver,
)
from tests.nvhook.deviceplugin.test_server import (
    UUIDS,
    Served,
    seen_by_plugin,
    serving,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A dgx-a100 mock of the test's own, to change in place."""
    path = tmp_path / "root"
    create("dgx-a100", path, nodes="file")
    return path


def _following(
    root: Path, config: PluginConfig, lines: list[str], **options: Any
) -> contextlib.AbstractContextManager[Served]:
    """The plugin on ``root`` following its GPUs (every 0.1 s), logging to ``lines``."""
    return serving(
        root,
        config,
        prefix="nvh-fl-",
        health_interval=0.2,
        log=lines.append,
        follow_interval=0.1,
        **options,
    )


def _settled(
    kubelet: Kubelet,
    plugin: DevicePlugin,
    lines: list[str],
    logged: str,
    names: set[str],
    since: int,
) -> list[Any]:
    """The plugin's registrations once it logged ``logged`` and serves exactly ``names``, each
    registered after the first ``since`` registrations: a poll may land between the mock's
    renames (its new entries move in before the old go), so the plugin may register an
    intermediate layout first."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        servers = list(plugin.servers)
        if (
            any(logged in line for line in lines)
            and {s.resource.name for s in servers} == names
            and all(s.serving for s in servers)
        ):
            start = len(kubelet.requests) - len(servers)
            last = kubelet.requests[start:]
            if start >= since and {r.resource_name for r in last} == names:
                return last
        time.sleep(0.05)
    raise AssertionError(f"not settled on {sorted(names)} after {logged!r}: {lines}")


def _listed(kubelet: Kubelet, requests: list[Any], resource: str, count: int) -> list[str]:
    """The device IDs of the resource of ``requests`` whose name ends with ``resource``, as its
    ListAndWatch lists them once it lists ``count``."""
    client = kubelet.client(next(r for r in requests if r.resource_name.endswith(resource)))
    client.watch()
    return [d.ID for d in client.wait_for(lambda d: len(d) == count)]


def test_mig_relayout_and_gpu_loss_reregister_without_restart(root: Path) -> None:
    lines: list[str] = []
    with _following(root, PluginConfig(mig_strategy="mixed"), lines) as served:
        kubelet, plugin, thread = served.kubelet, served.plugin, served.thread
        directory = served.directory
        first = kubelet.wait_registered(3)
        assert {r.resource_name for r in first} == {
            "nvidia.com/gpu",
            "nvidia.com/mig-2g.20gb",
            "nvidia.com/mig-3g.40gb",
        }
        vanished = kubelet.client(next(r for r in first if r.resource_name.endswith("3g.40gb")))
        vanished.watch()
        vanished.wait_for(lambda d: len(d) == 1)

        since = len(kubelet.requests)
        relayout_mig(root, 0, ["1g.10gb"] * 7)  # 3g.40gb + 2g.20gb + … -> 7 x 1g.10gb
        names = {"nvidia.com/gpu", "nvidia.com/mig-1g.10gb"}
        final = " -> 7.0,8.0,9.0,10.0,11.0,12.0,13.0 "
        again = _settled(kubelet, plugin, lines, final, names, since)
        assert vanished.stream_ended()  # withdrawn: its server stopped, its socket removed
        for profile in ("2g.20gb", "3g.40gb"):
            assert not (directory / f"nvhook-nvidia.com_mig-{profile}.sock").exists()
        assert len(_listed(kubelet, again, "1g.10gb", 7)) == 7
        # each step is logged (the steps of intermediate layouts too, where a poll saw one)
        assert any("registering nvidia.com/mig-1g.10gb (" in line for line in lines), lines
        assert any("withdrawing nvidia.com/mig-3g.40gb" in line for line in lines), lines

        since = len(kubelet.requests)
        remove_gpu(root, 7)
        gone = f"{UUIDS[7]}, minor 7): gone"
        settled = _settled(kubelet, plugin, lines, gone, names, since)
        assert _listed(kubelet, settled, "nvidia.com/gpu", 5) == UUIDS[2:7]
        assert any("nvidia.com/gpu: 6 -> 5 devices" in line for line in lines), lines
        assert thread.is_alive()  # the same plugin all along


def test_mig_uuids_only_change_is_seen_with_the_xid_monitor_on(root: Path) -> None:
    """A layout re-made with the same instance ids: procfs is the same, only NVML's UUIDs
    tell. The XID monitor holds NVML open (its event reader); the watcher's NVML check must
    still see the new UUIDs, and the plugin advertise them."""
    lines: list[str] = []
    with _following(
        root, PluginConfig(mig_strategy="mixed"), lines, follow_nvml_interval=0.3
    ) as served:
        kubelet, plugin = served.kubelet, served.plugin
        first = kubelet.wait_registered(3)
        assert plugin.monitor is not None and plugin.monitor.nvml_open.wait(5)  # NVML held
        before = sorted(_listed(kubelet, first, "2g.20gb", 2))
        since = len(kubelet.requests)
        relayout_mig(root, 0, ["2g.20gb", "2g.20gb", "3g.40gb"])  # the same gi ids, new UUIDs
        assert [i.id for i in current_profile(root).gpus[0].gpu_instances] == [3, 4, 2]
        names = {"nvidia.com/gpu", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"}
        again = _settled(kubelet, plugin, lines, "MIG devices re-created (new UUIDs)", names, since)
        after = sorted(_listed(kubelet, again, "2g.20gb", 2))
        assert not set(after) & set(before), (before, after)
        now = current_profile(root).gpus[0].mig_devices
        assert after == sorted(d.uuid for d in now if d.profile.name == "2g.20gb")
        assert any("MIG devices re-created (new UUIDs)" in line for line in lines), lines
        assert plugin.monitor is not None and plugin.monitor.nvml_open.wait(5)  # resumed

        # XID 79: the driver keeps GPU 4's /proc entry, NVML stops listing it (its line taken
        # out of the mock's NVML data, by rename as the mock changes files)
        data = root / "etc/nvhook-mock/nvml.txt"
        lines_kept = [x for x in data.read_text().splitlines(True) if f"\t{UUIDS[4]}\t" not in x]
        (root / "nvml.tmp").write_text("".join(lines_kept))
        since = len(kubelet.requests)
        os.rename(root / "nvml.tmp", data)
        lost = f"NVML: no longer lists {UUIDS[4]}"
        settled = _settled(kubelet, plugin, lines, lost, names, since)
        assert _listed(kubelet, settled, "nvidia.com/gpu", 5) == UUIDS[2:4] + UUIDS[5:]


def test_fail_on_init_error_false_starts_serving_when_the_driver_comes(root: Path) -> None:
    """``failOnInitError: false`` on a node whose driver is not loaded yet (a driver container
    starting after the plugin): nothing served, then the driver loads and the same plugin
    registers its resources, no restart."""
    unload_driver(root)
    lines: list[str] = []
    with _following(root, PluginConfig(fail_on_init_error=False), lines) as served:
        kubelet, plugin, thread = served.kubelet, served.plugin, served.thread
        directory = served.directory
        assert plugin.ready.wait(10)
        time.sleep(0.4)  # a few polls with nothing there
        assert kubelet.requests == [] and plugin.servers == [] and plugin.monitor is None
        assert not any(p.suffix == ".sock" for p in directory.iterdir() if p.name != "kubelet.sock")
        assert any(
            "Driver Not Loaded" in line
            and "serving nothing on this node until its driver or GPUs change" in line
            for line in lines
        ), lines

        load_driver(root)
        (gpu,) = kubelet.wait_registered(1, timeout=10)
        assert gpu.resource_name == "nvidia.com/gpu"
        client = kubelet.client(gpu)
        client.watch()
        assert [d.ID for d in client.wait_for(lambda d: len(d) == 8)] == UUIDS
        assert any("the node's GPUs changed: GPU 0000:07:00.0" in line for line in lines), lines
        assert any("registering nvidia.com/gpu (8 devices)" in line for line in lines), lines
        assert thread.is_alive()


def test_follow_flags_reach_the_plugin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runs = [[], ["--follow-interval", "2"], ["--no-follow-gpus"]]
    seen = seen_by_plugin(monkeypatch, tmp_path, lambda plugin: plugin.follow_interval, runs)
    assert seen == [0.5, 2.0, None]
