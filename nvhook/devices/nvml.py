"""NVML behind a small protocol: the only module that imports ``pynvml``.

>>> with open_nvml(lib_dir) as nvml:        # doctest: +SKIP
...     nvml.driver().driver_version, [g.uuid for g in nvml.gpus()]

:func:`open_nvml` loads ``libnvidia-ml.so.1`` (from ``lib_dir`` when given, else wherever the
dynamic loader finds it), initialises NVML, yields an :class:`Nvml` and shuts NVML down again.
Its answers are frozen values (:class:`oci._frozen.Frozen`); every NVML failure becomes a
:class:`DriverError` whose message names the NVML function, the device and the library.

``pynvml`` (from ``nvidia-ml-py``) keeps one library per process in ``pynvml.nvmlLib`` and caches
function pointers; to use a specific library this module loads it with ``ctypes`` by absolute
path, installs it as ``pynvml.nvmlLib`` and clears that cache. One library can be open at a
time in a process; switching to another one while NVML is open is an error. ``pynvml`` is
imported only when NVML is opened, never when ``nvhook`` is imported.

Bus ids are given in the ``/proc`` form (``0000:07:00.0``, see
:func:`nvhook.devices.procfs.normalize_bus_id`) so the two views compare directly.

:meth:`Nvml.topology` is where each GPU sits (:class:`GpuTopology`): NVML's common PCIe
ancestor to every other GPU, its NUMA node (memory affinity, node scope) and its active
NVLinks with what is at their far end. Where NVML answers ``NOT_SUPPORTED`` (no NVLink, a
host without NUMA information) the value says "unknown" instead of failing.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from nvhook.devices.nvml_ctypes import LIBRARY
from nvhook.devices.procfs import normalize_bus_id
from nvhook.errors import DriverError
from oci._frozen import Frozen

__all__ = [
    "EVENT_XID",
    "LIBRARY",
    "DriverInfo",
    "EventSet",
    "GpuInfo",
    "GpuTopology",
    "MigInfo",
    "NvLink",
    "Nvml",
    "NvmlEvent",
    "multiprocessors",
    "open_nvml",
]


_ARCHITECTURES = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
}
_BRANDS = {
    0: "unknown",
    1: "quadro",
    2: "tesla",
    3: "nvs",
    4: "grid",
    5: "geforce",
    6: "titan",
    13: "nvidia_rtx",
    14: "nvidia",
}
_NVLINK_REMOTES = {0: "gpu", 1: "ibmnpu", 2: "switch"}  # nvmlNvLinkDeviceType_t
_NODE_WORDS = 16  # NUMA node masks of 16 x 64 bits: up to 1,024 nodes


class DriverInfo(Frozen):
    driver_version: str  # "550.54.15"
    cuda_version: str  # "12.4"
    nvml_version: str  # "12.550.54.15"


class MigInfo(Frozen):
    index: int  # MIG device index under its GPU (nvmlDeviceGetMigDeviceHandleByIndex)
    uuid: str  # "MIG-…"
    gi: int  # GPU instance id
    ci: int  # compute instance id
    profile: str  # "3g.40gb"
    memory_bytes: int
    parent_uuid: str
    multiprocessors: int = 0  # nvmlDeviceGetAttributes_v2's multiprocessorCount


class GpuInfo(Frozen):
    index: int
    name: str
    uuid: str
    bus_id: str  # "0000:07:00.0"
    minor: int  # /dev/nvidia<minor>
    arch: str  # "ampere", "hopper"… ("unknown" for a value this module does not know)
    compute_capability: str  # "8.0"
    memory_bytes: int
    brand: str  # "nvidia", "tesla"…
    mig_capable: bool
    mig_enabled: bool
    migs: tuple[MigInfo, ...]
    multiprocessors: int = 0  # SMs (:func:`multiprocessors`); 0: NVML does not tell


class NvLink(Frozen):
    """An active NVLink of a GPU and the device at its far end."""

    link: int  # the link number on the GPU
    remote: str  # "gpu", "switch" (an NVSwitch), "ibmnpu" or "unknown"
    remote_bus_id: str  # "0000:c4:00.0": the far device's PCI bus id


class GpuTopology(Frozen):
    """Where one GPU sits, as NVML says (GPUs by NVML index)."""

    index: int
    ancestors: tuple[int | None, ...]  # nvmlGpuTopologyLevel_t to each GPU; None: not supported
    numa_node: int | None  # the one node of its memory affinity; None: unknown
    nvlinks: tuple[NvLink, ...]  # its active NVLinks (() without NVLink)


class Nvml(Protocol):
    """What nvhook asks NVML."""

    def driver(self) -> DriverInfo: ...

    def gpus(self) -> tuple[GpuInfo, ...]: ...

    def topology(self) -> tuple[GpuTopology, ...]: ...

    def events(self, uuids: Sequence[str]) -> EventSet: ...


class NvmlEvent(Frozen):
    """One NVML event: the GPU's UUID, ``nvmlEventType*``, its data (the XID of an
    ``XidCriticalError``) and the GPU/compute instance (None: the whole GPU)."""

    gpu_uuid: str
    event_type: int
    data: int
    gi: int | None = None
    ci: int | None = None


#: ``nvmlEventTypeXidCriticalError``
EVENT_XID = 0x8
_NOT_AVAILABLE = 0xFFFFFFFF


class EventSet:
    """An NVML event set with the XID events of some GPUs registered; valid while the
    :func:`open_nvml` block that made it runs. :meth:`wait` returns the next event or None
    after ``timeout`` seconds."""

    def __init__(self, nvml: _PynvmlNvml, handle: Any, uuids: dict[int, str]) -> None:
        self._nvml, self._handle, self.uuids = nvml, handle, uuids
        self.unsupported: list[str] = []  # GPUs that cannot report XIDs (NOT_SUPPORTED)

    def wait(self, timeout: float) -> NvmlEvent | None:
        nv = self._nvml._nv
        try:
            data = nv.nvmlEventSetWait_v2(self._handle, max(0, int(timeout * 1000)))
        except nv.NVMLError as e:
            if e.value == nv.NVML_ERROR_TIMEOUT:
                return None
            raise DriverError(
                f"NVML nvmlEventSetWait_v2 failed: {e} (NVML error {e.value}, "
                f"library {self._nvml._library})"
            ) from e
        uuid = self._nvml._call(
            "nvmlDeviceGetUUID", " for an event", nv.nvmlDeviceGetUUID, data.device
        )
        gi, ci = data.gpuInstanceId, data.computeInstanceId
        return NvmlEvent(
            _text(uuid),
            data.eventType,
            data.eventData,
            None if gi == _NOT_AVAILABLE else gi,
            None if ci == _NOT_AVAILABLE else ci,
        )

    def close(self) -> None:
        nv = self._nvml._nv
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlEventSetFree(self._handle)


_T = TypeVar("_T")


class _PynvmlNvml:
    """:class:`Nvml` over ``pynvml``, valid while its :func:`open_nvml` block runs."""

    def __init__(self, pynvml: Any, library: str) -> None:
        self._nv = pynvml
        self._library = library

    def _call(self, function: str, where: str, f: Callable[..., _T], *args: Any) -> _T:
        try:
            return f(*args)
        except self._nv.NVMLError as e:
            raise DriverError(
                f"NVML {function} failed{where}: {e} "
                f"(NVML error {e.value}, library {self._library})"
            ) from e

    def driver(self) -> DriverInfo:
        nv = self._nv
        version = self._call("nvmlSystemGetDriverVersion", "", nv.nvmlSystemGetDriverVersion)
        cuda = self._call("nvmlSystemGetCudaDriverVersion", "", nv.nvmlSystemGetCudaDriverVersion)
        nvml = self._call("nvmlSystemGetNVMLVersion", "", nv.nvmlSystemGetNVMLVersion)
        return DriverInfo(
            driver_version=_text(version),
            cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
            nvml_version=_text(nvml),
        )

    def events(self, uuids: Sequence[str]) -> EventSet:
        """An event set with XID events registered for each GPU of ``uuids`` that supports
        them (as NVIDIA's plugin does: ``nvmlDeviceGetSupportedEventTypes`` masks the
        request; a GPU answering NOT_SUPPORTED is listed in ``unsupported``)."""
        nv = self._nv
        handle = self._call("nvmlEventSetCreate", "", nv.nvmlEventSetCreate)
        events = EventSet(self, handle, {})
        try:
            for uuid in uuids:
                at = f" for GPU {uuid}"
                h = self._call("nvmlDeviceGetHandleByUUID", at, nv.nvmlDeviceGetHandleByUUID, uuid)
                supported = self._optional(
                    "nvmlDeviceGetSupportedEventTypes", at, nv.nvmlDeviceGetSupportedEventTypes, h
                )
                if supported is None or not supported & EVENT_XID:
                    events.unsupported.append(uuid)
                    continue
                self._call(
                    "nvmlDeviceRegisterEvents",
                    at,
                    nv.nvmlDeviceRegisterEvents,
                    h,
                    EVENT_XID,
                    handle,
                )
        except BaseException:
            events.close()
            raise
        return events

    def gpus(self) -> tuple[GpuInfo, ...]:
        nv = self._nv
        count = self._call("nvmlDeviceGetCount_v2", "", nv.nvmlDeviceGetCount)
        return tuple(self._gpu(i) for i in range(count))

    def _gpu(self, index: int) -> GpuInfo:
        nv = self._nv
        at = f" for GPU {index}"
        h = self._call("nvmlDeviceGetHandleByIndex_v2", at, nv.nvmlDeviceGetHandleByIndex, index)
        uuid = _text(self._call("nvmlDeviceGetUUID", at, nv.nvmlDeviceGetUUID, h))
        at = f" for GPU {index} ({uuid})"
        pci = self._call("nvmlDeviceGetPciInfo_v3", at, nv.nvmlDeviceGetPciInfo_v3, h)
        memory = self._call("nvmlDeviceGetMemoryInfo", at, nv.nvmlDeviceGetMemoryInfo, h)
        major, minor = self._call(
            "nvmlDeviceGetCudaComputeCapability", at, nv.nvmlDeviceGetCudaComputeCapability, h
        )
        arch = self._call("nvmlDeviceGetArchitecture", at, nv.nvmlDeviceGetArchitecture, h)
        brand = self._call("nvmlDeviceGetBrand", at, nv.nvmlDeviceGetBrand, h)
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(h)
            mig_capable, mig_enabled = True, bool(current)
        except nv.NVMLError_NotSupported:
            mig_capable, mig_enabled = False, False
        except nv.NVMLError as e:
            raise DriverError(
                f"NVML nvmlDeviceGetMigMode failed{at}: {e} (NVML error {e.value}, "
                f"library {self._library})"
            ) from e
        return GpuInfo(
            index=index,
            name=_text(self._call("nvmlDeviceGetName", at, nv.nvmlDeviceGetName, h)),
            uuid=uuid,
            bus_id=normalize_bus_id(_text(pci.busId)),
            minor=self._call("nvmlDeviceGetMinorNumber", at, nv.nvmlDeviceGetMinorNumber, h),
            arch=_ARCHITECTURES.get(arch, "unknown"),
            compute_capability=f"{major}.{minor}",
            memory_bytes=memory.total,
            brand=_BRANDS.get(brand, "unknown"),
            mig_capable=mig_capable,
            mig_enabled=mig_enabled,
            migs=self._migs(h, index, uuid) if mig_enabled else (),
            multiprocessors=multiprocessors(self._cores(h, at), f"{major}.{minor}"),
        )

    def _cores(self, h: Any, at: str) -> int:
        """``nvmlDeviceGetNumGpuCores`` (0 where not supported or not in this driver)."""
        nv = self._nv
        try:
            return int(nv.nvmlDeviceGetNumGpuCores(h))
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
            return 0
        except nv.NVMLError as e:
            raise DriverError(
                f"NVML nvmlDeviceGetNumGpuCores failed{at}: {e} (NVML error {e.value}, "
                f"library {self._library})"
            ) from e

    def _optional(self, function: str, where: str, f: Callable[..., _T], *args: Any) -> _T | None:
        """:meth:`_call`, but None where NVML answers ``NOT_SUPPORTED``."""
        try:
            return f(*args)
        except self._nv.NVMLError_NotSupported:
            return None
        except self._nv.NVMLError as e:
            raise DriverError(
                f"NVML {function} failed{where}: {e} "
                f"(NVML error {e.value}, library {self._library})"
            ) from e

    def topology(self) -> tuple[GpuTopology, ...]:
        nv = self._nv
        count = self._call("nvmlDeviceGetCount_v2", "", nv.nvmlDeviceGetCount)
        handles = [
            self._call(
                "nvmlDeviceGetHandleByIndex_v2", f" for GPU {i}", nv.nvmlDeviceGetHandleByIndex, i
            )
            for i in range(count)
        ]
        out = []
        for i, h in enumerate(handles):
            at = f" for GPU {i}"
            ancestors = tuple(
                nv.NVML_TOPOLOGY_INTERNAL
                if j == i
                else self._optional(
                    "nvmlDeviceGetTopologyCommonAncestor",
                    f" for GPUs {i} and {j}",
                    nv.nvmlDeviceGetTopologyCommonAncestor,
                    h,
                    other,
                )
                for j, other in enumerate(handles)
            )
            mask = self._optional(
                "nvmlDeviceGetMemoryAffinity",
                at,
                nv.nvmlDeviceGetMemoryAffinity,
                h,
                _NODE_WORDS,
                nv.NVML_AFFINITY_SCOPE_NODE,
            )
            nodes = [] if mask is None else _bits(mask)
            out.append(
                GpuTopology(
                    index=i,
                    ancestors=ancestors,
                    numa_node=nodes[0] if len(nodes) == 1 else None,
                    nvlinks=self._nvlinks(h, at),
                )
            )
        return tuple(out)

    def _nvlinks(self, h: Any, at: str) -> tuple[NvLink, ...]:
        """The GPU's active links: NVML answers ``INVALID_ARGUMENT`` past its last link and
        ``NOT_SUPPORTED`` for a link (or a GPU) without NVLink."""
        nv = self._nv
        out = []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            where = f"{at} NVLink {link}"
            try:
                state = nv.nvmlDeviceGetNvLinkState(h, link)
            except nv.NVMLError_InvalidArgument:
                break
            except nv.NVMLError_NotSupported:
                continue
            except nv.NVMLError as e:
                raise DriverError(
                    f"NVML nvmlDeviceGetNvLinkState failed{where}: {e} "
                    f"(NVML error {e.value}, library {self._library})"
                ) from e
            if state != nv.NVML_FEATURE_ENABLED:
                continue
            pci = self._call(
                "nvmlDeviceGetNvLinkRemotePciInfo_v2",
                where,
                nv.nvmlDeviceGetNvLinkRemotePciInfo,
                h,
                link,
            )
            kind = self._optional(
                "nvmlDeviceGetNvLinkRemoteDeviceType",
                where,
                nv.nvmlDeviceGetNvLinkRemoteDeviceType,
                h,
                link,
            )
            out.append(
                NvLink(
                    link=link,
                    remote=_NVLINK_REMOTES.get(kind, "unknown") if kind is not None else "unknown",
                    remote_bus_id=normalize_bus_id(_text(pci.busId)),
                )
            )
        return tuple(out)

    def _migs(self, h: Any, index: int, parent_uuid: str) -> tuple[MigInfo, ...]:
        nv = self._nv
        at = f" for GPU {index} ({parent_uuid})"
        slots = self._call(
            "nvmlDeviceGetMaxMigDeviceCount", at, nv.nvmlDeviceGetMaxMigDeviceCount, h
        )
        out = []
        for slot in range(slots):
            where = f" for GPU {index} ({parent_uuid}) MIG device {slot}"
            try:
                m = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, slot)
            except nv.NVMLError_NotFound:
                continue  # an empty slot
            except nv.NVMLError as e:
                raise DriverError(
                    f"NVML nvmlDeviceGetMigDeviceHandleByIndex failed{where}: {e} "
                    f"(NVML error {e.value}, library {self._library})"
                ) from e
            name = _text(self._call("nvmlDeviceGetName", where, nv.nvmlDeviceGetName, m))
            memory = self._call("nvmlDeviceGetMemoryInfo", where, nv.nvmlDeviceGetMemoryInfo, m)
            attributes = self._call(
                "nvmlDeviceGetAttributes_v2", where, nv.nvmlDeviceGetAttributes_v2, m
            )
            out.append(
                MigInfo(
                    index=slot,
                    uuid=_text(self._call("nvmlDeviceGetUUID", where, nv.nvmlDeviceGetUUID, m)),
                    gi=self._call(
                        "nvmlDeviceGetGpuInstanceId", where, nv.nvmlDeviceGetGpuInstanceId, m
                    ),
                    ci=self._call(
                        "nvmlDeviceGetComputeInstanceId",
                        where,
                        nv.nvmlDeviceGetComputeInstanceId,
                        m,
                    ),
                    profile=_mig_profile(name, attributes),
                    memory_bytes=memory.total,
                    parent_uuid=parent_uuid,
                    multiprocessors=attributes.multiprocessorCount,
                )
            )
        return tuple(out)


#: FP32 lanes ("CUDA cores") per SM by compute capability: the CUDA C++ Programming Guide's
#: "Throughput of Native Arithmetic Instructions" (32-bit floating-point add, multiply,
#: multiply-add results per clock per multiprocessor): 64 for 7.x and 8.0, 128 from 8.6 on
#: (8.6, 8.7, 8.9, 9.0, 10.x, 12.x). A100: 6912 / 64 = 108; H100 PCIe: 14592 / 128 = 114.
_LANES_BEFORE_86 = 64
_LANES_FROM_86 = 128


def multiprocessors(cuda_cores: int, compute_capability: str) -> int:
    """A GPU's SMs from NVML's ``nvmlDeviceGetNumGpuCores`` (its FP32 cores; NVML has no SM
    count for a whole GPU: ``nvmlDeviceGetAttributes_v2`` takes MIG device handles only).
    0 where the cores or the compute capability are unknown or predate Volta (7.0)."""
    try:
        major, minor = (int(x) for x in compute_capability.split(".", 1))
    except ValueError:
        return 0
    if cuda_cores <= 0 or major < 7:
        return 0
    lanes = _LANES_BEFORE_86 if (major, minor) < (8, 6) else _LANES_FROM_86
    return cuda_cores // lanes


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bits(words: Any) -> list[int]:
    """The bit numbers set in a mask of 64-bit words (a CPU or NUMA node set)."""
    return [w * 64 + b for w, word in enumerate(words) for b in range(64) if int(word) >> b & 1]


def _mig_profile(name: str, attributes: Any) -> str:
    """``NVIDIA A100-SXM4-80GB MIG 3g.40gb`` → ``3g.40gb``; else built from the attributes."""
    _, sep, profile = name.rpartition(" MIG ")
    if sep and profile:
        return profile
    gib = round(attributes.memorySizeMB / 1024)
    gi, ci = attributes.gpuInstanceSliceCount, attributes.computeInstanceSliceCount
    return f"{gi}g.{gib}gb" if ci == gi else f"{ci}c.{gi}g.{gib}gb"


# One library at a time per process: pynvml has one global library handle.
_lock = threading.Lock()
_current: str | None = None  # path of the library pynvml.nvmlLib holds (None: the default)
_open = 0


def _select(pynvml: Any, library: str | None) -> None:
    """Make pynvml use ``library`` (an absolute path; None: the loader's default)."""
    global _current
    if library == _current and (library is None or pynvml.nvmlLib is not None):
        return
    if _open:
        raise DriverError(
            f"NVML is already open with {_current or LIBRARY} in this process; "
            f"close it before opening {library or LIBRARY}"
        )
    import ctypes

    if library is None:
        lib = None
    else:
        try:
            lib = ctypes.CDLL(library)
        except OSError as e:
            raise DriverError(f"cannot load NVML library {library}: {e}") from e
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
    _current = library


@contextmanager
def open_nvml(lib_dir: str | os.PathLike[str] | None = None) -> Iterator[Nvml]:
    """Initialise NVML from ``lib_dir/libnvidia-ml.so.1`` (or the default library) for a block."""
    global _open
    import pynvml

    library = str(Path(lib_dir, LIBRARY).absolute()) if lib_dir is not None else None
    shown = library or LIBRARY
    with _lock:
        _select(pynvml, library)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound as e:
            raise DriverError(f"cannot load NVML: {shown} not found by the dynamic loader") from e
        except pynvml.NVMLError as e:
            raise DriverError(
                f"NVML nvmlInitWithFlags failed: {e} (NVML error {e.value}, library {shown})"
            ) from e
        _open += 1
    try:
        yield _PynvmlNvml(pynvml, shown)
    except BaseException:
        with _lock:
            _open -= 1
            with contextlib.suppress(pynvml.NVMLError):  # the propagating error says more
                pynvml.nvmlShutdown()
        raise
    with _lock:
        _open -= 1
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as e:
            raise DriverError(
                f"NVML nvmlShutdown failed: {e} (NVML error {e.value}, library {shown})"
            ) from e
