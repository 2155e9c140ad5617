"""Intel GPUs (``i915`` or ``xe``): discovered from sysfs as Intel's own plugins do.

The cards are Intel's GPU device plugin's (intel/intel-device-plugins-for-kubernetes
``cmd/gpu_plugin/gpu_plugin.go`` at 94a91bc, ``scan``): each ``/sys/class/drm/card<N>``
whose ``device/vendor`` is ``0x8086`` and that has ``device/drm``, skipping a physical
function that has virtual functions enabled (``device/sriov_numvfs`` > 0); its nodes are
every ``card*``/``renderD*`` under ``device/drm``, and its ``/dev/dri/by-path/pci-<bus>-*``
links (which that plugin bind-mounts, ``bypathMountsForPci``) are made in the container as
real links to ``../<node>`` by nvhook's createContainer hook. The driver is
``device/driver``'s name, ``i915`` or ``xe``; the device plugin's resource is
``gpu.intel.com/<driver>``.

The CDI kind and names are Intel's resource driver's (intel/intel-resource-drivers-for-
kubernetes ``pkg/gpu/device/device.go``): kind ``intel.com/gpu``, each device named by its
UID, the PCI address with ``:`` and ``.`` as ``-`` then the PCI device id
(``0000-29-00-0-0x0bd5``); product names are that file's ``ModelDetails``. Memory is
``device/lmem_total_bytes`` where the driver has it (i915), else the product's; Xe cores and
tiles come from the product table.
"""

from __future__ import annotations

import os

from nvhook.vendors._sysfs import listdir, pcie_root, read, read_int
from nvhook.vendors.model import Accelerator, Host, Vendor

__all__ = ["KIND", "MODELS", "VENDOR", "discover", "model", "uid"]

KIND = "intel.com/gpu"
_DRM = "/sys/class/drm"

#: device id: (product, memory MiB, Xe cores, tiles, matrix data types).
PRODUCTS: dict[int, tuple[str, int, int, int, tuple[str, ...]]] = {
    0x0BD5: ("Intel Data Center GPU Max 1550", 131072, 128, 2, ("bf16", "fp16", "fp32", "fp64")),
    0x0BD6: ("Intel Data Center GPU Max 1450", 131072, 112, 2, ("bf16", "fp16", "fp32", "fp64")),
    0x0BDA: ("Intel Data Center GPU Max 1100", 49152, 56, 1, ("bf16", "fp16", "fp32", "fp64")),
    0x56C0: ("Intel Data Center GPU Flex 170", 16384, 32, 1, ("bf16", "fp16", "fp32")),
    0x56C1: ("Intel Data Center GPU Flex 140", 12288, 16, 2, ("bf16", "fp16", "fp32")),
}

#: device id: (model, family) as Intel's resource driver's ``pkg/gpu/device/models.go``
#: ``ModelDetails`` names them (at 1da939f; its DRA driver publishes them as ``model`` and
#: ``family``, "Unknown" for an id not in the table).
MODELS: dict[int, tuple[str, str]] = {
    0x0BD0: ("Max 1550", "Data Center Max"),
    0x0BD5: ("Max 1550", "Data Center Max"),
    0x0BD6: ("Max 1450", "Data Center Max"),
    0x0BD9: ("Max 1100", "Data Center Max"),
    0x0BDA: ("Max 1100", "Data Center Max"),
    0x0BDB: ("Max 1100", "Data Center Max"),
    0x56C0: ("Flex 170", "Data Center Flex"),
    0x56C1: ("Flex 140", "Data Center Flex"),
}


def model(device_id: int) -> tuple[str, str]:
    """``(model, family)`` of a device id, Intel's spellings; ``("Unknown", "Unknown")``."""
    return MODELS.get(device_id, ("Unknown", "Unknown"))


def uid(bus_id: str, device_id: int) -> str:
    """Intel's resource-driver UID of a device: ``0000-29-00-0-0x0bd5``."""
    return bus_id.replace(":", "-").replace(".", "-") + f"-0x{device_id:04x}"


def discover(host: Host) -> tuple[Accelerator, ...]:
    """The host's Intel GPUs by card number (module docstring)."""
    drm = host.sys(_DRM)
    cards = [n for n in listdir(drm) if n.startswith("card") and n[4:].isdigit()]
    found: list[Accelerator] = []
    for card in sorted(cards, key=lambda n: int(n[4:])):
        device = os.path.join(drm, card, "device")
        if read(os.path.join(device, "vendor")) != "0x8086":
            continue
        if not os.path.isdir(os.path.join(device, "drm")):
            continue
        if (read_int(os.path.join(device, "sriov_numvfs"), 10) or 0) > 0:
            continue
        bus = os.path.basename(os.path.realpath(device))
        driver = os.path.basename(os.path.realpath(os.path.join(device, "driver")))
        device_id = read_int(os.path.join(device, "device")) or 0
        product, memory, cores, _tiles, dtypes = PRODUCTS.get(
            device_id, (f"Intel GPU {device_id:04x}", 0, 0, 1, ())
        )
        lmem = read_int(os.path.join(device, "lmem_total_bytes"))
        names = [
            n
            for n in listdir(os.path.join(device, "drm"))
            if (n.startswith("card") and n[4:].isdigit())
            or (n.startswith("renderD") and n[7:].isdigit())
        ]
        by_path = host.dev("/dev/dri/by-path")
        links = []
        for link in listdir(by_path):
            if link.startswith(f"pci-{bus}-"):
                try:
                    target = os.path.basename(os.readlink(os.path.join(by_path, link)))
                except OSError:
                    continue
                if target in names:
                    links.append((f"../{target}", f"/dev/dri/by-path/{link}"))
        found.append(
            Accelerator(
                vendor="intel",
                kind=KIND,
                name=uid(bus, device_id),
                index=len(found),
                bus_id=bus,
                product=product,
                driver=driver,
                nodes=tuple(f"/dev/dri/{n}" for n in names),
                links=tuple(links),
                memory_mib=lmem // (1024 * 1024) if lmem else memory,
                compute_units=cores,
                device_id=device_id,
                family="xe" if driver == "xe" else "i915",
                dtypes=dtypes,
                pcie_root=pcie_root(device),
                max_vfs=read_int(os.path.join(device, "sriov_totalvfs"), 10) or 0,
            )
        )
    return tuple(found)


def tiles(device_id: int) -> int:
    """The product's tile count (1 when unknown): the ``gpu.intel.com/tiles`` label."""
    return PRODUCTS.get(device_id, ("", 0, 0, 1, ()))[3]


def _none(host: Host) -> tuple[str, ...]:
    return ()


VENDOR = Vendor(
    name="intel", kind=KIND, env="", discover=discover, shared_nodes=_none, mounts=_none
)
