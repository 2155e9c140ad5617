"""The shell scripts under packaging/: executable, valid syntax, and clean under shellcheck."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.packaging.conftest import PACKAGING
from tests.support.containers import require

BASH_SCRIPTS = ["install.sh", "wheels.sh", "build.sh", "python-bundle.sh", "repo.sh"]
SH_SCRIPTS = [
    "setup",
    "preflight",
    "deb/preinst",
    "deb/postinst",
    "deb/prerm",
    "deb/postrm",
    "rpm/pre",
    "rpm/post",
    "rpm/preun",
    "rpm/postun",
]  # maintainer scripts and what they run: /bin/sh


def test_every_script_is_listed() -> None:
    found = sorted(
        str(p.relative_to(PACKAGING))
        for p in PACKAGING.rglob("*")
        if p.is_file() and p.read_bytes().startswith(b"#!")
    )
    assert found == sorted(BASH_SCRIPTS + SH_SCRIPTS)


@pytest.mark.parametrize("name", BASH_SCRIPTS + SH_SCRIPTS)
def test_script_is_executable_with_its_shell(name: str) -> None:
    path = PACKAGING / name
    assert os.access(path, os.X_OK), f"{name} is not executable"
    first = path.read_text().splitlines()[0]
    shell = "bash" if name in BASH_SCRIPTS else "sh"
    assert first == ("#!/usr/bin/env bash" if shell == "bash" else "#!/bin/sh")
    proc = subprocess.run([shell, "-n", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "set -e" in path.read_text()


@pytest.mark.parametrize("name", BASH_SCRIPTS + SH_SCRIPTS)
def test_shellcheck(name: str) -> None:
    shellcheck = require("shellcheck")
    proc = subprocess.run(
        [shellcheck, "--external-sources", str(PACKAGING / name)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("name", BASH_SCRIPTS)
def test_usage(name: str, tmp_path: Path) -> None:
    """--help prints the header comment; a wrong call exits 2 and makes nothing."""
    path = str(PACKAGING / name)
    proc = subprocess.run([path, "--help"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert proc.stdout.startswith(f"{Path(name).name} ")
    proc = subprocess.run(
        [path, "a", "b"], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"{Path(name).name} ")
    assert list(tmp_path.iterdir()) == []
