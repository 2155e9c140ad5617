"""The node watcher and its refresh, on mock machines changed in place (nvhook.mock.mutate)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nvhook.mock import create
from nvhook.mock.mutate import add_gpu, relayout_mig, remove_gpu, set_driver
from nvhook.planner import Host
from nvhook.tools.cdicheck import check_specs
from nvhook.watch import Refresher, Update, Watcher, diff, snapshot, spec_paths
from tests.support.basics import require_root


def _machine(tmp_path: Path, profile: str = "dgx-a100", *, char: bool = False) -> Path:
    """A mock of its own (changed in place); ``char``: real device nodes, which `nvhook cdi
    check` wants (root)."""
    if char:
        require_root()
    root = tmp_path / profile
    create(profile, root, nodes="char" if char else "file")
    return root


def _names(spec: Path) -> set[str]:
    return {d["name"] for d in json.loads(spec.read_text())["devices"]}


def _check(spec_dir: Path, root: Path) -> list[str]:
    return [str(finding) for finding in check_specs([str(spec_dir)], root=str(root))]


def test_diff_names_each_change(tmp_path: Path) -> None:
    root = _machine(tmp_path)
    host = Host(root=str(root))
    before = snapshot(host, nvml=True)
    assert before.driver == "550.54.15" and len(before.gpus) == 8 and before.nvml == "ok"
    assert before.gpus[0].layout == "2.0,3.0,4.0" and len(before.gpus[0].mig_uuids or ()) == 3
    assert before.gpus[1].mig and before.gpus[1].layout == "" and not before.gpus[2].mig
    relayout_mig(root, 0, ["1g.10gb"] * 7)
    relayout_mig(root, 1, None)
    remove_gpu(root, 5)
    set_driver(root, "550.90.07")
    changes = {c.kind: str(c) for c in diff(before, snapshot(host, nvml=True))}
    assert changes["driver"] == "driver: 550.54.15 -> 550.90.07"
    assert changes["mig-layout"].endswith(
        "minor 0): MIG layout 2.0,3.0,4.0 -> 7.0,8.0,9.0,10.0,11.0,12.0,13.0 (gi.ci)"
    )
    assert changes["mig-mode"].endswith("minor 1): MIG mode off")
    assert changes["gpu-removed"].endswith("minor 5): gone")
    add_gpu(root, 5)
    again = snapshot(host, nvml=True)
    relayout_mig(root, 0, ["1g.10gb"] * 7)  # the same ids again: only NVML tells
    changes = {c.kind: str(c) for c in diff(again, snapshot(host, nvml=True))}
    assert changes["mig-uuids"].endswith("MIG devices re-created (new UUIDs)")
    assert "mig-layout" not in changes


def test_a_gpu_that_nvml_no_longer_lists(tmp_path: Path) -> None:
    """XID 79: the driver keeps the GPU's /proc entry, NVML stops listing it (here: its line
    taken out of the mock's NVML data, by rename as the mock changes files)."""
    root = _machine(tmp_path)
    host = Host(root=str(root))
    before = snapshot(host, nvml=True)
    lost = before.gpus[4].uuid
    data = root / "etc/nvhook-mock/nvml.txt"
    kept = [line for line in data.read_text().splitlines(True) if f"\t{lost}\t" not in line]
    (root / "nvml.tmp").write_text("".join(kept))
    os.rename(root / "nvml.tmp", data)
    (change,) = diff(before, snapshot(host, nvml=True))
    assert str(change) == f"NVML: no longer lists {lost}"


def test_imex_channels_and_unloaded_driver(tmp_path: Path) -> None:
    root = _machine(tmp_path, "gb200-imex")
    host = Host(root=str(root))
    before = snapshot(host)
    assert before.imex_channels
    assert "nvidia-caps-imex-channels" in dict(before.majors)
    last = max(before.imex_channels)
    os.unlink(root / f"dev/nvidia-caps-imex-channels/channel{last}")
    (change,) = diff(before, snapshot(host))
    assert str(change) == f"IMEX channels: {len(before.imex_channels)} -> {last}"
    os.rename(root / "proc/driver/nvidia", root / "proc/driver/nvidia.gone")
    unloaded = snapshot(host)
    assert unloaded.driver is None and unloaded.gpus == ()
    assert str(diff(before, unloaded)[0]) == f"driver: {before.driver} unloaded"


def test_refresh_follows_relayout_loss_and_upgrade(tmp_path: Path) -> None:
    root = _machine(tmp_path, char=True)
    host = Host(root=str(root))
    spec = tmp_path / "cdi" / "nvidia.json"
    lines: list[str] = []
    watcher = Watcher(host, log=lines.append)
    refresher = Refresher(host, output=str(spec), watcher=watcher, log=lines.append)
    watcher.subscribe(refresher)
    assert refresher.refresh() and not refresher.refresh()  # the second: already up to date
    assert {"0:0", "0:2", "7"} <= _names(spec)
    old_uuids = {n for n in _names(spec) if n.startswith("MIG-")}

    relayout_mig(root, 0, ["1g.10gb"] * 7)
    update = watcher.poll()
    assert update is not None and "mig-layout" in {c.kind for c in update.changes}
    names = _names(spec)
    assert {f"0:{i}" for i in range(7)} <= names and not old_uuids & names
    assert _check(spec.parent, root) == []
    assert any("rewritten (" in line and "removed MIG-" in line for line in lines)

    remove_gpu(root, 7)
    assert watcher.poll() is not None
    assert "7" not in _names(spec) and _check(spec.parent, root) == []

    set_driver(root, "550.90.07")
    update = watcher.poll()
    assert update is not None and "driver" in {c.kind for c in update.changes}
    text = spec.read_text()
    assert "550.90.07" in text and "550.54.15" not in text
    assert _check(spec.parent, root) == []
    assert any(p.endswith("libcuda.so.550.90.07") for p in spec_paths(str(spec)))
    assert watcher.poll() is None  # the new files are watched, and did not change


def test_a_failing_subscriber_does_not_stop_the_others(tmp_path: Path) -> None:
    root = _machine(tmp_path)
    lines: list[str] = []
    watcher = Watcher(Host(root=str(root)), log=lines.append, nvml=False)
    seen: list[Update] = []

    def broken(update: Update) -> None:
        raise RuntimeError("boom")

    watcher.subscribe(broken)
    watcher.subscribe(seen.append)
    remove_gpu(root, 2)
    watcher.poll()
    assert len(seen) == 1 and "RuntimeError('boom')" in lines[0]


def test_refresher_writes_the_vendor_it_is_given(tmp_path: Path) -> None:
    root = _machine(tmp_path)
    spec = tmp_path / "example.com.json"
    refresher = Refresher(Host(root=str(root)), output=str(spec), vendor="example.com")
    assert refresher.refresh()
    assert json.loads(spec.read_text())["kind"] == "example.com/gpu"


def test_run_sees_a_change_from_its_thread(tmp_path: Path) -> None:
    root = _machine(tmp_path)
    watcher = Watcher(Host(root=str(root)), nvml=False, log=lambda line: None)
    seen = threading.Event()
    watcher.subscribe(lambda update: seen.set())
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,))
    thread.start()
    try:
        remove_gpu(root, 0)
        assert seen.wait(30)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_cli_once_and_sigterm(tmp_path: Path) -> None:
    root = _machine(tmp_path, "l40s-x4")
    spec = tmp_path / "cdi" / "nvidia.json"
    nvhook = [sys.executable, "-m", "nvhook"]
    done = subprocess.run(
        [*nvhook, "watch", "--root", str(root), "-o", str(spec), "--once"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"{spec} rewritten (9 devices; added 0, GPU-" in done.stderr
    proc = subprocess.Popen(
        [*nvhook, "watch", "--root", str(root), "-o", str(spec), "--interval", "0.1"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert "already up to date" in proc.stderr.readline()
        assert "watching" in proc.stderr.readline()
        remove_gpu(root, 3)
        # a poll may land inside the change: its first files (the mock's rebuilt nvidia-smi)
        # can come an update before /proc's, so read on to the GPU's loss
        seen = [proc.stderr.readline() for _ in range(2)]
        while not any("minor 0): gone" in line for line in seen) and len(seen) < 8:
            seen.append(proc.stderr.readline())
        gone = next(i for i, line in enumerate(seen) if "changed: GPU 0000:" in line)
        assert "minor 0): gone" in seen[gone], seen
        rewritten = seen[gone + 1] if gone + 1 < len(seen) else proc.stderr.readline()
        assert "rewritten (7 devices; added none; removed " in rewritten, seen
        assert "3" not in _names(spec)
    finally:
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0 and rest.strip().endswith("stopped")


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_intervals_must_be_positive(tmp_path: Path, interval: float) -> None:
    from nvhook.errors import NvhookError

    with pytest.raises(NvhookError, match="must be positive"):
        Watcher(Host(root=str(tmp_path)), interval=interval)


def test_labels_follow_the_spec_on_a_change(tmp_path: Path) -> None:
    """With a labels file configured, a GPU loss rewrites the spec, then the NFD feature file
    (its gpu.count), each step logged in that order."""
    root = _machine(tmp_path, "l40s-x4")
    host = Host(root=str(root))
    labels = tmp_path / "features.d" / "gfd"
    lines: list[str] = []
    watcher = Watcher(host, log=lines.append)
    refresher = Refresher(
        host,
        output=str(tmp_path / "cdi" / "nvidia.json"),
        labels_output=str(labels),
        watcher=watcher,
        log=lines.append,
    )
    watcher.subscribe(refresher)
    refresher.refresh()
    assert "nvidia.com/gpu.count=4\n" in labels.read_text()
    lines.clear()
    remove_gpu(root, 2)
    assert watcher.poll() is not None
    assert "nvidia.com/gpu.count=3\n" in labels.read_text()
    assert [line.split(" ")[0] for line in lines] == [
        "changed:",
        str(tmp_path / "cdi" / "nvidia.json"),
        str(labels),
    ]
    assert " rewritten (" in lines[2] and lines[2].endswith(", gpu.count 3)")
