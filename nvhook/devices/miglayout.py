"""A GPU's MIG layout identity and its presence: recorded in a generated CDI spec, checked at
each create.

MIG device names (``0:1``, the second MIG device of GPU 0) mean what the layout made them
mean: after a re-layout, ``0:1`` is another instance, and the nodes a stale spec names
(``/dev/nvidia-caps/nvidia-cap<n>``, which ``nvidia-modprobe`` never removes) may now give
a container a GPU instance that was destroyed and re-created under another identity. So
``nvhook cdi generate`` records, in each MIG device's edits, the layout of its GPU as the
driver shows it, in one environment entry per GPU::

    NVHOOK_MIG_LAYOUT_<minor>=<gi>.<ci>,<gi>.<ci>,…@<root>/proc/driver/nvidia/capabilities/gpu<minor>/mig

(sorted GPU-instance and compute-instance ids of every MIG device of the GPU, then the
procfs directory they were read from), and the runtime shim, before a cdi-mode create is
applied, compares each such entry with that directory now (:func:`stale_layouts`): a listing
of it and of each GPU instance's directory, a few system calls (``bench/miglayout.py``).

Why an environment entry: it is in the CDI schema since its first version, so the spec keeps
``cdiVersion`` 0.5.0 (spec annotations need 0.6.0, which podman 4.3 refuses), every CDI
implementation carries it into the container unchanged (where it says which layout the
container's MIG devices come from), and the shim finds it in the edits it resolved without
reading the spec again. An engine's own CDI does not check it: there, a stale spec is caught
when the watcher (``nvhook watch``) rewrites it, within its poll interval.

What procfs shows is which instances exist, by id, not their profiles or UUIDs: a layout
re-made with the same ids (the same profiles at the same placements, on an A100 whose ids
follow profile and placement) passes; its devices mean what they meant, only their MIG UUIDs
changed, which the watcher sees through NVML and rewrites the spec for.

Each GPU a device gives (whole, or as a MIG device's parent) is recorded too, as the GPU's
``/proc`` entry::

    NVHOOK_GPU_<minor>=<uuid>@<root>/proc/driver/nvidia/gpus/<bus id>

runc makes a spec's device node from its type and numbers, never from the host's node, so a
GPU that fell off the bus would still be given to a container of a stale spec; the entry is
checked (one ``stat``) before the layout (:func:`gone_gpus`).

Stdlib only, no regular expressions: this is on the create path (rank 4).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from nvhook.devices.gpus import Gpu, HostGpus, Mig, Selected
    from oci.cdi.edits import Edits

__all__ = [
    "GPU_ENV",
    "LAYOUT_ENV",
    "caps_directory",
    "gone_gpus",
    "gpu_entry",
    "layout_entry",
    "layout_of",
    "read_layout",
    "stale_layouts",
]

LAYOUT_ENV = "NVHOOK_MIG_LAYOUT_"
GPU_ENV = "NVHOOK_GPU_"


def layout_of(migs: Iterable[Mig]) -> str:
    """The layout string of a GPU's MIG devices: ``2.0,3.0,4.0``."""
    return ",".join(f"{gi}.{ci}" for gi, ci in sorted({(m.gi, m.ci) for m in migs}))


def caps_directory(root: str, minor: int) -> str:
    return os.path.join(root, "proc/driver/nvidia/capabilities", f"gpu{minor}", "mig")


def layout_entry(root: str, minor: int, migs: Iterable[Mig]) -> str:
    """The environment entry that records GPU ``minor``'s layout (``root``: the host root)."""
    return f"{LAYOUT_ENV}{minor}={layout_of(migs)}@{caps_directory(root, minor)}"


def gpu_entry(root: str, gpu: Gpu) -> str:
    """The environment entry that records ``gpu``'s presence (its ``/proc`` entry)."""
    from nvhook.devices.procfs import normalize_bus_id

    where = os.path.join(root, "proc/driver/nvidia/gpus", normalize_bus_id(gpu.bus_id))
    return f"{GPU_ENV}{gpu.minor}={gpu.uuid}@{where}"


def layout_edits(selected: Iterable[Selected], gpus: HostGpus, *, root: str) -> Edits:
    """The entries of the GPUs in ``selected`` (whole, or parents of its MIG devices): each
    GPU's presence, then, for a GPU whose MIG devices are selected, its layout (jit mode and
    ``nvhook cdi generate`` alike, so that both give a container the same env: D1)."""
    from nvhook.devices.gpus import Mig
    from oci.cdi.edits import Edits

    by_index = {g.index: g for g in gpus.gpus}
    parents: dict[Gpu, bool] = {}
    for s in selected:
        gpu = by_index[s.gpu_index] if isinstance(s, Mig) else s
        parents[gpu] = parents.get(gpu, False) or isinstance(s, Mig)
    env: list[str] = []
    for g, mig in parents.items():
        env.append(gpu_entry(root, g))
        if mig:
            env.append(layout_entry(root, g.minor, g.migs))
    return Edits(env=tuple(env))


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
