"""What the NVIDIA kernel module tells ``/proc``: the fast view of the GPUs, without NVML.

:func:`read_driver` reads, under a root (``/`` on a host, a mock machine's directory in tests):

- ``proc/driver/nvidia/version``: the driver version and which kernel module (proprietary/open);
- ``proc/driver/nvidia/params``: the module parameters;
- ``proc/driver/nvidia/gpus/<bus id>/information``: each GPU's model, UUID, bus id and minor;
- ``proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<g>[/ci<c>]/access``: the MIG GPU and
  compute instances that exist, with the nvidia-caps minor of each (``DeviceFileMinor``);
- ``proc/devices``: the majors of character devices by name (``nvidia-uvm``, ``nvidia-caps``…).

There is no NVML index in ``/proc``. NVML numbers GPUs in PCI bus-id order, so
:attr:`ProcGpu.index` is the GPU's position in that order (domain, bus, device, function
compared as numbers). The device minor (``/dev/nvidia<minor>``) is the driver's own numbering
and need not follow it. MIG devices have no UUID here (only NVML knows those).

Stdlib only and no regular expressions: the runtime shim calls this on every container start.
"""

from __future__ import annotations

import os
from types import MappingProxyType

from nvhook.errors import DriverError
from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ProcComputeInstance",
    "ProcDriver",
    "ProcGpu",
    "ProcGpuInstance",
    "listdir",
    "normalize_bus_id",
    "read_driver",
    "read_majors",
    "read_mig_minors",
]


class ProcComputeInstance(Frozen):
    ci: int
    caps_minor: int  # /dev/nvidia-caps/nvidia-cap<caps_minor>


class ProcGpuInstance(Frozen):
    gi: int
    caps_minor: int
    compute_instances: tuple[ProcComputeInstance, ...]  # by ci


class ProcGpu(Frozen, kw_only=True):
    index: int  # position in PCI bus-id order, which is NVML's index
    bus_id: str  # "0000:07:00.0" (normalize_bus_id form)
    uuid: str
    model: str
    minor: int
    gpu_instances: tuple[ProcGpuInstance, ...]  # MIG GPU instances that exist, by gi
    info: Mapping[str, str]  # every field of the information file

    def __hash__(self) -> int:  # info (a mapping) is left out: unhashable
        return hash((self.index, self.bus_id, self.uuid, self.minor, self.gpu_instances))


class ProcDriver(Frozen, kw_only=True):
    version: str  # "550.54.15"
    open_module: bool  # the open kernel module (else the proprietary one)
    gpus: tuple[ProcGpu, ...]  # in index order
    majors: Mapping[str, int]  # character device majors by /proc/devices name
    params: Mapping[str, str]
    mig_config_minor: int | None  # nvidia-caps minors of capabilities/mig/config …
    mig_monitor_minor: int | None  # … and capabilities/mig/monitor

    def __hash__(self) -> int:
        return hash((self.version, self.open_module, self.gpus))

    def gpu_by_minor(self, minor: int) -> ProcGpu | None:
        return next((g for g in self.gpus if g.minor == minor), None)

    def gpu_by_uuid(self, uuid: str) -> ProcGpu | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)


def normalize_bus_id(bus_id: str) -> str:
    """A PCI bus id as ``/proc`` writes it: ``00000000:07:00.0``, ``07:00.0`` → ``0000:07:00.0``."""
    parts = bus_id.strip().split(":")
    try:
        if len(parts) == 2:
            parts = ["0", *parts]
        domain, bus, devfn = parts
        device, function = devfn.split(".")
        return (
            f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}"
        )
    except ValueError:
        raise ValueError(f"not a PCI bus id (domain:bus:device.function): {bus_id!r}") from None


def _bus_key(bus_id: str) -> tuple[int, ...]:
    domain, bus, devfn = bus_id.split(":")
    device, function = devfn.split(".")
    return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        raise DriverError(f"cannot read {path}: {e.strerror}") from e


def _fields(text: str) -> dict[str, str]:
    """``Key: value`` lines (split at the first colon, both sides trimmed)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _proc(root: str | os.PathLike[str], *parts: str) -> str:
    return os.path.join(os.fspath(root), "proc", *parts)


def read_majors(root: str | os.PathLike[str] = "/") -> dict[str, int]:
    """Character device majors by name from ``proc/devices`` (the first of a repeated name)."""
    path = _proc(root, "devices")
    majors: dict[str, int] = {}
    in_chars = False
    for line in _read(path).splitlines():
        if line.startswith("Character devices:"):
            in_chars = True
            continue
        if not line.strip():
            in_chars = False
            continue
        if in_chars:
            number, _, name = line.strip().partition(" ")
            if number.isdigit() and name:
                majors.setdefault(name.strip(), int(number))
    return majors


def read_mig_minors(root: str | os.PathLike[str] = "/") -> dict[str, int]:
    """``proc/driver/nvidia-caps/mig-minors``: every possible MIG capability and its minor."""
    out: dict[str, int] = {}
    for line in _read(_proc(root, "driver", "nvidia-caps", "mig-minors")).splitlines():
        name, _, minor = line.rpartition(" ")
        if name and minor.isdigit():
            out[name] = int(minor)
    return out


def _version(text: str, path: str) -> tuple[str, bool]:
    first = text.partition("\n")[0]
    if not first.startswith("NVRM version:"):
        raise DriverError(f"{path}: expected 'NVRM version: …' on the first line, got {first!r}")
    words = first.split()
    for word in words[2:]:
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            return word, "Open" in words
    raise DriverError(f"{path}: no driver version on the first line {first!r}")


def _access_minor(path: str) -> int:
    value = _fields(_read(path)).get("DeviceFileMinor", "")
    if not value.isdigit():
        raise DriverError(f"{path}: no DeviceFileMinor")
    return int(value)


def listdir(path: str) -> list[str]:
    """The names in the host directory ``path`` (unsorted); none when it does not exist.

    Any other failure is a :class:`DriverError` naming the directory. Shared with
    :mod:`nvhook.discover.nodes` (``/dev``), which imports it from here because this
    module is on the same path (jit creates) and imports next to nothing.
    """
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise DriverError(f"{path}: cannot list the directory: {e.strerror}") from None


def _numbered(names: list[str], prefix: str) -> list[int]:
    return sorted(
        int(n[len(prefix) :]) for n in names if n.startswith(prefix) and n[len(prefix) :].isdigit()
    )


def _gpu_instances(caps: str, minor: int) -> tuple[ProcGpuInstance, ...]:
    mig = os.path.join(caps, f"gpu{minor}", "mig")
    out = []
    for gi in _numbered(listdir(mig), "gi"):
        gi_dir = os.path.join(mig, f"gi{gi}")
        cis = tuple(
            ProcComputeInstance(
                ci=ci, caps_minor=_access_minor(os.path.join(gi_dir, f"ci{ci}", "access"))
            )
            for ci in _numbered(listdir(gi_dir), "ci")
        )
        out.append(
            ProcGpuInstance(
                gi=gi,
                caps_minor=_access_minor(os.path.join(gi_dir, "access")),
                compute_instances=cis,
            )
        )
    return tuple(out)


def _optional_minor(path: str) -> int | None:
    return _access_minor(path) if os.path.exists(path) else None


def read_driver(root: str | os.PathLike[str] = "/") -> ProcDriver:
    """The driver's view of the GPUs under ``root``; :class:`DriverError` if it is not loaded."""
    version_path = _proc(root, "driver", "nvidia", "version")
    if not os.path.exists(version_path):
        raise DriverError(f"the NVIDIA kernel module is not loaded: {version_path} does not exist")
    version, open_module = _version(_read(version_path), version_path)
    params_path = _proc(root, "driver", "nvidia", "params")
    params = _fields(_read(params_path)) if os.path.exists(params_path) else {}
    gpus_dir = _proc(root, "driver", "nvidia", "gpus")
    caps = _proc(root, "driver", "nvidia", "capabilities")
    found = []
    for entry in listdir(gpus_dir):
        path = os.path.join(gpus_dir, entry, "information")
        info = _fields(_read(path))
        missing = [k for k in ("Model", "GPU UUID", "Device Minor") if k not in info]
        if missing:
            raise DriverError(f"{path}: no {', '.join(missing)}")
        if not info["Device Minor"].isdigit():
            raise DriverError(f"{path}: Device Minor is not a number: {info['Device Minor']!r}")
        try:
            bus_id = normalize_bus_id(info.get("Bus Location") or entry)
        except ValueError as e:
            raise DriverError(f"{path}: {e}") from None
        found.append((bus_id, info))
    found.sort(key=lambda bi: _bus_key(bi[0]))
    gpus = tuple(
        ProcGpu(
            index=i,
            bus_id=bus_id,
            uuid=info["GPU UUID"],
            model=info["Model"],
            minor=int(info["Device Minor"]),
            gpu_instances=_gpu_instances(caps, int(info["Device Minor"])),
            info=MappingProxyType(info),
        )
        for i, (bus_id, info) in enumerate(found)
    )
    return ProcDriver(
        version=version,
        open_module=open_module,
        gpus=gpus,
        majors=MappingProxyType(read_majors(root)),
        params=MappingProxyType(params),
        mig_config_minor=_optional_minor(os.path.join(caps, "mig", "config")),
        mig_monitor_minor=_optional_minor(os.path.join(caps, "mig", "monitor")),
    )
