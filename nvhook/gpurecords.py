"""The GPU and MIG layout records a generated CDI spec (or jit mode) puts in a container's
environment, and whether they still hold.

:mod:`nvhook.devices.miglayout` writes them (its docstring says why they exist)::

    NVHOOK_GPU_<minor>=<uuid>@<root>/proc/driver/nvidia/gpus/<bus id>
    NVHOOK_MIG_LAYOUT_<minor>=<gi>.<ci>,…@<root>/proc/driver/nvidia/capabilities/gpu<minor>/mig

Checked here, with a few system calls: by the runtime shim before a cdi-mode create
(:mod:`nvhook.create`), by ``nvhook cdi check``, and by the ``create-container`` hook
(:func:`nvhook.hook.dispatch.check_records`), which every engine's own CDI runs too.
Stdlib only, low on the start path (rank 2), so that the hook (rank 3) may use it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["GPU_ENV", "LAYOUT_ENV", "gone_gpus", "read_layout", "stale_layouts"]

LAYOUT_ENV = "NVHOOK_MIG_LAYOUT_"
GPU_ENV = "NVHOOK_GPU_"


def gone_gpus(env: Iterable[str]) -> list[tuple[int, str, str]]:
    """The recorded GPUs in ``env`` whose ``/proc`` entry is gone: (minor, UUID, entry)."""
    out = []
    seen: set[str] = set()
    for entry in env:
        if not entry.startswith(GPU_ENV) or entry in seen:
            continue
        seen.add(entry)
        name, _, value = entry.partition("=")
        uuid, at, where = value.partition("@")
        minor = name[len(GPU_ENV) :]
        if at and minor.isdigit() and not os.path.isdir(where):
            out.append((int(minor), uuid, where))
    return out


def _numbered(names: list[str], prefix: str) -> list[int]:
    n = len(prefix)
    return sorted(int(x[n:]) for x in names if x.startswith(prefix) and x[n:].isdigit())


def read_layout(directory: str) -> str | None:
    """The layout under a GPU's ``capabilities/gpu<minor>/mig`` directory now; None when the
    directory is not there (MIG mode off, the GPU gone, the driver unloaded)."""
    try:
        gis = _numbered(os.listdir(directory), "gi")
    except OSError:
        return None
    pairs = []
    for gi in gis:
        try:
            cis = _numbered(os.listdir(os.path.join(directory, f"gi{gi}")), "ci")
        except OSError:  # destroyed between the two listings: not part of the layout
            continue
        pairs += [f"{gi}.{ci}" for ci in cis]
    return ",".join(pairs)


def stale_layouts(env: Iterable[str]) -> list[tuple[int, str, str | None]]:
    """The recorded layouts in ``env`` that no longer hold: (GPU minor, recorded, now), now
    None when the directory is gone. Entries that are not layout records are ignored."""
    out = []
    seen: set[str] = set()
    for entry in env:
        if not entry.startswith(LAYOUT_ENV) or entry in seen:
            continue
        seen.add(entry)
        name, _, value = entry.partition("=")
        layout, at, directory = value.partition("@")
        minor = name[len(LAYOUT_ENV) :]
        if not at or not minor.isdigit():
            continue
        now = read_layout(directory)
        if now != layout:
            out.append((int(minor), layout, now))
    return out
