"""GPU Feature Discovery's node labels, from NVML's view and the device plugin's configuration.

:func:`node_labels` is a pure function of the driver, the GPUs (NVML index order) and the
:class:`~nvhook.deviceplugin.model.PluginConfig` (its ``migStrategy`` and time-slicing), with
GFD's names and value conventions:

- ``nvidia.com/gpu.present``, ``nvidia.com/mig.capable`` (any GPU), ``nvidia.com/mig.strategy``;
- ``nvidia.com/cuda.driver.{major,minor,rev}``: the driver version's parts as written
  (``535.230.02`` gives ``535``, ``230``, ``02``); ``nvidia.com/cuda.runtime.{major,minor}``:
  the CUDA version the driver supports;
- ``nvidia.com/gpu.compute.{major,minor}`` and ``nvidia.com/gpu.family`` of the first GPU,
  the family named from its compute capability (8.0 ``ampere``, 8.9 ``ada-lovelace``, 9.0
  ``hopper``…);
- per resource (``nvidia.com/gpu``, and ``nvidia.com/mig-<profile>`` under ``mixed``):
  ``.count`` (physical devices), ``.product`` (the name, spaces as dashes; a MIG device's is
  ``<GPU>-MIG-<profile>``) and ``.memory`` (MiB) of its first device;
- a shared resource (``replicas`` > 1) adds ``.replicas`` and ``.sharing-strategy``
  (``time-slicing``, or ``mps``), and its product ends in ``-SHARED`` unless the resource is
  renamed.

``single`` labels the MIG devices as ``nvidia.com/gpu`` when every GPU is in MIG mode with
devices of one profile, the GPUs as ``none`` does when no GPU is in MIG mode, and otherwise
(a layout the device plugin refuses) ``nvidia.com/gpu.product=<GPU>-MIG-INVALID`` with count
and memory 0, as GFD does. :func:`labels_text` is Node Feature Discovery's local feature-file
format (``key=value`` lines); :func:`write_feature_file` writes it atomically.

:func:`health_labels` (nvhook's own, not GFD's) adds the device plugin's view of each
GPU's health from its state file (:mod:`nvhook.deviceplugin.healthstate`):
``nvidia.com/gpu.health`` (``healthy`` when every GPU is, else ``unhealthy``), and per GPU
(NVML index N) ``nvidia.com/gpu.N.health`` and, while a fatal XID counts against it,
``nvidia.com/gpu.N.xid``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from nvhook.deviceplugin.model import PluginConfig
from nvhook.deviceplugin.resources import GPU_RESOURCE, mig_resource_name
from nvhook.errors import WorkdirError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.devices.nvml import DriverInfo, GpuInfo, MigInfo
    from nvhook.planner import Host

__all__ = [
    "FEATURE_FILE",
    "family",
    "health_labels",
    "labels_text",
    "node_labels",
    "product",
    "read_node",
    "write_feature_file",
]

#: where GFD writes its labels for NFD's ``local`` source
FEATURE_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
_MIB = 1 << 20
_PREFIX = "nvidia.com/"


def family(compute_capability: str) -> str:
    """GFD's architecture family for a compute capability (``8.9`` → ``ada-lovelace``)."""
    major_text, _, minor_text = compute_capability.partition(".")
    try:
        major, minor = int(major_text), int(minor_text or 0)
    except ValueError:
        return "undefined"
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    names = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper"}
    return names.get(major, "blackwell" if major in (10, 12) else "undefined")


def product(name: str) -> str:
    """A GPU's name as a label value: ``NVIDIA A100-SXM4-80GB`` → ``NVIDIA-A100-SXM4-80GB``."""
    return "-".join(name.split())


def read_node(host: Host) -> tuple[DriverInfo, tuple[GpuInfo, ...]]:
    """The driver and the GPUs, as NVML (from the host's driver root) reports them."""
    from nvhook.devices.nvml import open_nvml
    from nvhook.planner import nvml_library_dir

    with open_nvml(nvml_library_dir(host.driver_root)) as nvml:
        return nvml.driver(), nvml.gpus()


def node_labels(
    driver: DriverInfo, gpus: Sequence[GpuInfo], config: PluginConfig
) -> dict[str, str]:
    """GFD's labels for a node with ``driver`` and ``gpus`` under ``config``, sorted by key."""
    labels: dict[str, str] = {
        "nvidia.com/gpu.present": _bool(bool(gpus)),
        "nvidia.com/mig.capable": _bool(any(g.mig_capable for g in gpus)),
        "nvidia.com/mig.strategy": config.mig_strategy,
    }
    major, minor, rev = [*driver.driver_version.split(".", 2), "", ""][:3]
    labels |= {
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
    }
    cuda_major, _, cuda_minor = driver.cuda_version.partition(".")
    labels |= {
        "nvidia.com/cuda.runtime.major": cuda_major,
        "nvidia.com/cuda.runtime.minor": cuda_minor,
    }
    if not gpus:
        labels["nvidia.com/gpu.count"] = "0"
        return dict(sorted(labels.items()))
    first = gpus[0]
    compute_major, _, compute_minor = first.compute_capability.partition(".")
    labels |= {
        "nvidia.com/gpu.compute.major": compute_major,
        "nvidia.com/gpu.compute.minor": compute_minor,
        "nvidia.com/gpu.family": family(first.compute_capability),
    }
    strategy = config.mig_strategy
    in_mig = [g for g in gpus if g.mig_enabled]
    if strategy == "none" or not in_mig:
        labels |= _whole(GPU_RESOURCE, gpus, config)
    elif strategy == "single":
        migs = [m for g in gpus for m in g.migs]
        if len(in_mig) != len(gpus) or not all(g.migs for g in gpus) or _profiles(migs) != 1:
            labels |= {
                "nvidia.com/gpu.count": "0",
                "nvidia.com/gpu.memory": "0",
                "nvidia.com/gpu.product": f"{product(in_mig[0].name)}-MIG-INVALID",
            }
        else:
            labels |= _mig(GPU_RESOURCE, first, migs, config)
    else:  # mixed
        whole = [g for g in gpus if not g.mig_enabled]
        labels |= _whole(GPU_RESOURCE, whole, config)
        by_profile: dict[str, tuple[GpuInfo, list[MigInfo]]] = {}
        for g in in_mig:
            for m in g.migs:
                by_profile.setdefault(m.profile, (g, []))[1].append(m)
        for profile, (parent, migs) in by_profile.items():
            labels |= _mig(mig_resource_name(profile), parent, migs, config)
    return dict(sorted(labels.items()))


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _profiles(migs: Sequence[MigInfo]) -> int:
    return len({m.profile for m in migs})


def _whole(resource: str, gpus: Sequence[GpuInfo], config: PluginConfig) -> dict[str, str]:
    if not gpus:
        return {f"{resource}.count": "0"}
    return _resource(
        resource, len(gpus), product(gpus[0].name), gpus[0].memory_bytes // _MIB, config
    )


def _mig(
    resource: str, parent: GpuInfo, migs: Sequence[MigInfo], config: PluginConfig
) -> dict[str, str]:
    name = f"{product(parent.name)}-MIG-{migs[0].profile}"
    return _resource(resource, len(migs), name, migs[0].memory_bytes // _MIB, config)


def _resource(
    resource: str, count: int, name: str, memory_mib: int, config: PluginConfig
) -> dict[str, str]:
    labels = {f"{resource}.count": str(count), f"{resource}.memory": str(memory_mib)}
    shared = config.time_sliced(resource)
    if shared is not None and shared.replicas > 1:
        renamed = bool(shared.rename) or config.rename_by_default
        name = name if renamed else f"{name}-SHARED"
        labels[f"{resource}.replicas"] = str(shared.replicas)
        labels[f"{resource}.sharing-strategy"] = config.sharing_strategy
    labels[f"{resource}.product"] = name
    return labels


def health_labels(state: Mapping[str, Any]) -> dict[str, str]:
    """The health labels of a health state document (see the module docstring)."""
    gpus = state.get("gpus", [])
    labels = {
        "nvidia.com/gpu.health": "healthy" if all(g.get("healthy") for g in gpus) else "unhealthy"
    }
    for g in gpus:
        index = g["index"]
        labels[f"nvidia.com/gpu.{index}.health"] = "healthy" if g.get("healthy") else "unhealthy"
        if isinstance(g.get("xid"), int):
            labels[f"nvidia.com/gpu.{index}.xid"] = str(g["xid"])
    return dict(sorted(labels.items()))


def labels_text(labels: dict[str, str]) -> str:
    """NFD's local feature-file format: one ``key=value`` line per label."""
    return "".join(f"{key}={value}\n" for key, value in labels.items())


def write_feature_file(path: str, labels: dict[str, str]) -> None:
    """Write ``labels`` to ``path`` atomically, mode 0644.

    The text goes to a hidden temporary file in the same directory (NFD's local source skips
    names starting with a dot), is synced, then renamed over ``path``: NFD, which rereads the
    directory when it changes, sees the old file or the new one, never a part.
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    except OSError as e:
        raise WorkdirError(f"cannot write {path}: {e.strerror}") from e
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(labels_text(labels))
            f.flush()
            os.fchmod(f.fileno(), 0o644)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise WorkdirError(f"cannot write {path}: {e.strerror}") from e
    except BaseException:
        os.unlink(tmp)
        raise
