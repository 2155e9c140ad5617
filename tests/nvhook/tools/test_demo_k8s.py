"""``nvhook demo --kubernetes``: register, list, allocate, CRI, runtime, ``nvidia-smi -L``."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

import nvhook.tools.demo
import nvhook.tools.demo_k8s
from nvhook.cli import main

#: the dgx-a100 profile's GPUs 2 and 3: the first two not in MIG mode, which mixed advertises
#: as nvidia.com/gpu and the preferred allocation picks (behind one PCIe switch pair, NUMA 1)
FIRST_WHOLE = [
    "GPU-086c745f-81ed-45b1-b563-f27bba6d7561",
    "GPU-17297365-d66b-40f2-85f4-de7bd1bd8cd3",
]


def _narrated_steps(out: str) -> list[str]:
    return re.findall(r"^== \d\. (\w+)", out, re.M)


def _gpus_seen(out: str) -> list[str]:
    return re.findall(
        r"^   \| GPU \d+: NVIDIA A100-SXM4-80GB \(UUID: (GPU-[0-9a-f-]+)\)$", out, re.M
    )


def _listdir(path: str) -> set[str]:
    return set(os.listdir(path)) if os.path.isdir(path) else set()


@pytest.mark.runtime
@pytest.mark.root
@pytest.mark.slow
def test_kubernetes_demo_runs_the_pod_through_containerd_s_cri(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.containers import require, require_root

    require_root()
    for tool in ("runc", "busybox", "containerd", "ctr", "umoci", "skopeo"):
        require(tool)
    sockets = _listdir("/run/containerd/s")
    started = time.monotonic()
    assert main(["demo", "--kubernetes", "--dir", str(tmp_path)]) == 0
    elapsed = time.monotonic() - started
    out = capsys.readouterr().out
    assert _narrated_steps(out) == ["a", "register", "list", "allocate", "CRI", "runtime"]
    assert f"   preferred: {', '.join(FIRST_WHOLE)}\n" in out
    annotation = ",".join(f"nvidia.com/gpu={u}" for u in FIRST_WHOLE)
    assert re.search(
        rf"^   annotation cdi\.k8s\.io/nvhook-device-plugin_\w+={annotation}$", out, re.M
    )
    assert "not through containerd's CRI" not in out
    # the runtime entry nvhook runtime configure wrote, as containerd read it
    assert '   | container_annotations = ["cdi.k8s.io/*"]\n' in out
    assert re.search(r"^   containerd 1\.6\.\S+ started: ", out, re.M)
    assert "   RunPodSandbox (runtime_handler nvidia, host network): " in out
    # both containers went through nvhook-runtime; only ours asked, by the CDI annotation
    assert "create: asks for no GPU, config.json untouched  (pause container)" in out
    assert f"create: mode cdi, {annotation}, config.json edited  (container)" in out
    assert _gpus_seen(out) == FIRST_WHOLE
    assert "clean-up: StopPodSandbox, RemovePodSandbox" in out
    assert "clean-up: containerd stopped" in out
    # nothing left running or behind: no new shim socket, no containerd on the demo's config
    assert _listdir("/run/containerd/s") <= sockets
    config = str(tmp_path / "containerd" / "config.toml")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert config.encode() not in f.read(), f"pid {pid} still runs on {config}"
        except OSError:
            continue  # gone meanwhile
    print(f"demo --kubernetes through CRI: {elapsed:.1f}s")


@pytest.mark.runtime
@pytest.mark.root
@pytest.mark.slow
def test_kubernetes_demo_without_cri_starts_the_bundle_with_runc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.containers import require

    require("runc")
    require("busybox")
    monkeypatch.setattr(nvhook.tools.demo_k8s, "cannot_run_cri", lambda: "skopeo is not installed")
    assert main(["demo", "--kubernetes", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert _narrated_steps(out) == ["a", "register", "list", "allocate", "CRI", "runtime"]
    assert "   not through containerd's CRI: skopeo is not installed; the bundle its CRI" in out
    assert "(nvhook-runtime, then runc)" in out
    assert _gpus_seen(out) == FIRST_WHOLE
    assert "plugin: stopped; sockets removed" in out


def test_cri_needs_containerd_ctr_umoci_and_skopeo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nvhook.tools.demo, "cannot_run", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert nvhook.tools.demo_k8s.cannot_run_cri() == "containerd is not installed"
    for tool in ("containerd", "ctr", "umoci"):
        (tmp_path / tool).write_text("#!/bin/sh\n")
        (tmp_path / tool).chmod(0o755)
    assert nvhook.tools.demo_k8s.cannot_run_cri() == "skopeo is not installed"
    monkeypatch.setattr(nvhook.tools.demo, "cannot_run", lambda: "not root (runc needs root here)")
    assert nvhook.tools.demo_k8s.cannot_run_cri() == "not root (runc needs root here)"


def test_kubernetes_demo_without_containers_shows_what_the_runtime_would_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nvhook.tools.demo, "cannot_run", lambda: "runc is not installed")
    assert main(["demo", "--kubernetes", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert _narrated_steps(out) == ["a", "register", "list", "allocate", "CRI", "runtime"]
    assert "not through containerd's CRI: runc is not installed" in out
    assert "not starting a container: runc is not installed" in out
    assert "Mode: cdi" in out
    for uuid in FIRST_WHOLE:
        assert f"nvidia.com/gpu={uuid}" in out
    assert "Result: config.json would be edited" in out
