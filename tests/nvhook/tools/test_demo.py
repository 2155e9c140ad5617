"""The README's main command: `nvhook demo`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import nvhook.tools.demo
from nvhook.cli import main


@pytest.mark.runtime
@pytest.mark.root
def test_demo_shows_two_gpus_from_inside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.containers import require

    require("runc")
    require("busybox")
    assert main(["demo", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = r"^   \| GPU \d+: NVIDIA A100-SXM4-80GB \(UUID: (GPU-[0-9a-f-]+)\)$"
    gpus = re.findall(line, out, re.M)
    assert gpus == [
        "GPU-ac376f35-2448-4461-a104-b174eb2df7b3",  # index 0 of the dgx-a100 profile
        "GPU-17297365-d66b-40f2-85f4-de7bd1bd8cd3",  # index 3
    ]
    assert "   | nvidia1\n" not in out and "   | nvidia0\n" in out and "   | nvidia3\n" in out
    assert "0000000 177   E   L   F" in out  # the injected libcuda is readable inside
    assert "Mode: jit" in out and "from env NVIDIA_VISIBLE_DEVICES='0,3'" in out


def test_demo_without_containers_shows_the_edits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nvhook.tools.demo, "cannot_run", lambda: "not root (runc needs root here)")
    assert main(["demo", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "not starting a container: not root" in out
    assert "/dev/nvidia0  c 195:0" in out and "/dev/nvidia3  c 195:3" in out
    assert "/dev/nvidia1 " not in out
    assert "Result: config.json would be edited" in out


def test_demo_runs_again_in_the_same_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nvhook.tools.demo, "cannot_run", lambda: "not root (runc needs root here)")
    assert main(["demo", "--dir", str(tmp_path)]) == 0
    assert main(["demo", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("/dev/nvidia3  c 195:3") == 2


def test_demo_refuses_a_host_dir_that_is_not_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "precious").write_text("keep me")
    assert main(["demo", "--dir", str(tmp_path)]) != 0
    assert "is not a mock machine" in capsys.readouterr().err
    assert (tmp_path / "host" / "precious").read_text() == "keep me"
