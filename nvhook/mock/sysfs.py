"""``sys/`` of a mock machine: NVIDIA's PCI functions as the kernel lists them.

Every GPU of the profile and every NVSwitch is a PCI function under
``sys/devices/pci<domain>:<bus>/<bus id>`` with the ``vendor``, ``device`` and ``class`` files
the kernel writes from its configuration space, and a ``sys/bus/pci/devices/<bus id>`` link
to it (``Documentation/ABI/testing/sysfs-bus-pci``). They are there whether the driver is
loaded or not, as on a real host (the kernel enumerates the bus, not the driver): what
``nvhook labels --presence`` reads (:mod:`nvhook.vendors.pci`). GPUs are 3D controllers
(``0x030200``), or VGA controllers (``0x030000``) on a profile with a display; an NVSwitch
is a bridge (``0x068000``). No ``numa_node`` is written: NVML's answer is the mock's one.
"""

from __future__ import annotations

from nvhook.mock._tree import Tree
from nvhook.mock.model import Profile

__all__ = ["NVIDIA_VENDOR", "pci_dir", "write_sys"]

NVIDIA_VENDOR = 0x10DE
_3D, _VGA, _BRIDGE = 0x030200, 0x030000, 0x068000


def pci_dir(bus_id: str) -> str:
    """The function's directory under the tree (``sys/devices/pci0000:07/0000:07:00.0``)."""
    return f"sys/devices/pci{bus_id[:4]}:{bus_id[5:7]}/{bus_id}"


def _function(tree: Tree, bus_id: str, device: int, pci_class: int) -> None:
    where = pci_dir(bus_id)
    tree.write(f"{where}/vendor", f"0x{NVIDIA_VENDOR:04x}\n")
    tree.write(f"{where}/device", f"0x{device:04x}\n")
    tree.write(f"{where}/class", f"0x{pci_class:06x}\n")
    tree.symlink(f"sys/bus/pci/devices/{bus_id}", "../../../" + where[len("sys/") :])


def write_sys(tree: Tree, prof: Profile) -> None:
    """``sys/``: the GPUs' and NVSwitches' PCI functions (the module docstring)."""
    for g in prof.gpus:
        _function(tree, g.bus_id, g.model.pci_device_id, _VGA if prof.display else _3D)
    if prof.nvlink is not None:
        for bus_id in prof.nvlink.switch_bus_ids:
            _function(tree, bus_id, prof.nvlink.switch_pci_device_id, _BRIDGE)
