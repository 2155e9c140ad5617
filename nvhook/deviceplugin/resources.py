"""What the device plugin advertises: the host's GPUs as resources, per MIG strategy.

:func:`build_resources` is a pure function of the GPUs (NVML's view,
:class:`nvhook.devices.nvml.GpuInfo`), their NUMA nodes and the configuration. The rules
are those of NVIDIA's device plugin (``flags.migStrategy``):

- ``none``: every GPU as ``nvidia.com/gpu``, IDs its UUID (a GPU in MIG mode as a whole);
- ``single``: when no GPU is in MIG mode, as ``none``; otherwise every GPU must be in MIG
  mode, have MIG devices, and all of them one profile, and the MIG devices become
  ``nvidia.com/gpu`` (IDs: MIG UUIDs). A GPU breaking a rule is a :class:`StrategyError`
  naming it: the node would otherwise advertise devices that are not what a pod asked for;
- ``mixed``: GPUs not in MIG mode as ``nvidia.com/gpu``, MIG devices as
  ``nvidia.com/mig-<profile>`` (``nvidia.com/mig-3g.40gb``); a GPU in MIG mode without MIG
  devices is advertised under no resource (a warning says so).

Time-slicing (``sharing.timeSlicing.resources[]``) replaces each device of a named resource
by ``replicas`` IDs ``<uuid>::<n>`` (n from 0), all mapping to the same device, under
``rename`` when given (or ``<name>.shared`` with ``renameByDefault``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nvhook.deviceplugin.errors import StrategyError
from nvhook.deviceplugin.model import Device, PluginConfig, Resource

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.devices.nvml import GpuInfo

__all__ = ["GPU_RESOURCE", "REPLICA_SEPARATOR", "build_resources", "mig_resource_name"]

GPU_RESOURCE = "nvidia.com/gpu"
REPLICA_SEPARATOR = "::"


def mig_resource_name(profile: str) -> str:
    """``3g.40gb`` → ``nvidia.com/mig-3g.40gb`` (the mixed strategy's resource)."""
    return f"nvidia.com/mig-{profile}"


def build_resources(
    gpus: Sequence[GpuInfo],
    config: PluginConfig,
    *,
    numa: Mapping[str, int | None] | None = None,
    warnings: list[str] | None = None,
) -> tuple[Resource, ...]:
    """The resources to advertise for ``gpus`` (NVML index order) under ``config``.

    ``numa`` maps a GPU UUID to its NUMA node; problems that do not stop the plugin are
    appended to ``warnings``. Resources come in order: ``nvidia.com/gpu`` first, then MIG
    profiles by name; a resource without devices is left out.
    """
    numa = numa or {}
    warn = warnings if warnings is not None else []
    grouped: dict[str, list[Device]] = {}

    def whole(g: GpuInfo, name: str = GPU_RESOURCE) -> None:
        grouped.setdefault(name, []).append(
            Device(g.uuid, g.uuid, g.uuid, g.index, numa_node=numa.get(g.uuid))
        )

    def migs(g: GpuInfo, single: bool) -> None:
        for m in g.migs:
            name = GPU_RESOURCE if single else mig_resource_name(m.profile)
            grouped.setdefault(name, []).append(
                Device(m.uuid, m.uuid, g.uuid, g.index, numa_node=numa.get(g.uuid))
            )

    strategy = config.mig_strategy
    if strategy == "none" or (strategy == "single" and not any(g.mig_enabled for g in gpus)):
        for g in gpus:
            whole(g)
    elif strategy == "single":
        _check_single(gpus)
        for g in gpus:
            migs(g, single=True)
    elif strategy == "mixed":
        for g in gpus:
            if not g.mig_enabled:
                whole(g)
            elif not g.migs:
                warn.append(
                    f"GPU {g.index} ({g.uuid}) is in MIG mode without MIG devices: advertised "
                    "under no resource (create MIG instances, or disable MIG mode)"
                )
            else:
                migs(g, single=False)
    else:
        raise StrategyError(f"migStrategy {strategy!r}: expected none, single or mixed")

    order = sorted(grouped, key=lambda n: (n != GPU_RESOURCE, n))
    for t in config.time_slicing:
        if t.name not in grouped:
            warn.append(
                f"sharing.timeSlicing: resource {t.name} is not advertised on this node "
                f"(advertised: {', '.join(order) or 'nothing'}); its replicas are unused"
            )
    return tuple(_time_sliced(name, grouped[name], config) for name in order)


def _check_single(gpus: Sequence[GpuInfo]) -> None:
    first = next(g for g in gpus if g.mig_enabled)
    for g in gpus:
        if not g.mig_enabled:
            raise StrategyError(
                f"migStrategy single: GPU {g.index} ({g.uuid}) is not in MIG mode while GPU "
                f"{first.index} is; put every GPU in MIG mode with one profile, or use "
                "migStrategy mixed"
            )
        if not g.migs:
            raise StrategyError(
                f"migStrategy single: GPU {g.index} ({g.uuid}) is in MIG mode without MIG "
                "devices; create its instances with the node's profile, or use migStrategy mixed"
            )
    profile = next(g for g in gpus if g.migs).migs[0].profile
    for g in gpus:
        for m in g.migs:
            if m.profile != profile:
                raise StrategyError(
                    f"migStrategy single: GPU {g.index} ({g.uuid}) has MIG device {m.index} "
                    f"with profile {m.profile}, others {profile}; every MIG device must have "
                    "one profile, or use migStrategy mixed"
                )


def _time_sliced(name: str, devices: list[Device], config: PluginConfig) -> Resource:
    shared = config.time_sliced(name)
    if shared is None or shared.replicas <= 1:
        return Resource(name, tuple(devices))
    renamed = shared.rename or (f"{name}.shared" if config.rename_by_default else name)
    replicated = tuple(
        Device(
            f"{d.id}{REPLICA_SEPARATOR}{n}",
            d.uuid,
            d.gpu_uuid,
            d.gpu_index,
            numa_node=d.numa_node,
            replica=n,
        )
        for d in devices
        for n in range(shared.replicas)
    )
    return Resource(renamed, replicated, replicas=shared.replicas)
