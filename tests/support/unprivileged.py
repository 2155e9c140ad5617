"""Run an ``nvhook`` command as an unprivileged user (tests run as root)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from tests.support.basics import require, require_root

__all__ = ["NOBODY", "run_as_nobody"]

#: The uid and gid of ``nobody``/``nogroup`` on Debian.
NOBODY = 65534


def run_as_nobody(args: Sequence[str], *, cwd: str = "/") -> subprocess.CompletedProcess[str]:
    """``python -m nvhook ARGS`` as uid/gid 65534 without supplementary groups, through
    ``setpriv`` (skips without root or setpriv; fails under CI)."""
    require_root()
    setpriv = require("setpriv")
    argv = [
        setpriv,
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        sys.executable,
        "-m",
        "nvhook",
        *args,
    ]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
