"""``nvhook labels --presence`` against the API-server stand-in (tests/support/kubeapi.py, on
loopback; no kube-apiserver here): a fresh node with no label of ours and no driver gets
``nvidia.com/gpu.present=true`` from its PCI bus, and with it the node selection of the
installer, the labeller and the device plugin (evaluated here as the scheduler's node affinity
matches, since no scheduler runs here) becomes true; only that one key is ever written; it goes
when the bus has no NVIDIA GPU; an unreadable bus sends nothing; the daemon survives the API
failing and stops on SIGTERM; it loads neither NVML nor pydantic."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvhook.cli import main
from nvhook.deviceplugin.presence import PRESENT, presence_patch
from tests.packaging.conftest import PACKAGING
from tests.support.kubeapi import KubeApiServer

KUBE = PACKAGING / "kubernetes"
#: a fresh worker as kubelet registers it: its own labels, none of nvhook's
FRESH = {
    "kubernetes.io/hostname": "gpu-1",
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": "amd64",
    "nvidia.com/device-plugin.config": "big",  # an admin's: never touched
    "nvidia.com/gpu.product": "kept",  # the full labeller's: never touched by --presence
}


@pytest.fixture
def api() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        server.put("nodes", {"metadata": {"name": "gpu-1", "labels": dict(FRESH)}})
        yield server


@pytest.fixture
def fresh_node(make_mock_machine: Callable[..., Path]) -> Path:
    """An H100 node before anything is installed: the PCI bus, no driver at all."""
    root = make_mock_machine("h100-pcie")
    for gone in ("proc/driver/nvidia", "usr/lib", "usr/bin", "run/nvidia-persistenced"):
        shutil.rmtree(root / gone, ignore_errors=True)
    for node in (root / "dev").glob("nvidia*"):
        shutil.rmtree(node) if node.is_dir() else node.unlink()
    return root


def _matches(requirement: dict[str, Any], labels: dict[str, str]) -> bool:
    """One node selector requirement, as the API's label selectors match (NotIn and
    DoesNotExist hold where the key is absent)."""
    key, op, values = requirement["key"], requirement["operator"], requirement.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not modelled")


def _selects(daemonset: dict[str, Any], labels: dict[str, str]) -> bool:
    """The DaemonSet's required node affinity on a node with ``labels`` (terms ORed,
    expressions ANDed)."""
    affinity = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return any(all(_matches(r, labels) for r in t["matchExpressions"]) for t in terms)


def _daemonset(name: str) -> dict[str, Any]:
    return next(
        d for d in yaml.safe_load_all((KUBE / name).read_text()) if d["kind"] == "DaemonSet"
    )


GPU_DAEMONSETS = ("installer-daemonset.yaml", "labeller.yaml", "device-plugin.yaml")


def test_the_patch_is_the_one_key() -> None:
    assert presence_patch({}, True) == {PRESENT: "true"}
    assert presence_patch({PRESENT: "true"}, True) == {}
    assert presence_patch({PRESENT: "false"}, True) == {PRESENT: "true"}
    assert presence_patch({PRESENT: "true", "nvidia.com/gpu.count": "8"}, False) == {PRESENT: None}
    assert presence_patch({"nvidia.com/gpu.count": "8"}, False) == {}
    assert presence_patch({PRESENT: "true"}, None) == {}  # the bus unreadable: nothing


def test_a_fresh_gpu_node_is_selected_by_the_gpu_daemonsets(
    api: KubeApiServer, fresh_node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = api.get("nodes", "gpu-1")["metadata"]["labels"]
    assert _selects(_daemonset("presence-labeller.yaml"), before)
    assert not any(_selects(_daemonset(n), before) for n in GPU_DAEMONSETS)
    argv = ["labels", "--presence", "--root", str(fresh_node), "--node", "gpu-1",
            "--api-server", api.url]  # fmt: skip
    assert main(argv) == 0
    after = api.get("nodes", "gpu-1")["metadata"]["labels"]
    assert after == {**FRESH, PRESENT: "true"}
    assert f"node gpu-1: {PRESENT} set" in capsys.readouterr().err
    for name in GPU_DAEMONSETS:
        assert _selects(_daemonset(name), after), name
    assert _selects(_daemonset("presence-labeller.yaml"), after)  # it keeps watching
    sent = len(api.requests)
    assert main(argv) == 0  # nothing to change: a GET and no PATCH
    assert api.requests[sent:] == [("GET", "/api/v1/nodes/gpu-1")]
    assert api.rejected == []


def test_the_label_goes_with_the_gpus_and_stays_when_the_bus_is_unreadable(
    api: KubeApiServer, make_mock_machine: Callable[..., Path], fresh_node: Path, tmp_path: Path
) -> None:
    base = ["labels", "--presence", "--node", "gpu-1", "--api-server", api.url]
    assert main([*base, "--root", str(fresh_node)]) == 0
    unreadable = tmp_path / "no-sysfs"
    unreadable.mkdir()
    sent = len(api.requests)
    assert main([*base, "--root", str(unreadable)]) == 0
    assert api.requests[sent:] == [("GET", "/api/v1/nodes/gpu-1")]
    assert api.get("nodes", "gpu-1")["metadata"]["labels"][PRESENT] == "true"
    empty = make_mock_machine("no-gpu")
    (empty / "sys/bus/pci/devices").mkdir(parents=True)  # a bus without an NVIDIA function
    assert main([*base, "--root", str(empty)]) == 0
    assert api.get("nodes", "gpu-1")["metadata"]["labels"] == FRESH


def test_presence_needs_a_node_and_takes_no_other_mode(fresh_node: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    for extra, said in (
        ([], "give --node"),
        (["--node", "n", "--output", "/tmp/x"], "do not apply"),
        (["--node", "n", "--all-vendors"], "do not apply"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "nvhook", "labels", "--presence", *extra],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr


#: The daemon as its DaemonSet runs it, in a fresh interpreter that reports what it loaded.
DAEMON = """
import sys
from nvhook.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("pynvml", "pydantic", "yaml", "grpc") if m in sys.modules)
print("loaded:", heavy, file=sys.stderr)
sys.exit(code)
"""


def test_the_daemon_survives_the_api_and_stops_on_sigterm(
    api: KubeApiServer, fresh_node: Path
) -> None:
    api.fail("GET", "/api/v1/nodes/gpu-1", 503, times=1)  # the API server restarting
    argv = ["labels", "--presence", "--root", str(fresh_node), "--node", "gpu-1",
            "--api-server", api.url, "--interval", "0.2"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-c", DAEMON, *argv], stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while api.get("nodes", "gpu-1")["metadata"]["labels"].get(PRESENT) != "true":
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    assert "503" in err and "trying again" in err
    assert f"node gpu-1: {PRESENT} set" in err
    assert "loaded: []" in err  # no NVML, no pydantic: it runs from the image's wheels
