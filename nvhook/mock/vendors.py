"""Mock machines of other vendors: AMD MI300X, Intel Max 1550, Ascend 910B, a mixed node.

A vendor profile is a TOML file under ``machines/vendors/`` with one table per vendor
(``[amd]``, ``[intel]``, ``[ascend]``) and optionally ``nvidia = "<profile>"``, an NVIDIA
profile laid out first under the same root (a mixed node). :func:`create` writes what each
vendor's kernel driver and packages put on a host, as each vendor's own tools read it
(the vendor modules' docstrings, :mod:`nvhook.vendors.amd` and the others, cite them):

- AMD: the PCI functions bound to ``amdgpu`` (``sys/bus/pci/drivers/amdgpu/<bus>``, reached
  through ``sys/module/amdgpu/drivers/pci:amdgpu``) with ``device``, ``numa_node``,
  ``current_compute_partition``, ``current_memory_partition`` and ``drm/card*``,
  ``drm/renderD*``; the module's ``sys/module/amdgpu/version`` and ``srcversion`` (an
  amdgpu-dkms module's, which ROCm's DRA driver publishes); each further compute partition as
  ``sys/devices/platform/amdgpu_xcp_<n>/drm/…``; the KFD topology (a CPU node, then one node
  per partition with ``drm_render_minor``, ``location_id``, ``domain``, ``simd_count``,
  ``unique_id`` and its memory bank); ``dev/kfd`` and ``dev/dri/{card,renderD}*``
  (``root:render 0660``; cards ``root:video 0660``) with their ``by-path`` links;
- Intel: ``sys/class/drm/card<N>`` and ``renderD<M>`` linked to the PCI function's ``drm/``
  with ``device`` (back to the function), ``vendor``, ``device``, ``sriov_numvfs`` and the
  ``driver`` link (``xe`` or ``i915``); ``dev/dri`` nodes and ``by-path`` links;
- Ascend: the Huawei PCI functions in ``sys/bus/pci/devices``; ``dev/davinci<N>``,
  ``davinci_manager``, ``devmm_svm``, ``hisi_hdc`` (``HwHiAiUser 0660``); the driver tree
  (``usr/local/Ascend/driver/{lib64,include,version.info}``, ``usr/local/dcmi``).

Each vendor also gets an ``*-smi`` stand-in, a POSIX shell script that lists the devices
whose node the caller can open (as the mock ``nvidia-smi`` does): ``usr/local/bin/npu-smi``
(on the host, where Ascend's runtime mounts it from), ``opt/rocm/bin/rocm-smi`` and
``usr/bin/xpu-smi`` (which a real node has in the image: tests mount them in). Nodes are
character devices or regular files by the tree's node mode, as for NVIDIA's profiles.
"""

from __future__ import annotations

import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from nvhook.errors import MockError, UnknownProfileError
from nvhook.mock._tree import Tree
from nvhook.mock.devnodes import VIDEO_GID
from oci._frozen import Frozen

__all__ = [
    "ASCEND_GID",
    "KFD_MAJOR",
    "RENDER_GID",
    "VendorMachine",
    "create",
    "is_vendor_profile",
    "list_vendor_profiles",
    "load_vendor_profile",
]

DRM_MAJOR = 226
_SRCVERSION = "4D8A4B4F5E2C1B0A9F8E7D6"
KFD_MAJOR = 236  # dynamic on a real host; what /proc/devices would say
DAVINCI_MAJOR = 237
MANAGER_MAJOR = 238
RENDER_GID = 105  # Debian's render group is a dynamic system group
ASCEND_GID = 1090  # HwHiAiUser, which Ascend's driver installer creates
_UNIQUE_BASE = 0x5F1A4C2E00000000


class VendorMachine(Frozen):
    """A laid-out vendor machine: its root and the profile's data as read."""

    root: Path
    name: str
    profile: dict[str, Any]
    nodes: str

    def __repr__(self) -> str:
        return f"VendorMachine(root={self.root!r}, name={self.name!r})"


def _folder() -> Any:
    return resources.files("nvhook.mock.machines").joinpath("vendors")


def list_vendor_profiles() -> tuple[str, ...]:
    """The shipped vendor profiles' names, sorted."""
    return tuple(sorted(e.name[:-5] for e in _folder().iterdir() if e.name.endswith(".toml")))


def is_vendor_profile(name: str) -> bool:
    return name in list_vendor_profiles()


def load_vendor_profile(name: str) -> dict[str, Any]:
    """A shipped vendor profile's data, checked (a :class:`MockError` names the key)."""
    if not is_vendor_profile(name):
        known = ", ".join(list_vendor_profiles())
        raise UnknownProfileError(f"unknown vendor mock profile {name!r}; known: {known}")
    where = f"vendor mock profile {name}"
    data = tomllib.loads(_folder().joinpath(f"{name}.toml").read_text(encoding="utf-8"))
    vendors = [k for k in ("amd", "intel", "ascend") if k in data]
    if not vendors:
        raise MockError(f"{where}: expected an [amd], [intel] or [ascend] table")
    for key in vendors:
        buses = data[key].get("bus_ids")
        if not isinstance(buses, list) or not buses or len(set(buses)) != len(buses):
            raise MockError(f"{where}: [{key}] bus_ids must be a list of distinct bus ids")
    return data


def create(name: str, root: Path | str, *, nodes: str = "auto") -> VendorMachine:
    """Lay out vendor profile ``name`` at ``root`` (new or empty), under its NVIDIA base."""
    data = load_vendor_profile(name)
    top = Path(root).absolute()
    mode = "char" if nodes == "auto" and os.geteuid() == 0 else nodes
    if mode == "auto":
        mode = "file"
    if mode not in ("char", "file"):
        raise MockError(f"unknown node mode {nodes!r}: expected auto, char or file")
    base = data.get("nvidia")
    if base:
        from nvhook.mock.layout import create as create_nvidia

        create_nvidia(base, top, nodes="char" if mode == "char" else "file")
    elif top.exists() and (not top.is_dir() or any(top.iterdir())):
        raise MockError(f"cannot lay out mock machine at {top}: it exists and is not empty")
    tree = Tree(top, "char" if mode == "char" else "file")
    tree.mkdir("")
    if "amd" in data:
        _amd(tree, data["amd"])
    if "intel" in data:
        _intel(tree, data["intel"])
    if "ascend" in data:
        _ascend(tree, data["ascend"])
    return VendorMachine(root=top, name=name, profile=data, nodes=mode)


def _pci_dir(bus: str) -> str:
    return f"sys/devices/pci{bus[:4]}:{bus[5:7]}/{bus}"


def _location(bus: str) -> tuple[int, int]:
    domain, b, rest = bus.split(":")
    dev, fn = rest.split(".")
    return int(domain, 16), (int(b, 16) << 8) | (int(dev, 16) << 3) | int(fn)


def _drm(tree: Tree, parent: str, card: int, render: int) -> None:
    tree.write(f"{parent}/drm/card{card}/dev", f"{DRM_MAJOR}:{card}\n")
    tree.write(f"{parent}/drm/renderD{render}/dev", f"{DRM_MAJOR}:{render}\n")


def _smi(tree: Tree, rel: str, title: str, rows: list[tuple[str, str]]) -> None:
    """A shell stand-in listing the rows whose node (first column) the caller can open
    (``csrc/visible.c``'s rule, by the shell's message: ``No such device or address``)."""
    lines = "\n".join(f"{node}|{text}" for node, text in rows)
    script = f"""#!/bin/sh
# nvhook mock {title}: lists the devices whose node this process can open
n=0
while IFS='|' read -r node text; do
  # opens, or fails with ENXIO (a node with no driver behind it: the mock's), as the
  # mock nvidia-smi counts a GPU; EPERM (the device cgroup denies) and no node do not
  err=$( (exec 3<"$node") 2>&1 )
  case "$err" in ""|*"No such device or address"*) ok=1 ;; *) ok=0 ;; esac
  if [ -c "$node" ] && [ "$ok" = 1 ]; then
    echo "$text"
    n=$((n+1))
  fi
done <<'ROWS'
{lines}
ROWS
[ "$n" -gt 0 ] || {{ echo "{title}: no devices found" >&2; exit 1; }}
"""
    tree.write(rel, script, 0o755)


def _amd(tree: Tree, t: dict[str, Any]) -> None:
    parts = int(t.get("partitions", 1))
    cus = int(t["compute_units"])
    per_cu = int(t.get("simd_per_cu", 4))
    memory = int(t["memory_mib"])
    device_id = int(t["device_id"])
    tree.mkdir("sys/bus/pci/drivers/amdgpu")
    tree.symlink("sys/module/amdgpu/drivers/pci:amdgpu", "../../../bus/pci/drivers/amdgpu")
    # an out-of-tree (amdgpu-dkms) module has a version; ROCm's DRA driver publishes it
    tree.write("sys/module/amdgpu/version", f"{t.get('driver_version', '6.10.5')}\n")
    tree.write("sys/module/amdgpu/srcversion", f"{t.get('driver_srcversion', _SRCVERSION)}\n")
    topo = "sys/class/kfd/kfd/topology/nodes"
    tree.write(f"{topo}/0/properties", "cpu_cores_count 96\nsimd_count 0\ndrm_render_minor 0\n")
    tree.write("sys/class/kfd/kfd/dev", f"{KFD_MAJOR}:0\n")
    tree.node("dev/kfd", KFD_MAJOR, 0, 0o660, gid=RENDER_GID)
    rows: list[tuple[str, str]] = []
    xcp = 0
    node = 1
    for g, bus in enumerate(t["bus_ids"]):
        pci = _pci_dir(bus)
        tree.write(f"{pci}/vendor", "0x1002\n")
        tree.write(f"{pci}/device", f"0x{device_id:04x}\n")
        tree.write(f"{pci}/numa_node", f"{g * 2 // len(t['bus_ids'])}\n")
        tree.write(f"{pci}/current_compute_partition", f"{t['compute_partition']}\n")
        tree.write(f"{pci}/current_memory_partition", f"{t['memory_partition']}\n")
        tree.symlink(f"sys/bus/pci/drivers/amdgpu/{bus}", "../" * 4 + pci[len("sys/") :])
        domain, location = _location(bus)
        for p in range(parts):
            card, render = 1 + g * parts + p, 128 + g * parts + p
            owner = pci if p == 0 else f"sys/devices/platform/amdgpu_xcp_{xcp}"
            if p:
                xcp += 1
            _drm(tree, owner, card, render)
            props = (
                f"simd_count {cus * per_cu // parts}\nsimd_per_cu {per_cu}\n"
                f"gfx_target_version {t['gfx_target_version']}\nvendor_id 4098\n"
                f"device_id {device_id}\nlocation_id {location}\ndomain {domain}\n"
                f"drm_render_minor {render}\nunique_id {_UNIQUE_BASE + g}\n"
            )
            tree.write(f"{topo}/{node}/properties", props)
            size = memory // parts * 1024 * 1024
            bank = f"heap_type 1\nsize_in_bytes {size}\n"
            tree.write(f"{topo}/{node}/mem_banks/0/properties", bank)
            node += 1
            tree.node(f"dev/dri/card{card}", DRM_MAJOR, card, 0o660, gid=VIDEO_GID)
            tree.node(f"dev/dri/renderD{render}", DRM_MAJOR, render, 0o660, gid=RENDER_GID)
            if p == 0:
                tree.symlink(f"dev/dri/by-path/pci-{bus}-card", f"../card{card}")
                tree.symlink(f"dev/dri/by-path/pci-{bus}-render", f"../renderD{render}")
            index = g * parts + p
            text = (
                f"GPU[{index}] : {bus} renderD{render} "
                f"{t['compute_partition']}/{t['memory_partition']} partition {p}"
            )
            rows.append((f"/dev/dri/renderD{render}", text))
    _smi(tree, "opt/rocm/bin/rocm-smi", "rocm-smi", rows)


def _intel(tree: Tree, t: dict[str, Any]) -> None:
    driver = str(t["driver"])
    device_id = int(t["device_id"])
    tree.mkdir(f"sys/bus/pci/drivers/{driver}")
    rows: list[tuple[str, str]] = []
    for i, bus in enumerate(t["bus_ids"]):
        pci = _pci_dir(bus)
        card, render = i, 128 + i
        tree.write(f"{pci}/vendor", "0x8086\n")
        tree.write(f"{pci}/device", f"0x{device_id:04x}\n")
        tree.write(f"{pci}/sriov_numvfs", "0\n")
        tree.write(f"{pci}/numa_node", f"{i * 2 // len(t['bus_ids'])}\n")
        up = "../" * (pci.count("/") - 1)
        tree.symlink(f"{pci}/driver", f"{up}bus/pci/drivers/{driver}")
        for name in (f"card{card}", f"renderD{render}"):
            minor = card if name.startswith("card") else render
            tree.write(f"{pci}/drm/{name}/dev", f"{DRM_MAJOR}:{minor}\n")
            tree.symlink(f"{pci}/drm/{name}/device", "../..")
            tree.symlink(f"sys/class/drm/{name}", "../../" + pci[len("sys/") :] + f"/drm/{name}")
        tree.node(f"dev/dri/card{card}", DRM_MAJOR, card, 0o660, gid=VIDEO_GID)
        tree.node(f"dev/dri/renderD{render}", DRM_MAJOR, render, 0o666)
        tree.symlink(f"dev/dri/by-path/pci-{bus}-card", f"../card{card}")
        tree.symlink(f"dev/dri/by-path/pci-{bus}-render", f"../renderD{render}")
        rows.append((f"/dev/dri/renderD{render}", f"Device {i}: {bus} card{card} {driver}"))
    _smi(tree, "usr/bin/xpu-smi", "xpu-smi", rows)


def _ascend(tree: Tree, t: dict[str, Any]) -> None:
    device_id = int(t["device_id"])
    rows: list[tuple[str, str]] = []
    for bus in t["bus_ids"]:
        pci = _pci_dir(bus)
        tree.write(f"{pci}/vendor", "0x19e5\n")
        tree.write(f"{pci}/device", f"0x{device_id:04x}\n")
        tree.symlink(f"sys/bus/pci/devices/{bus}", "../../../" + pci[len("sys/") :])
    for n, bus in enumerate(sorted(t["bus_ids"])):
        tree.node(f"dev/davinci{n}", DAVINCI_MAJOR, n, 0o660, gid=ASCEND_GID)
        rows.append((f"/dev/davinci{n}", f"NPU {n}: 910B3 {bus} OK"))
    tree.node("dev/davinci_manager", MANAGER_MAJOR, 0, 0o660, gid=ASCEND_GID)
    tree.node("dev/devmm_svm", MANAGER_MAJOR, 1, 0o660, gid=ASCEND_GID)
    tree.node("dev/hisi_hdc", MANAGER_MAJOR, 2, 0o660, gid=ASCEND_GID)
    driver = "usr/local/Ascend/driver"
    tree.write(f"{driver}/version.info", f"Version={t['driver_version']}\n")
    for lib in ("libascend_hal.so", "libdrvdsmi_host.so", "libc_sec.so", "libmmpa.so"):
        tree.write(f"{driver}/lib64/driver/{lib}", f"mock {lib}\n")
        tree.symlink(f"{driver}/lib64/{lib}", f"driver/{lib}")
    tree.write(f"{driver}/include/dsmi_common_interface.h", "/* mock */\n")
    tree.write("usr/local/dcmi/dcmi_interface_api.h", "/* mock */\n")
    tree.write("usr/local/dcmi/libdcmi.so", "mock libdcmi.so\n")
    _smi(tree, "usr/local/bin/npu-smi", "npu-smi", rows)
