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

The rows run in blocks of 5: ``no plugin``, then the plugin started and the two plugin rows
interleaved, then the plugin stopped, and so on, so that a drifting load weighs on all alike.
Then the plugin's ``CreateContainer`` handler alone is timed in this process on the same
requests (decode, the shim's decision, the adjustment, encode): the plugin's own work, free
of containerd's noise.
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
from typing import Any

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
            block = 5
            for start in range(0, runs, block):  # blocks: no plugin, then plugin (interleaved)
                n = min(block, runs - start)
                rows["no plugin"] += [once(False) for _ in range(n)]
                plugin = start_plugin(settings, work)
                try:
                    once(True)
                    for _ in range(n):
                        rows["plugin, no GPU"].append(once(False))
                        rows["plugin, 2 GPUs"].append(once(True))
                finally:
                    plugin.send_signal(signal.SIGTERM)
                    plugin.wait(15)
            client.stop_pod_sandbox(sandbox)
            client.remove_pod_sandbox(sandbox)
            log = (work / "plugin.log").read_text()
            blocks = -(-runs // block)
            assert log.count("devices GPU-") == runs + blocks, log[-2000:]
    handler = handler_times(settings, uuids, runs)
    reference = statistics.median(rows["no plugin"])
    print(f"containerd 2.1 CRI CreateContainer, median of {runs} (load: {os.getloadavg()[0]:.2f})")
    print(f"{'row':<16} {'median ms':>10} {'+ms':>8} {'ratio':>6}")
    for name, times in rows.items():
        median = statistics.median(times)
        extra = (median - reference) * 1000
        print(f"{name:<16} {median * 1000:>10.1f} {extra:>+8.1f} {median / reference:>6.2f}")
    print("the plugin's CreateContainer handler alone, in process (decode, decide, encode):")
    for name, times in handler.items():
        print(f"{name:<16} {statistics.median(times) * 1000:>10.2f}")
    return 0


def handler_times(settings: Path, uuids: list[str], runs: int) -> dict[str, list[float]]:
    """The plugin's own work per CreateContainer: its handler on the request bytes, in this
    process with the same settings (what the socket round trip adds is not in it)."""
    from nvhook.nri.pb import api_pb2
    from nvhook.nri.plugin import PLUGIN_SERVICE, NriPlugin
    from nvhook.settings import load_settings

    api: Any = api_pb2
    os.environ["NVHOOK_CACHE_DIR"] = str(settings.parent / "cache")
    plugin = NriPlugin(load_settings(str(settings)), log=lambda line: None)
    handle = plugin.handlers()[f"{PLUGIN_SERVICE}/CreateContainer"]
    pod = api.PodSandbox(id="p", name="bench", namespace="bench")
    env = ["PATH=/bin"]
    mounts = [
        api.Mount(destination=f"{DEVICES}/{u}", source="/dev/null", type="bind") for u in uuids
    ]
    requests = {
        "no GPU": api.CreateContainerRequest(pod=pod, container=api.Container(name="c", env=env)),
        "2 GPUs": api.CreateContainerRequest(
            pod=pod, container=api.Container(name="c", env=env, mounts=mounts)
        ),
    }
    out: dict[str, list[float]] = {name: [] for name in requests}
    for _ in range(runs):
        for name, request in requests.items():
            payload = request.SerializeToString()
            started = time.perf_counter()
            handle(payload)
            out[name].append(time.perf_counter() - started)
    return out


def start_plugin(settings: Path, work: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NVHOOK_CONFIG": str(settings), "NVHOOK_CACHE_DIR": str(work / "cache")}
    log = work / "plugin.log"
    before = log.read_text().count("registered as") if log.exists() else 0
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(ROOT / ".venv/bin/nvhook"), "nri-plugin"], env=env, stdout=out, stderr=out
        )
    deadline = time.monotonic() + 20
    while log.read_text().count("registered as") == before:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the plugin did not register:\n{log.read_text()}")
        time.sleep(0.05)
    return proc


if __name__ == "__main__":
    sys.exit(main())
