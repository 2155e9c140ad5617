"""What the node watcher (``nvhook.watch``) costs on an idle node, and how fast it sees a change.

    .venv/bin/python bench/watch.py [--polls 1000]

On a ``dgx-a100`` mock (8 GPUs, GPU 0 with 3 MIG devices), with the spec's driver files
watched as ``nvhook watch`` watches them:

- **CPU per hour, idle**: the process CPU time (``time.process_time``: user + system) of
  ``--polls`` polls with nothing changing, per poll, times the polls of an hour at the
  default interval (:data:`nvhook.watch.DEFAULT_INTERVAL`); NVML's own check every
  :data:`~nvhook.watch.DEFAULT_NVML_INTERVAL` seconds is timed apart and added per hour;
- **detection latency**: a watcher thread at the default interval, then a MIG re-layout of
  GPU 0 (to 7x1g.10gb) and a GPU loss (GPU 5), each through ``nvhook.mock.mutate``; the
  latency is from the change's landing in procfs (the mtime of the directory the change
  renamed entries in: ``capabilities/gpu0/mig``, ``gpus``) to the subscriber's call, and to
  the rewritten spec on disk (the refresh included). Five of each; the median and the worst;
- **the device plugin's NVML check**: with the XID monitor's NVML event reader running
  (:class:`~nvhook.deviceplugin.health.HealthMonitor`), how long the watcher waits for the
  reader to release NVML (``nvml_released``) and how long the reader is closed (its XID
  events unseen through NVML) per check, twenty checks; the median and the worst.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from nvhook.mock import create  # noqa: E402
from nvhook.mock.mutate import add_gpu, relayout_mig, remove_gpu  # noqa: E402
from nvhook.planner import Host  # noqa: E402
from nvhook.watch import (  # noqa: E402
    DEFAULT_INTERVAL,
    DEFAULT_NVML_INTERVAL,
    Refresher,
    Update,
    Watcher,
    snapshot,
    spec_paths,
)

BUDGET_S = 1.0


def _idle_cpu(host: Host, spec: str, polls: int) -> tuple[float, float, float]:
    watcher = Watcher(host, nvml=False, files=spec_paths(spec), log=lambda line: None)
    start = time.process_time()
    for _ in range(polls):
        watcher.poll()
    per_poll = (time.process_time() - start) / polls
    start = time.process_time()
    for _ in range(20):
        snapshot(host, nvml=True)
    nvml = (time.process_time() - start) / 20
    hourly = per_poll * 3600 / DEFAULT_INTERVAL + nvml * 3600 / DEFAULT_NVML_INTERVAL
    return per_poll, nvml, hourly


def _latencies(host: Host, root: Path, spec: str) -> dict[str, list[tuple[float, float]]]:
    watcher = Watcher(host, files=spec_paths(spec), log=lambda line: None)
    refresher = Refresher(host, output=spec, watcher=watcher, log=lambda line: None)
    seen: list[float] = []
    written: list[float] = []
    done = threading.Event()

    def on_update(update: Update) -> None:
        seen.append(time.time())
        refresher(update)
        written.append(time.time())
        done.set()

    watcher.subscribe(on_update)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,))
    thread.start()
    out: dict[str, list[tuple[float, float]]] = {"MIG re-layout": [], "GPU loss": []}
    mig_dir = root / "proc/driver/nvidia/capabilities/gpu0/mig"
    gpus_dir = root / "proc/driver/nvidia/gpus"
    try:
        for i in range(5):
            for what, change, directory in (
                (
                    "MIG re-layout",
                    lambda n=7 - i % 2: relayout_mig(root, 0, ["1g.10gb"] * n),
                    mig_dir,
                ),
                ("GPU loss", lambda: remove_gpu(root, 5), gpus_dir),
            ):
                done.clear()
                seen.clear()
                written.clear()
                change()
                landed = os.stat(directory).st_mtime_ns / 1e9
                if not done.wait(30):
                    raise SystemExit(f"{what}: not seen within 30 s")
                time.sleep(DEFAULT_INTERVAL * 2)  # the rest of a change spread over two polls
                out[what].append((seen[0] - landed, written[0] - landed))
            add_gpu(root, 5)
            time.sleep(DEFAULT_INTERVAL * 3)
    finally:
        stop.set()
        thread.join()
    return out


def _released(host: Host) -> tuple[list[float], list[float]]:
    from nvhook.deviceplugin.health import HealthMonitor
    from nvhook.deviceplugin.xid import XidPolicy
    from nvhook.watch import _with_nvml

    gpus = [(g.uuid, g.bus_id) for g in snapshot(host).gpus]
    monitor = HealthMonitor(host, gpus, XidPolicy())
    monitor.start()
    waits, closed = [], []
    try:
        for _ in range(20):
            assert monitor.nvml_open.wait(5)
            time.sleep(random.uniform(0, HealthMonitor.WAIT))  # anywhere in its wait
            start = time.monotonic()
            with monitor.nvml_released():
                got = time.monotonic()
                _with_nvml(host, snapshot(host))
            waits.append(got - start)
            assert monitor.nvml_open.wait(5)
            closed.append(time.monotonic() - got)
    finally:
        monitor.stop()
    return waits, closed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--polls", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "dgx"
        create("dgx-a100", root, nodes="char" if os.geteuid() == 0 else "file")
        host = Host(root=str(root))
        spec = f"{tmp}/cdi/nvidia.json"
        Refresher(host, output=spec, log=lambda line: None).refresh()
        per_poll, nvml, hourly = _idle_cpu(host, spec, args.polls)
        print(
            f"idle poll (procfs, /dev, {len(spec_paths(spec))} spec paths): "
            f"{per_poll * 1e3:.2f} ms CPU; NVML check {nvml * 1e3:.1f} ms CPU"
        )
        print(
            f"CPU per hour at {DEFAULT_INTERVAL:g} s (NVML every {DEFAULT_NVML_INTERVAL:g} s): "
            f"{hourly:.1f} s ({hourly / 36:.2f} % of one core)"
        )
        for what, rows in _latencies(host, root, spec).items():
            seen = [s for s, _ in rows]
            written = [w for _, w in rows]
            verdict = "PASS" if max(seen) <= BUDGET_S else "OVER"
            print(
                f"{what:14} seen after median {statistics.median(seen):.2f} s, worst "
                f"{max(seen):.2f} s; spec rewritten after median "
                f"{statistics.median(written):.2f} s, worst {max(written):.2f} s  "
                f"{verdict} ({BUDGET_S:g} s)"
            )
        waits, closed = _released(host)
        print(
            f"device plugin NVML check: waits for the XID reader median "
            f"{statistics.median(waits):.2f} s, worst {max(waits):.2f} s; the reader is closed "
            f"median {statistics.median(closed) * 1e3:.1f} ms, worst {max(closed) * 1e3:.1f} ms "
            "per check "
            f"(every {DEFAULT_NVML_INTERVAL:g} s and on a procfs change)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
