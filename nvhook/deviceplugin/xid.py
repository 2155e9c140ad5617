"""XID errors: what each means, which make a GPU unhealthy, and when it is healthy again.

Pure logic over values (the device plugin's event and kernel-log readers in
:mod:`nvhook.deviceplugin.health` feed it; another front end may too):

- :func:`meaning`: the driver's name for an XID. XIDs 0-95 are the strings of
  ``ROBUST_CHANNEL_ERROR_STR_PUBLIC_PUBLISHED`` in NVIDIA's ``nverror.h``
  (open-gpu-kernel-modules ``src/common/sdk/nvidia/inc/nverror.h`` at 90eb1077, MIT
  licence: "Copyright (c) 1993-2022, NVIDIA CORPORATION"), verbatim; 109 is named as
  NVIDIA's device plugin names it (``internal/rm/health.go``), 110 and 119-125 after their
  ``#define`` names in ``nverror.h``.
- :func:`parse_kmsg` reads the kernel's ``NVRM: Xid (PCI:0000:07:00): 79, pid=…, GPU has
  fallen off the bus.`` line (a ``/dev/kmsg`` record ``prio,seq,usec,flags;message`` or a
  plain line) into the PCI address and the XID.
- :class:`XidPolicy` is the config file's ``health`` section: the XIDs ``ignored``
  (default NVIDIA's: 13, 31, 43, 45, 68, 109, application errors after which the GPU is
  still healthy), the ``fatal`` ones (default: every XID not ignored, as NVIDIA's plugin
  treats them) and the recovery rule: healthy again ``recover_after`` seconds after the
  last fatal XID, while NVML still answers for the GPU (0: never, NVIDIA's behaviour).
- :class:`XidTracker` records XIDs per GPU and answers which GPUs are unhealthy now and
  why; :meth:`XidTracker.record` is O(1) so a flood of events costs little.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

from oci._frozen import Frozen

__all__ = ["DEFAULT_IGNORED", "XidEvent", "XidPolicy", "XidTracker", "meaning", "parse_kmsg"]

#: NVIDIA's device plugin skips these (internal/rm/health.go): application errors.
DEFAULT_IGNORED = (13, 31, 43, 45, 68, 109)

_PUBLISHED = (
    "Unknown Error",
    "DMA Engine Error (FIFO Error 1)",
    "DMA Engine Error (FIFO Error 2)",
    "DMA Engine Error (FIFO Error 3)",
    "DMA Engine Error (FIFO Error 4)",
    "DMA Engine Error (FIFO Error 5)",
    "DMA Engine Error (FIFO Error 6)",
    "DMA Engine Error (FIFO Error 7)",
    "DMA Engine Error (FIFO Error 8)",
    "Graphics Engine Error (GR Error 1)",
    "Graphics Engine Error (GR Error 2)",
    "Graphics Engine Error (GR Error 3)",
    "Graphics Engine Error (GR Error 4)",
    "Graphics Engine Error (GR Exception Error)",
    "Fake Error",
    "Display Engine Error (CRTC Error 1)",
    "Display Engine Error (CRTC Error 2)",
    "Display Engine Error (CRTC Error 3)",
    "Bus Interface Error (BIF Error)",
    "Client Reported Error",
    "Video Engine Error (MPEG Error)",
    "Video Engine Error (ME Error)",
    "Video Engine Error (VP Error 1)",
    "Error Reporting Enabled",
    "Graphics Engine Error (GR Error 6)",
    "Graphics Engine Error (GR Error 7)",
    "DMA Engine Error (FIFO Error 9)",
    "Video Engine Error (VP Error 2)",
    "Video Engine Error (VP2 Error)",
    "Video Engine Error (BSP Error)",
    "Access Violation Error (MMU Error 1)",
    "Access Violation Error (MMU Error 2)",
    "DMA Engine Error (PBDMA Error)",
    "Security Engine Error (SEC Error)",
    "Video Engine Error (MSVLD Error)",
    "Video Engine Error (MSPDEC Error)",
    "Video Engine Error (MSPPP Error)",
    "Graphics Engine Error (FECS Error 1)",
    "Graphics Engine Error (FECS Error 2)",
    "DMA Engine Error (CE Error 1)",
    "DMA Engine Error (CE Error 2)",
    "DMA Engine Error (CE Error 3)",
    "Video Engine Error (VIC Error)",
    "Verification Error",
    "Access Violation Error (MMU Error 3)",
    "Operating System Error (OS Error 1)",
    "Operating System Error (OS Error 2)",
    "Video Engine Error (MSENC/NVENC0 Error)",
    "ECC Error (DBE Error)",
    "Power State Locked",
    "Power State Event (RC Error)",
    "Power State Event (Stress Test Error)",
    "Power State Event (Thermal Event 1)",
    "Power State Event (Thermal Event 2)",
    "Power State Event (Power Event)",
    "Power State Event (Thermal Event 3)",
    "Display Engine Error (EVO Error)",
    "FB Interface Error (FBPA Error 1)",
    "FB Interface Error (FBPA Error 2)",
    "PMU error",
    "SEC2 error",
    "PMU Breakpoint (non-fatal)",
    "PMU Halt Error",
    "INFOROM Page Retirement Event",
    "INFOROM Page Retirement Failure",
    "Video Engine Error (NVENC1 Error)",
    "Graphics Engine Error (FECS Error 3)",
    "Graphics Engine Error (FECS Error 4)",
    "Video Engine Error (NVDEC0 Error)",
    "Graphics Engine Error (GR Class Error)",
    "DMA Engine Error (CE Error 4)",
    "DMA Engine Error (CE Error 5)",
    "DMA Engine Error (CE Error 6)",
    "Video Engine Error (NVENC2 Error)",
    "NVLink Error",
    "DMA Engine Error (CE Error 6)",
    "DMA Engine Error (CE Error 7)",
    "DMA Engine Error (CE Error 8)",
    "vGPU device cannot be started",
    "GPU has fallen off the bus",
    "DMA Engine Error (Pushbuffer CRC mismatch)",
    "VGA Subsystem Error",
    "Video JPEG Engine Error (NVJPG Error)",
    "Video Engine Error (NVDEC1 Error)",
    "Video Engine Error (NVDEC2 Error)",
    "DMA Engine Error (CE Error 9)",
    "Video OFA Engine Error (OFA0 Error)",
    "NvTelemetry Driver Reoprt",
    "Video Engine Error (NVDEC3 Error)",
    "Video Engine Error (NVDEC4 Error)",
    "FB Interface Error (FBPA Error 3)",
    "Reserved Xid",
    "Excessive SBE interrupts",
    "INFOROM Erase Limit Exceeded",
    "Contained error",
    "Uncontained error",
)
_NAMED = {
    109: "Context Switch Timeout Error",
    110: "Security fault error (SEC_FAULT_ERROR)",
    119: "GSP RPC timeout (GSP_RPC_TIMEOUT)",
    120: "GSP error (GSP_ERROR)",
    121: "C2C error (C2C_ERROR)",
    122: "SPI PMU RPC read failure",
    123: "SPI PMU RPC write failure",
    124: "SPI PMU RPC erase failure",
    125: "INFOROM filesystem error",
}


def meaning(xid: int) -> str:
    """The driver's name for ``xid`` (``79`` → ``GPU has fallen off the bus``)."""
    if 0 <= xid < len(_PUBLISHED):
        return _PUBLISHED[xid]
    return _NAMED.get(xid, "not in the driver's published list")


#: ``NVRM: Xid (PCI:0000:07:00): 79, …``: the domain:bus:device, then the XID
_KMSG = re.compile(
    r"NVRM: Xid \(PCI:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})[^)]*\): (\d+)"
)


def parse_kmsg(line: str) -> tuple[str, int] | None:
    """The PCI address (``0000:07:00``, lower case) and XID of a kernel-log line, or None."""
    m = _KMSG.search(line)
    if m is None:
        return None
    return m.group(1).lower(), int(m.group(2))


class XidEvent(Frozen):
    """One XID on one GPU (UUID), from ``source`` (``NVML events``, ``/dev/kmsg``)."""

    gpu_uuid: str
    xid: int
    source: str


class XidPolicy(Frozen):
    """The config's ``health`` section (see the module docstring)."""

    ignored: tuple[int, ...] = DEFAULT_IGNORED
    fatal: tuple[int, ...] | None = None  # None: every XID not ignored
    recover_after: float = 0.0  # seconds; 0: never
    enabled: bool = True
    kmsg: str = ""  # the kernel log to read ("": none)
    state_file: str = ""  # the health state file to write ("": none)

    def is_fatal(self, xid: int) -> bool:
        if not self.enabled or xid in self.ignored:
            return False
        return self.fatal is None or xid in self.fatal


class _Mark:
    __slots__ = ("count", "first", "last", "source", "xid")

    def __init__(self, xid: int, source: str, now: float) -> None:
        self.xid, self.source, self.first, self.last, self.count = xid, source, now, now, 1


class XidTracker:
    """Fatal XIDs per GPU and whether each GPU is still unhealthy for them (thread-safe)."""

    def __init__(self, policy: XidPolicy) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._marks: dict[str, _Mark] = {}

    def record(self, event: XidEvent, now: float) -> bool:
        """Note ``event`` at ``now``; True when it makes a healthy GPU unhealthy."""
        if not self.policy.is_fatal(event.xid):
            return False
        with self._lock:
            mark = self._marks.get(event.gpu_uuid)
            if mark is not None and not self._expired(mark, now):
                mark.last, mark.count, mark.xid, mark.source = (
                    now,
                    mark.count + 1,
                    event.xid,
                    event.source,
                )
                return False
            self._marks[event.gpu_uuid] = _Mark(event.xid, event.source, now)
            return True

    def _expired(self, mark: _Mark, now: float) -> bool:
        after = self.policy.recover_after
        return after > 0 and now - mark.last >= after

    def unhealthy(self, now: float, answering: Iterable[str] = ()) -> dict[str, str]:
        """GPU UUID → why, for each GPU a fatal XID still holds unhealthy at ``now``; a GPU
        whose recovery time has passed is healthy again only if it is in ``answering``
        (NVML answers for it) and is then forgotten."""
        alive = set(answering)
        out: dict[str, str] = {}
        with self._lock:
            for uuid, mark in list(self._marks.items()):
                if self._expired(mark, now) and uuid in alive:
                    del self._marks[uuid]
                    continue
                times = f", {mark.count} times" if mark.count > 1 else ""
                out[uuid] = f"XID {mark.xid} ({meaning(mark.xid)}) from {mark.source}{times}"
        return out

    def xids(self) -> dict[str, int]:
        """GPU UUID → the last fatal XID still counted against it."""
        with self._lock:
            return {u: m.xid for u, m in self._marks.items()}
