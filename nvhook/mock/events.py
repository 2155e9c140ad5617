"""Post NVML events (XIDs, ECC errors) to a mock machine's fake NVML.

The fake ``libnvidia-ml.so.1`` (``csrc/nvml.c``, "events") reads its event queue from
``<root>/etc/nvhook-mock/nvml-events``: one event a line, ``<gpu index> <type, hex> <data>
[<gpu instance> <compute instance>]``. An event set created by ``nvmlEventSetCreate``
delivers those posted after it, to ``nvmlEventSetWait_v2``, for the GPUs and types
registered with ``nvmlDeviceRegisterEvents``. :func:`post_event` appends one line in one
``write`` of an ``O_APPEND`` file (whole lines, whatever else writes there);
:func:`post_xid` posts an XID (``nvmlEventTypeXidCriticalError``, the data the XID).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["EVENTS_FILE", "XID_CRITICAL_ERROR", "events_path", "post_event", "post_xid"]

#: the queue file under a mock root
EVENTS_FILE = "etc/nvhook-mock/nvml-events"
#: ``nvmlEventTypeXidCriticalError``
XID_CRITICAL_ERROR = 0x8


def events_path(root: str | os.PathLike[str]) -> Path:
    """The event queue of the mock machine at ``root``."""
    return Path(root) / EVENTS_FILE


def post_event(
    root: str | os.PathLike[str],
    gpu_index: int,
    event_type: int,
    data: int,
    *,
    instance: tuple[int, int] | None = None,
) -> None:
    """Append one event for GPU ``gpu_index`` (NVML index) to the queue at ``root``."""
    line = f"{gpu_index} {event_type:x} {data}"
    if instance is not None:
        line += f" {instance[0]} {instance[1]}"
    fd = os.open(events_path(root), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def post_xid(root: str | os.PathLike[str], gpu_index: int, xid: int, *, count: int = 1) -> None:
    """Post XID ``xid`` on GPU ``gpu_index``, ``count`` times (one write)."""
    line = f"{gpu_index} {XID_CRITICAL_ERROR:x} {xid}\n"
    fd = os.open(events_path(root), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, (line * count).encode())
    finally:
        os.close(fd)
