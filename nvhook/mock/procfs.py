"""``/proc`` of a mock machine, as the NVIDIA driver and a Debian kernel write it.

``proc/devices`` (the host's own devices plus the driver's majors), and when the driver is
loaded ``driver/nvidia/{version,params}``, ``driver/nvidia/gpus/<bus>/information`` per GPU,
``driver/nvidia/capabilities/…/access`` for the MIG capabilities and
``driver/nvidia-caps/mig-minors``, the driver's table of every MIG capability's minor.
"""

from __future__ import annotations

import functools

from nvhook.mock._tree import Tree
from nvhook.mock.model import (
    DRM_MAJOR,
    MAX_CI_ID,
    MAX_GI_ID,
    MAX_MIG_MINOR_GPU,
    MIG_CONFIG_MINOR,
    MIG_MONITOR_MINOR,
    NVIDIA_MAJOR,
    Profile,
    mig_caps_minor,
)

__all__ = ["write_proc"]

# What a Debian host announces besides the NVIDIA driver (none in the dynamic ranges 234-254
# and 384-511 that the profiles use).
_BASE_CHAR_DEVICES = (
    (1, "mem"),
    (4, "/dev/vc/0"),
    (4, "tty"),
    (4, "ttyS"),
    (5, "/dev/tty"),
    (5, "/dev/console"),
    (5, "/dev/ptmx"),
    (7, "vcs"),
    (10, "misc"),
    (13, "input"),
    (21, "sg"),
    (29, "fb"),
    (128, "ptm"),
    (136, "pts"),
    (180, "usb"),
    (189, "usb_device"),
)
_BLOCK_DEVICES = (
    (7, "loop"),
    (8, "sd"),
    (9, "md"),
    (65, "sd"),
    (253, "device-mapper"),
    (259, "blkext"),
)


def _proc_devices(prof: Profile) -> str:
    chars = list(_BASE_CHAR_DEVICES)
    if prof.driver.loaded:
        chars.append((NVIDIA_MAJOR, prof.driver.frontend))
        chars += [(major, name) for name, major in prof.char_majors]
    if any(g.dri_card is not None for g in prof.gpus) or prof.dri_cards:
        chars.append((DRM_MAJOR, "drm"))
    lines = ["Character devices:"]
    lines += [f"{major:3d} {name}" for major, name in sorted(chars, key=lambda mn: mn[0])]
    lines += ["", "Block devices:"]
    lines += [f"{major:3d} {name}" for major, name in _BLOCK_DEVICES]
    return "\n".join(lines) + "\n"


def _version_file(prof: Profile) -> str:
    d = prof.driver
    if d.kernel_module == "open":
        first = f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {d.version}  {d.build}"
    else:
        first = f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {d.version}  {d.build}"
    return f"{first}\nGCC version:  {d.gcc} \n"


def _params_file(prof: Profile, gid: int = 0, mode: int = 0o666) -> str:
    params: list[tuple[str, str]] = [
        ("ResmanDebugLevel", "4294967295"),
        ("RmLogonRC", "1"),
        ("ModifyDeviceFiles", "1"),
        ("DeviceFileUID", "0"),
        ("DeviceFileGID", str(gid)),
        ("DeviceFileMode", str(mode)),
        ("InitializeSystemMemoryAllocations", "1"),
        ("UsePageAttributeTable", "4294967295"),
        ("EnableMSI", "1"),
        ("EnablePCIeGen3", "0"),
        ("MemoryPoolSize", "0"),
        ("KMallocHeapMaxSize", "0"),
        ("VMallocHeapMaxSize", "0"),
        ("IgnoreMMIOCheck", "0"),
        ("TCEBypassMode", "0"),
        ("EnableStreamMemOPs", "0"),
        ("EnableUserNUMAManagement", "1"),
        ("NvLinkDisable", "0"),
        ("RmProfilingAdminOnly", "1"),
        ("PreserveVideoMemoryAllocations", "0"),
        ("EnableS0ixPowerManagement", "0"),
        ("S0ixPowerManagementVideoMemoryThreshold", "256"),
        ("DynamicPowerManagement", "3"),
        ("DynamicPowerManagementVideoMemoryThreshold", "200"),
        ("RegisterPCIDriver", "1"),
        ("EnablePCIERelaxedOrderingMode", "0"),
        ("EnableResizableBar", "0"),
        ("EnableGpuFirmware", "18"),
        ("EnableGpuFirmwareLogs", "2"),
        ("RmNvlinkBandwidthLinkCount", "0"),
        ("EnableDbgBreakpoint", "0"),
        ("OpenRmEnableUnsupportedGpus", "1"),
        ("DmaRemapPeerMmio", "1"),
    ]
    if prof.driver.branch >= 550:
        params += [("ImexChannelCount", "2048"), ("CreateImexChannel0", "0")]
    params += [
        ("RegistryDwords", '""'),
        ("RegistryDwordsPerDevice", '""'),
        ("RmMsg", '""'),
        ("GpuBlacklist", '""'),
        ("TemporaryFilePath", '""'),
        ("ExcludedGpus", '""'),
    ]
    return "".join(f"{k}: {v}\n" for k, v in params)


def _information_file(prof: Profile, index: int) -> str:
    g = prof.gpus[index]
    wide_dma = g.model.architecture in ("hopper", "blackwell")
    lines = [
        f"Model: \t\t {g.name}",
        f"IRQ:   \t\t {g.irq}",
        f"GPU UUID: \t {g.uuid}",
        f"Video BIOS: \t {g.model.vbios}",
        "Bus Type: \t PCIe",
        f"DMA Size: \t {52 if wide_dma else 47} bits",
        f"DMA Mask: \t {'0xfffffffffffff' if wide_dma else '0x7fffffffffff'}",
        f"Bus Location: \t {g.bus_id}",
        f"Device Minor: \t {g.minor}",
    ]
    if prof.driver.firmware:
        lines.append(f"GPU Firmware: \t {prof.driver.version}")
    lines.append("GPU Excluded:\t No")
    return "\n".join(lines) + "\n"


def _access_file(minor: int, mode: int = 0o444) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


@functools.cache
def _mig_minors() -> str:
    """Every possible MIG capability and its minor, for GPU minors 0-31 (the driver's table)."""
    lines = [f"config {MIG_CONFIG_MINOR}", f"monitor {MIG_MONITOR_MINOR}"]
    for gpu in range(MAX_MIG_MINOR_GPU + 1):
        for gi in range(MAX_GI_ID + 1):
            lines.append(f"gpu{gpu}/gi{gi}/access {mig_caps_minor(gpu, gi)}")
            lines += [
                f"gpu{gpu}/gi{gi}/ci{ci}/access {mig_caps_minor(gpu, gi, ci)}"
                for ci in range(MAX_CI_ID + 1)
            ]
    return "\n".join(lines) + "\n"


def write_proc(tree: Tree, prof: Profile, *, gid: int = 0, mode: int = 0o666) -> None:
    """``proc/devices`` always; the driver's own files only when it is loaded (``params``
    with ``DeviceFileGID`` ``gid`` and ``DeviceFileMode`` ``mode``, as
    :func:`nvhook.mock.devnodes.write_dev` makes the nodes)."""
    tree.write("proc/devices", _proc_devices(prof), 0o444)
    if not prof.driver.loaded:
        return
    nv = "proc/driver/nvidia"
    tree.write(f"{nv}/version", _version_file(prof), 0o444)
    tree.write(f"{nv}/params", _params_file(prof, gid, mode), 0o444)
    tree.mkdir(f"{nv}/gpus")
    for i, g in enumerate(prof.gpus):
        tree.write(f"{nv}/gpus/{g.bus_id}/information", _information_file(prof, i), 0o444)
    caps = f"{nv}/capabilities"
    tree.write(f"{caps}/mig/config", _access_file(MIG_CONFIG_MINOR, 0o400), 0o444)
    tree.write(f"{caps}/mig/monitor", _access_file(MIG_MONITOR_MINOR), 0o444)
    for g in prof.gpus:
        if not g.mig_enabled:
            continue
        tree.mkdir(f"{caps}/gpu{g.minor}/mig")
        for m in g.mig_devices:
            gi = f"{caps}/gpu{g.minor}/mig/gi{m.gi}"
            tree.write(f"{gi}/access", _access_file(m.gi_caps_minor), 0o444)
            tree.write(f"{gi}/ci{m.ci}/access", _access_file(m.ci_caps_minor), 0o444)
    tree.write("proc/driver/nvidia-caps/mig-minors", _mig_minors(), 0o444)
