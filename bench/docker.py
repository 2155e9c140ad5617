"""What ``docker run --gpus all`` costs over a plain ``docker run``, in hook and shim mode.

    .venv/bin/python bench/docker.py [--runs N] [--keep]

A private dockerd 20.10 (``tests/support/docker.py``'s: its own data and exec roots,
socket and containerd namespace, no iptables, no bridge) on the ``dgx-a100`` mock laid out
as root, with nvhook's bin directory first on its PATH (so that it accepts ``--gpus``) and
``nvhook runtime configure --runtime docker`` applied (so that ``--runtime nvidia`` runs
the shim). Rows, each ``docker run --rm --network none [OPTIONS] busybox true``:

- ``plain``: no options (the reference);
- ``hook``: ``--gpus all``: plain runc, dockerd's prestart hook (``nvhook-hook prestart``)
  injects all 8 GPUs, their driver files and the ld cache;
- ``shim``: ``--runtime nvidia --gpus all``: the shim edits the spec, runc does the rest;
- ``shim, no GPU``: ``--runtime nvidia`` alone: what the shim costs every container.

The rows are interleaved (one run of each, in turn, ``--runs`` times, after a warm-up
round), so a noisy neighbour weighs on all of them alike; each is reported as its median
wall time, its difference to ``plain`` and the ratio to ``plain``, all of the same run.
Needs root, docker.io, runc, umoci and skopeo (``./dev setup``) and the launchers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the tests' harness lives beside bench/
    sys.path.insert(0, str(ROOT))

from tests.support.docker import Docker  # noqa: E402
from tests.support.images import BUSYBOX_IMAGE, busybox_image_tar  # noqa: E402

PROFILE = "dgx-a100"
BIN = Path(sys.executable).parent
ROWS: dict[str, tuple[str, ...]] = {
    "plain": (),
    "hook, --gpus all": ("--gpus", "all"),
    "shim, --gpus all": ("--runtime", "nvidia", "--gpus", "all"),
    "shim, no GPU": ("--runtime", "nvidia"),
}


def prepare(work: Path) -> Docker:
    """The mock, a config naming it, and a private dockerd with busybox loaded (started)."""
    from nvhook.mock import create

    for launcher in ("nvhook", "nvhook-runtime", "nvhook-hook", "nvidia-container-runtime-hook"):
        if not (BIN / launcher).is_file():
            sys.exit(f"{BIN / launcher} missing: run {BIN / 'nvhook'} install-entrypoints")
    machine = work / "machine"
    create(PROFILE, machine, nodes="auto")
    config = work / "config.toml"
    config.write_text(
        f'[runtime]\nruntimes = ["{shutil.which("runc") or "runc"}"]\n'
        f'log_file = "{work / "shim.log"}"\n[host]\nroot = "{machine}"\n'
    )
    env = {"NVHOOK_CONFIG": str(config), "NVHOOK_CACHE_DIR": str(work / "cache")}
    docker = Docker(work / "docker", path=[str(BIN)], env=env)
    subprocess.run(
        [str(BIN / "nvhook"), "runtime", "configure", "--runtime", "docker",
         "--config", str(docker.config), "--backup-dir", str(work / "backups")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    docker.start()
    docker.load(busybox_image_tar(work / "image"))
    return docker


def one_run(docker: Docker, options: tuple[str, ...]) -> float:
    argv = ["run", "--rm", "--network", "none", *options, BUSYBOX_IMAGE, "true"]
    started = time.perf_counter()
    result = docker.cmd(*argv, timeout=120)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"docker {' '.join(argv)} failed:\n{result.stderr}")
    return elapsed


def check(docker: Docker) -> None:
    """Once: each GPU row gives the container all 8 GPUs (the mock nvidia-smi counts them)."""
    for name, options in ROWS.items():
        result = docker.run(BUSYBOX_IMAGE, ["nvidia-smi", "-L"], *options)
        gpus = sum(line.startswith("GPU ") for line in result.stdout.splitlines())
        want = 8 if "--gpus" in options else 0
        if gpus != want:
            sys.exit(f"{name}: the container sees {gpus} GPUs, not {want}:\n{result.stderr}")


def measure(docker: Docker, runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in ROWS}
    for options in ROWS.values():  # warm-up: page cache, dockerd's first-run work
        one_run(docker, options)
    for _ in range(runs):
        for name, options in ROWS.items():
            times[name].append(one_run(docker, options))
    return times


def report(times: dict[str, list[float]], runs: int) -> None:
    plain = statistics.median(times["plain"])
    print(f"docker run --rm busybox true, {runs} interleaved runs per row, medians; "
          f"dockerd 20.10, {PROFILE} mock, --gpus all = 8 GPUs")  # fmt: skip
    print(f"{'row':<20} {'median':>9} {'min':>9} {'- plain':>9} {'x plain':>8}")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"{name:<20} {median * 1000:>7.0f}ms {min(values) * 1000:>7.0f}ms "
            f"{(median - plain) * 1000:>+7.0f}ms {median / plain:>7.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per row (default 15)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: dockerd, runc and the mock's device nodes need it")
    work = Path(tempfile.mkdtemp(prefix="nvhook-bench-docker-"))
    docker: Docker | None = None
    try:
        docker = prepare(work)
        check(docker)
        report(measure(docker, args.runs), args.runs)
    finally:
        if docker is not None:
            docker.stop()
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
