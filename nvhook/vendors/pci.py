"""The host's PCI functions from sysfs, through a root: the one PCI scan of the package.

:func:`functions` lists ``<root>/sys/bus/pci/devices/*`` (the kernel's links to every PCI
function it enumerated, with or without a driver bound) with each function's ``vendor``,
``device`` and ``class`` files, the IDs the kernel read from its configuration space at
enumeration (``Documentation/ABI/testing/sysfs-bus-pci``: ``class`` is the 24-bit class code,
base class, subclass and programming interface, as ``0x030200``). No driver, NVML or device
node is needed, which is what lets a fresh node say it has a GPU before anything is
installed: :func:`nvidia_gpus` is the NVIDIA functions (vendor ``0x10de``) of base class
``0x03``, display controllers (VGA ``0x0300``, 3D ``0x0302``); an NVSwitch (a bridge,
``0x0680``) or a GPU's audio function (``0x0403``) is not a GPU. Node Feature Discovery's
``pci-10de.present`` label counts the same classes by default (its ``deviceClassWhitelist``
``03``, ``0b40``, ``12``).

A function whose ``vendor`` cannot be read is skipped; the ``class`` of a function that lacks
it reads as ``None``. :func:`scan` answers None where the bus itself cannot be listed (no
sysfs, not a Linux host), so that a caller can tell "no GPU" from "cannot tell".
"""

from __future__ import annotations

import os

from nvhook.vendors._sysfs import listdir, read_int
from nvhook.vendors.model import Host
from oci._frozen import Frozen

__all__ = [
    "DISPLAY_CLASS",
    "NVIDIA",
    "PCI_DEVICES",
    "PciFunction",
    "functions",
    "nvidia_gpus",
    "scan",
]

PCI_DEVICES = "/sys/bus/pci/devices"
#: NVIDIA's PCI vendor ID
NVIDIA = 0x10DE
#: the PCI base class of display controllers (VGA, XGA, 3D, other)
DISPLAY_CLASS = 0x03


class PciFunction(Frozen):
    """One PCI function: its address (``0000:07:00.0``) and configuration-space IDs."""

    bus_id: str
    vendor: int
    device: int | None
    pci_class: int | None  # the 24-bit class code (``0x030200``: a 3D controller)

    @property
    def base_class(self) -> int | None:
        return None if self.pci_class is None else self.pci_class >> 16


def scan(host: Host) -> tuple[PciFunction, ...] | None:
    """Every PCI function of ``host`` in bus order; None when the bus cannot be listed."""
    top = host.sys(PCI_DEVICES)
    if not os.path.isdir(top):
        return None
    found = []
    for bus_id in listdir(top):
        where = os.path.join(top, bus_id)
        vendor = read_int(os.path.join(where, "vendor"), 16)
        if vendor is None:
            continue
        found.append(
            PciFunction(
                bus_id=bus_id,
                vendor=vendor,
                device=read_int(os.path.join(where, "device"), 16),
                pci_class=read_int(os.path.join(where, "class"), 16),
            )
        )
    return tuple(found)


def functions(host: Host, *, vendor: int) -> tuple[PciFunction, ...]:
    """``vendor``'s PCI functions in bus order (none where the bus cannot be listed)."""
    return tuple(f for f in scan(host) or () if f.vendor == vendor)


def nvidia_gpus(host: Host) -> tuple[PciFunction, ...] | None:
    """NVIDIA's display-class functions (the module docstring); None: the bus is unreadable."""
    found = scan(host)
    if found is None:
        return None
    return tuple(f for f in found if f.vendor == NVIDIA and f.base_class == DISPLAY_CLASS)
