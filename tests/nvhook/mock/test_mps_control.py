"""The mock's nvidia-cuda-mps-control (csrc/mps.c): the daemon starts once, creates its pipe and
log directories, answers the commands a device plugin sends on the client's stdin, and stops
on quit; without a daemon the client fails as the real one does."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path


def test_daemon_commands_and_quit(mock_machine: Callable[..., Path]) -> None:
    binary = mock_machine("h100-pcie") / "usr/bin/nvidia-cuda-mps-control"
    top = Path(tempfile.mkdtemp(prefix="nvh-mps-", dir="/tmp"))  # unix sockets: short paths
    env = {
        **os.environ,
        "CUDA_MPS_PIPE_DIRECTORY": str(top / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(top / "log"),
    }

    def run(stdin: str | None, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(binary), *args], input=stdin, env=env, capture_output=True, text=True, timeout=10
        )

    try:
        none = run("get_default_active_thread_percentage")
        assert (none.returncode, none.stderr) == (1, "Cannot find MPS control daemon process\n")
        assert run(None, "-d").returncode == 0
        again = run(None, "-d")
        assert again.returncode == 1 and "already running" in again.stderr
        assert sorted(p.name for p in (top / "pipe").iterdir()) == [
            "control",
            "nvidia-cuda-mps-control.pid",
        ]
        answered = run(
            "set_default_active_thread_percentage 25\n"
            "set_default_device_pinned_mem_limit 0 20480M\n"
            "get_default_device_pinned_mem_limit 0\n"
            "get_default_active_thread_percentage\n"
        )
        assert answered.stdout == "25.0\n20480M\n25.0\n"
        log = (top / "log/control.log").read_text()
        assert "CMD set_default_device_pinned_mem_limit 0 20480M" in log
        assert run("quit").returncode == 0
        deadline = 50
        while (top / "pipe/control").exists() and deadline:
            deadline -= 1
            subprocess.run(["sleep", "0.05"], check=True)
        assert not (top / "pipe/control").exists()
        assert run("get_default_active_thread_percentage").returncode == 1
    finally:
        run("quit")
        shutil.rmtree(top, ignore_errors=True)
