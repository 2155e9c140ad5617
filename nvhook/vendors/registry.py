"""The vendors nvhook serves beside NVIDIA, and their devices as container edits.

:data:`VENDORS` is the one table (docs/architecture.md, "Where a vendor plugs in"): a new
vendor is a module with a :class:`~nvhook.vendors.model.Vendor` and a row here.
:func:`resolve` turns qualified names of any vendor's kind (``amd.com/gpu=0``,
``huawei.com/npu=all``) into :class:`~oci.cdi.edits.Edits` from that vendor's discovery
(jit mode); :func:`device_edits` and :func:`shared_edits` are what ``nvhook cdi generate``
writes per device and at spec level, so the two modes give a container the same nodes
(docs/architecture.md D1).

Each node is written fully specified from the host's node (``type``, ``major``, ``minor``;
``hostPath`` under the dev root), with the host's ``fileMode`` and, where its group may do
what others may not (the mocks' ``/dev/kfd`` ``root:render 0660``, a card ``root:video
0660``, ``davinci<N>`` of ``HwHiAiUser``), its ``uid``/``gid`` and that group in
``additionalGids``, so that a container user other than root may open it.
"""

from __future__ import annotations

import os
import stat

from nvhook.errors import UnknownDeviceError
from nvhook.vendors import amd, ascend, intel
from nvhook.vendors.model import Accelerator, Host, Vendor
from oci.cdi.edits import DeviceNode, Edits, Mount

__all__ = [
    "VENDORS",
    "by_kind",
    "by_name",
    "device_edits",
    "discover_all",
    "resolve",
    "shared_edits",
]

VENDORS: tuple[Vendor, ...] = (amd.VENDOR, intel.VENDOR, ascend.VENDOR)

#: Read-only bind mounts of a vendor's driver trees (as ascend-docker-runtime mounts them).
_MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")


def by_kind(kind: str) -> Vendor | None:
    """The vendor whose CDI kind is ``kind`` (None: not another vendor's)."""
    return next((v for v in VENDORS if v.kind == kind), None)


def by_name(name: str) -> Vendor:
    """The vendor ``amd``, ``intel`` or ``ascend``."""
    for v in VENDORS:
        if v.name == name:
            return v
    known = ", ".join(v.name for v in VENDORS)
    raise UnknownDeviceError(f"unknown vendor {name!r}: expected one of {known}")


def discover_all(host: Host) -> dict[str, tuple[Accelerator, ...]]:
    """Every vendor's devices on ``host`` (vendors with none left out)."""
    found = {v.name: v.discover(host) for v in VENDORS}
    return {k: d for k, d in found.items() if d}


def node(host: Host, path: str) -> DeviceNode:
    """``path`` (a container path, the same on the host under the dev root), as the host has it."""
    host_path = host.dev(path)
    try:
        st = os.stat(host_path)
    except OSError as e:
        raise UnknownDeviceError(
            f"{host_path}: {e.strerror}; is the vendor's driver loaded on this host?"
        ) from None
    mode = stat.S_IMODE(st.st_mode)
    other = mode & 0o7
    restricted = ((mode >> 6) | (mode >> 3)) & 0o7 & ~other
    char = stat.S_ISCHR(st.st_mode)
    return DeviceNode(
        path=path,
        host_path=host_path if host_path != path else None,
        type="c" if char else None,
        major=os.major(st.st_rdev) if char else None,
        minor=os.minor(st.st_rdev) if char else None,
        file_mode=mode,
        uid=st.st_uid if restricted else None,
        gid=st.st_gid if restricted else None,
    )


def _with_groups(edits: Edits) -> Edits:
    gids = {n.gid for n in edits.device_nodes if n.gid}
    if not gids:
        return edits
    return edits._replace(additional_gids=tuple(sorted(gids.union(edits.additional_gids))))


def device_edits(host: Host, device: Accelerator, *, hook_path: str, links: bool = True) -> Edits:
    """The nodes (and, with ``links``, the hook making its ``by-path`` links) of one device."""
    edits = Edits(device_nodes=tuple(node(host, p) for p in device.nodes))
    if links and device.links:
        from nvhook.discover.hooks import create_container_hook

        hook = create_container_hook(device_links=device.links, hook_path=hook_path)
        edits = edits._replace(hooks=(hook,))
    return _with_groups(edits)


def shared_edits(host: Host, vendor: Vendor) -> Edits:
    """What every container of ``vendor`` gets: its shared nodes and driver trees."""
    nodes = tuple(node(host, p) for p in vendor.shared_nodes(host))
    mounts = tuple(
        Mount(host.sys(p), p, type="bind", options=_MOUNT_OPTIONS) for p in vendor.mounts(host)
    )
    return _with_groups(Edits(device_nodes=nodes, mounts=mounts))


def resolve(names: tuple[str, ...], host: Host, *, hook_path: str) -> Edits:
    """The edits of qualified names of other vendors' kinds, from their discovery.

    A name is a device's CDI name, ``all``, or (AMD) a unique id ``0x…`` (every partition of
    that GPU). An unknown name is an :class:`UnknownDeviceError` naming what the host has."""
    edits = Edits()
    found: dict[str, tuple[Accelerator, ...]] = {}
    served: list[Vendor] = []
    links: list[tuple[str, str]] = []
    for qualified in names:
        kind, _, name = qualified.partition("=")
        vendor = by_kind(kind)
        if vendor is None:
            raise UnknownDeviceError(f"{qualified}: not a device kind of another vendor")
        if vendor.name not in found:
            found[vendor.name] = vendor.discover(host)
        devices = found[vendor.name]
        if name == "all":
            chosen = list(devices)
        else:
            chosen = [d for d in devices if name in (d.name, d.unique_id)]
        if not chosen:
            have = ", ".join(d.name for d in devices[:8]) or "none"
            raise UnknownDeviceError(
                f"{qualified}: no such {vendor.name} device on this host (it has: {have})"
            )
        for d in chosen:
            edits += device_edits(host, d, hook_path=hook_path, links=False)
            links += d.links
        if vendor not in served:
            served.append(vendor)
    for vendor in served:
        edits += shared_edits(host, vendor)
    if links:  # one hook for every device's links
        from nvhook.discover.hooks import create_container_hook

        hook = create_container_hook(device_links=links, hook_path=hook_path)
        edits = edits._replace(hooks=(*edits.hooks, hook))
    return _dedupe(edits)


def _dedupe(edits: Edits) -> Edits:
    return edits._replace(
        device_nodes=tuple(dict.fromkeys(edits.device_nodes)),
        mounts=tuple(dict.fromkeys(edits.mounts)),
        additional_gids=tuple(sorted(set(edits.additional_gids))),
    )
