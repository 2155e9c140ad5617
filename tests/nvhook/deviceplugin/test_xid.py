"""XID health that recovers: the XID table and kernel-log parser, the tracker's rules, the
config's ``health`` section and NVIDIA's variables, the fake NVML's event queue through the
real pynvml, and the plugin against the kubelet stand-in on a dgx-a100 mock: a fatal XID
(NVML events, or an ``NVRM: Xid`` line in a kernel-log file) makes the GPU Unhealthy at once,
recovers after ``recoverAfter``; NVIDIA's ignored XIDs change nothing; a flood of 10,000
events does not stall ListAndWatch; ``nvhook labels`` and ``nvhook doctor`` show it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.deviceplugin.config import health_environment, parse_config
from nvhook.deviceplugin.errors import PluginConfigError
from nvhook.deviceplugin.model import PluginConfig
from nvhook.deviceplugin.xid import (
    DEFAULT_IGNORED,
    XidEvent,
    XidPolicy,
    XidTracker,
    meaning,
    parse_kmsg,
)
from nvhook.mock.events import post_xid
from tests.nvhook.deviceplugin.test_server import (  # noqa: F401 (fixtures)
    DGX,
    UUIDS,
    Running,
    dgx,
    run_plugin,
)


def test_meanings_are_the_drivers() -> None:
    assert meaning(79) == "GPU has fallen off the bus"
    assert meaning(48) == "ECC Error (DBE Error)"
    assert meaning(13) == "Graphics Engine Error (GR Exception Error)"
    assert meaning(109) == "Context Switch Timeout Error"
    assert meaning(4000) == "not in the driver's published list"
    assert DEFAULT_IGNORED == (13, 31, 43, 45, 68, 109)  # NVIDIA's internal/rm/health.go


def test_kernel_log_lines() -> None:
    record = "3,1234,5678,-;NVRM: Xid (PCI:0000:4E:00): 79, pid=1234, GPU has fallen off the bus."
    assert parse_kmsg(record) == ("0000:4e:00", 79)
    assert parse_kmsg("[ 12.3] NVRM: Xid (PCI:0000:07:00): 13, Graphics Exception") == (
        "0000:07:00",
        13,
    )
    assert parse_kmsg("NVRM: loading NVIDIA UNIX x86_64 Kernel Module 550.54.15") is None


def test_tracker_fatal_ignored_and_recovery() -> None:
    tracker = XidTracker(XidPolicy(recover_after=10))
    assert not tracker.record(XidEvent("GPU-a", 13, "NVML events"), 0)  # ignored by default
    assert tracker.unhealthy(0) == {}
    assert tracker.record(XidEvent("GPU-a", 79, "NVML events"), 1)
    assert not tracker.record(XidEvent("GPU-a", 79, "NVML events"), 2)  # already unhealthy
    assert tracker.unhealthy(5) == {
        "GPU-a": "XID 79 (GPU has fallen off the bus) from NVML events, 2 times"
    }
    assert "GPU-a" in tracker.unhealthy(13)  # 11 s after the last one, but NVML does not answer
    assert tracker.unhealthy(13, answering=["GPU-a"]) == {}  # recovered, and forgotten
    assert tracker.unhealthy(14) == {}
    only = XidTracker(XidPolicy(fatal=(48,)))
    assert not only.record(XidEvent("GPU-a", 79, "k"), 0)
    assert only.record(XidEvent("GPU-a", 48, "k"), 0)
    assert "GPU-a" in only.unhealthy(10**9, answering=["GPU-a"])  # recover_after 0: never


def test_health_section_and_nvidias_variables() -> None:
    config = parse_config(
        {
            "health": {
                "xids": {"ignored": [13], "fatal": [48, 79]},
                "recoverAfter": "1h30m",
                "kmsg": "/dev/kmsg",
                "stateFile": "/run/x.json",
            }
        }
    )
    assert config.health == XidPolicy(
        ignored=(13,),
        fatal=(48, 79),
        recover_after=5400.0,
        kmsg="/dev/kmsg",
        state_file="/run/x.json",
    )
    with pytest.raises(PluginConfigError, match=r"health\.recoverAfter: should be a duration"):
        parse_config({"health": {"recoverAfter": "soon"}})
    policy = XidPolicy()
    assert not health_environment(policy, {"DP_DISABLE_HEALTHCHECKS": "xids"}).enabled
    changed = health_environment(
        policy, {"DP_DISABLE_HEALTHCHECKS": "79", "DP_ENABLE_HEALTHCHECKS": "13"}
    )
    assert changed.ignored == (31, 43, 45, 68, 79, 109)
    assert health_environment(policy, {"DP_ENABLE_HEALTHCHECKS": "all"}).ignored == ()


def test_fake_nvml_event_queue_through_pynvml(dgx: Path) -> None:  # noqa: F811
    import pynvml

    from nvhook.devices.nvml import open_nvml

    with open_nvml(dgx / "usr/lib/x86_64-linux-gnu") as nvml:
        post_xid(dgx, 2, 79)  # before the set exists: not delivered
        events = nvml.events([UUIDS[2], UUIDS[3]])
        assert events.unsupported == []
        assert events.wait(0.05) is None  # NVML_ERROR_TIMEOUT
        post_xid(dgx, 4, 79)  # GPU 4 is not registered: skipped
        post_xid(dgx, 3, 48)
        got = events.wait(1)
        assert got is not None and (got.gpu_uuid, got.event_type, got.data) == (UUIDS[3], 8, 48)
        assert got.gi is None and got.ci is None
        with pytest.raises(pynvml.NVMLError_NotSupported):  # only ECC and XID events
            pynvml.nvmlDeviceRegisterEvents(
                pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypePState, events._handle
            )
        events.close()


# ----------------------------------------------------------------------------- the plugin


def _health(devices: list[object], index: int) -> str:
    return devices[index].health  # type: ignore[attr-defined,no-any-return]


def test_fatal_xid_unhealthy_within_one_interval_then_recovered(
    run_plugin: Callable[..., Running],  # noqa: F811
    dgx: Path,  # noqa: F811
) -> None:
    interval = 1.0  # the XID arrives far sooner: an event, not a poll
    running = run_plugin(PluginConfig(health=XidPolicy(recover_after=1.5)), interval)
    [request] = running.kubelet.wait_registered(1)
    client = running.kubelet.client(request)
    client.watch()
    client.wait_for(lambda d: {x.health for x in d} == {"Healthy"})
    posted = time.monotonic()
    post_xid(dgx, 3, 79)
    devices = client.wait_for(lambda d: _health(d, 3) == "Unhealthy", timeout=interval)
    seen = time.monotonic() - posted
    assert [x.health for i, x in enumerate(devices) if i != 3] == ["Healthy"] * 7
    fatal = f"GPU {UUIDS[3]}: XID 79 (GPU has fallen off the bus) from NVML events: fatal"
    assert fatal in running.lines
    time.sleep(0.5)
    assert _health(client.wait_for(lambda d: True), 3) == "Unhealthy"  # the rule does not hold yet
    client.wait_for(lambda d: _health(d, 3) == "Healthy", timeout=1.5 + 2 * interval)
    recovered = time.monotonic() - posted
    assert seen < interval, seen
    assert recovered >= 1.5, recovered
    assert any(f"GPU {UUIDS[3]} is healthy again (was: XID 79" in line for line in running.lines)


def test_nonfatal_xids_change_nothing_and_a_flood_does_not_stall(
    run_plugin: Callable[..., Running],  # noqa: F811
    dgx: Path,  # noqa: F811
) -> None:
    running = run_plugin(PluginConfig())  # NVIDIA's defaults: every XID fatal but 6
    [request] = running.kubelet.wait_registered(1)
    client = running.kubelet.client(request)
    client.watch()
    client.wait_for(lambda d: {x.health for x in d} == {"Healthy"})
    lists = client.lists
    for xid in DEFAULT_IGNORED:
        post_xid(dgx, 5, xid)
    time.sleep(1.0)
    monitor = running.plugin.monitor
    assert monitor is not None and monitor.events == 6
    assert client.lists == lists and {x.health for x in client.wait_for(lambda d: True)} == {
        "Healthy"
    }
    # 10,000 fatal events on GPU 2, 10,000 ignored ones on GPU 4: one new list, and a later
    # XID on GPU 6 still arrives at once
    post_xid(dgx, 2, 48, count=10_000)
    post_xid(dgx, 4, 13, count=10_000)
    client.wait_for(lambda d: _health(d, 2) == "Unhealthy", timeout=5)
    deadline = time.monotonic() + 10
    while monitor.events < 20_006 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert monitor.events == 20_006
    started = time.monotonic()
    post_xid(dgx, 6, 95)
    client.wait_for(lambda d: _health(d, 6) == "Unhealthy", timeout=1)
    assert time.monotonic() - started < 1
    assert client.lists <= lists + 3, client.lists - lists
    assert _health(client.wait_for(lambda d: True), 4) == "Healthy"


def test_kernel_log_xid_state_file_labels_and_doctor(
    run_plugin: Callable[..., Running],  # noqa: F811
    dgx: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("3,1,1,-;NVRM: Xid (PCI:0000:4e:00): 79, old: before the plugin started\n")
    state = dgx / "run/nvhook/device-plugin/gpu-health.json"
    config = PluginConfig(health=XidPolicy(kmsg=str(kmsg), state_file=str(state)))
    running = run_plugin(config)
    [request] = running.kubelet.wait_registered(1)
    client = running.kubelet.client(request)
    client.watch()
    client.wait_for(lambda d: {x.health for x in d} == {"Healthy"})
    bus = DGX.gpus[3].bus_id[: -len(".0")]
    with kmsg.open("a") as f:
        f.write(f"4,2,2,-;NVRM: Xid (PCI:{bus}): 48, pid=99, name=python, DBE\n")
    client.wait_for(lambda d: _health(d, 3) == "Unhealthy", timeout=2)
    doc = json.loads(state.read_text())
    assert [g["healthy"] for g in doc["gpus"]] == [True] * 3 + [False] + [True] * 4
    assert doc["gpus"][3]["xid"] == 48
    assert doc["gpus"][3]["reason"] == f"XID 48 (ECC Error (DBE Error)) from {kmsg}"
    assert main(["labels", "--root", str(dgx), "--health-state-file", str(state)]) == 0
    out = capsys.readouterr().out
    assert "nvidia.com/gpu.health=unhealthy\n" in out
    assert "nvidia.com/gpu.3.health=unhealthy\nnvidia.com/gpu.3.xid=48\n" in out
    assert "nvidia.com/gpu.2.health=healthy\n" in out
    main(["doctor", "--root", str(dgx), "--json"])
    found = json.loads(capsys.readouterr().out)
    [check] = [c for c in found["checks"] if c["area"] == "gpu-health"]
    assert check["status"] == "fail"
    assert check["message"] == (
        f"GPU 3 ({UUIDS[3]}) is unhealthy for the device plugin: "
        f"XID 48 (ECC Error (DBE Error)) from {kmsg}"
    )


def test_one_default_state_file() -> None:
    from nvhook.cli.deviceplugin import DEFAULT_HEALTH_STATE
    from nvhook.cli.labels import labels as labels_command
    from nvhook.deviceplugin.healthstate import DEFAULT_STATE_FILE

    [option] = [p for p in labels_command.params if p.name == "health_state_file"]
    assert DEFAULT_HEALTH_STATE == option.default == DEFAULT_STATE_FILE


def test_a_failing_reader_says_so_once(tmp_path: Path, dgx: Path) -> None:  # noqa: F811
    from nvhook.deviceplugin.health import HealthMonitor
    from nvhook.planner import Host

    lines: list[str] = []
    policy = XidPolicy(kmsg=str(tmp_path / "no-kmsg"))
    monitor = HealthMonitor(
        Host(root=str(dgx)), [(UUIDS[0], DGX.gpus[0].bus_id)], policy, log=lines.append
    )
    monitor.RETRY = 0.02
    monitor.start()
    time.sleep(0.5)  # some 25 attempts
    monitor.stop()
    assert [line for line in lines if line.startswith("kernel log")] == [
        f"kernel log {tmp_path / 'no-kmsg'}: No such file or directory; retrying every 0.02 s"
    ]
