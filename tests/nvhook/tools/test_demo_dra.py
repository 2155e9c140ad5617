"""``nvhook demo --kubernetes --dra``: publish, allocate, prepare, CDI devices, runc, unprepare."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import nvhook.tools.demo
from nvhook.cli import main
from tests.nvhook.tools.test_demo_k8s import FIRST_WHOLE, _gpus_seen

MIG_3G = "MIG-c4a3af76-4d0a-431f-a3f3-d300352fa6d6"  # dgx-a100's GPU 0, GPU instance 2
STEPS = ["a", "publish", "allocate", "prepare", "CRI", "unprepare"]


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short directory: the driver's sockets are under it (a unix socket path is short)."""
    path = Path(tempfile.mkdtemp(prefix="dra-demo-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _steps(out: str) -> list[str]:
    return re.findall(r"^== \d\. (\w+)", out, re.M)


@pytest.mark.runtime
@pytest.mark.root
def test_the_dra_demo_runs_both_claims_containers(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.containers import require, require_root

    require_root()
    require("runc")
    require("busybox")
    assert main(["demo", "--kubernetes", "--dra", "--dir", str(workdir)]) == 0
    out = capsys.readouterr().out
    assert _steps(out) == STEPS
    assert _gpus_seen(out) == [*FIRST_WHOLE, "GPU-ac376f35-2448-4461-a104-b174eb2df7b3"]
    assert re.search(rf"^   \|   MIG 3g\.40gb +Device +0: \(UUID: {MIG_3G}\)$", out, re.M)
    assert "unprepare: both claims; their specs removed" in out


def test_without_containers_it_shows_the_claims_devices(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nvhook.tools.demo, "cannot_run", lambda: "runc is not installed")
    assert main(["demo", "--kubernetes", "--dra", "--dir", str(workdir)]) == 0
    out = capsys.readouterr().out
    assert _steps(out) == STEPS
    assert "ResourceSlice demo-node-gpu.nvidia.com-0: pool demo-node generation 1, 9 devices" in out
    assert "two-gpus <- gpu-2, gpu-3; a-mig (3g.40gb) <- gpu-0-mig-2-0" in out
    assert re.search(r"two-gpus: 6 device nodes: .* /dev/nvidia2 /dev/nvidia3$", out, re.M)
    assert "/dev/nvidia-caps/nvidia-cap21" in out
    assert "not starting containers: runc is not installed" in out
    assert "their specs removed" in out


def test_dra_needs_kubernetes() -> None:
    assert main(["demo", "--dra"]) != 0


def test_a_socket_directory_too_long_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 80)
    monkeypatch.setattr(nvhook.tools.demo, "cannot_run", lambda: "runc is not installed")
    assert main(["demo", "--kubernetes", "--dra", "--dir", str(deep)]) != 0
    err = capsys.readouterr().err
    assert "too long for a unix socket" in err and "Traceback" not in err
