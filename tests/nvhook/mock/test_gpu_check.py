"""scripts/gpu-check against the mock machine: agreement, and the disagreements it reports."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.mock import compiled, list_profiles, load_profile

SCRIPT = Path(__file__).resolve().parents[3] / "scripts/gpu-check"


def gpu_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


#: gpu-check loads NVML and runs nvidia-smi: only where the profile's objects run here.
RUNNABLE = [p for p in list_profiles() if compiled(load_profile(p))]


@pytest.mark.parametrize("profile", RUNNABLE)
def test_the_views_of_a_mock_machine_agree(profile: str, mock_machine: Callable[..., Path]) -> None:
    result = gpu_check(mock_machine(profile))
    if not load_profile(profile).driver.loaded:
        assert result.returncode == 2
        assert "Driver Not Loaded" in result.stderr and "not loaded" in result.stderr
        return
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.endswith("agree\n")
    for g in load_profile(profile).gpus:
        assert result.stdout.count(g.uuid) == 3  # NVML, /proc, nvidia-smi


def test_a_disagreement_is_reported(make_mock_machine: Callable[..., Path]) -> None:
    root = make_mock_machine("l40s-x4")
    info = root / "proc/driver/nvidia/gpus/0000:c1:00.0/information"
    info.chmod(0o644)
    info.write_text(info.read_text().replace("Device Minor: \t 0", "Device Minor: \t 3"))
    (root / "dev/nvidia2").unlink()  # nvidia-smi no longer sees index 1
    result = gpu_check(root)
    assert result.returncode == 1
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("DISAGREE: ")]
    assert any(
        "GPU-56b69e84-e2b1-47c9-9fe9-cc93344404e7 minor: NVML 0, /proc 3" in ln for ln in lines
    )
    assert any(ln.startswith("DISAGREE: GPUs: NVML has") and "nvidia-smi" in ln for ln in lines)
    assert result.stdout.endswith(f"{len(lines)} disagreement(s)\n")
