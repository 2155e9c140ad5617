"""``etc/nvhook-mock`` of a mock machine: what the fake NVML answers, and the profile as JSON.

``nvml.txt`` is one tab-separated line per fact, read by ``csrc/nvml.c`` when the library is
loaded: driver, NVML and CUDA versions, a ``gpu`` line per GPU (its PCI ids, architecture and
brand as NVML's enum values, memory, MIG capability) and a ``mig`` line per MIG device.
``profile.json`` is the whole profile, field by field, for tools and tests.
"""

from __future__ import annotations

import json

from nvhook.mock._tree import Tree
from nvhook.mock.model import ARCHITECTURES, BRANDS, Profile, parse_bus_id
from oci._frozen import Frozen

__all__ = ["DATA_DIR", "nvml_bus_id", "write_data"]

DATA_DIR = "etc/nvhook-mock"


def nvml_bus_id(bus_id: str) -> str:
    """NVML's form of a bus id: ``0000:07:00.0`` → ``00000000:07:00.0`` (uppercase hex)."""
    domain, bus, device, _ = parse_bus_id(bus_id)
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def _nvml_data(prof: Profile) -> str:
    d = prof.driver
    lines = [
        f"# nvhook mock machine, profile {prof.name}: what the fake libnvidia-ml.so.1 answers",
        f"loaded\t{int(d.loaded)}",
        f"driver\t{d.version}",
        f"nvml\t{d.nvml_version}",
        f"cuda\t{d.cuda_version_int}",
    ]
    for g in prof.gpus:
        m = g.model
        domain, bus, device, _ = parse_bus_id(g.bus_id)
        cc_major, cc_minor = m.compute_capability.split(".")
        fields: list[object] = [
            "gpu",
            g.minor,
            g.uuid,
            f"{domain:04X}:{bus:02X}:{device:02X}.0",
            nvml_bus_id(g.bus_id),
            domain,
            bus,
            device,
            f"0x{(m.pci_device_id << 16) | 0x10DE:08x}",
            f"0x{m.pci_subsystem_id:08x}",
            ARCHITECTURES[m.architecture],
            cc_major,
            cc_minor,
            m.memory_mib << 20,
            m.reserved_mib << 20,
            0,
            BRANDS[m.brand],
            int(m.mig_capable),
            int(g.mig_enabled),
            m.max_mig_devices,
            m.multiprocessors,
            g.name,
        ]
        lines.append("\t".join(str(f) for f in fields))
    for g in prof.gpus:
        for mig in g.mig_devices:
            p = mig.profile
            fields = [
                "mig",
                g.index,
                mig.uuid,
                mig.gi,
                mig.ci,
                p.memory_mib << 20,
                p.slices,
                p.slices,
                p.multiprocessors,
                p.copy_engines,
                p.decoders,
                p.encoders,
                p.jpegs,
                p.ofas,
                p.name,
            ]
            lines.append("\t".join(str(f) for f in fields))
    return "\n".join(lines) + "\n"


def write_data(tree: Tree, prof: Profile, nodes: str) -> None:
    """``etc/nvhook-mock/nvml.txt`` and ``profile.json`` (which also records the node mode)."""
    tree.write(f"{DATA_DIR}/nvml.txt", _nvml_data(prof))
    summary = {"profile": prof.name, "nodes": nodes, "machine": _plain(prof)}
    tree.write(f"{DATA_DIR}/profile.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")


def _plain(value: object) -> object:
    """``value`` with every :class:`Frozen` in it turned into a dict of its fields (for JSON)."""
    if isinstance(value, Frozen):
        return {name: _plain(getattr(value, name)) for name in value.__frozen_fields__}
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value
