"""How long request -> edits takes on the mock DGX A100, through each path.

    .venv/bin/python bench/discovery.py [--runs N] [--cold-runs N] [--profile P] [--devices D]

In-process (median of ``--runs`` after a warm-up, so imports and first-time costs are
excluded), for ``NVIDIA_VISIBLE_DEVICES=<devices>`` (default ``all``):

- jit, procfs resolver: :func:`nvhook.requests.parse_requests` + :func:`nvhook.planner.plan`
  with ``host.resolver = "procfs"`` (the shim's default);
- jit, nvml resolver: the same with ``host.resolver = "nvml"`` (NVML init and shutdown on
  every call, against the mock's fake libnvidia-ml);
- cdi generate: :func:`nvhook.tools.generate.generate_spec` + :func:`oci.cdi.write.dump_spec`
  (the whole spec, every device, as JSON bytes: the default format);
- cdi mode: a registry over a directory holding that spec (as JSON, then as YAML) resolving
  ``nvidia.com/gpu=<devices>`` (what the shim does per container in mode cdi, reading and
  parsing the spec file included).

Cold (median of ``--cold-runs`` fresh ``python -I`` processes, timed from outside): the jit
procfs path from a bare interpreter (imports included) next to ``python -I -c pass``: the
shim pays this on every GPU container start.

The machine is shared and noisy: compare the lines of one run with each other.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

_COLD = """
import sys
from nvhook.planner import Host, plan
from nvhook.requests.policy import Policy
from nvhook.requests.parse import parse_requests
spec = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=" + sys.argv[2]]}}
plan(parse_requests(spec, Policy()), Host(root=sys.argv[1]))
"""


def _median_ms(fn: Callable[[], object], runs: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _cold_ms(argv: list[str], runs: int) -> float:
    times = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, env=env, stdin=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--cold-runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile", default="dgx-a100")
    parser.add_argument("--devices", default="all")
    args = parser.parse_args(argv)

    from nvhook.mock import create
    from nvhook.planner import Host, plan
    from nvhook.requests.parse import parse_requests
    from nvhook.requests.policy import Policy
    from nvhook.tools.generate import generate_spec
    from oci.cdi.registry import Registry
    from oci.cdi.write import dump_spec, write_spec

    with tempfile.TemporaryDirectory(prefix="nvhook-bench-") as tmp:
        root = os.path.join(tmp, "root")
        create(args.profile, root, nodes="file")
        spec = {"process": {"env": [f"NVIDIA_VISIBLE_DEVICES={args.devices}"]}}
        policy = Policy()
        procfs, nvml = Host(root=root, resolver="procfs"), Host(root=root, resolver="nvml")
        generated = generate_spec(procfs).spec
        yaml_dir, json_dir = os.path.join(tmp, "cdi-yaml"), os.path.join(tmp, "cdi-json")
        write_spec(os.path.join(yaml_dir, "nvidia.yaml"), generated)
        write_spec(os.path.join(json_dir, "nvidia.json"), generated)
        name = f"nvidia.com/gpu={args.devices}"

        def jit(host: Host) -> Callable[[], object]:
            return lambda: plan(parse_requests(spec, policy), host).edits

        rows = [
            ("jit, procfs resolver", jit(procfs)),
            ("jit, nvml resolver", jit(nvml)),
            (
                "cdi generate (whole spec, JSON bytes)",
                lambda: dump_spec(generate_spec(procfs).spec, format="json"),
            ),
            (
                f"cdi mode, {name} from nvidia.json",
                lambda: Registry([json_dir]).resolve([name]),
            ),
            (
                f"cdi mode, {name} from nvidia.yaml",
                lambda: Registry([yaml_dir]).resolve([name]),
            ),
        ]
        print(
            f"request -> edits on {args.profile}, NVIDIA_VISIBLE_DEVICES={args.devices}: "
            f"median of {args.runs} in-process runs after {args.warmup} warm-up"
        )
        for label, fn in rows:
            print(f"  {label:<48} {_median_ms(fn, args.runs, args.warmup):8.2f} ms")

        python = sys.executable
        bare = _cold_ms([python, "-I", "-c", "pass"], args.cold_runs)
        code = f"import sys; sys.path.insert(0, {os.getcwd()!r})\n" + _COLD
        cold = _cold_ms([python, "-I", "-c", code, root, args.devices], args.cold_runs)
        print(f"cold, one fresh process each: median of {args.cold_runs}")
        print(f"  {'python -I -c pass':<48} {bare:8.2f} ms")
        print(f"  {'jit, procfs resolver (imports included)':<48} {cold:8.2f} ms")
        print(f"  {'  difference':<48} {cold - bare:8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
