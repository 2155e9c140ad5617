"""Shared by the packaging tests: where ``packaging/`` is, and one wheelhouse per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGING = ROOT / "packaging"


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``packaging/wheels.sh`` run once: nvhook's wheel, its dependencies' and pip's.

    Built with this interpreter, whose pip fetches the dependencies from the package index.
    """
    out = tmp_path_factory.mktemp("wheelhouse")
    proc = subprocess.run(
        [str(PACKAGING / "wheels.sh"), str(out)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"packaging/wheels.sh failed ({proc.returncode}):\n{proc.stderr}", pytrace=False
        )
    return out
