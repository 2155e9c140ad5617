"""The one PCI scan (nvhook/vendors/pci.py) on the mock machines' sysfs: NVIDIA's GPUs by
vendor and display class, never an NVSwitch, a GPU's audio function or another vendor's VGA;
the same with the driver gone; "cannot tell" apart from "none"."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from nvhook.mock import load_profile
from nvhook.vendors.model import Host
from nvhook.vendors.pci import NVIDIA, functions, nvidia_gpus, scan


def _function(root: Path, bus: str, vendor: int, pci_class: int | None) -> None:
    where = root / "sys/devices/pci0000:00" / bus
    where.mkdir(parents=True)
    (where / "vendor").write_text(f"0x{vendor:04x}\n")
    (where / "device").write_text("0x1234\n")
    if pci_class is not None:
        (where / "class").write_text(f"0x{pci_class:06x}\n")
    (root / "sys/bus/pci/devices" / bus).symlink_to(f"../../../devices/pci0000:00/{bus}")


def test_the_gpus_of_every_profile_are_found_and_the_nvswitches_are_not(
    mock_machine: Callable[..., Path],
) -> None:
    for name, switches in (("dgx-a100", 6), ("h100-pcie", 0), ("l40s-x4", 0)):
        root = mock_machine(name)
        profile = load_profile(name)
        gpus = nvidia_gpus(Host(root=str(root)))
        assert gpus is not None
        assert [g.bus_id for g in gpus] == sorted(g.bus_id for g in profile.gpus), name
        assert {g.device for g in gpus} == {g.model.pci_device_id for g in profile.gpus}
        every = functions(Host(root=str(root)), vendor=NVIDIA)
        bridges = [f for f in every if f.base_class == 0x06]
        assert len(bridges) == switches, name  # NVSwitches: NVIDIA's, not GPUs


def test_only_nvidia_display_controllers_count(make_mock_machine: Callable[..., Path]) -> None:
    root = make_mock_machine("no-gpu")
    host = Host(root=str(root))
    assert nvidia_gpus(host) is None  # no GPU in the profile: no bus at all, cannot tell
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    assert nvidia_gpus(host) == ()  # a bus with nothing on it: none
    _function(root, "0000:02:00.0", 0x1A03, 0x030000)  # a BMC's VGA (ASPEED)
    _function(root, "0000:07:00.1", NVIDIA, 0x040300)  # a GPU's HD audio function
    _function(root, "0000:08:00.0", NVIDIA, None)  # no class file: not counted
    assert nvidia_gpus(host) == ()
    assert len(scan(host) or ()) == 3
    _function(root, "0000:07:00.0", NVIDIA, 0x030000)  # a VGA controller
    _function(root, "0000:09:00.0", NVIDIA, 0x030200)  # a 3D controller
    assert [g.bus_id for g in nvidia_gpus(host) or ()] == ["0000:07:00.0", "0000:09:00.0"]


def test_the_bus_needs_no_driver(make_mock_machine: Callable[..., Path]) -> None:
    """A fresh node: the driver's user space, module, nodes and /proc gone, the bus remains."""
    root = make_mock_machine("h100-pcie")
    for gone in ("proc/driver/nvidia", "usr/lib", "run/nvidia-persistenced"):
        shutil.rmtree(root / gone, ignore_errors=True)
    for node in (root / "dev").glob("nvidia*"):
        shutil.rmtree(node) if node.is_dir() else node.unlink()
    assert len(nvidia_gpus(Host(root=str(root))) or ()) == len(load_profile("h100-pcie").gpus)
