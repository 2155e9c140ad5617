"""``/dev`` and ``/run`` of a mock machine: the driver's device nodes and daemons' sockets.

GPU and control nodes under major 195, ``nvidia-uvm``, ``nvidia-caps`` (MIG config, monitor,
each GPU and compute instance), IMEX channels and NVSwitches under the dynamic majors the
profile announces in ``proc/devices``, DRM cards and render nodes with their ``dri/by-path``
links; then the sockets of ``nvidia-persistenced`` (and of the fabric manager on NVSwitch
systems) with nobody listening. Nodes are character devices or regular files by the tree's
node mode (:class:`nvhook.mock._tree.Tree`).
"""

from __future__ import annotations

from nvhook.mock._tree import Tree
from nvhook.mock.model import (
    CTL_MINOR,
    DRM_MAJOR,
    MIG_CONFIG_MINOR,
    MIG_MONITOR_MINOR,
    MODESET_MINOR,
    NVIDIA_MAJOR,
    Profile,
)

__all__ = ["VIDEO_GID", "write_dev", "write_run"]

#: The group of DRM card nodes (``video`` on Debian): ``crw-rw---- root video``, as udev
#: makes them; given where the mock is laid out as root.
VIDEO_GID = 44


def write_dev(tree: Tree, prof: Profile, *, gid: int = 0, mode: int = 0o666) -> None:
    """``dev/``: DRM cards of other vendors always, the driver's nodes when it is loaded.

    ``gid`` and ``mode`` are the driver's ``DeviceFileGID`` and ``DeviceFileMode``
    (``NVreg_DeviceFileGID=44 NVreg_DeviceFileMode=0660`` restricts the GPUs to group
    ``video``): the GPU, control, modeset and UVM nodes get them."""
    tree.mkdir("dev")
    for card in prof.dri_cards:
        tree.node(f"dev/dri/card{card.card}", DRM_MAJOR, card.card, 0o660, gid=VIDEO_GID)
        tree.symlink(f"dev/dri/by-path/pci-{card.bus_id}-card", f"../card{card.card}")
    if not prof.driver.loaded:
        return
    majors = dict(prof.char_majors)
    group = gid or None
    for g in prof.gpus:
        tree.node(f"dev/nvidia{g.minor}", NVIDIA_MAJOR, g.minor, mode, gid=group)
    tree.node("dev/nvidiactl", NVIDIA_MAJOR, CTL_MINOR, mode, gid=group)
    tree.node("dev/nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR, mode, gid=group)
    tree.node("dev/nvidia-uvm", majors["nvidia-uvm"], 0, mode, gid=group)
    tree.node("dev/nvidia-uvm-tools", majors["nvidia-uvm"], 1, mode, gid=group)
    caps = majors["nvidia-caps"]
    tree.node(f"dev/nvidia-caps/nvidia-cap{MIG_CONFIG_MINOR}", caps, MIG_CONFIG_MINOR, 0o400)
    tree.node(f"dev/nvidia-caps/nvidia-cap{MIG_MONITOR_MINOR}", caps, MIG_MONITOR_MINOR, 0o444)
    for g in prof.gpus:
        for m in g.mig_devices:
            for minor in (m.gi_caps_minor, m.ci_caps_minor):
                if not tree.path(f"dev/nvidia-caps/nvidia-cap{minor}").exists():
                    tree.node(f"dev/nvidia-caps/nvidia-cap{minor}", caps, minor, 0o444)
    for ch in range(prof.imex_channels):
        major = majors["nvidia-caps-imex-channels"]
        tree.node(f"dev/nvidia-caps-imex-channels/channel{ch}", major, ch)
    if prof.nvswitches:
        tree.node("dev/nvidia-nvswitchctl", majors["nvidia-nvswitch"], CTL_MINOR)
        for i in range(prof.nvswitches):
            tree.node(f"dev/nvidia-nvswitch{i}", majors["nvidia-nvswitch"], i)
    for g in prof.gpus:
        if g.dri_card is not None:
            tree.node(f"dev/dri/card{g.dri_card}", DRM_MAJOR, g.dri_card, 0o660, gid=VIDEO_GID)
            tree.symlink(f"dev/dri/by-path/pci-{g.bus_id}-card", f"../card{g.dri_card}")
        if g.dri_render is not None:
            tree.node(f"dev/dri/renderD{g.dri_render}", DRM_MAJOR, g.dri_render, 0o666)
            tree.symlink(f"dev/dri/by-path/pci-{g.bus_id}-render", f"../renderD{g.dri_render}")


def write_run(tree: Tree, prof: Profile) -> None:
    """``run/``: the driver daemons' sockets (none when the driver is not loaded)."""
    if not prof.driver.loaded:
        return
    tree.unix_socket("run/nvidia-persistenced/socket")
    if prof.nvswitches:
        tree.unix_socket("run/nvidia-fabricmanager/socket")
