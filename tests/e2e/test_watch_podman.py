"""podman's own CDI in the loop while the node changes: what protects its user.

podman (the host's 4.3) resolves ``--device <vendor>/gpu=…`` itself, from the spec files in
``/var/run/cdi``, and hands runc a finished config: ``nvhook-runtime`` is not on this path.
nvhook runs as the spec's ``createContainer`` hook (``nvhook-hook create-container``). What
protects the podman user:

- the :class:`~nvhook.watch.Refresher` rewrites the spec within the poll interval and a
  refresh (each change's rewrite is timed here against :data:`WINDOW`), by rename, so podman
  reads the old spec or the new one, never none and never a part (the reader loop checks);
- a start that resolved the old spec before the rewrite is refused by the hook, which checks
  the GPU and MIG layout records of the container's env (:mod:`nvhook.gpurecords`): runc's
  ``error running hook #0: … exit status 11, …, stderr: nvhook-hook create-container: …``;
- a change that lands after the hook's check leaves the old names' nodes: a MIG device's
  ``nvidia-cap`` nodes of a destroyed instance, a lost GPU's node; such a container sees no
  such device (``nvidia-smi -L`` lists the GPU without that MIG device, or none), not another;
- after the rewrite a name the spec no longer has fails in podman itself, before any
  container exists: ``Error: setting up CDI devices: unresolvable CDI devices <name>``
  (asserted here as podman 4.3 prints it).

A ``dgx-a100`` mock of the test's own (real char nodes): GPU 0 re-laid to 7x1g.10gb and back,
GPU 5 lost and back, while a loop of ``podman run`` asks in turn for ``0:1`` and GPU 5 by
UUID. Every start got the device as a layout current during it defines it, or (only between
a change and its rewrite) the hook's refusal or the old spec's dead nodes, or failed with
podman's line.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from nvhook.mock import create
from nvhook.mock.mutate import add_gpu, current_profile, relayout_mig, remove_gpu
from nvhook.planner import Host
from nvhook.tools.cdicheck import check_specs
from nvhook.tools.generate import generate_spec
from nvhook.watch import Refresher, Watcher
from oci.cdi.write import dump_spec
from tests.e2e.test_watch_runc import ORIGINAL, SEVEN, SpecReader, Timeline, running
from tests.support.cdi import cdi_spec
from tests.support.containers import Podman, require_root, unique_id

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]

OPTIONS = ["--network", "none"]
PROBE = "nvidia-smi -L; echo '--- env'; env | grep '^NVHOOK_' || true"
#: The bound on a change's landing to the spec's rewrite: the watcher's interval (0.5 s) and a
#: refresh (docs/watch.md: worst 0.56 s measured), with room for this loaded machine.
WINDOW = 1.5
UNRESOLVABLE = "Error: setting up CDI devices: unresolvable CDI devices "
#: podman's report of a createContainer hook that refused: runc's wrapping, then its line.
HOOK_LINE = "error running hook #0: error running hook: exit status 11, stdout: , stderr: "
HOOK_LINE += "nvhook-hook create-container: "
RETRY = "rewrites the spec within a second of the change), then retry"


def _listed(out: str) -> tuple[list[str], list[str]]:
    """The GPU and MIG UUIDs the mock's ``nvidia-smi -L`` listed in the container."""
    smi = out.partition("--- env")[0].splitlines()
    gpus = [line.split("(UUID: ")[1].rstrip(")") for line in smi if line.startswith("GPU ")]
    migs = [line.split("(UUID: ")[1].rstrip(")") for line in smi if "MIG " in line]
    return gpus, migs


def _mig01(root: Path) -> str:
    return current_profile(root).gpus[0].mig_devices[1].uuid


def test_podman_starts_while_the_node_changes(tmp_path: Path, podman: Podman) -> None:
    require_root()
    root = tmp_path / "dgx"
    create("dgx-a100", root, nodes="char")
    host = Host(root=str(root))
    vendor = unique_id("nvhook-test").replace("-", "") + ".com"
    log: list[tuple[float, str]] = []

    def note(line: str) -> None:
        log.append((time.time(), line))

    watcher = Watcher(host, log=note)
    gpu0 = current_profile(root).gpus[0].uuid
    gpu5 = current_profile(root).gpus[5].uuid
    first = generate_spec(host, vendor=vendor).spec
    with cdi_spec(dump_spec(first, format="json").decode(), vendor) as spec_file:
        refresher = Refresher(host, output=str(spec_file), watcher=watcher, vendor=vendor, log=note)
        assert not refresher.refresh()  # the same bytes; the watcher now follows its files
        watcher.subscribe(refresher)
        stop = threading.Event()
        reader = SpecReader(spec_file, stop, pause=0.001)
        reads, bad_reads = reader.reads, reader.bad_reads

        results: list[tuple[float, float, str, int, str, str]] = []

        def starter() -> None:
            i = 0
            while not stop.is_set():
                asked = f"{vendor}/gpu=0:1" if i % 2 == 0 else f"{vendor}/gpu={gpu5}"
                t0 = time.time()
                done = podman.run(["sh", "-c", PROBE], devices=[asked], options=OPTIONS)
                results.append((t0, time.time(), asked, done.returncode, done.stdout, done.stderr))
                i += 1

        timeline = Timeline({"mig01": _mig01(root), "gpu5": True})
        with running(stop, [lambda: watcher.run(stop), reader, starter], join=120):
            time.sleep(1.5)
            timeline.change(lambda: relayout_mig(root, 0, SEVEN), mig01="")
            timeline.events[-1][2]["mig01"] = _mig01(root)
            time.sleep(1.5)
            timeline.change(lambda: remove_gpu(root, 5), gpu5=False)
            time.sleep(2.5)  # long enough for GPU 5 to be asked for after the rewrite
            timeline.change(lambda: add_gpu(root, 5), gpu5=True)
            time.sleep(1.5)
            timeline.change(lambda: relayout_mig(root, 0, ORIGINAL), mig01="")
            timeline.events[-1][2]["mig01"] = _mig01(root)
            time.sleep(2.5)
        # what protects podman: each change's spec rewritten within the bound, by rename
        rewrites = [t for t, line in log if " rewritten (" in line]
        lags = []
        for start, end, _ in timeline.events[1:]:
            after = [t for t in rewrites if t >= start]
            assert after and after[0] - end <= WINDOW, (start, end, rewrites, log)
            lags.append(after[0] - end)

        def before_a_rewrite(t0: float, t1: float) -> bool:
            """Whether the start began after a change landed and before its rewrite: only
            then may podman have resolved the old spec."""
            for start, _, _ in timeline.events[1:]:
                after = [t for t in rewrites if t >= start]
                if start <= t1 and t0 <= after[0]:
                    return True
            return False

        assert bad_reads == [] and len(reads) > 1000, (bad_reads[:3], len(reads))
        right = stale = refused = hooked = 0
        for t0, t1, asked, rc, out, err in results:
            last = err.strip().splitlines()[-1] if err.strip() else ""
            if rc != 0 and last.startswith(UNRESOLVABLE):
                # only for a name the spec read lacked (GPU 5 gone, or back but the spec not yet
                # rewritten), in podman, before any container
                assert last == UNRESOLVABLE + asked and asked.endswith(gpu5), err
                assert timeline.held(t0, t1, "gpu5", False) or before_a_rewrite(t0, t1), err
                refused += 1
                continue
            if rc != 0:  # the old spec's records refused by nvhook's createContainer hook
                assert HOOK_LINE in last and last.endswith(RETRY), err
                assert before_a_rewrite(t0, t1), (t0, rewrites, err)
                hooked += 1
                continue
            gpus, migs = _listed(out)
            if asked.endswith("=0:1"):
                assert gpus == [gpu0], out
                if migs:  # a MIG device: 0:1 as a layout current during the start has it
                    (mig,) = migs
                    assert timeline.held(t0, t1, "mig01", mig), (mig, timeline.events)
                    right += 1
                else:  # the re-layout landed after the hook's check: the old spec's nodes of a
                    # destroyed instance, no device, not another
                    assert before_a_rewrite(t0, t1), (t0, rewrites, out)
                    stale += 1
            elif gpus:
                assert gpus == [gpu5] and timeline.held(t0, t1, "gpu5", True), out
                right += 1
            else:  # GPU 5's node from the old spec, the GPU gone: no device, not another
                assert before_a_rewrite(t0, t1) and timeline.held(t0, t1, "gpu5", False), out
                stale += 1
        assert right >= 10, (right, stale, refused)
        assert refused >= 1, results  # podman's own line was seen while GPU 5 was gone
        # after the last change settled, both requests start again with the devices now there
        assert [r[3] for r in results[-2:]] == [0, 0], [r[5] for r in results[-2:]]
        last = {r[2]: _listed(r[4]) for r in results[-2:]}
        assert last[f"{vendor}/gpu=0:1"] == ([gpu0], [_mig01(root)]), last
        assert last[f"{vendor}/gpu={gpu5}"] == ([gpu5], []), last
        mine = tmp_path / "cdi"  # /var/run/cdi holds other tests' specs too
        mine.mkdir()
        (mine / spec_file.name).write_bytes(spec_file.read_bytes())
        assert check_specs([str(mine)], root=str(root)) == []
    print(
        f"{len(results)} podman starts ({right} with the device asked for, {hooked} refused by "
        f"nvhook's hook and {stale} with the old spec's dead nodes inside the window, {refused} "
        "refused by podman), "
        f"{len(reads)} spec reads; spec rewritten {max(lags):.2f} s after a change at worst"
    )
