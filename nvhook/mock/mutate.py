"""Change a live mock machine as a GPU node changes under its containers.

Three changes, each on a laid-out root (:func:`nvhook.mock.create`) while others read it:

- :func:`relayout_mig`: a GPU's MIG layout re-made (``nvidia-smi mig -dci/-dgi`` then
  ``-cgi``), or MIG mode turned on or off. New instances get new MIG UUIDs (a generation
  counter per GPU goes into them), so a device re-created under the same index is another
  device, as on a real GPU; GPU-instance ids follow the A100's numbering by profile and
  placement (:func:`gpu_instance_id`).
- :func:`remove_gpu` / :func:`add_gpu`: a GPU falls off the bus (XID 79) and comes back: its
  ``/dev/nvidia<minor>``, ``/proc/driver/nvidia/gpus/<bus>`` and NVML record go and return.
  GPUs are named by their *slot*, their index in the profile, which does not move when another
  GPU is gone (NVML's index does: it is the position among the GPUs present).
- :func:`set_driver`: the driver replaced by another version (libraries, links, firmware,
  ``ld.so.cache``, ``/proc/driver/nvidia/version``, NVML's versions).
- :func:`unload_driver` / :func:`load_driver`: the kernel module unloaded (``rmmod``: no
  ``/proc/driver/nvidia``, no ``/dev/nvidia*`` node, no GPU, NVML fails with "Driver Not
  Loaded"; the user space stays installed) and loaded again, with the GPUs as they were: a
  node whose driver comes up after nvhook's daemons (a driver container starting late).

Each change is laid out whole, from the changed profile, into a staging directory beside the
root (same filesystem), and the difference is moved in by ``rename``: no file is ever seen
half-written or absent while it is replaced. The order is a real node's: first what is new or
changed (``dev``, then the driver's files, then ``proc``, then the NVML data, which a process
reads at ``nvmlInit``), so a link never names a file not there yet; then what is gone, in the
reverse order (NVML data, ``proc``, files, ``dev``), then the directories left empty.
``dev/nvidia-caps/*`` nodes stay when their instance goes, as ``nvidia-modprobe``'s nodes
stay on a real node: a stale spec's MIG device still finds its nodes, which is why the layout
identity exists (:mod:`nvhook.devices.miglayout`).

What was changed is kept in ``etc/nvhook-mock/mutations.json`` (the base profile and the
changes), so the machine's current :class:`Profile` is :func:`current_profile`, and each
change starts from it. A process that has NVML initialized keeps its answers until its
refcount drops to zero and it initializes again (the fake library reads its data at
``nvmlInit``), as a real NVML client must re-enumerate.
"""

from __future__ import annotations

import contextlib
import filecmp
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from nvhook.errors import MockError
from nvhook.mock.layout import MockMachine, create
from nvhook.mock.model import (
    MEMORY_SLICES,
    ComputeInstance,
    Gpu,
    GpuInstance,
    MigProfile,
    Profile,
)
from nvhook.mock.nvmldata import DATA_DIR
from nvhook.mock.profiles import load_profile

__all__ = [
    "MUTATIONS_FILE",
    "add_gpu",
    "current_profile",
    "gpu_instance_id",
    "load_driver",
    "relayout_mig",
    "remove_gpu",
    "set_driver",
    "unload_driver",
]

MUTATIONS_FILE = f"{DATA_DIR}/mutations.json"
_PROFILE_FILE = f"{DATA_DIR}/profile.json"
#: Where each kind of file goes in the order of additions (removals: the reverse).
_ORDER = ("dev/", "", "proc/", f"{DATA_DIR}/")
#: Nodes that stay when what they stand for goes (nvidia-modprobe never removes them).
_KEPT = ("dev/nvidia-caps/",)
#: A100 GPU-instance ids by slice count: the first id of the profile, ids advance by placement.
_GI_BASE = {7: 0, 8: 0, 4: 1, 3: 1, 2: 3, 1: 7}


def _state(root: Path) -> dict[str, Any]:
    path = root / MUTATIONS_FILE
    if path.exists():
        try:
            loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return loaded
        except (OSError, ValueError) as e:
            raise MockError(
                f"{path}: unreadable mutation record ({e}); lay the mock out again"
            ) from None
    try:
        summary = json.loads((root / _PROFILE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise MockError(f"{root} is not a mock machine ({root / _PROFILE_FILE}: {e})") from None
    source = summary["machine"]["source"]
    base = source if os.path.isabs(source) else summary["profile"]
    return {"base": base, "nodes": summary["nodes"], "driver": None, "removed": [], "mig": {}}


def _base(state: dict[str, Any]) -> Profile:
    return load_profile(state["base"])


def current_profile(root: Path | str) -> Profile:
    """The profile the mock at ``root`` answers now: its base profile with its changes."""
    return _apply(_state(Path(root)))


def gpu_instance_id(profile: MigProfile, placement: int) -> int:
    """The id an A100 gives a GPU instance of ``profile`` at ``placement`` (memory slice):
    7g 0, 4g 1, 3g 1-2, 2g 3-6, 1g 7-14, by placement."""
    base = _GI_BASE.get(profile.slices, 0)
    return base + placement // max(profile.placement_size, 1)


def _mig_uuid(gpu: Gpu, generation: int, gi: int, ci: int) -> str:
    h = hashlib.sha256(f"{gpu.uuid}/{generation}/{gi}/{ci}".encode()).hexdigest()
    return f"MIG-{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"


def _layout(gpu: Gpu, names: Sequence[str], generation: int) -> tuple[GpuInstance, ...]:
    profiles: list[MigProfile] = []
    for name in names:
        profile = gpu.model.mig_profile(name)
        if profile is None:
            known = ", ".join(p.name for p in gpu.model.mig_profiles)
            raise MockError(f"GPU {gpu.uuid} ({gpu.name}) has no MIG profile {name!r}: {known}")
        profiles.append(profile)
    starts = _place(profiles, frozenset())
    if starts is None:
        raise MockError(f"GPU {gpu.uuid}: {', '.join(names)} do not fit together on one GPU")
    out: list[GpuInstance] = []
    for profile, start in zip(profiles, starts, strict=True):
        gi = gpu_instance_id(profile, start)
        ci = ComputeInstance(id=0, uuid=_mig_uuid(gpu, generation, gi, 0))
        out.append(GpuInstance(id=gi, profile=profile, compute_instances=(ci,), placement=start))
    return tuple(out)


def _place(profiles: Sequence[MigProfile], used: frozenset[int]) -> list[int] | None:
    """A placement for each of ``profiles`` in order, none overlapping ``used`` or another
    (the first such in the profiles' placement orders: a small backtracking search)."""
    if not profiles:
        return []
    first = profiles[0]
    for start in first.placements:
        span = frozenset(range(start, start + first.placement_size))
        if span & used or start + first.placement_size > MEMORY_SLICES:
            continue
        rest = _place(profiles[1:], used | span)
        if rest is not None:
            return [start, *rest]
    return None


def _apply(state: dict[str, Any]) -> Profile:
    base = _base(state)
    gpus: list[Gpu] = []
    for slot, gpu in enumerate(base.gpus):
        if slot in state["removed"]:
            continue
        mig = state["mig"].get(str(slot))
        if mig is not None:
            if mig["layout"] is None:
                gpu = gpu._replace(mig_enabled=False, gpu_instances=())
            else:
                instances = _layout(gpu, mig["layout"], mig["generation"])
                gpu = gpu._replace(mig_enabled=True, gpu_instances=instances)
        gpus.append(gpu._replace(index=len(gpus)))
    prof = base._replace(gpus=tuple(gpus))
    if state["driver"] is not None:
        prof = prof._replace(driver=prof.driver._replace(**state["driver"]))
    if state.get("unloaded"):  # what a driver that is not loaded cannot have goes with it
        prof = prof._replace(
            driver=prof.driver._replace(loaded=False),
            gpus=(),
            nvswitches=0,
            imex_channels=0,
            char_majors=(),
            nvlink=None,
        )
    return prof


def _slot(state: dict[str, Any], slot: int) -> Gpu:
    base = _base(state)
    if not 0 <= slot < len(base.gpus):
        raise MockError(f"profile {base.name} has GPU slots 0-{len(base.gpus) - 1}, not {slot}")
    return base.gpus[slot]


def relayout_mig(root: Path | str, slot: int, layout: Sequence[str] | None) -> MockMachine:
    """Re-make the MIG layout of the GPU in ``slot``: ``layout`` lists GPU-instance profiles
    (``["1g.10gb"] * 7``; ``[]``: MIG mode without instances), None turns MIG mode off."""
    top = Path(root).absolute()
    state = _state(top)
    gpu = _slot(state, slot)
    if not gpu.model.mig_capable and layout is not None:
        raise MockError(f"GPU slot {slot} ({gpu.name}) is not MIG capable")
    if slot in state["removed"]:
        raise MockError(f"GPU slot {slot} is removed: add it back first (nvhook mock add-gpu)")
    previous = state["mig"].get(str(slot), {"generation": 0})
    state["mig"][str(slot)] = {
        "layout": None if layout is None else list(layout),
        "generation": previous["generation"] + 1,
    }
    return _commit(top, state)


def remove_gpu(root: Path | str, slot: int) -> MockMachine:
    """Take the GPU in ``slot`` off the machine (its node, procfs entry and NVML record)."""
    top = Path(root).absolute()
    state = _state(top)
    _slot(state, slot)
    if slot in state["removed"]:
        raise MockError(f"GPU slot {slot} is already removed")
    state["removed"] = sorted([*state["removed"], slot])
    return _commit(top, state)


def add_gpu(root: Path | str, slot: int) -> MockMachine:
    """Bring the GPU of ``slot`` back (as it was, with its MIG layout)."""
    top = Path(root).absolute()
    state = _state(top)
    _slot(state, slot)
    if slot not in state["removed"]:
        raise MockError(f"GPU slot {slot} is present: remove it first (nvhook mock remove-gpu)")
    state["removed"] = [s for s in state["removed"] if s != slot]
    return _commit(top, state)


def set_driver(root: Path | str, version: str, *, cuda: str | None = None) -> MockMachine:
    """Replace the driver by ``version`` (same branch's file list for another branch's number:
    the library set follows ``driver.toml``'s ``since``/``until`` for the new branch)."""
    parts = version.split(".")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
        raise MockError(f"not a driver version (like 550.54.15): {version!r}")
    top = Path(root).absolute()
    state = _state(top)
    driver: dict[str, str] = {"version": version}
    if cuda is not None:
        driver["cuda"] = cuda
    state["driver"] = driver
    return _commit(top, state)


def unload_driver(root: Path | str) -> MockMachine:
    """Unload the driver's kernel module (its GPUs, nodes and procfs go; its files stay)."""
    top = Path(root).absolute()
    state = _state(top)
    if state.get("unloaded"):
        raise MockError(f"the mock at {top} has its driver unloaded already")
    if not _base(state).driver.loaded:
        raise MockError(f"the mock at {top} has no loaded driver (its profile's driver.loaded)")
    state["unloaded"] = True
    return _commit(top, state)


def load_driver(root: Path | str) -> MockMachine:
    """Load the driver's kernel module again (the GPUs come back as they were)."""
    top = Path(root).absolute()
    state = _state(top)
    if not state.get("unloaded"):
        raise MockError(
            f"the mock at {top} has its driver loaded: unload it first (nvhook mock unload-driver)"
        )
    state["unloaded"] = False
    return _commit(top, state)


def _commit(top: Path, state: dict[str, Any]) -> MockMachine:
    prof = _apply(state)
    nodes: Literal["char", "file"] = "char" if state["nodes"] == "char" else "file"
    staging = Path(tempfile.mkdtemp(dir=top.parent, prefix=f".{top.name}.change-"))
    try:
        new = staging / "root"
        create(prof, new, nodes=nodes)
        record = new / MUTATIONS_FILE
        record.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.chmod(record, 0o644)
        _sync(new, top)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return MockMachine(root=top, profile=prof, nodes=nodes)


def _entries(top: Path) -> dict[str, os.stat_result]:
    out: dict[str, os.stat_result] = {}
    for directory, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(directory, name)
            out[os.path.relpath(path, top)] = os.lstat(path)
    return out


def _same(a: Path, sa: os.stat_result, b: Path, sb: os.stat_result) -> bool:
    if stat.S_IFMT(sa.st_mode) != stat.S_IFMT(sb.st_mode):
        return False
    if stat.S_ISLNK(sa.st_mode):
        return os.readlink(a) == os.readlink(b)
    if stat.S_ISSOCK(sa.st_mode) or stat.S_ISDIR(sa.st_mode):
        return True
    if stat.S_IMODE(sa.st_mode) != stat.S_IMODE(sb.st_mode):
        return False
    if stat.S_ISCHR(sa.st_mode):
        return sa.st_rdev == sb.st_rdev
    return sa.st_size == sb.st_size and filecmp.cmp(a, b, shallow=False)


def _rank(rel: str) -> int:
    for i, prefix in reversed(list(enumerate(_ORDER))):
        if prefix and rel.startswith(prefix):
            return i
    return 1


def _depth(rel: str) -> int:
    return rel.count("/")


def _sync(new: Path, top: Path) -> None:
    """Make ``top`` what ``new`` is, by renames from ``new`` (see the module docstring)."""
    want, have = _entries(new), _entries(top)
    moves = [
        rel
        for rel, st in want.items()
        if not stat.S_ISDIR(st.st_mode)
        and (rel not in have or not _same(new / rel, st, top / rel, have[rel]))
    ]
    # within a part, files before links, so that no link names a file not there yet
    for rel in sorted(moves, key=lambda r: (_rank(r), stat.S_ISLNK(want[r].st_mode), r)):
        target = top / rel
        for parent in reversed(Path(rel).parents[:-1]):
            if not (top / parent).is_dir():
                os.mkdir(top / parent, 0o755)
                os.chmod(top / parent, 0o755)
        if rel in have and stat.S_ISDIR(have[rel].st_mode):
            raise MockError(f"{target} is a directory in the mock, a file in the change")
        os.rename(new / rel, target)
    # directories with nothing moved into them (MIG mode on without instances: an empty mig/)
    for rel in sorted((r for r, st in want.items() if stat.S_ISDIR(st.st_mode)), key=_depth):
        if not (top / rel).is_dir():
            os.mkdir(top / rel)
            os.chmod(top / rel, stat.S_IMODE(want[rel].st_mode))
    gone = [
        rel
        for rel, st in have.items()
        if rel not in want and not stat.S_ISDIR(st.st_mode) and not rel.startswith(_KEPT)
    ]
    for rel in sorted(gone, key=lambda r: (-_rank(r), r)):
        os.unlink(top / rel)
    empty = [rel for rel, st in have.items() if rel not in want and stat.S_ISDIR(st.st_mode)]
    for rel in sorted(empty, key=lambda r: -_depth(r)):
        with contextlib.suppress(OSError):  # something kept (nvidia-caps nodes): leave it
            os.rmdir(top / rel)
