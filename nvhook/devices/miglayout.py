"""A GPU's MIG layout identity: recorded in a generated CDI spec, checked at each create.

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

Stdlib only, no regular expressions: this is on the create path (rank 4).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from nvhook.devices.gpus import HostGpus, Mig, Selected
    from oci.cdi.edits import Edits

__all__ = [
    "LAYOUT_ENV",
    "caps_directory",
    "layout_entry",
    "layout_of",
    "read_layout",
    "stale_layouts",
]

LAYOUT_ENV = "NVHOOK_MIG_LAYOUT_"


def layout_of(migs: Iterable[Mig]) -> str:
    """The layout string of a GPU's MIG devices: ``2.0,3.0,4.0``."""
    return ",".join(f"{gi}.{ci}" for gi, ci in sorted({(m.gi, m.ci) for m in migs}))


def caps_directory(root: str, minor: int) -> str:
    return os.path.join(root, "proc/driver/nvidia/capabilities", f"gpu{minor}", "mig")


def layout_entry(root: str, minor: int, migs: Iterable[Mig]) -> str:
    """The environment entry that records GPU ``minor``'s layout (``root``: the host root)."""
    return f"{LAYOUT_ENV}{minor}={layout_of(migs)}@{caps_directory(root, minor)}"


def layout_edits(selected: Iterable[Selected], gpus: HostGpus, *, root: str) -> Edits:
    """The layout entries of the GPUs whose MIG devices are in ``selected`` (jit mode and
    ``nvhook cdi generate`` alike, so that both give a container the same env: D1)."""
    from nvhook.devices.gpus import Mig
    from oci.cdi.edits import Edits

    by_index = {g.index: g for g in gpus.gpus}
    parents = dict.fromkeys(by_index[s.gpu_index] for s in selected if isinstance(s, Mig))
    return Edits(env=tuple(layout_entry(root, g.minor, g.migs) for g in parents))


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
