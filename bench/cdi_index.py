"""Resolving one CDI device among many unrelated spec files: full scan against the index.

    .venv/bin/python bench/cdi_index.py [--others 1000] [--runs 20]

A spec directory holds the spec ``nvhook cdi generate`` would write for the ``dgx-a100``
mock (as ``bench/runtime.py`` builds it) and ``--others`` claim specs of another kind (as a
DRA driver writes one per claim). Once the files are older than the index's racy window
(:data:`oci.cdi.index.RACY_NS`), ``nvidia.com/gpu=1`` is resolved:

- ``Registry(dirs).resolve`` (the full scan: every file parsed, every call);
- :func:`oci.cdi.index.resolve` with no index yet (the first call: every file parsed,
  the index written) and with the index (later calls), in this process;
- the three again in a fresh ``python -I -S`` process each, timed inside it around the
  call (the interpreter's start and the imports of ``oci.cdi.index`` and
  ``oci.cdi.registry`` are left out).

Each row is the median of ``--runs``, with the number of files parsed per call.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.runtime import PROFILE, cdi_spec, other_spec  # noqa: E402

NAME = "nvidia.com/gpu=1"
_CHILD = """\
import sys, time
sys.path.insert(0, {repo!r})
t0 = time.perf_counter()
from oci.cdi.index import resolve
from oci.cdi.registry import Registry
t1 = time.perf_counter()
{call}
t2 = time.perf_counter()
print((t1 - t0) * 1e3, (t2 - t1) * 1e3)
"""


def median_ms(call: Callable[[], object], runs: int, before: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        before()
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def child_ms(script: str, runs: int, before: Callable[[], object]) -> tuple[float, float]:
    imports, calls = [], []
    for _ in range(runs):
        before()
        out = subprocess.run(
            [sys.executable, "-I", "-S", "-c", script], check=True, capture_output=True, text=True
        ).stdout.split()
        imports.append(float(out[0]))
        calls.append(float(out[1]))
    return statistics.median(imports), statistics.median(calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--others", type=int, default=1000, help="claim specs (default 1000)")
    parser.add_argument("--runs", type=int, default=20, help="calls per row (default 20)")
    args = parser.parse_args()

    from nvhook.mock import create
    from oci.cdi import index
    from oci.cdi.parse import load_spec
    from oci.cdi.registry import Registry
    from oci.cdi.spec import Spec

    work = Path(tempfile.mkdtemp(prefix="nvhook-bench-cdi-index-"))
    try:
        spec_dir, cache = work / "cdi", work / "cache"
        spec_dir.mkdir()
        for i in range(args.others):
            path = spec_dir / f"k8s.gpu.example.com-claim_{i:04}.json"
            path.write_text(json.dumps(other_spec(i), indent=2))
        create(PROFILE, work / "machine", nodes="file")
        (spec_dir / "nvidia.json").write_text(json.dumps(cdi_spec(work / "machine"), indent=2))
        time.sleep(index.RACY_NS / 1e9 + 0.1)
        dirs = [str(spec_dir)]
        parsed: list[str] = []

        def loader(path: str) -> Spec:
            parsed.append(path)
            return load_spec(path)

        def forget() -> None:
            shutil.rmtree(cache, ignore_errors=True)

        def keep() -> None:
            pass

        def per_call(call: Callable[[], object], before: Callable[[], object]) -> int:
            parsed.clear()
            before()
            call()
            return len(parsed)

        def full() -> object:
            return Registry(dirs, loader=loader).resolve([NAME])

        def indexed() -> object:
            return index.resolve(dirs, [NAME], cache_dir=str(cache), loader=loader)

        assert full() == indexed()
        rows = [
            ("Registry(dirs).resolve (full scan)", median_ms(full, args.runs, keep),
             per_call(full, keep)),
            ("resolve, first call (no index)", median_ms(indexed, args.runs, forget),
             per_call(indexed, forget)),
            ("resolve, later calls (index)", median_ms(indexed, args.runs, keep),
             per_call(indexed, keep)),
        ]  # fmt: skip
        calls = {
            "full scan": f"Registry([{str(spec_dir)!r}]).resolve([{NAME!r}])",
            "first call": f"resolve([{str(spec_dir)!r}], [{NAME!r}], cache_dir={str(cache)!r})",
        }
        calls["later call"] = calls["first call"]
        fresh: dict[str, tuple[float, float]] = {}
        for label, code in calls.items():
            script = _CHILD.format(repo=str(REPO), call=code)
            fresh[label] = child_ms(script, args.runs, forget if label == "first call" else keep)

        print(f"{NAME}: the {PROFILE} GPU spec among {args.others} other specs, ", end="")
        print(f"median of {args.runs} calls, {os.cpu_count()} cpus")
        print(f"{'':<38} {'ms':>7}  files parsed")
        for label, ms, count in rows:
            print(f"{label:<38} {ms:>7.2f}  {count}")
        for label, (imp, ms) in fresh.items():
            print(f"python -I -S, {label:<24} {ms:>7.2f}  (import oci.cdi.index "
                  f"{imp:.2f} ms before it)")  # fmt: skip
        size = sum(p.stat().st_size for p in cache.glob("cdi-index-*.marshal"))
        print(f"index file: {size} bytes")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
