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

Renaming (``resources.gpus[]`` / ``resources.mig[]``, NVIDIA's ``internal/rm/device_map.go``):
a GPU goes to the first entry whose pattern matches its NVML name (``NVIDIA A100-SXM4-80GB``),
a MIG device to the first whose pattern matches its profile (``1g.10gb``); after the
configured entries come NVIDIA's defaults (``AddDefaultResourcesToConfig``): ``*`` →
``nvidia.com/gpu`` for GPUs, and for MIG devices ``*`` → ``nvidia.com/gpu`` under ``single``,
each profile → ``nvidia.com/mig-<profile>`` (``+`` as ``.``) under ``mixed``.

Time-slicing (``sharing.timeSlicing.resources[]``) replaces each device of a named resource
(``devices``: all of them, the first N in NVML order, or those listed by index or UUID) by
``replicas`` IDs ``<uuid>::<n>`` (n from 0), all mapping to the same device, under
``rename`` when given (or ``<name>.shared`` with ``renameByDefault``); the devices not
listed stay under the resource's name, one ID each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nvhook.deviceplugin.errors import StrategyError
from nvhook.deviceplugin.model import Device, PluginConfig, Resource, TimeSlicedResource

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.devices.nvml import GpuInfo, MigInfo

__all__ = [
    "GPU_RESOURCE",
    "REPLICA_SEPARATOR",
    "build_resources",
    "gpu_resource",
    "mig_resource",
    "mig_resource_name",
]

GPU_RESOURCE = "nvidia.com/gpu"
REPLICA_SEPARATOR = "::"


def mig_resource_name(profile: str) -> str:
    """``3g.40gb`` → ``nvidia.com/mig-3g.40gb`` (the mixed strategy's resource; a ``+`` in
    a profile such as ``1g.10gb+me`` becomes ``.``, as in NVIDIA's plugin)."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def gpu_resource(g: GpuInfo, config: PluginConfig) -> str:
    """The resource a whole GPU is advertised under: the first ``resources.gpus[]`` pattern
    matching its name, else ``nvidia.com/gpu``."""
    return next((r.name for r in config.gpu_resources if r.matches(g.name)), GPU_RESOURCE)


def mig_resource(m: MigInfo, config: PluginConfig, *, single: bool) -> str:
    """The resource a MIG device is advertised under (``resources.mig[]``, then the
    strategy's default)."""
    for r in config.mig_resources:
        if r.matches(m.profile):
            return r.name
    return GPU_RESOURCE if single else mig_resource_name(m.profile)


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

    def whole(g: GpuInfo) -> None:
        grouped.setdefault(gpu_resource(g, config), []).append(
            Device(
                g.uuid,
                g.uuid,
                g.uuid,
                g.index,
                numa_node=numa.get(g.uuid),
                index=str(g.index),
                memory_bytes=g.memory_bytes,
            )
        )

    def migs(g: GpuInfo, single: bool) -> None:
        for m in g.migs:
            grouped.setdefault(mig_resource(m, config, single=single), []).append(
                Device(
                    m.uuid,
                    m.uuid,
                    g.uuid,
                    g.index,
                    numa_node=numa.get(g.uuid),
                    index=f"{g.index}:{m.index}",
                    mig=m.index,
                    memory_bytes=m.memory_bytes,
                )
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
    out: dict[str, Resource] = {}
    for name in order:
        for r in _time_sliced(name, grouped[name], config):
            if r.name in out:  # renamed onto an existing name: NVIDIA's map merges them
                before = out[r.name]
                merged = sorted(
                    before.devices + r.devices,
                    key=lambda d: (d.gpu_index, d.mig or 0, d.replica or 0),
                )
                r = Resource(r.name, tuple(merged), max(before.replicas, r.replicas))
            out[r.name] = r
    return tuple(out[n] for n in sorted(out, key=lambda n: (n != GPU_RESOURCE, n)))


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


def _chosen(name: str, devices: list[Device], shared: TimeSlicedResource) -> list[Device]:
    """The devices of ``name`` that ``shared.devices`` picks (NVIDIA's
    ``getIDsOfDevicesToReplicate``): a ref that is no device of it is a :class:`StrategyError`."""
    if shared.count:
        if shared.count > len(devices):
            raise StrategyError(
                f"sharing.timeSlicing: {name}: devices: {shared.count} asked for, the node has "
                f"{len(devices)}; lower the count"
            )
        return devices[: shared.count]
    if shared.devices is None:
        return devices
    chosen = []
    for ref in shared.devices:
        found = next((d for d in devices if ref in (d.uuid, d.index)), None)
        if found is None:
            raise StrategyError(
                f"sharing.timeSlicing: {name}: devices: {ref} is not a device of {name} on "
                f"this node (it has {', '.join(d.index for d in devices)})"
            )
        chosen.append(found)
    return [d for d in devices if d in chosen]


def _time_sliced(name: str, devices: list[Device], config: PluginConfig) -> list[Resource]:
    shared = config.time_sliced(name)
    if shared is None or shared.replicas <= 1:
        return [Resource(name, tuple(devices))]
    chosen = _chosen(name, devices, shared)
    if config.sharing_strategy == "mps" and any(d.mig is not None for d in chosen):
        raise StrategyError(
            f"sharing.mps: {name} holds MIG devices, which MPS cannot share (NVIDIA's rule); "
            "share whole GPUs, or use sharing.timeSlicing"
        )
    renamed = shared.rename or (f"{name}.shared" if config.rename_by_default else name)
    replicated = tuple(
        d.replica_of(f"{d.id}{REPLICA_SEPARATOR}{n}", n)
        for d in chosen
        for n in range(shared.replicas)
    )
    rest = tuple(d for d in devices if d not in chosen)
    out = [Resource(name, rest)] if rest else []
    return [*out, Resource(renamed, replicated, replicas=shared.replicas)]
