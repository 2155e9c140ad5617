"""The node changes under a loop of real containers: no start gets a wrong device.

A ``dgx-a100`` mock of the test's own (real char nodes) is changed in place
(:mod:`nvhook.mock.mutate`: GPU 0 re-laid from 3g.40gb + 2x2g.20gb to 7x1g.10gb and back, GPU
5 lost and back, the driver replaced by another version) while

- a loop starts real runc containers through ``nvhook-runtime`` in cdi mode, asking in turn
  for ``nvidia.com/gpu=0:1`` (a name whose meaning a re-layout changes) and for GPU 5 by UUID;
- the watcher (:class:`nvhook.watch.Watcher` with a :class:`~nvhook.watch.Refresher`) keeps
  the spec current, in this process, at the default interval;
- a reader loop opens and parses the spec over and over.

Every start either got, seen from inside the container (``ls -l /dev``), the device it asked
for as some layout current during the start defines it, or failed with one of the documented
lines (stale spec, MIG layout changed, device not defined; or the createContainer hook's,
when the change landed between the shim's check and the hook's); the reader never found the spec
absent or invalid; ``nvhook cdi check`` passes at the end. Before the loop, with the watcher
not yet running, the same is shown without a race: a start against a spec of the old layout
fails with the layout line, and starts once the spec is rewritten.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvhook.mock import create
from nvhook.mock.model import mig_caps_minor
from nvhook.mock.mutate import add_gpu, current_profile, relayout_mig, remove_gpu, set_driver
from nvhook.planner import Host
from nvhook.tools.cdicheck import check_specs
from nvhook.watch import Refresher, Watcher
from oci.cdi.parse import parse_spec
from tests.e2e.conftest import Shim, new_shim, parse_probe
from tests.support.containers import require_root

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]

GpuBundle = Callable[..., Path]
ORIGINAL = ["3g.40gb", "2g.20gb", "2g.20gb"]
SEVEN = ["1g.10gb"] * 7
#: What a failed start may say (its first line, after "nvhook-runtime: "): a stale spec
#: (a GPU gone, a MIG layout changed, a driver file gone), each naming the command that
#: rewrites it, or, once the watcher rewrote it, a device no longer in it.
DOCUMENTED = (
    "is stale",
    "not defined in any spec",
)
#: A change that lands between the shim's check and runc's createContainer hook: the hook
#: checks the same records and refuses (exit 11), runc reports it on its one line.
HOOK_REFUSAL = "error running hook #0: error running hook: exit status 11, stdout: , stderr: "
HOOK_REFUSAL += "nvhook-hook create-container: "


def _caps(gis: list[int]) -> frozenset[str]:
    """The caps nodes of MIG device 0:1 of GPU 0 (minor 0) whose GPU instance ids are ``gis``."""
    gi = sorted(gis)[1]
    return frozenset(f"/dev/nvidia-caps/nvidia-cap{mig_caps_minor(0, gi, c)}" for c in (None, 0))


LAYOUT_CAPS = {"original": _caps([2, 3, 4]), "seven": _caps(list(range(7, 14)))}


class Timeline:
    """What was true when: (start, end, state) of each change, a change's window included."""

    def __init__(self, state: dict[str, object]) -> None:
        self.events: list[tuple[float, float, dict[str, object]]] = [(0.0, 0.0, dict(state))]

    def change(self, apply: Callable[[], object], **state: object) -> None:
        start = time.time()
        apply()
        self.events.append((start, time.time(), {**self.events[-1][2], **state}))

    def held(self, t0: float, t1: float, key: str, value: object) -> bool:
        """Whether ``key`` may have been ``value`` at some moment of [t0, t1]: a state holds
        from its change's start (it may land early in it) to the next change's end."""
        for i, (start, _, state) in enumerate(self.events):
            until = self.events[i + 1][1] if i + 1 < len(self.events) else float("inf")
            if state[key] == value and start <= t1 and until >= t0:
                return True
        return False


class SpecReader:
    """Opens and parses ``spec_file`` over and over until ``stop`` is set, ``pause`` seconds
    between reads (0: none): a read that found it absent, torn or invalid is a bad read."""

    def __init__(self, spec_file: Path, stop: threading.Event, pause: float = 0.0) -> None:
        self.spec_file, self.stop, self.pause = spec_file, stop, pause
        self.reads: list[str] = []
        self.bad_reads: list[str] = []

    def __call__(self) -> None:
        while not self.stop.is_set():
            try:
                parse_spec(json.loads(self.spec_file.read_bytes()), source=str(self.spec_file))
                self.reads.append("ok")
            except Exception as e:  # absent, torn or invalid: all are failures here
                self.bad_reads.append(repr(e))
            if self.pause:
                time.sleep(self.pause)


@contextlib.contextmanager
def running(
    stop: threading.Event, loops: list[Callable[[], object]], join: float
) -> Iterator[None]:
    """``loops`` on threads of their own while the body runs; then ``stop`` set and each
    thread given ``join`` seconds to end."""
    threads = [threading.Thread(target=loop) for loop in loops]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(join)


def _raced_the_upgrade(t0: float, t1: float, err: str, timeline: Timeline) -> bool:
    """A start that ran while the driver's files were being replaced and failed in runc on a
    file of the old version: the file went between the shim's check of the spec's host
    files and runc's mount, a window no runtime can close (docs/watch.md, "Inside the
    window"). Any other runc failure, or one outside the replacement, is not this."""
    replacing = [(a, b) for a, b, state in timeline.events if state.get("driver") == "550.90.07"]
    (start, end) = replacing[0]
    return "error mounting" in err and "550.54.15" in err and t0 <= end and t1 >= start


@pytest.fixture
def node(tmp_path: Path) -> tuple[Path, Shim]:
    require_root()
    root = tmp_path / "dgx"
    create("dgx-a100", root, nodes="char")
    shim = new_shim(root, tmp_path / "shim")
    shim.config.write_text(shim._toml({"runtime": {"mode": "cdi"}}))
    return root, shim


def test_a_relayout_before_the_refresh_fails_with_the_layout_line(
    node: tuple[Path, Shim], gpu_bundle: GpuBundle, tmp_path: Path
) -> None:
    root, shim = node
    host = Host(root=str(root))
    refresher = Refresher(host, output=str(shim.cdi_dir / "nvidia.json"), log=lambda line: None)
    refresher.refresh()
    runc = shim.runc_for(tmp_path / "state")
    try:
        relayout_mig(root, 0, SEVEN)
        stale = runc.run(gpu_bundle("stale", ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0:1"]))
        assert stale.returncode != 0
        (line,) = stale.stderr.splitlines()
        assert "GPU 0's MIG layout changed since it was written" in line, line
        assert "run: nvhook cdi generate" in line and line.endswith("then retry")
        refresher.refresh()
        fresh = runc.run(gpu_bundle("fresh", ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0:1"]))
        assert fresh.returncode == 0, fresh.stderr
        assert parse_probe(fresh.stdout).caps_nodes == LAYOUT_CAPS["seven"]
    finally:
        runc.cleanup()


def test_starts_while_the_node_changes(
    node: tuple[Path, Shim], gpu_bundle: GpuBundle, tmp_path: Path
) -> None:
    root, shim = node
    host = Host(root=str(root))
    spec_file = shim.cdi_dir / "nvidia.json"
    log: list[str] = []
    watcher = Watcher(host, log=log.append)
    refresher = Refresher(host, output=str(spec_file), watcher=watcher, log=log.append)
    refresher.refresh()
    watcher.subscribe(refresher)
    gpu5 = current_profile(root).gpus[5].uuid
    stop = threading.Event()
    reader = SpecReader(spec_file, stop)
    reads, bad_reads = reader.reads, reader.bad_reads

    results: list[tuple[float, float, str, int, str, str]] = []
    runc = shim.runc_for(tmp_path / "state")

    def starter() -> None:
        i = 0
        while not stop.is_set():
            asked = "nvidia.com/gpu=0:1" if i % 2 == 0 else f"nvidia.com/gpu={gpu5}"
            bundle = gpu_bundle(f"b{i}", [f"NVIDIA_VISIBLE_DEVICES={asked}"])
            t0 = time.time()
            result = runc.run(bundle, timeout=120)
            results.append(
                (t0, time.time(), asked, result.returncode, result.stdout, result.stderr)
            )
            i += 1

    timeline = Timeline({"layout": "original", "gpu5": True, "driver": "550.54.15"})
    try:
        with running(stop, [lambda: watcher.run(stop), reader, starter], join=180):
            time.sleep(2)
            timeline.change(lambda: relayout_mig(root, 0, SEVEN), layout="seven")
            time.sleep(3)
            timeline.change(lambda: remove_gpu(root, 5), gpu5=False)
            time.sleep(3)
            timeline.change(lambda: add_gpu(root, 5), gpu5=True)
            time.sleep(3)
            timeline.change(lambda: relayout_mig(root, 0, ORIGINAL), layout="original")
            time.sleep(3)
            timeline.change(lambda: set_driver(root, "550.90.07"), driver="550.90.07")
            time.sleep(4)
    finally:
        runc.cleanup()

    assert bad_reads == [] and len(reads) > 1000, (bad_reads[:3], len(reads))
    started = failed = raced = hooked = 0
    for t0, t1, asked, rc, out, err in results:
        if rc == 0:
            started += 1
            probe = parse_probe(out)
            if asked.endswith("=0:1"):
                assert probe.gpu_nodes == {"/dev/nvidia0"}, probe.raw
                (layout,) = [k for k, v in LAYOUT_CAPS.items() if v == probe.caps_nodes] or [None]
                assert layout is not None, f"0:1 got {sorted(probe.caps_nodes)}"
                assert timeline.held(t0, t1, "layout", layout), (t0, t1, layout, timeline.events)
            else:
                assert probe.gpu_nodes == {"/dev/nvidia5"}, probe.raw
                assert timeline.held(t0, t1, "gpu5", True), (t0, t1, timeline.events)
        else:
            failed += 1
            first = err.strip().splitlines()[0] if err.strip() else ""
            if not first.startswith("nvhook-runtime: ") and _raced_the_upgrade(
                t0, t1, err, timeline
            ):
                raced += 1
                continue
            if HOOK_REFUSAL in first and "then retry" in first:
                hooked += 1  # the change landed after the shim's check, before the hook's
                continue
            assert first.startswith("nvhook-runtime: "), err
            assert any(d in first for d in DOCUMENTED), err
            assert "not defined" in first or "run: nvhook cdi generate" in first, err
    assert started >= 10, (started, failed, [r[5] for r in results if r[3]][:3])
    # after the last change settled, both requests start again
    assert [r[3] for r in results[-2:]] == [0, 0], [r[5] for r in results[-2:]]
    assert check_specs([str(shim.cdi_dir)], root=str(root)) == []
    assert any("MIG layout 7.0" in line for line in log) and any("gone" in line for line in log)
    print(
        f"{len(results)} starts ({started} started, {failed} failed, {raced} of them racing "
        f"the driver's replacement in runc, {hooked} refused by the hook), {len(reads)} spec reads"
    )
