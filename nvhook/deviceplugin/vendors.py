"""Other vendors' devices as kubelet resources, under the names their own plugins use.

So that a cluster moves to nvhook without changing its pod specs, each vendor's devices are
advertised under its own plugin's resource names: ``amd.com/gpu`` (ROCm/k8s-device-plugin's),
``gpu.intel.com/i915`` or ``gpu.intel.com/xe`` by driver
(intel/intel-device-plugins-for-kubernetes ``cmd/gpu_plugin``: ``devProps.driver()``), and
``huawei.com/Ascend910`` (``Ascend310``, ``Ascend310P``) by chip family, as Ascend's device
plugin runs them (Ascend/mind-cluster 22bb3d9, :mod:`nvhook.vendors.ascend`: the 910A, 910B
and 910A3 all under ``Ascend910``). A device's ID is its CDI name (``9``,
``0000-29-00-0-0x0bd5``), but Ascend's, which is its plugin's ``<family>-<phy id>``
(``Ascend910-3``, what Volcano's Ascend scheduling and the ``huawei.com/Ascend910``
annotations name); its ``uuid`` the qualified name (``amd.com/gpu=9``), which the allocation
hands on.

AMD's partitions follow ROCm's ``-resource_naming_strategy`` (ROCm/k8s-device-plugin at
ed76468, ``cmd/k8s-device-plugin/main.go`` ``getResourceList``, ``internal/pkg/amdgpu``
``UniquePartitionConfigCount``): with ``single`` (its default and nvhook's) every device is
``amd.com/gpu``, and a node whose GPUs are partitioned differently is refused (ROCm: "not
supported with single strategy"); with ``mixed`` each device is under
``amd.com/<compute>_<memory>``, its GPU's ``current_compute_partition`` and
``current_memory_partition`` lowercased (``amd.com/cpx_nps4``), and a GPU without them under
``amd.com/gpu``.

An allocation gives the container the devices as nvhook's requests read them
(:mod:`nvhook.requests.vendors`): with the ``envvar`` strategy the vendor's own variable
(``AMD_VISIBLE_DEVICES=9``, ``ASCEND_VISIBLE_DEVICES=1``), which the shim serves in jit mode;
for a vendor without one (Intel), or with ``cdi-annotations``, the CDI annotation; with
``cdi-cri`` the CDI device names for the engine's own CDI (``nvhook cdi generate --vendor``'s
spec). ``volume-mounts`` is NVIDIA's alone and gives nothing here. Health is what the
vendors' own plugins check without their libraries (:mod:`nvhook.vendors.health`), on the
plugin's health tick.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from nvhook.deviceplugin.allocate import ANNOTATION_NAME, ContainerAllocation, devices_for
from nvhook.deviceplugin.errors import StrategyError
from nvhook.deviceplugin.model import Device, PluginConfig, Resource
from nvhook.deviceplugin.preferred import Topology
from nvhook.vendors import ascend
from nvhook.vendors.model import Accelerator, Host
from nvhook.vendors.registry import VENDORS

__all__ = [
    "AMD_NAMING",
    "allocate_vendor",
    "is_vendor_resource",
    "resource_name",
    "vendor_devices",
    "vendor_resources",
]

#: ROCm's ``-resource_naming_strategy`` values (module docstring)
AMD_NAMING = ("single", "mixed")

_PREFIXES = ("amd.com/", "gpu.intel.com/", "huawei.com/")


def resource_name(device: Accelerator, amd_naming: str = "single") -> str:
    """The resource the vendor's own plugin advertises ``device`` under (``amd_naming``:
    ROCm's resource naming strategy)."""
    if device.vendor == "amd":
        if amd_naming == "mixed" and device.partition:
            return f"amd.com/{device.partition}"
        return "amd.com/gpu"
    if device.vendor == "intel":
        return f"gpu.intel.com/{device.driver}"
    return f"huawei.com/{device.family}"


def _device_id(device: Accelerator) -> str:
    return ascend.device_id(device) if device.vendor == "ascend" else device.name


def is_vendor_resource(name: str) -> bool:
    return name.startswith(_PREFIXES)


def vendor_devices(host: Host) -> tuple[Accelerator, ...]:
    """Every other vendor's devices on ``host``, vendor by vendor."""
    return tuple(d for vendor in VENDORS for d in vendor.discover(host))


def vendor_resources(
    host: Host, amd_naming: str = "single", devices: Sequence[Accelerator] | None = None
) -> tuple[tuple[Resource, Topology], ...]:
    """Each vendor resource of ``host`` (or of ``devices``, discovered there) and its topology
    (NUMA unknown, no links); raises :class:`StrategyError` for differently partitioned AMD
    GPUs under ``single``."""
    present = vendor_devices(host) if devices is None else tuple(devices)
    if amd_naming == "single":
        _check_single([d for d in present if d.vendor == "amd"])
    grouped: dict[str, list[Accelerator]] = {}
    for d in present:
        grouped.setdefault(resource_name(d, amd_naming), []).append(d)
    found = []
    for name, members in grouped.items():
        listed = tuple(
            Device(id=_device_id(d), uuid=d.qualified_name, gpu_uuid=d.qualified_name, gpu_index=i)
            for i, d in enumerate(members)
        )
        found.append((Resource(name, listed), Topology(numa=(None,) * len(listed))))
    return tuple(found)


def _check_single(devices: Sequence[Accelerator]) -> None:
    kinds: dict[str, str] = {}
    for d in devices:
        if d.partition:
            kinds.setdefault(d.partition, d.bus_id)
    if len(kinds) > 1:
        which = ", ".join(f"{p} (GPU {bus})" for p, bus in sorted(kinds.items()))
        raise StrategyError(
            f"the AMD GPUs are partitioned differently ({which}): the 'single' resource naming "
            "strategy cannot name them; start the device plugin with "
            "--amd-resource-naming mixed (ROCm's -resource_naming_strategy=mixed) or "
            "partition them alike"
        )


def allocate_vendor(
    resource: Resource, ids: Sequence[str], config: PluginConfig
) -> ContainerAllocation:
    """One container's allocation of ``ids`` of a vendor ``resource`` (module docstring)."""
    devices = devices_for(resource, ids, unhealthy={})
    names = [d.uuid for d in devices]
    kind = names[0].partition("=")[0]
    variable = next((v.env for v in VENDORS if v.kind == kind and v.env), "")
    strategies = config.device_list_strategies
    envs: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if "envvar" in strategies and variable:
        envs[variable] = ",".join(n.partition("=")[2] for n in names)
    if "cdi-annotations" in strategies or ("envvar" in strategies and not variable):
        digest = hashlib.sha256("\0".join([resource.name, *ids]).encode()).hexdigest()[:12]
        annotations[f"{config.cdi_annotation_prefix}{ANNOTATION_NAME}_{digest}"] = ",".join(names)
    cdi = tuple(names) if "cdi-cri" in strategies else ()
    return ContainerAllocation(
        envs=tuple(envs.items()), annotations=tuple(annotations.items()), cdi_devices=cdi
    )
