"""``nvhook bench``: what nvhook adds to a container start, measured on this node, leaving it as
it was (:mod:`nvhook.tools.startcost`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nvhook.tools.startcost import Row, render
from tests.support.basics import require, require_root

BIN = Path(sys.executable).parent


def _listing(path: str) -> list[str] | None:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return None


def test_bench_measures_each_row_and_leaves_nothing(tmp_path: Path) -> None:
    """As root with the launchers installed (``./dev setup``): every row, the server's and the
    hook's too, with real runc; its temporary directory gone and /run/nvhook untouched."""
    require_root()
    require("runc")
    if not (BIN / "nvhook-shim-server").exists() or not (BIN / "nvhook-hook").exists():
        raise AssertionError(f"{BIN}: run `nvhook install-entrypoints` (./dev setup does)")
    run_nvhook = _listing("/run/nvhook")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin", "TMPDIR": str(tmp)}
    done = subprocess.run([str(BIN / "nvhook"), "bench", "--runs", "2"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for row in ("pass-through (state)", "create, no GPU request",
                "create 1 GPU (nvidia.com/gpu=0) ", "create 1 GPU (nvidia.com/gpu=0), server",
                "createContainer hook (ldconfig included)"):  # fmt: skip
        assert re.search(rf"^  {re.escape(row)}\s+\d+\.\dms", out, re.MULTILINE), out
    assert re.search(r"^a GPU container's start: about \d+ ms more than with plain runc", out,
                     re.MULTILINE), out  # fmt: skip
    assert list(tmp.iterdir()) == []
    assert _listing("/run/nvhook") == run_nvhook


def test_bench_without_the_launchers_says_what_to_do(tmp_path: Path) -> None:
    require("runc")
    done = subprocess.run(
        [sys.executable, "-m", "nvhook", "bench", "--bin-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == (
        f"Error: {tmp_path}/nvhook-runtime not found: run `nvhook install-entrypoints` first\n"
    )


def _row(name: str, ms: list[float], reference: list[float] | None) -> Row:
    row = Row(name, None if reference is None else "ref")
    row.ms, row.reference_ms = ms, reference or []
    return row


def test_render_adds_the_cheapest_gpu_create_the_hook_and_three_pass_throughs() -> None:
    rows = [
        _row("pass-through (state)", [3.0, 5.0, 4.0], [2.0, 3.0, 3.0]),  # +1
        _row("create 1 GPU (x=0)", [30.0, 30.0, 30.0], [1.0, 1.0, 1.0]),  # +29
        _row("create 1 GPU (x=0), server", [11.0, 11.0, 12.0], [1.0, 1.0, 1.0]),  # +10
        _row("createContainer hook (ldconfig included)", [20.0, 20.0, 20.0], None),
    ]
    assert "need root" in render(rows[:-1], 3, "h100-pcie")  # no hook row: not root
    text = render(rows, 3, "h100-pcie")
    assert "need root" not in text
    assert "  pass-through (state)" in text and "+1.0ms  ref (3.0 ms)" in text
    assert (
        "a GPU container's start: about 33 ms more than with plain runc (create 1 GPU (x=0), "
        "server, the hook, 3 pass-through calls)"
    ) in text


def test_a_server_row_with_a_fallback_is_refused(tmp_path: Path) -> None:
    """The server row's trace must hold one served call per call (else it timed Python)."""
    from nvhook.tools.startcost import BenchError, _check_served

    trace = tmp_path / "trace"
    trace.write_text("7 child 1 1\n7 reply_sent 2 2\n8 child 3 3\n8 reply_sent 4 4\n")
    _check_served(str(trace), 2)
    with pytest.raises(BenchError, match=r"^nvhook-shim-server served 2 of the 3 calls sent"):
        _check_served(str(trace), 3)
