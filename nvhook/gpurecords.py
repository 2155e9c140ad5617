"""The GPU and MIG layout records a generated CDI spec (or jit mode) puts in a container's
environment, and whether they still hold.

:mod:`nvhook.devices.miglayout` writes them (its docstring says why they exist)::

    NVHOOK_GPU_<minor>=<uuid>@<root>/proc/driver/nvidia/gpus/<bus id>
    NVHOOK_MIG_LAYOUT_<minor>=<gi>.<ci>,…@<root>/proc/driver/nvidia/capabilities/gpu<minor>/mig

Checked here, with a few system calls: by the runtime shim before a cdi-mode create
(:mod:`nvhook.create`), by ``nvhook cdi check``, and by the ``create-container`` hook
(:func:`nvhook.hook.dispatch.check_records`), which every engine's own CDI runs too.
Stdlib only, low on the start path (rank 2), so that the hook (rank 3) may use it.

The hook reads the records from the container's environment, which the image's own ``Env``
is part of, and runs as root on the host: so a record is only one of the two shapes above
(:func:`gpu_entry_path`, :func:`layout_entry_path`: an absolute path without ``.``, ``..``
or empty components, ending in a GPU's ``/proc`` entry by its PCI bus id, or in the ``mig``
directory of the record's own GPU minor). Anything else is not a record and is not looked
at: an image cannot point the hook at another host path (a ``stat`` or a listing there would
tell the image, by the container starting or not, whether that path exists). A record of the
right shape can name only another GPU's procfs entry, which any container may read.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = [
    "CAPS_DIR",
    "GPUS_DIR",
    "GPU_ENV",
    "LAYOUT_ENV",
    "gone_gpus",
    "gpu_entry_path",
    "layout_entry_path",
    "read_layout",
    "stale_layouts",
]

LAYOUT_ENV = "NVHOOK_MIG_LAYOUT_"
GPU_ENV = "NVHOOK_GPU_"
#: where a GPU record's path ends: this, then the GPU's PCI bus id (``0000:07:00.0``)
GPUS_DIR = "/proc/driver/nvidia/gpus/"
#: where a layout record's path ends: this, the record's GPU minor, then ``/mig``
CAPS_DIR = "/proc/driver/nvidia/capabilities/gpu"
_HEX = frozenset("0123456789abcdef")


def _clean(path: str) -> bool:
    """An absolute path, without a NUL, whose components are none of ``""``, ``.``, ``..``
    (the native hook's ``clean_path``)."""
    return (
        path.startswith("/")
        and "\0" not in path
        and all(part not in ("", ".", "..") for part in path[1:].split("/"))
    )


def _bus_id(text: str) -> bool:
    """``0000:07:00.0`` as ``/proc`` names a GPU (:func:`nvhook.devices.procfs.normalize_bus_id`):
    a domain of 4-8 hex digits, bus and device of 2, a function 0-7, lower case."""
    head, dot, function = text.rpartition(".")
    parts = head.split(":")
    return (
        bool(dot)
        and len(function) == 1
        and function in "01234567"
        and len(parts) == 3
        and 4 <= len(parts[0]) <= 8
        and len(parts[1]) == len(parts[2]) == 2
        and all(set(p) <= _HEX for p in parts)
    )


def gpu_entry_path(where: str) -> bool:
    """Whether ``where`` has a GPU record's shape (module docstring)."""
    _, found, bus = where.rpartition(GPUS_DIR)
    return bool(found) and _clean(where) and _bus_id(bus)


def layout_entry_path(minor: str, directory: str) -> bool:
    """Whether ``directory`` has the shape of GPU ``minor``'s layout record (module docstring)."""
    return _clean(directory) and directory.endswith(f"{CAPS_DIR}{minor}/mig")


def _records(env: Iterable[str], prefix: str) -> Iterator[tuple[str, str, str, str]]:
    """Each distinct entry of ``env`` named ``prefix``…, split: (the name after ``prefix``,
    the value before its first ``@``, ``"@"`` or ``""`` where it has none, what follows)."""
    seen: set[str] = set()
    for entry in env:
        if not entry.startswith(prefix) or entry in seen:
            continue
        seen.add(entry)
        name, _, value = entry.partition("=")
        recorded, at, path = value.partition("@")
        yield name[len(prefix) :], recorded, at, path


def gone_gpus(env: Iterable[str]) -> list[tuple[int, str, str]]:
    """The recorded GPUs in ``env`` whose ``/proc`` entry is gone: (minor, UUID, entry).
    Entries that are not GPU records (of another shape: module docstring) are ignored."""
    out = []
    for minor, uuid, at, where in _records(env, GPU_ENV):
        if at and minor.isdigit() and gpu_entry_path(where) and not os.path.isdir(where):
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
    None when the directory is gone. Entries that are not layout records (of another shape:
    module docstring) are ignored."""
    out = []
    for minor, layout, at, directory in _records(env, LAYOUT_ENV):
        if not at or not minor.isdigit() or not layout_entry_path(minor, directory):
            continue
        now = read_layout(directory)
        if now != layout:
            out.append((int(minor), layout, now))
    return out
