"""Resolve a container's device request to the host's GPUs and MIG devices.

Two sources give one view (:class:`HostGpus`), and :func:`resolve` answers the
same from either:

- :func:`from_procfs` — ``/proc/driver/nvidia`` (no NVML; about a millisecond):
  the default on the container-start path. It has no MIG UUIDs, so a request
  naming ``MIG-<uuid>`` needs the NVML view (:func:`needs_nvml`).
- :func:`from_nvml` — NVML through :mod:`nvhook.devices.nvml`, plus the nvidia-caps
  minors from ``/proc/driver/nvidia-caps/mig-minors``: serves ``cdi generate``
  and ``info``, and is the fallback.

A GPU's index is NVML's (PCI bus-id order); its node is ``/dev/nvidia<minor>``,
the driver's own numbering, which need not equal the index. A MIG device's
index under its GPU counts its compute instances in (GPU instance, compute
instance) order, as NVML's ``nvmlDeviceGetMigDeviceHandleByIndex`` does.
"""

from __future__ import annotations

from nvhook.errors import UnknownDeviceError
from nvhook.requests.ids import (
    All,
    CdiName,
    Devices,
    Index,
    LegacyMig,
    MigIndex,
    MigUuid,
    NoGpus,
    Uuid,
    Void,
)
from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from nvhook.devices.nvml import GpuInfo, MigInfo
    from nvhook.devices.nvml_ctypes import GpuMigIds, MigId
    from nvhook.devices.procfs import ProcDriver
    from nvhook.requests.ids import DeviceId, DeviceRequest

__all__ = [
    "Gpu",
    "HostGpus",
    "Mig",
    "Selected",
    "from_nvml",
    "from_procfs",
    "needs_nvml",
    "resolve",
    "with_nvml_migs",
]


class Mig(Frozen, kw_only=True):
    """A MIG device: a compute instance of a GPU instance of a GPU in MIG mode."""

    gpu_index: int
    index: int
    gi: int
    ci: int
    gi_caps_minor: int  # /dev/nvidia-caps/nvidia-cap<n> giving access to the GPU instance
    ci_caps_minor: int  # … and to the compute instance
    uuid: str | None  # "MIG-…" (None in the procfs view)

    @property
    def name(self) -> str:
        return f"{self.gpu_index}:{self.index}"


class Gpu(Frozen, kw_only=True):
    """A physical GPU as the host shows it."""

    index: int
    uuid: str
    minor: int  # /dev/nvidia<minor>
    bus_id: str  # "0000:07:00.0"
    model: str
    migs: tuple[Mig, ...]  # in MIG index order

    @property
    def name(self) -> str:
        return str(self.index)


Selected = Gpu | Mig


class HostGpus(Frozen):
    """The host's GPUs in index order, and which source saw them (``procfs`` | ``nvml``)."""

    gpus: tuple[Gpu, ...]
    source: str

    def describe(self) -> str:
        """A short list of what exists, for error messages."""
        if not self.gpus:
            return "this host has no GPU"
        parts = []
        for g in self.gpus:
            migs = f" with MIG {', '.join(m.name for m in g.migs)}" if g.migs else ""
            parts.append(f"{g.index} ({g.uuid}){migs}")
        return "GPUs: " + "; ".join(parts)


def from_procfs(driver: ProcDriver) -> HostGpus:
    gpus = []
    for g in driver.gpus:
        migs: list[Mig] = []
        for gi in g.gpu_instances:
            for ci in gi.compute_instances:
                migs.append(
                    Mig(
                        gpu_index=g.index,
                        index=len(migs),
                        gi=gi.gi,
                        ci=ci.ci,
                        gi_caps_minor=gi.caps_minor,
                        ci_caps_minor=ci.caps_minor,
                        uuid=None,
                    )
                )
        gpus.append(
            Gpu(
                index=g.index,
                uuid=g.uuid,
                minor=g.minor,
                bus_id=g.bus_id,
                model=g.model,
                migs=tuple(migs),
            )
        )
    return HostGpus(tuple(gpus), "procfs")


def from_nvml(gpus: Iterable[GpuInfo], mig_minors: Mapping[str, int]) -> HostGpus:
    """The NVML view; ``mig_minors`` comes from :func:`.procfs.read_mig_minors`."""
    out = [
        Gpu(
            index=g.index,
            uuid=g.uuid,
            minor=g.minor,
            bus_id=g.bus_id,
            model=g.name,
            migs=_nvml_migs(g.index, g.minor, g.migs, mig_minors),
        )
        for g in gpus
    ]
    return HostGpus(tuple(out), "nvml")


def with_nvml_migs(
    view: HostGpus, gpus: Sequence[GpuMigIds], mig_minors: Mapping[str, int]
) -> HostGpus | None:
    """The procfs ``view`` with NVML's names and MIG devices (:func:`.nvml.mig_ids`): what
    :func:`from_nvml` gives, bus ids from ``/proc``. None when NVML lists other GPUs (index,
    UUID, minor) than ``view``.
    """
    if [(g.index, g.uuid, g.minor) for g in gpus] != [
        (g.index, g.uuid, g.minor) for g in view.gpus
    ]:
        return None
    out = [
        Gpu(
            index=g.index,
            uuid=g.uuid,
            minor=g.minor,
            bus_id=seen.bus_id,
            model=g.name,
            migs=_nvml_migs(g.index, g.minor, g.migs, mig_minors),
        )
        for g, seen in zip(gpus, view.gpus, strict=True)
    ]
    return HostGpus(tuple(out), "nvml")


def _nvml_migs(
    gpu_index: int, minor: int, found: Iterable[MigId | MigInfo], mig_minors: Mapping[str, int]
) -> tuple[Mig, ...]:
    migs = []
    for m in sorted(found, key=lambda m: m.index):
        gi_key = f"gpu{minor}/gi{m.gi}/access"
        ci_key = f"gpu{minor}/gi{m.gi}/ci{m.ci}/access"
        if gi_key not in mig_minors or ci_key not in mig_minors:
            raise UnknownDeviceError(
                f"MIG device {gpu_index}:{m.index} ({m.uuid}): no nvidia-caps minor for "
                f"{gi_key if gi_key not in mig_minors else ci_key} in "
                "/proc/driver/nvidia-caps/mig-minors"
            )
        migs.append(
            Mig(
                gpu_index=gpu_index,
                index=m.index,
                gi=m.gi,
                ci=m.ci,
                gi_caps_minor=mig_minors[gi_key],
                ci_caps_minor=mig_minors[ci_key],
                uuid=m.uuid,
            )
        )
    return tuple(migs)


def needs_nvml(request: DeviceRequest) -> bool:
    """Whether the procfs view cannot answer ``request`` (it names a MIG device by UUID)."""
    return isinstance(request, Devices) and any(isinstance(i, MigUuid) for i in request.ids)


def resolve(request: DeviceRequest, host: HostGpus) -> tuple[Selected, ...]:
    """The GPUs and MIG devices ``request`` names, in request order, without duplicates.

    ``all`` is every GPU, each followed by its MIG devices (so a GPU in MIG mode comes
    with the access nodes of every GPU and compute instance, and every MIG device is
    usable, as with NVIDIA's runtime); ``none`` and ``void`` select no device. An id that
    does not exist is an :class:`~nvhook.errors.UnknownDeviceError` naming it and listing
    what exists.
    """
    if isinstance(request, All):
        every: list[Selected] = []
        for gpu in host.gpus:
            every.append(gpu)
            every.extend(gpu.migs)
        return tuple(every)
    if isinstance(request, (NoGpus, Void)):
        return ()
    selected: list[Selected] = []
    for device_id in request.ids:
        found = _one(device_id, host)
        if found not in selected:
            selected.append(found)
    return tuple(selected)


def _one(device_id: DeviceId, host: HostGpus) -> Selected:
    match device_id:
        case Index(n):
            if n < len(host.gpus):
                return host.gpus[n]
            raise _unknown(f"GPU {n}", host)
        case Uuid(value):
            gpu = _by_uuid(value, host)
            if gpu is None:
                shown = value if value.upper().startswith("GPU-") else f"GPU {value}"
                raise _unknown(shown, host)
            return gpu
        case MigIndex(g, m):
            if g >= len(host.gpus):
                raise _unknown(f"MIG device {g}:{m}: GPU {g}", host)
            return _mig(host.gpus[g], f"MIG device {g}:{m}", host, index=m)
        case LegacyMig(gpu_uuid, gi, ci):
            gpu = _by_uuid(gpu_uuid, host)
            if gpu is None:
                raise _unknown(f"MIG device {device_id}: {gpu_uuid}", host)
            return _mig(gpu, f"MIG device {device_id}", host, gi=gi, ci=ci)
        case MigUuid(value):
            for gpu in host.gpus:
                for mig in gpu.migs:
                    if mig.uuid is not None and mig.uuid.lower() == value.lower():
                        return mig
            if host.source == "procfs":
                raise UnknownDeviceError(
                    f"MIG device {value}: /proc does not show MIG UUIDs; resolve it with NVML "
                    '(host.resolver = "nvml")'
                )
            raise _unknown(f"MIG device {value}", host)
        case CdiName(value):
            raise UnknownDeviceError(
                f"{value}: a CDI device name cannot be resolved from the host's GPUs; "
                "use runtime mode cdi or auto with a CDI spec that defines it"
            )
    raise AssertionError(f"unhandled device id {device_id!r}")  # pragma: no cover


def _by_uuid(value: str, host: HostGpus) -> Gpu | None:
    wanted = value.lower()
    for gpu in host.gpus:
        if gpu.uuid.lower() == wanted:
            return gpu
    return None


def _mig(
    gpu: Gpu,
    what: str,
    host: HostGpus,
    *,
    index: int | None = None,
    gi: int | None = None,
    ci: int | None = None,
) -> Mig:
    for mig in gpu.migs:
        if (index is not None and mig.index == index) or (mig.gi, mig.ci) == (gi, ci):
            return mig
    if not gpu.migs:
        raise UnknownDeviceError(
            f"{what}: GPU {gpu.index} ({gpu.uuid}) has no MIG devices (not in MIG mode, "
            f"or in MIG mode without instances); {host.describe()}"
        )
    raise _unknown(what, host)


def _unknown(what: str, host: HostGpus) -> UnknownDeviceError:
    return UnknownDeviceError(f"{what} does not exist; {host.describe()}")
