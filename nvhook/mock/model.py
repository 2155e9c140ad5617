"""What a mock machine is made of, as frozen values (read from files by :mod:`.profiles`).

A :class:`Profile` is one fake host: its :class:`Driver`, its :class:`Gpu` list in NVML index
order (a GPU's NVML index is its position in PCI bus-id order, as with the real NVML; device
minors are the driver's own numbering and need not follow it), its NVSwitches, IMEX channels
and DRM cards, and the topology NVML reports: NUMA nodes with their CPUs, which GPUs share a
PCIe switch, NVLinks (:meth:`Profile.topology_level`). A :class:`GpuModel` holds what every GPU
of one product shares, MIG profiles (with their placements) included; a MIG-mode GPU lists its
GPU instances and their compute instances, and :attr:`Gpu.mig_devices` enumerates them as
NVML does. :class:`DriverFiles` is the driver's file list (``driver.toml``).

The numbers the driver gives its devices are here too: major 195 for GPUs and the control
nodes, DRM's 226, and the ``nvidia-caps`` minors of MIG capabilities (:func:`mig_caps_minor`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from oci._frozen import Frozen

__all__ = [
    "ARCHITECTURES",
    "BRANDS",
    "CTL_MINOR",
    "DRM_MAJOR",
    "GI_PROFILE_INDEX",
    "MAX_CI_ID",
    "MAX_GI_ID",
    "MAX_GPU_MINOR",
    "MAX_MIG_MINOR_GPU",
    "MEMORY_SLICES",
    "MIG_CONFIG_MINOR",
    "MIG_MONITOR_MINOR",
    "MOCK_ARCHES",
    "MODESET_MINOR",
    "NVIDIA_MAJOR",
    "SLICES",
    "TOPOLOGY_LEVELS",
    "Binary",
    "ComputeInstance",
    "DriCard",
    "Driver",
    "DriverFiles",
    "Gpu",
    "GpuInstance",
    "GpuModel",
    "Library",
    "MigDevice",
    "MigProfile",
    "NumaNode",
    "NvLink",
    "Process",
    "Profile",
    "mig_caps_minor",
    "parse_bus_id",
]

#: NVML's ``nvmlDeviceArchitecture_t`` values by name.
ARCHITECTURES: Mapping[str, int] = {
    "kepler": 2,
    "maxwell": 3,
    "pascal": 4,
    "volta": 5,
    "turing": 6,
    "ampere": 7,
    "ada": 8,
    "hopper": 9,
    "blackwell": 10,
}

#: The architectures a profile may declare (``host.arch``).
MOCK_ARCHES: tuple[str, ...] = ("aarch64", "x86_64")

#: NVML's ``nvmlBrandType_t`` values by name.
BRANDS: Mapping[str, int] = {
    "unknown": 0,
    "quadro": 1,
    "tesla": 2,
    "nvs": 3,
    "grid": 4,
    "geforce": 5,
    "titan": 6,
    "nvidia_rtx": 13,
    "nvidia": 14,
}

#: NVML's ``nvmlGpuTopologyLevel_t`` values by name.
TOPOLOGY_LEVELS: Mapping[str, int] = {
    "internal": 0,
    "single": 10,
    "multiple": 20,
    "hostbridge": 30,
    "node": 40,
    "system": 50,
}

#: NVML's ``NVML_GPU_INSTANCE_PROFILE_<n>_SLICE`` (and compute-instance) values by slice count.
GI_PROFILE_INDEX: Mapping[int, int] = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}

MAX_GI_ID = 14  # GPU-instance ids are 0-14
MAX_CI_ID = 7  # compute-instance ids are 0-7
MAX_MIG_MINOR_GPU = 31  # /proc/driver/nvidia-caps/mig-minors covers gpu0..gpu31
SLICES = 7  # the slices a MIG-capable GPU divides into
MEMORY_SLICES = 8  # the memory slices GPU-instance placements are counted in
MAX_GPU_MINOR = 253  # 254 is nvidia-modeset, 255 nvidiactl

NVIDIA_MAJOR = 195  # GPUs, nvidiactl, nvidia-modeset
DRM_MAJOR = 226  # /dev/dri/card<n>, /dev/dri/renderD<n>
CTL_MINOR = 255  # nvidiactl (and nvidia-nvswitchctl under its own major)
MODESET_MINOR = 254
MIG_CONFIG_MINOR = 1  # nvidia-caps: /proc/driver/nvidia/capabilities/mig/config
MIG_MONITOR_MINOR = 2  # … and mig/monitor


class MigProfile(Frozen):
    """A GPU-instance profile of a GPU model (``nvidia-smi mig -lgip``)."""

    name: str  # "3g.40gb"
    id: int  # NVML's profile id (9 for 3g.40gb on an A100)
    slices: int
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int
    placement_size: int  # memory slices one instance spans (a 3g.40gb on an A100 spans 4)
    placements: tuple[int, ...]  # the memory slices an instance can start at

    @property
    def nvml_index(self) -> int | None:
        """NVML's ``NVML_GPU_INSTANCE_PROFILE_<n>_SLICE`` value of this profile (by slices)."""
        return GI_PROFILE_INDEX.get(self.slices)


class GpuModel(Frozen):
    """What every GPU of one product has in common."""

    name: str  # "NVIDIA A100-SXM4-80GB", as NVML and /proc report it
    architecture: str  # a key of ARCHITECTURES
    compute_capability: str  # "8.0"
    memory_mib: int
    reserved_mib: int
    brand: str  # a key of BRANDS
    pci_device_id: int  # the device part; NVML's pciDeviceId is (this << 16) | 0x10de
    pci_subsystem_id: int
    vbios: str
    multiprocessors: int
    max_mig_devices: int  # 0: not MIG capable
    mig_profiles: tuple[MigProfile, ...]
    idle_temperature_c: int  # what NVML's GPU sensor reads with nothing running
    idle_power_w: int
    power_limit_w: int
    cuda_cores: int = 0  # nvmlDeviceGetNumGpuCores (the datasheet's FP32 cores); 0: unknown

    @property
    def mig_capable(self) -> bool:
        return self.max_mig_devices > 0

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)


class ComputeInstance(Frozen):
    """A compute instance inside a GPU instance: one MIG device, with its own UUID."""

    id: int
    uuid: str  # "MIG-…"


class GpuInstance(Frozen):
    id: int
    profile: MigProfile
    compute_instances: tuple[ComputeInstance, ...]
    placement: int  # the memory slice it starts at, one of profile.placements


class Process(Frozen):
    """A process using a GPU (``nvidia-smi``'s process table)."""

    pid: int
    name: str
    used_mib: int


class MigDevice(Frozen):
    """A MIG device (GPU instance + compute instance) in NVML's enumeration order."""

    index: int  # nvmlDeviceGetMigDeviceHandleByIndex index under the parent
    uuid: str
    gi: int
    ci: int
    profile: MigProfile
    gi_caps_minor: int  # /dev/nvidia-caps/nvidia-cap<n> of the GPU instance
    ci_caps_minor: int  # … and of the compute instance


class Gpu(Frozen):
    index: int  # NVML index: position in PCI bus-id order
    model: GpuModel
    uuid: str
    bus_id: str  # "0000:07:00.0": domain:bus:device.function, lowercase, as /proc writes it
    minor: int  # /dev/nvidia<minor>
    irq: int
    mig_enabled: bool
    gpu_instances: tuple[GpuInstance, ...]
    dri_card: int | None  # /dev/dri/card<n>
    dri_render: int | None  # /dev/dri/renderD<n>
    numa_node: int | None = None  # the NUMA node whose CPUs are closest (None: not declared)
    pcie_switch: int | None = None  # GPUs with the same number sit behind one PCIe switch
    processes: tuple[Process, ...] = ()
    utilization: int = 0  # percent of time a kernel ran (NVML's utilization.gpu)
    memory_utilization: int = 0  # percent of time memory was read or written

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def memory_bytes(self) -> int:
        return self.model.memory_mib * 1024 * 1024

    @property
    def mig_devices(self) -> tuple[MigDevice, ...]:
        """MIG devices in NVML order (GPU instance id, then compute instance id)."""
        out: list[MigDevice] = []
        for gi in sorted(self.gpu_instances, key=lambda g: g.id):
            for ci in sorted(gi.compute_instances, key=lambda c: c.id):
                gi_minor = mig_caps_minor(self.minor, gi.id)
                out.append(
                    MigDevice(
                        index=len(out),
                        uuid=ci.uuid,
                        gi=gi.id,
                        ci=ci.id,
                        profile=gi.profile,
                        gi_caps_minor=gi_minor,
                        ci_caps_minor=gi_minor + 1 + ci.id,
                    )
                )
        return tuple(out)


def mig_caps_minor(gpu_minor: int, gi: int, ci: int | None = None) -> int:
    """The nvidia-caps minor of a GPU instance (or of one of its compute instances).

    The driver numbers every possible MIG capability in advance (``mig-minors``): ``config`` 1,
    ``monitor`` 2, then per GPU minor 15 GPU-instance ids with 8 compute-instance ids each.
    """
    n = 3 + gpu_minor * (MAX_GI_ID + 1) * (MAX_CI_ID + 2) + gi * (MAX_CI_ID + 2)
    return n if ci is None else n + 1 + ci


class DriCard(Frozen):
    """A DRM card that is not an NVIDIA GPU (a BMC's VGA, say): it takes a card number too."""

    bus_id: str
    card: int
    driver: str


class NumaNode(Frozen):
    """A NUMA node of the host's CPUs."""

    id: int
    socket: int
    cpus: tuple[int, ...]  # logical CPU numbers, sorted


class NvLink(Frozen):
    """A GPU's NVLinks, all to the host's NVSwitches (link ``l`` to switch ``l * n // links``)."""

    links: int  # per GPU: 12 on an A100
    version: int  # NVML's nvmlNvlinkVersion_t: 4 is NVLink 3.0 (A100)
    switch_pci_device_id: int  # the NVSwitches' PCI device id (0x1af1)
    switch_bus_ids: tuple[str, ...]  # one per NVSwitch, "0000:c4:00.0"


class Driver(Frozen):
    version: str  # "550.54.15"
    cuda: str  # "12.4"
    kernel_module: Literal["proprietary", "open"]
    build: str  # what follows the version on /proc/driver/nvidia/version's first line
    gcc: str
    loaded: bool  # the kernel module is loaded (False: no /proc/driver/nvidia, no nodes)
    firmware: tuple[str, ...]  # GSP firmware file names
    vulkan_api: str
    egl_platforms: tuple[tuple[str, str], ...]  # (platform, library version), sorted
    frontend: str  # the /proc/devices name of major 195

    @property
    def branch(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def cuda_version_int(self) -> int:
        """CUDA version as the driver API reports it: 12.4 → 12040."""
        major, minor = self.cuda.split(".")
        return int(major) * 1000 + int(minor) * 10

    @property
    def nvml_version(self) -> str:
        return f"{self.cuda.split('.')[0]}.{self.version}"


class Profile(Frozen):
    name: str
    description: str
    source: str  # the file it was read from
    driver: Driver
    char_majors: tuple[tuple[str, int], ...]  # dynamic majors announced in /proc/devices
    gpus: tuple[Gpu, ...]  # in NVML index order
    nvswitches: int
    imex_channels: int
    graphics_config: bool  # Vulkan/EGL vendor files, X config snippet
    display: bool  # the Xorg driver module
    dri_cards: tuple[DriCard, ...]  # DRM cards of other vendors
    numa_nodes: tuple[NumaNode, ...] = ()
    switch_level: str = "single"  # a key of TOPOLOGY_LEVELS: two GPUs behind one PCIe switch
    nvlink: NvLink | None = None  # None: the GPUs have no NVLink
    #: The driver's architecture (``x86_64``, ``aarch64``): its library directory, ELF machine
    #: and ld.so.cache flags. None: whatever this machine compiles, at Debian's x86-64 paths.
    arch: str | None = None

    def topology_level(self, a: Gpu, b: Gpu) -> int:
        """NVML's ``nvmlGpuTopologyLevel_t`` between two GPUs (their common PCIe ancestor).

        The same GPU is internal; behind one PCIe switch :attr:`switch_level`; on one NUMA
        node (or on a host that declares none) separate host bridges, ``NODE``; else the
        path crosses the CPUs' interconnect, ``SYSTEM``. NVLink does not change it, as in
        NVML (``nvidia-smi topo -m`` shows NVLink separately).
        """
        if a.index == b.index:
            return TOPOLOGY_LEVELS["internal"]
        if a.pcie_switch is not None and a.pcie_switch == b.pcie_switch:
            return TOPOLOGY_LEVELS[self.switch_level]
        if a.numa_node == b.numa_node:
            return TOPOLOGY_LEVELS["node"]
        return TOPOLOGY_LEVELS["system"]

    def numa_node(self, node_id: int | None) -> NumaNode | None:
        return next((n for n in self.numa_nodes if n.id == node_id), None)

    def major(self, name: str) -> int | None:
        """The major announced for a ``/proc/devices`` name (195 for the frontend)."""
        if name == self.driver.frontend and self.driver.loaded:
            return NVIDIA_MAJOR
        return dict(self.char_majors).get(name)

    def gpu_by_minor(self, minor: int) -> Gpu | None:
        return next((g for g in self.gpus if g.minor == minor), None)


class Library(Frozen):
    stem: str
    capability: str
    soname: str  # may contain "{version}"
    compat32: bool
    subdir: str
    since: int | None
    until: int | None
    platform: str | None


class Binary(Frozen):
    name: str
    capability: str
    when: str | None  # "nvswitch" | "imex" | None (always)


class DriverFiles(Frozen):
    libraries: tuple[Library, ...]
    binaries: tuple[Binary, ...]


def parse_bus_id(bus_id: str) -> tuple[int, int, int, int]:
    """``"0000:07:00.0"`` (or NVML's ``"00000000:07:00.0"``) → (domain, bus, device, function)."""
    try:
        domain, bus, devfn = bus_id.split(":")
        device, function = devfn.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        raise ValueError(f"not a PCI bus id (domain:bus:device.function): {bus_id!r}") from None
