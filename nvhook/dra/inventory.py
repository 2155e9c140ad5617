"""The node's devices as ``resource.k8s.io/v1`` devices, and the ResourceSlices that carry them.

:func:`discover` reads the host the way the device plugin does (NVML loaded from the driver
root of nvhook's settings; IMEX channels from ``/dev/nvidia-caps-imex-channels`` under the dev
root), so it runs on a mock machine; :func:`build_devices` is the pure part: NVML's values to
devices with the attribute names and types of NVIDIA's driver
(``kubernetes-sigs/dra-driver-nvidia-gpu``, ``cmd/gpu-kubelet-plugin/deviceinfo.go`` and
``mig.go``), so the same DeviceClass and CEL selectors select the same devices:

- a GPU not in MIG mode: ``gpu-<minor>``, ``type=gpu``, ``uuid``, ``productName``, ``brand``,
  ``architecture`` (go-nvlib's spellings: ``Ampere``, ``Hopper``, ``Ada Lovelace``…),
  ``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion`` (versions, as strict
  semver: ``8.0`` → ``8.0.0``, ``580.65.06`` → ``580.65.6`` as Masterminds/semver's
  ``String()`` gives them), ``resource.kubernetes.io/pciBusID`` and
  ``resource.kubernetes.io/numaNode`` (int, when NVML knows it); capacity ``memory`` (bytes);
- a MIG device: ``type=mig``, ``uuid``, ``parentUUID``, ``profile`` and the parent's
  ``productName``… (``CommonAttributesMig``), capacity ``memory``; a GPU in MIG mode is
  published through its MIG devices only (it cannot run work as a whole);
- an IMEX channel: ``channel-<n>``, ``type=channel``, ``id`` (int), as NVIDIA's
  ComputeDomain plugin publishes it, but under this driver (docs/dra.md says why).

Deliberate differences (docs/dra.md): MIG devices are named ``gpu-<minor>-mig-<gi>-<ci>``
(NVIDIA: ``gpu-<minor>-mig-<profile>-<profileId>-<placement>``; names are opaque to
selectors), and MIG devices carry no ``multiprocessors``/``copyEngines``… or ``memorySlice``
capacities, which NVML's MIG view here does not give; no ``pcieRoot`` (sysfs's PCI tree)
nor ``addressingMode``.

:func:`build_slices` cuts the devices into the slices of one pool per node (the pool's name
is the node's), at most :data:`MAX_DEVICES_PER_SLICE` devices each, every slice with the
pool's generation and slice count, as ``types.go`` asks.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from oci._frozen import EMPTY_MAPPING, Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.devices.nvml import DriverInfo, GpuInfo
    from nvhook.planner import Host

__all__ = [
    "API_VERSION",
    "DRIVER",
    "MAX_ATTRIBUTES_AND_CAPACITIES",
    "MAX_DEVICES_PER_SLICE",
    "UNHEALTHY_TAINT",
    "DraDevice",
    "Inventory",
    "build_devices",
    "build_slices",
    "discover",
    "imex_channels",
    "quantity",
    "semver",
    "slice_name",
]

#: The driver name, NVIDIA's (``cmd/gpu-kubelet-plugin/main.go`` ``DriverName``).
DRIVER = "gpu.nvidia.com"
API_VERSION = "resource.k8s.io/v1"
#: ``types.go`` ``ResourceSliceMaxDevices``.
MAX_DEVICES_PER_SLICE = 128
#: ``types.go`` ``ResourceSliceMaxAttributesAndCapacitiesPerDevice``.
MAX_ATTRIBUTES_AND_CAPACITIES = 32
NUMA_ATTRIBUTE = "resource.kubernetes.io/numaNode"
#: The taint an unhealthy device carries: the scheduler allocates it to no new claim.
UNHEALTHY_TAINT = f"{DRIVER}/unhealthy"
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"

#: nvhook's architecture names → go-nvlib's ``GetArchitectureAsString``.
_ARCHITECTURES = {
    "kepler": "Kepler",
    "maxwell": "Maxwell",
    "pascal": "Pascal",
    "volta": "Volta",
    "turing": "Turing",
    "ampere": "Ampere",
    "ada": "Ada Lovelace",
    "hopper": "Hopper",
    "blackwell": "Blackwell",
    "unknown": "Unknown",
}
#: nvhook's brand names → go-nvlib's ``GetBrandAsString`` (the two NVIDIA brands: docs/dra.md).
_BRANDS = {
    "unknown": "Unknown",
    "quadro": "Quadro",
    "tesla": "Tesla",
    "nvs": "NVS",
    "grid": "Grid",
    "geforce": "GeForce",
    "titan": "Titan",
    "nvidia_rtx": "NvidiaRTX",
    "nvidia": "Nvidia",
}


class DraDevice(Frozen):
    """One published device: its name in the pool, what it is, its API attributes/capacity."""

    name: str  # "gpu-0", "gpu-0-mig-2-0", "channel-0"
    kind: str  # "gpu" | "mig" | "channel"; another vendor's: "amd" | "intel" | "ascend"
    # the GPU's or MIG device's UUID (what its CDI edits are found by); another vendor's
    # device: its qualified CDI name (amd.com/gpu=3), as `nvhook cdi generate --vendor` names it
    uuid: str = ""
    gpu_uuid: str = ""  # the physical GPU (health is per GPU); "" for a channel
    bus_id: str = ""  # the physical GPU's PCI bus id, as NVML gives it
    channel: int | None = None
    attributes: Mapping[str, Mapping[str, Any]] = EMPTY_MAPPING
    capacity: Mapping[str, Mapping[str, str]] = EMPTY_MAPPING

    def api(self, taint: str | None = None, driver: str = DRIVER) -> dict[str, Any]:
        """The device as the API's JSON (``ResourceSlice.spec.devices[]``); ``taint``: why
        it is unhealthy, published as a ``NoSchedule`` taint ``<driver>/unhealthy``
        (:data:`UNHEALTHY_TAINT` for NVIDIA's)."""
        out: dict[str, Any] = {"name": self.name}
        if self.attributes:
            out["attributes"] = {k: dict(v) for k, v in sorted(self.attributes.items())}
        if self.capacity:
            out["capacity"] = {k: dict(v) for k, v in sorted(self.capacity.items())}
        if taint is not None:
            # types.go DeviceTaint: key a qualified name, value at most 63 characters
            key = f"{driver}/unhealthy"
            out["taints"] = [{"key": key, "value": "true", "effect": "NoSchedule"}]
        return out


class Inventory(Frozen):
    """The node's devices of one driver, in publication order: NVIDIA's (``gpu.nvidia.com``)
    or another vendor's (:mod:`nvhook.dra.vendors`: ``vendor`` ``amd``, ``intel``,
    ``ascend`` and that vendor's DRA driver name)."""

    devices: tuple[DraDevice, ...]
    driver: str = DRIVER
    vendor: str = "nvidia"

    def device(self, name: str) -> DraDevice | None:
        return next((d for d in self.devices if d.name == name), None)

    @property
    def digest(self) -> str:
        """Changes exactly when the published content would."""
        text = json.dumps([d.api() for d in self.devices], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def semver(version: str) -> str:
    """``8.0`` → ``8.0.0``; ``580.65.06`` → ``580.65.6`` (strict semver, no leading zeros)."""
    parts = [str(int(p)) for p in version.split(".")[:3]]
    while len(parts) < 3:
        parts.append("0")
    return ".".join(parts)


def quantity(n: int) -> str:
    """Bytes as a Kubernetes quantity in canonical binary-SI form: ``80Gi``, ``1536Mi``."""
    for suffix, shift in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def _s(v: str) -> dict[str, str]:
    return {"string": v}


def build_devices(
    gpus: Sequence[GpuInfo],
    driver: DriverInfo,
    *,
    numa: Mapping[str, int | None] | None = None,
    channels: Sequence[int] = (),
) -> Inventory:
    """The devices of ``gpus`` (NVML index order), then of the IMEX ``channels``."""
    numa = numa or {}
    versions = {
        "driverVersion": {"version": semver(driver.driver_version)},
        "cudaDriverVersion": {"version": semver(driver.cuda_version)},
    }
    out: list[DraDevice] = []
    for g in gpus:
        common: dict[str, Mapping[str, Any]] = {
            "productName": _s(g.name),
            "brand": _s(_BRANDS.get(g.brand, "Unknown")),
            "architecture": _s(_ARCHITECTURES.get(g.arch, "Unknown")),
            "cudaComputeCapability": {"version": semver(g.compute_capability)},
            **versions,
            PCI_BUS_ID_ATTRIBUTE: _s(g.bus_id.lower()),
        }
        node = numa.get(g.uuid)
        if node is not None:
            common[NUMA_ATTRIBUTE] = {"int": node}
        if not g.mig_enabled:
            out.append(
                DraDevice(
                    name=f"gpu-{g.minor}",
                    kind="gpu",
                    uuid=g.uuid,
                    gpu_uuid=g.uuid,
                    bus_id=g.bus_id,
                    attributes={"type": _s("gpu"), "uuid": _s(g.uuid), **common},
                    capacity={"memory": {"value": quantity(g.memory_bytes)}},
                )
            )
            continue
        for m in g.migs:
            out.append(
                DraDevice(
                    name=f"gpu-{g.minor}-mig-{m.gi}-{m.ci}",
                    kind="mig",
                    uuid=m.uuid,
                    gpu_uuid=g.uuid,
                    bus_id=g.bus_id,
                    attributes={
                        "type": _s("mig"),
                        "uuid": _s(m.uuid),
                        "parentUUID": _s(g.uuid),
                        "profile": _s(m.profile),
                        **common,
                    },
                    capacity={"memory": {"value": quantity(m.memory_bytes)}},
                )
            )
    for n in channels:
        out.append(
            DraDevice(
                name=f"channel-{n}",
                kind="channel",
                channel=n,
                attributes={"type": _s("channel"), "id": {"int": n}},
            )
        )
    return Inventory(tuple(out))


def imex_channels(dev_root: str) -> tuple[int, ...]:
    """The IMEX channel numbers under ``dev_root``'s ``/dev/nvidia-caps-imex-channels``."""
    directory = os.path.join(dev_root, "dev/nvidia-caps-imex-channels")
    try:
        names = os.listdir(directory)
    except OSError:
        return ()
    return tuple(
        sorted(
            int(n[len("channel") :])
            for n in names
            if n.startswith("channel") and n[len("channel") :].isdigit()
        )
    )


def discover(host: Host) -> Inventory:
    """The host's devices: NVML's GPUs and MIG devices (NUMA nodes from NVML's topology),
    and the IMEX channels. Raises :class:`~nvhook.errors.DriverError` when NVML fails."""
    from nvhook.devices.nvml import open_nvml
    from nvhook.planner import nvml_library_dir

    with open_nvml(nvml_library_dir(host.driver_root)) as nvml:
        driver = nvml.driver()
        gpus = nvml.gpus()
        numa = {g.uuid: t.numa_node for g, t in zip(gpus, nvml.topology(), strict=True)}
    return build_devices(gpus, driver, numa=numa, channels=imex_channels(host.dev_root))


def slice_name(node: str, index: int, driver: str = DRIVER) -> str:
    """The name of the node's slice ``index``: ``<node>-<driver>-<index>``
    (``node-a-gpu.nvidia.com-0``)."""
    return f"{node}-{driver}-{index}"


def build_slices(
    inventory: Inventory,
    node: str,
    generation: int,
    unhealthy: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The ResourceSlices of ``node``'s pool at ``generation`` (the API's JSON); the devices
    named in ``unhealthy`` (device name → why) are tainted.

    A node without devices still publishes one empty slice: the pool then says "no devices"
    rather than leaving the scheduler to guess."""
    unhealthy = unhealthy or {}
    driver = inventory.driver
    devices = [d.api(unhealthy.get(d.name), driver) for d in inventory.devices]
    chunks = [
        devices[i : i + MAX_DEVICES_PER_SLICE]
        for i in range(0, len(devices), MAX_DEVICES_PER_SLICE)
    ] or [[]]
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(node, i, driver)},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": generation, "resourceSliceCount": len(chunks)},
                **({"devices": chunk} if chunk else {}),
            },
        }
        for i, chunk in enumerate(chunks)
    ]
