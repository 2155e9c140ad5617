"""What the DRA driver's two hot paths cost: a prepare, and a republish of a node's slices.

    .venv/bin/python bench/dra.py [--runs N]

On the dgx-a100 mock (laid out in a temporary directory) with the API-server stand-in of the
tests on 127.0.0.1 (tests/support/kubeapi.py: an in-process HTTP server that validates every
object against the kubernetes client's models, so its own cost is in the rows):

- ``prepare 1 claim``: ``Preparer.prepare`` of one claim of two GPUs, from the claim's GET to
  the transient spec written (temp, fsync, rename) and the checkpoint synced; each run a new
  claim (a repeat is a lookup);
- ``unprepare 1 claim``: its spec removed, the checkpoint synced;
- ``republish dgx-a100``: ``Publisher.publish`` after the inventory changed (one MIG device
  fewer, then back): list, replace the slice with a new pool generation;
- ``publish, unchanged``: the periodic check when nothing changed (list and compare);
- ``discover dgx-a100``: ``inventory.discover`` (NVML through the mock's libnvidia-ml);
- ``device edits dgx-a100``: ``prepare.host_edits`` (nvhook's CDI generator for every device:
  paid at start and after a relayout, never per prepare).

Prints medians in ms; compare rows of one run only (the machine is shared).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nvhook.dra.inventory import Inventory, discover
from nvhook.dra.kubeapi import connect
from nvhook.dra.plugin import Publisher
from nvhook.dra.prepare import ClaimRef, Preparer, host_edits
from nvhook.mock import create
from nvhook.planner import Host
from tests.nvhook.dra.conftest import NODE, allocated_claim
from tests.support.kubeapi import KubeApiServer


def median_ms(f: Callable[[int], None], runs: int) -> float:
    times = []
    for i in range(runs):
        t = time.perf_counter()
        f(i)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp, KubeApiServer() as server:
        root = Path(tmp) / "root"
        create("dgx-a100", root, nodes="file")
        host = Host(root=str(root))
        api = connect(str(server.kubeconfig(Path(tmp) / "kubeconfig")))
        inventory = discover(host)
        (Path(tmp) / "state").mkdir()
        preparer = Preparer(
            node=NODE, api=api, state_dir=f"{tmp}/state", cdi_root=f"{tmp}/cdi",
            inventory=inventory, edits=host_edits(host, inventory),
        )  # fmt: skip
        claims = []
        for i in range(runs):
            obj = server.put("resourceclaims", allocated_claim(f"c{i}", ["gpu-2", "gpu-3"]))
            claims.append(ClaimRef("default", f"c{i}", obj["metadata"]["uid"]))

        prepared, unprepared = [], []
        for c in claims:  # each claim prepared then unprepared: they share the two GPUs
            t = time.perf_counter()
            assert preparer.prepare([c])[c.uid].error == ""
            prepared.append(time.perf_counter() - t)
            t = time.perf_counter()
            assert preparer.unprepare([c])[c.uid].error == ""
            unprepared.append(time.perf_counter() - t)
        rows = {
            "prepare 1 claim": statistics.median(prepared) * 1000,
            "unprepare 1 claim": statistics.median(unprepared) * 1000,
        }
        publisher = Publisher(api, NODE)
        publisher.publish(inventory)
        fewer = Inventory(inventory.devices[1:])
        rows["republish dgx-a100"] = median_ms(
            lambda i: publisher.publish(fewer if i % 2 == 0 else inventory) and None, runs
        )
        rows["publish, unchanged"] = median_ms(
            lambda i: publisher.publish(inventory) and None, runs
        )
        rows["discover dgx-a100"] = median_ms(lambda i: discover(host) and None, runs)
        rows["device edits dgx-a100"] = median_ms(
            lambda i: host_edits(host, inventory) and None, runs
        )
        assert server.rejected == []
    for name, ms in rows.items():
        print(f"{name:24} {ms:8.2f} ms")


if __name__ == "__main__":
    main()
