"""Change a laid-out mock machine's driver in place, as a driver upgrade changes a host."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["driver_version", "upgrade_driver"]

VERSION_FILE = "proc/driver/nvidia/version"


def driver_version(root: Path) -> str:
    """The version ``root``'s mock kernel module reports (``NVRM version: … Module  V  …``)."""
    first = (root / VERSION_FILE).read_text().splitlines()[0]
    return first.split("Kernel Module")[1].split()[0]


def upgrade_driver(root: Path, new: str) -> str:
    """Replace the driver of the mock at ``root`` by version ``new``: every file, directory
    and link target named after the old version is renamed (``libcuda.so.550.54.15`` →
    ``libcuda.so.560.35.03``, the firmware directory), and the kernel module reports ``new``.
    Returns the old version."""
    old = driver_version(root)
    for directory, dirs, files in os.walk(root, topdown=False):
        for name in files + dirs:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                target = os.readlink(path)
                if old in target:
                    os.unlink(path)
                    os.symlink(target.replace(old, new), path)
            if old in name:
                os.rename(path, os.path.join(directory, name.replace(old, new)))
    version = root / VERSION_FILE
    version.write_text(version.read_text().replace(old, new))
    return old
