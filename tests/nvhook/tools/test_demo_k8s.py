"""``nvhook demo --kubernetes``: register, list, allocate, CRI, runtime, ``nvidia-smi -L``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import nvhook.tools.demo
from nvhook.cli import main

#: the dgx-a100 profile's GPUs 2 and 3: the first two not in MIG mode, which mixed advertises
#: as nvidia.com/gpu and the preferred allocation picks (behind one PCIe switch pair, NUMA 1)
FIRST_WHOLE = [
    "GPU-086c745f-81ed-45b1-b563-f27bba6d7561",
    "GPU-17297365-d66b-40f2-85f4-de7bd1bd8cd3",
]


def _narrated_steps(out: str) -> list[str]:
    return re.findall(r"^== \d\. (\w+)", out, re.M)


@pytest.mark.runtime
@pytest.mark.root
@pytest.mark.slow
def test_kubernetes_demo_container_sees_the_allocated_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.containers import require

    require("runc")
    require("busybox")
    assert main(["demo", "--kubernetes", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert _narrated_steps(out) == ["a", "register", "list", "allocate", "CRI", "runtime"]
    assert f"   preferred: {', '.join(FIRST_WHOLE)}\n" in out
    annotation = ",".join(f"nvidia.com/gpu={u}" for u in FIRST_WHOLE)
    assert re.search(
        rf"^   annotation cdi\.k8s\.io/nvhook-device-plugin_\w+={annotation}$", out, re.M
    )
    seen = re.findall(
        r"^   \| GPU \d+: NVIDIA A100-SXM4-80GB \(UUID: (GPU-[0-9a-f-]+)\)$", out, re.M
    )
    assert seen == FIRST_WHOLE
    assert "plugin: stopped; sockets removed" in out


def test_kubernetes_demo_without_containers_shows_what_the_runtime_would_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nvhook.tools.demo, "cannot_run", lambda: "runc is not installed")
    assert main(["demo", "--kubernetes", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert _narrated_steps(out) == ["a", "register", "list", "allocate", "CRI", "runtime"]
    assert "not starting a container: runc is not installed" in out
    assert "Mode: cdi" in out
    for uuid in FIRST_WHOLE:
        assert f"nvidia.com/gpu={uuid}" in out
    assert "Result: config.json would be edited" in out
