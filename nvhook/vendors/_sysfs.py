"""Small readers of sysfs files and directories, through a root; none raises for a file
that is missing (a device the kernel shows partly is skipped by its vendor module)."""

from __future__ import annotations

import os

__all__ = ["listdir", "pcie_root", "read", "read_int", "read_keyed"]


def read(path: str) -> str | None:
    """The file's text, stripped; None when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(65536).strip()
    except OSError:
        return None


def read_int(path: str, base: int = 0) -> int | None:
    """The file's integer (``0x…`` hex with ``base=0``); None when missing or not one."""
    text = read(path)
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


def read_keyed(path: str) -> dict[str, str]:
    """``key value`` lines (KFD topology ``properties``) as a dict; empty when missing."""
    text = read(path)
    found: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            found[key] = value.strip()
    return found


def listdir(path: str) -> list[str]:
    """The sorted names in a directory; empty when it cannot be read."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def pcie_root(device_dir: str) -> str:
    """The PCIe root complex of the PCI function at ``device_dir`` (a sysfs link such as
    ``/sys/bus/pci/devices/<bus>``): the ``pci<domain>:<bus>`` component of its real path
    under ``/sys/devices``, as Kubernetes' ``deviceattribute`` library derives the standard
    ``resource.kubernetes.io/pcieRoot`` attribute; "" when it has none."""
    parts = os.path.realpath(device_dir).split(os.sep)
    for i, part in enumerate(parts[:-1]):
        if part == "devices" and parts[i + 1].startswith("pci") and ":" in parts[i + 1]:
            return parts[i + 1]
    return ""
