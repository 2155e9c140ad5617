"""What ``nvhook nri-plugin`` adds to a CRI ``CreateContainer`` round trip on containerd 2.1.

    .venv/bin/python bench/nri.py [--runs N] [--keep]

containerd 2.1 from the Debian unstable root (tests/support/engines.py: a private overlay,
mount and pid namespace, its own socket, state and NRI socket), NRI on (its default), the
``dgx-a100`` mock laid out as root and nvhook's settings naming it (Kubernetes' policy:
device-list mounts count, image env does not). One pod sandbox; each run is one CRI
``CreateContainer`` (the client's call, containerd's spec and snapshot, NRI's round trip to the
plugin and back, the adjustment applied, runc's create of the task not included: CRI creates
it at ``StartContainer``). Rows:

- ``no plugin``: NRI on, no plugin connected (the reference);
- ``plugin, no GPU``: the plugin connected, a container that asks for nothing;
- ``plugin, 2 GPUs``: the plugin connected, a container with the device plugin's
  ``volume-mounts`` allocation of 2 GPUs (the plugin runs the shim's jit decision and returns
  device, mount, env and hook adjustments).

The reference row runs half before the plugin starts and half after it stopped; the two plugin
rows are interleaved between.
Each is reported as its median, its difference to ``no plugin`` and the ratio, of one run.
Needs root, umoci and skopeo (``./dev setup``), the launchers, and the sid engine root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the tests' harness lives beside bench/
    sys.path.insert(0, str(ROOT))

import tomlkit  # noqa: E402

from nvhook.cri.client import CriClient, container_config, pod_config  # noqa: E402
from nvhook.mock import create as create_mock  # noqa: E402
from nvhook.mock import load_profile  # noqa: E402
from tests.support.engines import EngineContainerd, PrivateRoot, engine_root  # noqa: E402
from tests.support.images import (  # noqa: E402
    BUSYBOX_IMAGE,
    PAUSE_IMAGE,
    busybox_image_tar,
    pause_image_tar,
)

DEVICES = "/var/run/nvidia-container-devices"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nvhook-bench-nri-"))
    try:
        return run(work, args.runs)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def run(work: Path, runs: int) -> int:
    machine = work / "machine"
    create_mock("dgx-a100", machine, nodes="char")
    uuids = [g.uuid for g in load_profile("dgx-a100").gpus if not g.mig_enabled][:2]
    with PrivateRoot(engine_root("sid"), work / "root", [work]) as root:
        socket = root.sockdir / "nri.sock"
        settings = work / "nvhook.toml"
        settings.write_text(
            f'[host]\nroot = "{machine}"\n[policy]\naccept_env_unprivileged = false\n'
            f'accept_volume_mounts = true\n[nri]\nsocket = "{socket}"\n'
        )
        config = work / "containerd.toml"
        doc = tomlkit.parse((root.lower / "etc/containerd/config.toml").read_text())
        doc.setdefault("plugins", {})
        doc["plugins"].setdefault("io.containerd.grpc.v1.cri", {})["restrict_oom_score_adj"] = True
        doc["plugins"]["io.containerd.nri.v1.nri"] = {"disable": False, "socket_path": str(socket)}
        config.write_text(tomlkit.dumps(doc))
        daemon = EngineContainerd(root, work / "ctrd", config)
        sandbox_image = daemon.dump()["plugins"]["io.containerd.cri.v1.images"]["pinned_images"][
            "sandbox"
        ]
        busybox = busybox_image_tar(work / "images")
        with daemon, CriClient(daemon.address) as client:
            daemon.ctr("images", "import", str(busybox))
            daemon.ctr("images", "import", str(pause_image_tar(busybox, work / "pause")))
            daemon.ctr("images", "tag", PAUSE_IMAGE, sandbox_image)
            pod = pod_config("bench", namespace="bench", log_directory=work / "logs")
            sandbox = client.run_pod_sandbox(pod, "")
            allocation = {"mounts": [(f"{DEVICES}/{u}", "/dev/null", True) for u in uuids]}
            made = iter(range(10**6))

            def once(asks: bool) -> float:
                """One create (a fresh name each: the CRI subset has no RemoveContainer; the
                containers, never started, go with the sandbox)."""
                config = container_config(
                    f"c{next(made)}",
                    BUSYBOX_IMAGE,
                    ["true"],
                    allocation=allocation if asks else None,
                )
                started = time.perf_counter()
                client.create_container(sandbox, config, pod)
                return time.perf_counter() - started

            rows: dict[str, list[float]] = {
                "no plugin": [],
                "plugin, no GPU": [],
                "plugin, 2 GPUs": [],
            }
            for _ in range(3):
                once(False)  # warm-up: the image's snapshot, containerd's caches
            half = max(runs // 2, 1)
            rows["no plugin"] = [once(False) for _ in range(half)]
            plugin = start_plugin(settings, work)
            try:
                once(True)
                for _ in range(runs):
                    rows["plugin, no GPU"].append(once(False))
                    rows["plugin, 2 GPUs"].append(once(True))
            finally:
                plugin.send_signal(signal.SIGTERM)
                plugin.wait(15)
            rows["no plugin"] += [once(False) for _ in range(runs - half)]  # before and after
            client.stop_pod_sandbox(sandbox)
            client.remove_pod_sandbox(sandbox)
            log = (work / "plugin.log").read_text()
            assert log.count("devices GPU-") == runs + 1, log[-2000:]
    reference = statistics.median(rows["no plugin"])
    print(f"containerd 2.1 CRI CreateContainer, median of {runs} (load: {os.getloadavg()[0]:.2f})")
    print(f"{'row':<16} {'median ms':>10} {'+ms':>8} {'ratio':>6}")
    for name, times in rows.items():
        median = statistics.median(times)
        extra = (median - reference) * 1000
        print(f"{name:<16} {median * 1000:>10.1f} {extra:>+8.1f} {median / reference:>6.2f}")
    return 0


def start_plugin(settings: Path, work: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NVHOOK_CONFIG": str(settings), "NVHOOK_CACHE_DIR": str(work / "cache")}
    log = work / "plugin.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(ROOT / ".venv/bin/nvhook"), "nri-plugin"], env=env, stdout=out, stderr=out
        )
    deadline = time.monotonic() + 20
    while "registered as" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the plugin did not register:\n{log.read_text()}")
        time.sleep(0.05)
    return proc


if __name__ == "__main__":
    sys.exit(main())
