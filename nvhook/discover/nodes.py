"""Device nodes: selected GPUs and MIG devices, control nodes, IMEX channels, NVSwitches, DRI.

Every node is written fully specified (``type``, ``major``, ``minor``) from the
driver's own numbers — 195 for GPUs and control nodes, the dynamic majors that
``/proc/devices`` announces for ``nvidia-uvm``, ``nvidia-caps``,
``nvidia-caps-imex-channels`` and ``nvidia-nvswitch`` — so that applying the
edits needs no ``stat`` of the host's ``/dev`` (runc creates the node in the
container from the numbers). ``hostPath`` names the node under the dev root
for consumers that bind-mount nodes (rootless podman).

Control nodes: ``nvidiactl`` always; ``nvidia-uvm`` and ``nvidia-uvm-tools``
when ``/proc/devices`` has ``nvidia-uvm``; ``nvidia-modeset`` when the host has
the node. DRI nodes (graphics/display) are the ``card``/``renderD`` nodes that
``/dev/dri/by-path/pci-<bus id>-{card,render}`` links to for a selected GPU.
"""

from __future__ import annotations

import os
import stat

from nvhook.devices.gpus import Gpu, HostGpus, Mig, Selected
from nvhook.devices.procfs import listdir
from nvhook.errors import DriverError
from oci.cdi.edits import DeviceNode, Edits

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "DRM_MAJOR",
    "NVIDIA_MAJOR",
    "caps_nodes",
    "control_nodes",
    "dri_links",
    "dri_nodes",
    "feature_nodes",
    "gpu_nodes",
    "imex_nodes",
    "node_groups",
    "nvswitch_nodes",
    "with_host_access",
    "with_node_groups",
]

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
MODESET_MINOR = 254
DRM_MAJOR = 226


def _node(dev_root: str, path: str, major: int, minor: int) -> DeviceNode:
    return DeviceNode(
        path=path, host_path=_host(dev_root, path), type="c", major=major, minor=minor
    )


def _host(dev_root: str, path: str) -> str:
    return os.path.join(dev_root, path.lstrip("/")) if dev_root not in ("", "/") else path


def _major(majors: Mapping[str, int], name: str, what: str) -> int:
    try:
        return majors[name]
    except KeyError:
        raise DriverError(
            f"{what}: /proc/devices has no {name!r} character device (is the module loaded?)"
        ) from None


def gpu_nodes(
    selected: Iterable[Selected], host: HostGpus, *, dev_root: str, majors: Mapping[str, int]
) -> Edits:
    """``/dev/nvidia<minor>`` of each selected GPU; a MIG device adds its parent's node and
    the ``nvidia-caps`` nodes of its GPU instance and compute instance."""
    nodes: list[DeviceNode] = []
    for device in selected:
        if isinstance(device, Gpu):
            nodes.append(_gpu_node(device, dev_root))
            continue
        parent = host.gpus[device.gpu_index]
        caps = _major(majors, "nvidia-caps", f"MIG device {device.name}")
        nodes.append(_gpu_node(parent, dev_root))
        nodes.extend(_caps_nodes(device, caps, dev_root))
    return Edits(device_nodes=tuple(dict.fromkeys(nodes)))


def _gpu_node(gpu: Gpu, dev_root: str) -> DeviceNode:
    return _node(dev_root, f"/dev/nvidia{gpu.minor}", NVIDIA_MAJOR, gpu.minor)


def _caps_nodes(mig: Mig, major: int, dev_root: str) -> list[DeviceNode]:
    return [
        _node(dev_root, f"/dev/nvidia-caps/nvidia-cap{minor}", major, minor)
        for minor in (mig.gi_caps_minor, mig.ci_caps_minor)
    ]


def caps_nodes(*, dev_root: str, majors: Mapping[str, int]) -> Edits:
    """Every ``/dev/nvidia-caps/nvidia-cap<N>`` the host has (its minor is N): MIG
    configuration and monitoring, and every GPU and compute instance's access node."""
    major = majors.get("nvidia-caps")
    if major is None:
        return Edits()
    directory, prefix = "/dev/nvidia-caps", "nvidia-cap"
    minors = sorted(
        int(name[len(prefix) :])
        for name in listdir(_host(dev_root, directory))
        if name.startswith(prefix) and name[len(prefix) :].isdigit()
    )
    return Edits(
        device_nodes=tuple(_node(dev_root, f"{directory}/{prefix}{n}", major, n) for n in minors)
    )


def control_nodes(*, dev_root: str, majors: Mapping[str, int]) -> Edits:
    """``nvidiactl`` and, where the host has them, the UVM and modeset nodes."""
    nodes = [_node(dev_root, "/dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR)]
    uvm = majors.get("nvidia-uvm")
    if uvm is not None:
        nodes.append(_node(dev_root, "/dev/nvidia-uvm", uvm, 0))
        nodes.append(_node(dev_root, "/dev/nvidia-uvm-tools", uvm, 1))
    if os.path.exists(_host(dev_root, "/dev/nvidia-modeset")):
        nodes.append(_node(dev_root, "/dev/nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR))
    return Edits(device_nodes=tuple(nodes))


def imex_nodes(
    channels: Iterable[int] | None, *, dev_root: str, majors: Mapping[str, int]
) -> Edits:
    """IMEX channel nodes: the given channel numbers, or (``None``) every channel the host has."""
    directory = "/dev/nvidia-caps-imex-channels"
    if channels is None:
        channels = sorted(
            int(name[len("channel") :])
            for name in listdir(_host(dev_root, directory))
            if name.startswith("channel") and name[len("channel") :].isdigit()
        )
    wanted = list(dict.fromkeys(channels))
    if not wanted:
        return Edits()
    major = _major(majors, "nvidia-caps-imex-channels", "IMEX channels")
    return Edits(
        device_nodes=tuple(_node(dev_root, f"{directory}/channel{n}", major, n) for n in wanted)
    )


def nvswitch_nodes(*, dev_root: str, majors: Mapping[str, int]) -> Edits:
    """``nvidia-nvswitchctl`` and every ``nvidia-nvswitch<N>`` node the host has."""
    numbers = sorted(
        int(name[len("nvidia-nvswitch") :])
        for name in listdir(_host(dev_root, "/dev"))
        if name.startswith("nvidia-nvswitch") and name[len("nvidia-nvswitch") :].isdigit()
    )
    if not numbers:
        return Edits()
    major = _major(majors, "nvidia-nvswitch", "NVSwitch nodes")
    # nvidia-nvswitchctl has the last minor of the range, like nvidiactl (255)
    nodes = [_node(dev_root, "/dev/nvidia-nvswitchctl", major, 255)]
    nodes += [_node(dev_root, f"/dev/nvidia-nvswitch{n}", major, n) for n in numbers]
    return Edits(device_nodes=tuple(nodes))


#: The host nodes of the optional features (``NVIDIA_GDS``, ``NVIDIA_MOFED``,
#: ``NVIDIA_GDRCOPY``): directory under /dev, and the name prefixes of its nodes.
FEATURE_NODES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gds": ("/dev", ("nvidia-fs",)),
    "gdrcopy": ("/dev", ("gdrdrv",)),
    "mofed": ("/dev/infiniband", ("uverbs", "rdma_cm", "umad", "issm")),
}


def feature_nodes(features: Iterable[str], *, dev_root: str) -> Edits:
    """The character nodes the host has for the enabled features (GDS, MOFED, GDRCopy).

    Their majors are dynamic and not all are in ``/proc/devices`` under a stable name, so
    each node is taken from the host's ``/dev`` as it is (``lstat``). A feature whose nodes
    the host lacks adds nothing: its driver is not loaded there.
    """
    nodes: list[DeviceNode] = []
    for feature in features:
        directory, prefixes = FEATURE_NODES[feature]
        host_dir = _host(dev_root, directory)
        for name in sorted(listdir(host_dir)):
            if not name.startswith(prefixes):
                continue
            try:
                st = os.lstat(os.path.join(host_dir, name))
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode):
                path = f"{directory}/{name}"
                nodes.append(_node(dev_root, path, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return Edits(device_nodes=tuple(nodes))


def with_host_access(edits: Edits) -> Edits:
    """``edits`` with each device node's access as the host has it, for a spec written now
    and applied later (``nvhook cdi generate``), and for jit mode (one ``stat`` a node).

    Every node gets ``fileMode``, the host node's permission bits (what the reference
    library fills in for a node it completes from the host). A node whose owner or group
    may do something that others may not (``nvidia-cap1`` ``0400``, a DRM card ``0660``
    of group ``video``) also gets the host's ``uid`` and ``gid``: without them the node
    would be created for the container's user (CDI gives an owner-less node
    ``process.user``'s uid and gid), which would widen or narrow who may open it. Both
    fields are CDI 0.3.0, so the spec's version does not rise. A node missing on the host
    is left as it is.
    """
    if not edits.device_nodes:
        return edits
    nodes: list[DeviceNode] = []
    for node in edits.device_nodes:
        try:
            st = os.stat(node.host_path or node.path)
        except OSError:
            nodes.append(node)
            continue
        mode = stat.S_IMODE(st.st_mode)
        other = mode & 0o7
        restricted = ((mode >> 6) | (mode >> 3)) & 0o7 & ~other
        nodes.append(
            node._replace(
                file_mode=mode if node.file_mode is None else node.file_mode,
                uid=st.st_uid if restricted and node.uid is None else node.uid,
                gid=st.st_gid if restricted and node.gid is None else node.gid,
            )
        )
    return edits._replace(device_nodes=tuple(nodes))


def node_groups(nodes: Iterable[DeviceNode]) -> set[int]:
    """The groups (not 0) of the driver's nodes among ``nodes`` that only their group may
    open: those :func:`with_host_access` gave a ``gid``. A ``/dev/dri`` node's group alone
    counts for nothing (a DRM card is ``video`` ``0660`` on every host, and a group would
    raise every graphics spec's ``cdiVersion`` past what older consumers read)."""
    return {n.gid for n in nodes if n.gid and not n.path.startswith("/dev/dri/")}


def with_node_groups(edits: Edits) -> Edits:
    """``edits`` with ``additionalGids``: the :func:`node_groups` of its nodes, so that a
    container process of a user other than root (``podman run --user 1000``) may open the
    nodes of a driver loaded with ``NVreg_DeviceFileGID``/``DeviceFileMode`` (``root:video
    0660``), in jit mode and in a generated spec alike (CDI 0.7.0, only then)."""
    gids = node_groups(edits.device_nodes)
    if not gids:
        return edits
    return edits._replace(additional_gids=tuple(sorted(gids.union(edits.additional_gids))))


def dri_nodes(selected: Iterable[Selected], host: HostGpus, *, dev_root: str) -> Edits:
    """The ``/dev/dri`` card and render nodes of the selected GPUs, matched by PCI bus id."""
    nodes = [
        _node(dev_root, f"/dev/dri/{name}", DRM_MAJOR, minor)
        for _, name, minor in _dri_by_path(selected, host, dev_root)
    ]
    return Edits(device_nodes=tuple(dict.fromkeys(nodes)))


def dri_links(
    selected: Iterable[Selected], host: HostGpus, *, dev_root: str
) -> tuple[tuple[str, str], ...]:
    """``(target, link)`` pairs: ``/dev/dri/by-path/pci-<bus id>-card -> ../cardN`` and
    ``-render -> ../renderDN`` for each selected GPU whose host has them.

    The links a DRM client (Xorg's ``BusID``, Vulkan and EGL device selection through
    libdrm) finds a GPU's nodes by; runc creates the nodes, not the links. NVIDIA's toolkit
    adds the same ones for graphics and display (``internal/discover/graphics.go``,
    ``newCreateDRMByPathSymlinks``). The target is always ``../<node>``, whatever form the
    host's link has, so it stays inside the container's ``/dev/dri``.
    """
    pairs = [
        (f"../{name}", f"/dev/dri/by-path/{link}")
        for link, name, _ in _dri_by_path(selected, host, dev_root)
    ]
    return tuple(dict.fromkeys(pairs))


def _dri_by_path(
    selected: Iterable[Selected], host: HostGpus, dev_root: str
) -> list[tuple[str, str, int]]:
    """``(by-path link name, node name, minor)`` of each selected GPU's card and render node."""
    by_path = _host(dev_root, "/dev/dri/by-path")
    found: list[tuple[str, str, int]] = []
    for device in selected:
        gpu = device if isinstance(device, Gpu) else host.gpus[device.gpu_index]
        for kind in ("card", "render"):
            name = f"pci-{gpu.bus_id.lower()}-{kind}"
            link = os.path.join(by_path, name)
            try:
                target = os.readlink(link)
            except OSError:
                continue
            node = os.path.basename(target)
            minor = _dri_minor(node)
            if minor is None:
                raise DriverError(f"{link}: points to {target!r}, not a DRM card or render node")
            found.append((name, node, minor))
    return found


def _dri_minor(name: str) -> int | None:
    for prefix in ("renderD", "card"):
        if name.startswith(prefix) and name[len(prefix) :].isdigit():
            return int(name[len(prefix) :])
    return None
