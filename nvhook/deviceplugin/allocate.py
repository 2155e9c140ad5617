"""``Allocate``: what a container gets for the device IDs kubelet chose, per strategy.

:func:`allocate` answers one container's request as a :class:`ContainerAllocation` value
(the gRPC layer copies it into a ``ContainerAllocateResponse``). The devices are named as
``nvhook cdi generate`` names them: a GPU or MIG device by its UUID, a replica ``<uuid>::<n>``
by its device's UUID (replicas of one device given together name it once). Each strategy of
``deviceListStrategy`` adds its part:

- ``envvar``: ``NVIDIA_VISIBLE_DEVICES=<uuid>,…`` (nvhook-runtime reads it when
  ``policy.accept_env_unprivileged`` is true);
- ``volume-mounts``: a read-only mount of ``/dev/null`` at
  ``/var/run/nvidia-container-devices/<uuid>`` per device (read when
  ``policy.accept_volume_mounts`` is true; an image cannot forge mounts);
- ``cdi-annotations``: ``<prefix>nvhook-device-plugin_<id>`` = ``nvidia.com/gpu=<uuid>,…``
  (read by nvhook-runtime under ``cdi.annotation_prefixes``, resolved through the spec
  ``nvhook cdi generate`` wrote; containerd 1.6 must pass the annotation on:
  ``container_annotations = ["cdi.k8s.io/*"]`` on the runtime);
- ``cdi-cri``: the same names as CRI ``CDIDevices`` (containerd >= 1.7, CRI-O >= 1.28).

With ``deviceIDStrategy: index`` the container is told NVML indices instead of UUIDs
(``0``, ``0:1`` for MIG device 1 of GPU 0: the names ``nvhook cdi generate`` gives by index);
kubelet's device IDs stay UUIDs. ``imex.channelIDs: [0]`` adds channel 0 (found on the host)
to every allocation: ``NVIDIA_IMEX_CHANNELS=0``, a ``volume-mounts`` entry ``imex/0``,
``nvidia.com/imex-channel=0`` (the kind ``nvhook cdi generate --kind imex-channel`` writes).
``gdrcopyEnabled``/``gdsEnabled``/``mofedEnabled`` set ``NVIDIA_GDRCOPY``/``NVIDIA_GDS``/
``NVIDIA_MOFED`` to ``enabled``. ``passDeviceSpecs`` lists the device nodes (kubelet's
``DeviceSpec``: ``/dev/nvidia<minor>``, and a MIG device's ``nvidia-caps`` access nodes,
host paths under ``flags.nvidiaDevRoot``), as NVIDIA's ``apiDeviceSpecs`` does; the nodes
come from ``nodes`` (device UUID → its paths), which the plugin reads at start.

Under ``sharing.mps`` a container's replicas must be of one GPU; it gets that GPU's MPS
control daemon's pipe directory and ``/dev/shm``, and its limits
(:func:`nvhook.deviceplugin.mps.container_share`).

Without ``envvar``, ``NVIDIA_VISIBLE_DEVICES=void`` is set so an image's own ``=all`` never
counts. An ID that is not one of the resource's, or whose GPU is unhealthy, is refused
(:class:`AllocationError` naming it); so is more than one replica of a time-sliced resource
with ``failRequestsGreaterThanOne``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence

from nvhook.constants import (
    DEVICE_LIST_MOUNT_ROOT,
    DEVICE_LIST_MOUNT_SOURCE,
    ENV_IMEX_CHANNELS,
    ENV_VISIBLE_DEVICES,
)
from nvhook.deviceplugin.errors import AllocationError
from nvhook.deviceplugin.model import Device, PluginConfig, Resource
from nvhook.deviceplugin.mps import container_share
from oci._frozen import Frozen

__all__ = [
    "ANNOTATION_NAME",
    "IMEX_CHANNEL_DIR",
    "ContainerAllocation",
    "DeviceSpec",
    "Mount",
    "allocate",
    "devices_for",
]

#: where the IMEX channels' device nodes are
IMEX_CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"

#: the CDI kind of IMEX channels (``nvhook cdi generate --kind imex-channel``)
IMEX_CDI_KIND = "nvidia.com/imex-channel"
#: The annotation name before ``_<id>``, after the configured prefix.
ANNOTATION_NAME = "nvhook-device-plugin"


class Mount(Frozen):
    container_path: str
    host_path: str
    read_only: bool = True


class DeviceSpec(Frozen):
    """A device node for the container (kubelet's ``DeviceSpec``)."""

    container_path: str
    host_path: str
    permissions: str = "rw"


class ContainerAllocation(Frozen):
    """What kubelet adds to one container's CRI ``CreateContainer`` request."""

    envs: tuple[tuple[str, str], ...] = ()
    mounts: tuple[Mount, ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    cdi_devices: tuple[str, ...] = ()
    devices: tuple[DeviceSpec, ...] = ()


def devices_for(
    resource: Resource, ids: Sequence[str], *, unhealthy: Mapping[str, str]
) -> tuple[Device, ...]:
    """The devices of ``ids``; refuses an unknown ID, or one whose GPU is in ``unhealthy``
    (GPU UUID → the problem)."""
    devices = []
    for device_id in ids:
        device = resource.device(device_id)
        if device is None:
            shown = ", ".join(d.id for d in resource.devices[:4])
            more = f" and {len(resource.devices) - 4} more" if len(resource.devices) > 4 else ""
            raise AllocationError(
                f"device ID {device_id!r} is not a device of {resource.name} on this node "
                f"(it has {shown or 'none'}{more}); kubelet's view is stale: restart the plugin"
            )
        problem = unhealthy.get(device.gpu_uuid)
        if problem is not None:
            raise AllocationError(
                f"device ID {device_id!r} of {resource.name} is unhealthy (GPU {device.gpu_uuid}: "
                f"{problem}); kubelet must choose a healthy one"
            )
        devices.append(device)
    return tuple(devices)


def allocate(
    resource: Resource,
    ids: Sequence[str],
    config: PluginConfig,
    *,
    unhealthy: Mapping[str, str] | None = None,
    nodes: Mapping[str, tuple[str, ...]] | None = None,
    imex: Sequence[int] = (),
) -> ContainerAllocation:
    """One container's allocation of ``ids`` of ``resource`` (see the module docstring).

    ``nodes``: each device UUID's device nodes (for ``passDeviceSpecs``); ``imex``: the IMEX
    channels configured and present on the host."""
    if not ids:
        raise AllocationError(f"an allocation of {resource.name} names no device ID")
    from nvhook.deviceplugin.vendors import allocate_vendor, is_vendor_resource

    if is_vendor_resource(resource.name):  # another vendor's: its own variable or CDI names
        return allocate_vendor(resource, ids, config)
    devices = devices_for(resource, ids, unhealthy=unhealthy or {})
    replicas = any(d.replica is not None for d in devices)
    mps = replicas and config.sharing_strategy == "mps"
    if mps and len({d.gpu_uuid for d in devices}) > 1:
        raise AllocationError(
            f"{resource.name} is shared with MPS: a container's replicas must be of one GPU "
            f"(its CUDA client talks to one control daemon); these are of "
            f"{len({d.gpu_uuid for d in devices})} ({', '.join(ids)})"
        )
    if replicas and config.fail_requests_greater_than_one and len(ids) > 1:
        raise AllocationError(
            f"{resource.name} is time-sliced with failRequestsGreaterThanOne: a container may ask "
            f"for 1 replica, this one asked for {len(ids)} ({', '.join(ids)})"
        )
    by_index = config.device_id_strategy == "index"
    uuids = list(dict.fromkeys(d.index if by_index else d.uuid for d in devices))
    strategies = config.device_list_strategies
    envs: dict[str, str] = {}
    mounts: list[Mount] = []
    annotations: dict[str, str] = {}
    cdi: list[str] = []
    names = [f"{config.cdi_kind}={u}" for u in uuids]
    names += [f"{IMEX_CDI_KIND}={c}" for c in imex]
    if "envvar" in strategies:
        envs[ENV_VISIBLE_DEVICES] = ",".join(uuids)
        if imex:
            envs[ENV_IMEX_CHANNELS] = ",".join(str(c) for c in imex)
    else:
        envs[ENV_VISIBLE_DEVICES] = "void"
    for feature in config.features:
        envs[feature] = "enabled"
    if mps:
        share = container_share(config.mps_root, resource.name, devices[0], resource.replicas)
        envs.update(share.envs)
        mounts += [Mount(c, h, read_only=False) for c, h in share.mounts]
    if "volume-mounts" in strategies:
        mounts += [Mount(f"{DEVICE_LIST_MOUNT_ROOT}/{u}", DEVICE_LIST_MOUNT_SOURCE) for u in uuids]
        mounts += [
            Mount(f"{DEVICE_LIST_MOUNT_ROOT}/imex/{c}", DEVICE_LIST_MOUNT_SOURCE) for c in imex
        ]
    specs: list[DeviceSpec] = []
    if config.pass_device_specs:
        paths = [p for d in devices for p in (nodes or {}).get(d.uuid, ())]
        paths += [f"{IMEX_CHANNEL_DIR}/channel{c}" for c in imex]
        specs = [
            DeviceSpec(p, os.path.join(config.dev_root, p.lstrip("/")))
            for p in dict.fromkeys(paths)
        ]
    if "cdi-annotations" in strategies:
        digest = hashlib.sha256("\0".join([resource.name, *ids]).encode()).hexdigest()[:12]
        key = f"{config.cdi_annotation_prefix}{ANNOTATION_NAME}_{digest}"
        annotations[key] = ",".join(names)
    if "cdi-cri" in strategies:
        cdi += names
    return ContainerAllocation(
        envs=tuple(envs.items()),
        mounts=tuple(mounts),
        annotations=tuple(annotations.items()),
        cdi_devices=tuple(cdi),
        devices=tuple(specs),
    )
