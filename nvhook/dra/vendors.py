"""Other vendors' devices for the DRA driver, under their own DRA drivers' names and attributes.

One ``nvhook dra-plugin --vendor V`` process serves one driver name (kubelet registers a
DRA plugin per driver name: ``pluginregistration`` ``PluginInfo.name``), so a node with two
vendors runs two processes, each publishing its own pool. The devices are those of
:mod:`nvhook.vendors` (the one discovery, shared with ``nvhook cdi generate --vendor``, the
device plugin and jit mode); this module only names them as each vendor's DRA driver does
(docs/dra.md, "Other vendors", cites the commits read):

- **AMD** ``gpu.amd.com`` (ROCm/k8s-gpu-dra-driver ``pkg/consts/consts.go``;
  ``cmd/gpu-kubeletplugin/deviceinfo.go`` ``GetDevice``, ``discovery.go``): a device per
  GPU or partition, ``gpu-<card>-<render>``; ``type`` ``amdgpu`` for a GPU in SPX (or
  without partitions), else ``amdgpu-partition``; a GPU has ``pciAddr`` and ``deviceID``,
  a partition ``parentPciAddr`` and ``parentDeviceID`` (the KFD ``unique_id`` in decimal,
  one value for every partition of a GPU: ``matchAttribute: gpu.amd.com/parentDeviceID``
  keeps two partitions on one GPU), and both ``cardIndex``, ``renderIndex`` (int),
  ``family`` (libdrm's family name: ``AI`` for gfx9), ``productName`` (spaces as ``_``),
  ``driverVersion`` (version) and ``driverSrcVersion`` (the ``amdgpu`` module's, when it
  has them), ``partitionProfile`` (``cpx_nps1``), ``resource.kubernetes.io/pcieRoot``;
  capacity ``memory``, ``computeUnits``, ``simdUnits``;
- **Intel** ``gpu.intel.com`` (intel/intel-resource-drivers-for-kubernetes
  ``pkg/gpu/device/device.go`` ``DriverName``; ``cmd/kubelet-gpu-plugin/node_state.go``
  ``GetResources``): a device per GPU named by its UID (``0000-29-00-0-0x0bd5``), with
  ``model``, ``family`` (``models.go``), ``driver``, ``sriov`` (bool), ``type`` ``gpu``,
  ``pciId``, ``pciAddress``, ``health`` (``Unknown``: nothing watches it),
  ``resource.kubernetes.io/pcieRoot``, ``resource.kubernetes.io/pciBusID``, ``pciRoot``;
  capacity ``memory`` and ``millicores`` (1000: the whole GPU);
- **Ascend** ``npu.huawei.com`` (Ascend/mind-cluster
  ``component/ascend-dynamic-resource-allocation``: ``pkg/consts/consts.go``,
  ``internal/device/generation_910.go``): a device per NPU with ``deviceType`` (the
  devmanager's: ``Ascend910B`` for a 910B, :func:`nvhook.vendors.ascend.card_type`) and
  ``physicId`` (int, the davinci number). Huawei names a device ``Ascend910-<physicId>``
  (the 910 generation's released name), which is not a DNS label (the API refuses upper
  case): nvhook publishes ``ascend910-<physicId>``.

A prepared claim gets a transient CDI spec ``k8s.<driver>-claim_<uid>.json`` of kind
``k8s.<driver>/claim`` (as NVIDIA's, :mod:`nvhook.dra.prepare`) holding, per device, the
edits ``nvhook cdi generate --vendor`` writes for it (:func:`vendor_edits`), and the
vendor's spec-level edits (``/dev/kfd``; Ascend's manager nodes and driver trees).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nvhook.dra.inventory import (
    DRIVER,
    PCI_BUS_ID_ATTRIBUTE,
    DraDevice,
    Inventory,
    quantity,
    semver,
)
from nvhook.errors import UnknownDeviceError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.dra.prepare import DeviceEdits
    from nvhook.planner import Host
    from nvhook.vendors.model import Accelerator

__all__ = [
    "DRIVERS",
    "PCIE_ROOT_ATTRIBUTE",
    "build_vendor_devices",
    "discover_vendor",
    "driver_name",
    "vendor_edits",
]

#: ``--vendor`` → the driver name that vendor's own DRA driver registers.
DRIVERS: Mapping[str, str] = {
    "nvidia": DRIVER,
    "amd": "gpu.amd.com",
    "intel": "gpu.intel.com",
    "ascend": "npu.huawei.com",
}
#: ``k8s.io/dynamic-resource-allocation/deviceattribute`` ``StandardDeviceAttributePCIeRoot``.
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
_MIB = 1 << 20
#: libdrm's ``AMDGPU_FAMILY_*`` names that ROCm's driver's ``FamilyIDtoString`` knows, by
#: the gfx major version of the KFD ``gfx_target_version`` (the kernel's family of the
#: dGPUs of each: gfx8 ``VI``, gfx9 ``AI`` (Vega, MI100-MI300), gfx10 ``NV``); later ones
#: have family ids that function does not name, so they have "" there too.
_AMD_FAMILIES = {"8": "VI", "9": "AI", "10": "NV"}


def driver_name(vendor: str) -> str:
    """The DRA driver name of ``vendor`` (``nvidia``, ``amd``, ``intel``, ``ascend``)."""
    try:
        return DRIVERS[vendor]
    except KeyError:
        known = ", ".join(DRIVERS)
        raise UnknownDeviceError(f"unknown vendor {vendor!r}: expected one of {known}") from None


def _s(v: str) -> dict[str, str]:
    return {"string": v}


def _indices(a: Accelerator) -> tuple[int, int]:
    card = render = -1
    for n in a.nodes:
        base = n.rsplit("/", 1)[-1]
        if base.startswith("card") and base[4:].isdigit():
            card = int(base[4:])
        elif base.startswith("renderD") and base[7:].isdigit():
            render = int(base[7:])
    return card, render


def _amd_family(gfx: str) -> str:
    digits = gfx[3:] if gfx.startswith("gfx") else ""
    major = digits[:-2] if len(digits) > 2 else ""
    return _AMD_FAMILIES.get(major, "")


def _version(text: str) -> dict[str, str] | None:
    try:
        return {"version": semver(text)} if text else None
    except ValueError:  # not numeric dotted: not a version the API takes
        return None


def _amd(a: Accelerator) -> DraDevice:
    card, render = _indices(a)
    full = a.partition.partition("_")[0] in ("", "spx")
    attributes: dict[str, Mapping[str, Any]] = {
        "type": _s("amdgpu" if full else "amdgpu-partition"),
        ("pciAddr" if full else "parentPciAddr"): _s(a.bus_id),
        "cardIndex": {"int": card},
        "renderIndex": {"int": render},
        "productName": _s(a.product.replace(" ", "_").replace("(", "").replace(")", "")),
    }
    if a.unique_id:
        attributes["deviceID" if full else "parentDeviceID"] = _s(str(int(a.unique_id, 16)))
    family = _amd_family(a.family)
    if family:
        attributes["family"] = _s(family)
    version = _version(a.driver_version)
    if version is not None:
        attributes["driverVersion"] = version
    if a.driver_src_version:
        attributes["driverSrcVersion"] = _s(a.driver_src_version)
    if a.partition:
        attributes["partitionProfile"] = _s(a.partition)
    if a.pcie_root:
        attributes[PCIE_ROOT_ATTRIBUTE] = _s(a.pcie_root)
    return DraDevice(
        name=f"gpu-{card}-{render}",
        kind="amd",
        uuid=a.qualified_name,
        bus_id=a.bus_id,
        attributes=attributes,
        capacity={
            "memory": {"value": quantity(a.memory_mib * _MIB)},
            "computeUnits": {"value": quantity(a.compute_units)},
            "simdUnits": {"value": quantity(a.simd_units)},
        },
    )


def _intel(a: Accelerator) -> DraDevice:
    from nvhook.vendors.intel import model

    name, family = model(a.device_id)
    attributes: dict[str, Mapping[str, Any]] = {
        "model": _s(name),
        "family": _s(family),
        "driver": _s(a.driver),
        "sriov": {"bool": a.max_vfs > 0},
        "type": _s("gpu"),
        "pciId": _s(f"0x{a.device_id:04x}"),
        "pciAddress": _s(a.bus_id),
        "health": _s("Unknown"),
        PCI_BUS_ID_ATTRIBUTE: _s(a.bus_id),
    }
    if a.pcie_root:
        attributes[PCIE_ROOT_ATTRIBUTE] = _s(a.pcie_root)
        # Intel's deprecated pciRoot: the root's bus alone ("pci0000:29" → "29")
        attributes["pciRoot"] = _s(a.pcie_root.rpartition(":")[2])
    return DraDevice(
        name=a.name,
        kind="intel",
        uuid=a.qualified_name,
        bus_id=a.bus_id,
        attributes=attributes,
        capacity={
            "memory": {"value": quantity(a.memory_mib * _MIB)},
            "millicores": {"value": "1k"},  # 1000, as the API renders it
        },
    )


def _ascend(a: Accelerator) -> DraDevice:
    from nvhook.vendors.ascend import card_type

    return DraDevice(
        name=f"{a.family.lower()}-{a.index}",
        kind="ascend",
        uuid=a.qualified_name,
        bus_id=a.bus_id,
        attributes={
            "deviceType": _s(card_type(a.device_id) or a.family),
            "physicId": {"int": a.index},
        },
    )


_BUILD = {"amd": _amd, "intel": _intel, "ascend": _ascend}


def build_vendor_devices(vendor: str, accelerators: Sequence[Accelerator]) -> Inventory:
    """``vendor``'s devices (its discovery's order) as its DRA driver publishes them."""
    build = _BUILD[vendor]
    return Inventory(
        tuple(build(a) for a in accelerators), driver=driver_name(vendor), vendor=vendor
    )


def _vendor_host(host: Host) -> Any:
    from nvhook.vendors.model import Host as VendorHost

    return VendorHost(root=host.root, dev_root=host.dev_root)


def discover_vendor(host: Host, vendor: str) -> Inventory:
    """The host's devices of ``vendor`` (``amd``, ``intel``, ``ascend``) through
    :mod:`nvhook.vendors`; an empty inventory when it has none."""
    from nvhook.vendors.registry import by_name

    found = by_name(vendor).discover(_vendor_host(host))
    return build_vendor_devices(vendor, found)


def vendor_edits(host: Host, inventory: Inventory) -> DeviceEdits:
    """Each device's CDI edits and the vendor's spec-level ones: what ``nvhook cdi generate
    --vendor`` writes (:mod:`nvhook.tools.vendor_specs`), from a fresh discovery."""
    from nvhook.dra.prepare import DeviceEdits
    from nvhook.vendors.registry import by_name, device_edits, shared_edits

    vhost = _vendor_host(host)
    vendor = by_name(inventory.vendor)
    found = {a.qualified_name: a for a in vendor.discover(vhost)}
    by_device = {
        d.name: device_edits(vhost, found[d.uuid], hook_path=host.hook_path)
        for d in inventory.devices
        if d.uuid in found
    }
    return DeviceEdits(by_device, shared_edits(vhost, vendor))
