"""The device plugin's values: its validated configuration and what it advertises.

:class:`PluginConfig` is what :mod:`nvhook.deviceplugin.config` makes of the YAML file
(the pydantic models stay there); :class:`Resource` and :class:`Device` are what
:func:`nvhook.deviceplugin.resources.build_resources` makes of the host's GPUs.
"""

from __future__ import annotations

from nvhook.deviceplugin.xid import XidPolicy
from oci._frozen import Frozen

__all__ = [
    "DEVICE_ID_STRATEGIES",
    "DEVICE_LIST_STRATEGIES",
    "MIG_STRATEGIES",
    "Device",
    "NamedResource",
    "PluginConfig",
    "Resource",
    "TimeSlicedResource",
    "is_dns_subdomain",
]


def is_dns_subdomain(name: str) -> bool:
    """Kubernetes' DNS subdomain (RFC 1123): a node's name, a resource name's part after its
    prefix (``validation.IsDNS1123Subdomain``)."""
    import re

    pattern = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    return len(name) <= 253 and re.fullmatch(pattern, name) is not None


#: ``flags.migStrategy`` values, as NVIDIA's device plugin names them.
MIG_STRATEGIES = ("none", "single", "mixed")
#: ``flags.plugin.deviceListStrategy`` values: how ``Allocate`` names the devices.
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
#: ``flags.plugin.deviceIDStrategy`` values: how ``Allocate`` names a device to the container.
DEVICE_ID_STRATEGIES = ("uuid", "index")


class NamedResource(Frozen):
    """``resources.gpus[]`` / ``resources.mig[]``: devices whose GPU name (``NVIDIA A100-SXM4-
    80GB``) or MIG profile (``1g.10gb``) matches ``pattern`` (``*`` any characters) are
    advertised as ``name`` (a full resource name, ``nvidia.com/a100``)."""

    pattern: str
    name: str

    def matches(self, value: str) -> bool:
        """The pattern's meaning in NVIDIA's plugin: the whole value, ``*`` any run."""
        import re

        parts = (re.escape(p) for p in self.pattern.split("*"))
        return re.fullmatch(".*".join(parts), value, re.DOTALL) is not None


class TimeSlicedResource(Frozen):
    """``sharing.timeSlicing.resources[]``: ``name`` advertised ``replicas`` times per device,
    as ``rename`` when given (a full resource name)."""

    name: str
    replicas: int
    rename: str = ""
    #: which devices of ``name`` are replicated: every one (``None``), the first ``count``
    #: (NVML order), or those listed by GPU index (``0``), MIG index (``0:1``) or UUID
    count: int = 0
    devices: tuple[str, ...] | None = None


class PluginConfig(Frozen):
    """The device plugin's configuration (the YAML file's meaning, validated)."""

    mig_strategy: str = "none"
    device_list_strategies: tuple[str, ...] = ("envvar",)
    device_id_strategy: str = "uuid"
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    cdi_kind: str = "nvidia.com/gpu"  # the kind `nvhook cdi generate` writes
    #: the replicated resources: ``sharing.timeSlicing``'s, or ``sharing.mps``'s under "mps"
    time_slicing: tuple[TimeSlicedResource, ...] = ()
    sharing_strategy: str = "time-slicing"  # "time-slicing" | "mps"
    mps_root: str = ""  # flags.mpsRoot: where the MPS daemons' pipe and log directories go
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    #: no GPU or no driver at start: False serves nothing and stays up (NVIDIA's ``false``)
    fail_on_init_error: bool = True
    #: ``Allocate`` also lists the device nodes (kubelet's ``DeviceSpec``), host paths under
    #: ``dev_root`` (``flags.nvidiaDevRoot``, else ``flags.nvidiaDriverRoot``, else ``/``)
    pass_device_specs: bool = False
    dev_root: str = "/"
    gpu_resources: tuple[NamedResource, ...] = ()  # before the default ``*`` → nvidia.com/gpu
    mig_resources: tuple[NamedResource, ...] = ()  # before the strategy's defaults
    #: ``NVIDIA_GDRCOPY`` / ``NVIDIA_GDS`` / ``NVIDIA_MOFED`` ``=enabled`` in every allocation
    features: tuple[str, ...] = ()
    imex_channel_ids: tuple[int, ...] = ()
    imex_required: bool = False
    gfd_output_file: str = ""  # flags.gfd.outputFile: nvhook labels' default --output
    health: XidPolicy = XidPolicy()  # the ``health`` section (nvhook's own)
    #: AMD partitions: ROCm's ``-resource_naming_strategy`` (``single`` | ``mixed``)
    amd_resource_naming: str = "single"
    #: one line per key accepted without effect here, naming it and why (the CLI logs them)
    notes: tuple[str, ...] = ()

    def time_sliced(self, resource: str) -> TimeSlicedResource | None:
        return next((t for t in self.time_slicing if t.name == resource), None)


class Device(Frozen):
    """One device ID kubelet sees, and the GPU or MIG device behind it."""

    id: str  # the UUID, or "<uuid>::<n>" for replica n under time-slicing
    uuid: str  # the GPU's or MIG device's UUID: what the container is given
    gpu_uuid: str  # the physical GPU (health and topology are per GPU)
    gpu_index: int  # its NVML index
    numa_node: int | None = None
    replica: int | None = None
    index: str = ""  # "0", or "0:1" for MIG device 1 of GPU 0: deviceIDStrategy index's name
    mig: int | None = None  # the MIG device's index under its GPU
    memory_bytes: int = 0  # the device's memory (MPS: each replica's pinned-memory share)

    def replica_of(self, device_id: str, n: int) -> Device:
        """Replica ``n`` of this device, as ``device_id``."""
        return Device(
            device_id,
            self.uuid,
            self.gpu_uuid,
            self.gpu_index,
            numa_node=self.numa_node,
            replica=n,
            index=self.index,
            mig=self.mig,
            memory_bytes=self.memory_bytes,
        )


class Resource(Frozen):
    """One resource (``nvidia.com/gpu``, ``nvidia.com/mig-3g.40gb``…) and its devices."""

    name: str
    devices: tuple[Device, ...]
    replicas: int = 1  # > 1: time-sliced

    def device(self, device_id: str) -> Device | None:
        return next((d for d in self.devices if d.id == device_id), None)

    @property
    def socket_name(self) -> str:
        """Its socket's file name in the device-plugin directory."""
        return "nvhook-" + self.name.replace("/", "_") + ".sock"
