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
reading the spec again. An engine's own CDI does not run the shim, but it runs the spec's
``createContainer`` hook, which checks the same records in the container's env
(:func:`nvhook.hook.dispatch.check_records`; the native hook's ``records_hold``); the
watcher (``nvhook watch``) rewrites a stale spec within its poll interval.

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

Stdlib only, no regular expressions: this is on the create path (rank 4). The records' checks
(:func:`gone_gpus`, :func:`stale_layouts`, :func:`read_layout`) live in
:mod:`nvhook.gpurecords` (rank 2, for the hook) and are re-exported here.
"""

from __future__ import annotations

import os

from nvhook.gpurecords import (
    GPU_ENV,
    LAYOUT_ENV,
    gone_gpus,
    read_layout,
    stale_layouts,
)

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
