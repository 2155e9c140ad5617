"""Huawei Ascend NPUs: the nodes and driver trees Ascend's own runtime injects.

What a container gets is ``ascend-docker-runtime``'s (Ascend/ascend-docker-runtime at
c451124, read for this module: ``runtime/main.go`` ``addDevice``, ``addManagerDevice``,
``addCommonManagerDevice``; ``build/scripts/base.list``): ``/dev/davinci<N>`` for each NPU
asked for, the manager node ``/dev/davinci_manager`` and the common ``/dev/devmm_svm`` and
``/dev/hisi_hdc`` (all but Atlas 200 products), and read-only bind mounts of the driver's
``/usr/local/Ascend/driver/lib64``, ``/usr/local/Ascend/driver/include``,
``/usr/local/dcmi`` and ``/usr/local/bin/npu-smi`` where the host has them.

The NPUs are the ``/dev/davinci<N>`` nodes (what that runtime stats; its chip name comes
from the DCMI library, which nvhook does not load): index and CDI name are ``N`` under kind
``huawei.com/npu``. The product comes from the Huawei PCI functions (vendor ``0x19e5``) in
``/sys/bus/pci/devices``, the N-th in bus order for ``davinci<N>``, by device id;
memory and AI cores from the product table (no sysfs file has them).

Ascend's device plugin (Ascend/mind-cluster ``component/ascend-device-plugin`` at 22bb3d9,
read for this: ``pkg/server/manager.go`` ``setAscendManager``, ``pkg/device/ascend910.go``
``getAscend910Name``, ``pkg/device/ascendcommon.go`` ``assemblePhyDevices``,
``component/ascend-common/api/default_name.go``) names a chip's *card type* from DCMI's chip
name (``Ascend910`` for the 910A, ``Ascend910B`` for ``910B<n>``, ``Ascend310P``…) and runs one
manager per family: 910A, 910B and 910A3 under ``Ascend910``, 310 and 310B under
``Ascend310``, 310P under ``Ascend310P``. Its resource is ``huawei.com/<family>`` and a
device's ID ``<family>-<phy id>`` (``Ascend910-3``): :func:`family` and :func:`device_id` here.
"""

from __future__ import annotations

import os

from nvhook.vendors._sysfs import listdir, pcie_root
from nvhook.vendors.model import Accelerator, Host, Vendor
from nvhook.vendors.pci import PCI_DEVICES
from nvhook.vendors.pci import functions as pci_functions

__all__ = [
    "DRIVER_TREES",
    "KIND",
    "MANAGER_NODES",
    "VENDOR",
    "card_type",
    "chip_name",
    "device_id",
    "discover",
    "family",
]

KIND = "huawei.com/npu"
ENV = "ASCEND_VISIBLE_DEVICES"
MANAGER_NODES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
DRIVER_TREES = (
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/include",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
)
HUAWEI = 0x19E5  # the PCI vendor ID

#: PCI device id: (product, Ascend's card type, memory MiB, AI cores, data types). The card
#: type is what Ascend's ``GetDeviceTypeByChipName`` makes of DCMI's chip name
#: (``component/ascend-common/devmanager/common/utils.go``); the chip name (``910B3``) is the
#: product's, as DCMI would tell it (one PCI id covers 910B1-B4: nvhook assumes the B3).
PRODUCTS: dict[int, tuple[str, str, int, int, tuple[str, ...]]] = {
    0xD801: ("Ascend 910", "Ascend910", 32768, 32, ("fp16", "fp32")),
    0xD802: ("Ascend 910B3", "Ascend910B", 65536, 20, ("bf16", "fp16", "fp32")),
    0xD500: ("Ascend 310P3", "Ascend310P", 24576, 8, ("fp16",)),
}
#: card type → the family Ascend's plugin runs it under (``setAscendManager``'s switch)
_FAMILIES = {
    "Ascend910": "Ascend910",
    "Ascend910B": "Ascend910",
    "Ascend910A3": "Ascend910",
    "Ascend310": "Ascend310",
    "Ascend310B": "Ascend310",
    "Ascend310P": "Ascend310P",
}


def card_type(pci_device_id: int) -> str:
    """``Ascend910B``: Ascend's card type for a PCI device id (``""``: not known)."""
    return PRODUCTS.get(pci_device_id, ("", "", 0, 0, ()))[1]


def family(pci_device_id: int) -> str:
    """``Ascend910``, ``Ascend310P``: the family in Ascend's resource and device names
    (``Ascend`` for a chip this module does not know)."""
    return _FAMILIES.get(card_type(pci_device_id), "Ascend")


def chip_name(product: str) -> str:
    """``Ascend 910B3`` → ``910B3``: DCMI's chip name, as Ascend's plugin labels it."""
    return product.removeprefix("Ascend ").strip()


def device_id(device: Accelerator) -> str:
    """``Ascend910-3``: the ID Ascend's plugin lists ``device`` under (family, phy id)."""
    return f"{device.family}-{device.index}"


def discover(host: Host) -> tuple[Accelerator, ...]:
    """The host's NPUs by davinci number (module docstring)."""
    dev = host.dev("/dev")
    numbers = sorted(
        int(n[7:]) for n in listdir(dev) if n.startswith("davinci") and n[7:].isdigit()
    )
    functions = pci_functions(host, vendor=HUAWEI)
    pci = host.sys(PCI_DEVICES)
    found: list[Accelerator] = []
    for position, n in enumerate(numbers):
        function = functions[position] if position < len(functions) else None
        bus = function.bus_id if function else ""
        device_id = (function.device or 0) if function else 0
        product, _, memory, cores, dtypes = PRODUCTS.get(
            device_id, ("Ascend NPU", "Ascend", 0, 0, ())
        )
        found.append(
            Accelerator(
                vendor="ascend",
                kind=KIND,
                name=str(n),
                index=n,
                bus_id=bus,
                product=product,
                driver="davinci",
                nodes=(f"/dev/davinci{n}",),
                memory_mib=memory,
                compute_units=cores,
                device_id=device_id,
                family=family(device_id),
                dtypes=dtypes,
                pcie_root=pcie_root(os.path.join(pci, bus)) if bus else "",
            )
        )
    return tuple(found)


def _shared(host: Host) -> tuple[str, ...]:
    return tuple(p for p in MANAGER_NODES if os.path.exists(host.dev(p)))


def _mounts(host: Host) -> tuple[str, ...]:
    return tuple(p for p in DRIVER_TREES if os.path.exists(host.sys(p)))


VENDOR = Vendor(
    name="ascend", kind=KIND, env=ENV, discover=discover, shared_nodes=_shared, mounts=_mounts
)
