"""packaging/setup (the venv's making, shared by the .deb and the .rpm) picks the interpreter,
and it and the pre-install scripts refuse a machine without a supported one with one line.

Run in a scratch root of static busybox with stand-in interpreters (shell scripts that print a
version), through chroot: the scripts look in /usr/bin, as on a real machine.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.packaging.conftest import PACKAGING
from tests.support.containers import require

pytestmark = pytest.mark.root

SCRIPTS = ("setup", "deb/preinst", "rpm/pre")


def missing_line() -> str:
    """The one line: the same in each script."""
    lines = {
        line.split('"')[1]
        for name in SCRIPTS
        for line in (PACKAGING / name).read_text().splitlines()
        if line.startswith("MISSING=")
    }
    assert len(lines) == 1, lines
    (line,) = lines
    assert "apt-get install python3" in line and "dnf install python3.12" in line
    return line


def scratch(tmp_path: Path, pythons: dict[str, str]) -> Path:
    """A root with busybox as /bin/sh, the scripts, and ``/usr/bin/NAME`` printing VERSION."""
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    shutil.copy2(require("busybox"), root / "bin/busybox")
    (root / "bin/sh").symlink_to("busybox")
    (root / "dev").mkdir()
    os.mknod(root / "dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    for name in SCRIPTS:
        shutil.copy2(PACKAGING / name, root / name.replace("/", "-"))
    for name, version in pythons.items():
        path = root / "usr/bin" / name
        path.write_text(f"#!/bin/sh\necho {version}\n")
        path.chmod(0o755)
    return root


def chroot(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require("chroot"), str(root), "/bin/sh", *argv],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("pythons", "picked"),
    [
        # the distribution's python3 when it is supported
        ({"python3": "3.13", "python3.11": "3.11", "python3.13": "3.13"}, "/usr/bin/python3"),
        ({"python3": "3.11", "python3.12": "3.12"}, "/usr/bin/python3"),
        # else the newest supported one
        ({"python3": "3.9", "python3.9": "3.9", "python3.12": "3.12"}, "/usr/bin/python3.12"),
        ({"python3.11": "3.11", "python3.13": "3.13"}, "/usr/bin/python3.13"),
        ({"python3": "3.15", "python3.13": "3.13", "python3.14": "3.14"}, "/usr/bin/python3.14"),
        ({"python3": "3.14", "python3.14": "3.14"}, "/usr/bin/python3"),
        # a file named python3.13 that is not 3.13 is passed over
        ({"python3.13": "3.10", "python3.11": "3.11"}, "/usr/bin/python3.11"),
    ],
)
def test_setup_picks_the_best_interpreter(
    tmp_path: Path, pythons: dict[str, str], picked: str
) -> None:
    root = scratch(tmp_path, pythons)
    proc = chroot(root, "/setup", "--pick")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, picked + "\n", "")
    for script, arg in (("deb-preinst", "install"), ("rpm-pre", "1")):
        proc = chroot(root, f"/{script}", arg)
        assert (proc.returncode, proc.stderr) == (0, ""), script


@pytest.mark.parametrize(
    "pythons", [{}, {"python3": "3.10", "python3.10": "3.10"}, {"python3.15": "3.15"}]
)
def test_without_a_supported_interpreter_each_script_refuses_in_one_line(
    tmp_path: Path, pythons: dict[str, str]
) -> None:
    root = scratch(tmp_path, pythons)
    before = sorted(p.name for p in root.rglob("*"))
    for argv in (["/setup"], ["/setup", "--pick"], ["/deb-preinst", "install"], ["/rpm-pre", "1"]):
        proc = chroot(root, *argv)
        assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", missing_line() + "\n"), argv
    assert sorted(p.name for p in root.rglob("*")) == before  # nothing made (no /opt/nvhook)
