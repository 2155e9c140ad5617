"""The device plugin's values: its validated configuration and what it advertises.

:class:`PluginConfig` is what :mod:`nvhook.deviceplugin.config` makes of the YAML file
(the pydantic models stay there); :class:`Resource` and :class:`Device` are what
:func:`nvhook.deviceplugin.resources.build_resources` makes of the host's GPUs.
"""

from __future__ import annotations

from oci._frozen import Frozen

__all__ = [
    "DEVICE_LIST_STRATEGIES",
    "MIG_STRATEGIES",
    "Device",
    "PluginConfig",
    "Resource",
    "TimeSlicedResource",
]

#: ``flags.migStrategy`` values, as NVIDIA's device plugin names them.
MIG_STRATEGIES = ("none", "single", "mixed")
#: ``flags.plugin.deviceListStrategy`` values: how ``Allocate`` names the devices.
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")


class TimeSlicedResource(Frozen):
    """``sharing.timeSlicing.resources[]``: ``name`` advertised ``replicas`` times per device,
    as ``rename`` when given (a full resource name)."""

    name: str
    replicas: int
    rename: str = ""


class PluginConfig(Frozen):
    """The device plugin's configuration (the YAML file's meaning, validated)."""

    mig_strategy: str = "none"
    device_list_strategies: tuple[str, ...] = ("envvar",)
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    cdi_kind: str = "nvidia.com/gpu"  # the kind `nvhook cdi generate` writes
    time_slicing: tuple[TimeSlicedResource, ...] = ()
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False

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
