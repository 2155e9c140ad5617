"""The health state file: the device plugin's view of each GPU's health, for other commands.

``nvhook device-plugin`` writes it on every health change (:func:`write_health_state`:
temp file in the same directory, fsync, rename, mode 0644); ``nvhook labels`` turns it into
per-GPU labels and ``nvhook doctor`` into findings (:func:`read_health_state`, bounded to
:data:`MAX_BYTES`). The document::

    {"version": 1, "pid": 1234, "updated": 1733100000.0,
     "gpus": [{"index": 0, "uuid": "GPU-…", "healthy": false,
               "reason": "XID 79 (GPU has fallen off the bus) from NVML events", "xid": 79}],
     "devices": [{"name": "amd.com/gpu=9", "healthy": false,
                  "reason": "its device node /dev/dri/renderD137 is gone"}]}

``devices`` are the other vendors' devices the plugin serves (:mod:`nvhook.vendors.health`),
by qualified name; absent when it serves none.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.devices.nvml import GpuInfo

__all__ = [
    "DEFAULT_STATE_FILE",
    "MAX_BYTES",
    "health_state",
    "read_health_state",
    "write_health_state",
]

#: where ``nvhook device-plugin`` writes the file, and ``labels`` and ``doctor`` read it
DEFAULT_STATE_FILE = "/run/nvhook/device-plugin/gpu-health.json"

#: the most of the file read (a node with 64 GPUs writes about 16 KiB)
MAX_BYTES = 1 << 20


def health_state(
    gpus: Sequence[GpuInfo],
    unhealthy: Mapping[str, str],
    xids: Mapping[str, int],
    devices: Sequence[str] = (),
) -> dict[str, object]:
    """The health state file's document: per GPU its index, UUID, health, why, and the
    fatal XID counted against it; per other vendor's device (``devices``, qualified names)
    its health and why."""
    doc: dict[str, object] = {
        "version": 1,
        "pid": os.getpid(),
        "updated": time.time(),
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "healthy": g.uuid not in unhealthy,
                "reason": unhealthy.get(g.uuid, ""),
                "xid": xids.get(g.uuid),
            }
            for g in gpus
        ],
    }
    if devices:
        doc["devices"] = [
            {"name": n, "healthy": n not in unhealthy, "reason": unhealthy.get(n, "")}
            for n in devices
        ]
    return doc


def write_health_state(path: str, state: dict[str, object]) -> None:
    """Write ``state`` as JSON to ``path`` atomically (temp in the same directory, fsync,
    rename), mode 0644."""
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(state, f, indent=1)
            f.write("\n")
            f.flush()
            os.fchmod(f.fileno(), 0o644)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_health_state(path: str) -> dict[str, Any] | None:
    """The document at ``path``; None when there is none, or it is not one (too large, not
    JSON, no ``gpus`` list)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_BYTES:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
        return None
    doc["gpus"] = [
        g for g in doc["gpus"] if isinstance(g, dict) and isinstance(g.get("index"), int)
    ]
    devices = doc.get("devices")
    doc["devices"] = [
        d
        for d in (devices if isinstance(devices, list) else [])
        if isinstance(d, dict) and isinstance(d.get("name"), str)
    ]
    return doc
