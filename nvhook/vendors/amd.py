"""AMD ROCm GPUs (``amdgpu``): discovered from sysfs as ROCm's own container toolkit does.

The device list is ``amd-ctk cdi generate``'s (ROCm/container-toolkit
``internal/amdgpu/amdgpu.go`` ``GetAMDGPUsWithFS`` at 192fe8e, read for this module): every
PCI function bound to ``amdgpu`` (``/sys/module/amdgpu/drivers/pci:amdgpu/<bus>``), then
every partition's platform device (``/sys/devices/platform/amdgpu_xcp_*``: MI300's CPX
compute partitions beyond the first), each with the ``card``/``renderD`` nodes under its
``drm/``. A device counts only when its render minor is a GPU node of the KFD topology
(``/sys/class/kfd/kfd/topology/nodes/*/properties``, ``drm_render_minor`` > 0; the CPU node
has 0), whose ``location_id`` and ``domain`` give the PCI function it belongs to. Devices
are grouped by that function in the order first seen, each group's partitions in render
minor order; the position in that list is the device's index and its CDI name (``0``,
``1``, …, under kind ``amd.com/gpu``, as ``internal/cdi/cdi.go`` names them). Every
container of an AMD device also gets ``/dev/kfd``, the compute interface all share.

Memory is the topology node's first memory bank (``mem_banks/0/properties``
``size_in_bytes``), compute units ``simd_count / simd_per_cu``, as ROCm's node labeller
(ROCm/k8s-device-plugin ``cmd/k8s-node-labeller/main.go`` at ed76468) computes its
``vram`` and ``cu-count`` labels; the unique id (``unique_id``, decimal) is written in hex
as ``AMD_VISIBLE_DEVICES`` takes it. No ROCm library is read.
"""

from __future__ import annotations

import os

from nvhook.vendors._sysfs import listdir, pcie_root, read, read_int, read_keyed
from nvhook.vendors.model import Accelerator, Host, Vendor

__all__ = ["KIND", "VENDOR", "discover"]

KIND = "amd.com/gpu"
ENV = "AMD_VISIBLE_DEVICES"
KFD = "/dev/kfd"
_DRIVER = "/sys/module/amdgpu/drivers/pci:amdgpu"
_XCP = "/sys/devices/platform"
_TOPOLOGY = "/sys/class/kfd/kfd/topology/nodes"
#: The ``amdgpu`` module's version and srcversion (what ROCm's DRA driver reads through
#: ``/sys/class/drm/card*/device/driver/module/``; an in-tree module has no version).
_MODULE = "/sys/module/amdgpu"

#: Products by PCI device id (the names of amdgpu.ids, libdrm's table) and what their
#: matrix cores take; only what the mock and the docs use, the rest are "AMD GPU <id>".
PRODUCTS: dict[int, tuple[str, tuple[str, ...]]] = {
    0x74A1: ("AMD Instinct MI300X", ("fp8", "bf16", "fp16", "fp32", "fp64")),
    0x74A5: ("AMD Instinct MI325X", ("fp8", "bf16", "fp16", "fp32", "fp64")),
    0x740F: ("AMD Instinct MI210", ("bf16", "fp16", "fp32", "fp64")),
    0x740C: ("AMD Instinct MI250X/MI250", ("bf16", "fp16", "fp32", "fp64")),
}


class _Node:
    __slots__ = ("bus", "compute_units", "family", "memory_mib", "simd_units", "unique_id")

    def __init__(self, props: dict[str, str], mem: dict[str, str]) -> None:
        location = _int(props.get("location_id"))
        domain = _int(props.get("domain"))
        dev, bus = (location >> 3) & 0x1F, (location >> 8) & 0xFF
        fn = location & 0x7
        self.bus = f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
        simd, per_cu = _int(props.get("simd_count")), _int(props.get("simd_per_cu"))
        self.compute_units = simd // per_cu if per_cu else 0
        self.simd_units = simd
        self.memory_mib = _int(mem.get("size_in_bytes")) // (1024 * 1024)
        gfx = _int(props.get("gfx_target_version"))
        self.family = f"gfx{gfx // 10000}{(gfx // 100) % 100:x}{gfx % 100:x}" if gfx else ""
        uid = _int(props.get("unique_id"))
        self.unique_id = f"0x{uid:x}" if uid else ""


def _int(text: str | None) -> int:
    try:
        return int(text or "0")
    except ValueError:
        return 0


def _topology(host: Host) -> dict[int, _Node]:
    """GPU topology nodes by render minor."""
    top = host.sys(_TOPOLOGY)
    found: dict[int, _Node] = {}
    for name in listdir(top):
        props = read_keyed(os.path.join(top, name, "properties"))
        minor = _int(props.get("drm_render_minor"))
        if minor > 0:
            mem = read_keyed(os.path.join(top, name, "mem_banks", "0", "properties"))
            found[minor] = _Node(props, mem)
    return found


def _drm(path: str) -> tuple[list[str], int]:
    nodes, render = [], 0
    for name in listdir(os.path.join(path, "drm")):
        if name.startswith("card") and name[4:].isdigit():
            nodes.append(f"/dev/dri/{name}")
        elif name.startswith("renderD") and name[7:].isdigit():
            nodes.append(f"/dev/dri/{name}")
            render = int(name[7:])
    return nodes, render


def discover(host: Host) -> tuple[Accelerator, ...]:
    """The host's AMD GPUs and partitions, in ``amd-ctk``'s index order (module docstring)."""
    if not os.path.isdir(host.sys("/sys/module/amdgpu/drivers")):
        return ()
    topology = _topology(host)
    driver = host.sys(_DRIVER)
    paths = [os.path.join(driver, n) for n in listdir(driver) if _is_bus(n)]
    xcp = host.sys(_XCP)
    paths += [os.path.join(xcp, n) for n in listdir(xcp) if n.startswith("amdgpu_xcp_")]
    groups: dict[str, list[tuple[int, list[str], str, str]]] = {}
    for path in paths:
        nodes, render = _drm(path)
        node = topology.get(render)
        if not nodes or node is None:
            continue
        compute = (read(os.path.join(path, "current_compute_partition")) or "").lower()
        memory = (read(os.path.join(path, "current_memory_partition")) or "").lower()
        partition = f"{compute}_{memory}" if compute or memory else ""
        groups.setdefault(node.bus, []).append((render, nodes, partition, path))
    version = read(host.sys(f"{_MODULE}/version")) or ""
    src_version = read(host.sys(f"{_MODULE}/srcversion")) or ""
    found: list[Accelerator] = []
    for bus, members in groups.items():
        pci = os.path.join(driver, bus)
        device_id = read_int(os.path.join(pci, "device")) or 0
        product, dtypes = PRODUCTS.get(device_id, (f"AMD GPU {device_id:04x}", ()))
        parent_partition = next((p for _, _, p, _ in members if p), "")
        root = pcie_root(pci)
        for render, nodes, partition, _ in sorted(members, key=lambda m: m[0]):
            node = topology[render]
            found.append(
                Accelerator(
                    vendor="amd",
                    kind=KIND,
                    name=str(len(found)),
                    index=len(found),
                    bus_id=bus,
                    product=product,
                    driver="amdgpu",
                    nodes=tuple(nodes),
                    memory_mib=node.memory_mib,
                    compute_units=node.compute_units,
                    device_id=device_id,
                    family=node.family,
                    partition=partition or parent_partition,
                    unique_id=node.unique_id,
                    dtypes=dtypes,
                    pcie_root=root,
                    simd_units=node.simd_units,
                    driver_version=version,
                    driver_src_version=src_version,
                )
            )
    return tuple(found)


def _is_bus(name: str) -> bool:
    head = name[:5]
    return (
        len(head) == 5 and head[4] == ":" and all(c in "0123456789abcdefABCDEF" for c in head[:4])
    )


def _shared(host: Host) -> tuple[str, ...]:
    return (KFD,)


def _mounts(host: Host) -> tuple[str, ...]:
    return ()  # ROCm's user space lives in the image


VENDOR = Vendor(
    name="amd", kind=KIND, env=ENV, discover=discover, shared_nodes=_shared, mounts=_mounts
)
