"""``etc/nvhook-mock`` of a mock machine: what the fake NVML answers, and the profile as JSON.

``nvml.txt`` is one tab-separated line per fact, read by ``csrc/nvml.c`` when the library is
loaded: driver, NVML and CUDA versions, a ``gpu`` line per GPU (its PCI ids, architecture and
brand as NVML's enum values, memory, MIG capability), a ``mig`` line per MIG device, and what
the rest of the implemented API answers from: per GPU its ``topo`` (NUMA node and socket with
their CPUs, the topology level to every GPU), ``sensor`` readings, ``cores`` (its CUDA cores,
where the profile gives them) and ``proc`` processes; per
MIG-capable GPU its GPU-instance profiles (``gip``) and instances (``gi``); the NVLinks
(``nvlink``) and the NVSwitches they go to (``nvswitch``). Everything NVML computes (levels,
CPU sets, MIG profile numbers) is computed here, so that the C side only looks things up.
``profile.json`` is the whole profile, field by field, for tools and tests.
"""

from __future__ import annotations

import json

from nvhook.mock._tree import Tree
from nvhook.mock.model import (
    ARCHITECTURES,
    BRANDS,
    SLICES,
    Gpu,
    Profile,
    parse_bus_id,
)
from oci._frozen import Frozen

__all__ = ["DATA_DIR", "cpu_list", "nvml_bus_id", "write_data"]

DATA_DIR = "etc/nvhook-mock"


def nvml_bus_id(bus_id: str) -> str:
    """NVML's form of a bus id: ``0000:07:00.0`` → ``00000000:07:00.0`` (uppercase hex)."""
    domain, bus, device, _ = parse_bus_id(bus_id)
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def cpu_list(cpus: tuple[int, ...] | list[int]) -> str:
    """CPU numbers in the kernel's cpulist form: ``[0, 1, 2, 5]`` → ``"0-2,5"`` (``-``: none)."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges) or "-"


def _pci_fields(bus_id: str) -> list[object]:
    """bus_legacy, bus, domain, bus number, device: how a ``gpu`` or ``nvswitch`` line starts."""
    domain, bus, device, _ = parse_bus_id(bus_id)
    return [f"{domain:04X}:{bus:02X}:{device:02X}.0", nvml_bus_id(bus_id), domain, bus, device]


def _topology(prof: Profile, g: Gpu) -> list[object]:
    node = prof.numa_node(g.numa_node)
    socket = [n for n in prof.numa_nodes if node is not None and n.socket == node.socket]
    return [
        "topo",
        g.index,
        -1 if node is None else node.id,
        -1 if node is None else node.socket,
        cpu_list(node.cpus if node else ()),
        cpu_list([c for n in socket for c in n.cpus]),
        cpu_list([n.id for n in socket]),
        ",".join(str(prof.topology_level(g, other)) for other in prof.gpus),
    ]


def _sensors(g: Gpu) -> list[object]:
    """Temperature and power rise with utilization from the model's idle readings."""
    m = g.model
    load = g.utilization / 100
    power_mw = round((m.idle_power_w + (m.power_limit_w - m.idle_power_w) * 0.8 * load) * 1000)
    return [
        "sensor",
        g.index,
        m.idle_temperature_c + round(40 * load),
        power_mw,
        m.power_limit_w * 1000,
        g.utilization,
        g.memory_utilization,
    ]


def _mig_profiles(g: Gpu) -> list[list[object]]:
    lines: list[list[object]] = []
    for p in g.model.mig_profiles:
        lines.append(
            [
                "gip",
                g.index,
                p.nvml_index,
                p.id,
                p.slices,
                SLICES // p.slices,
                p.multiprocessors,
                p.copy_engines,
                p.decoders,
                p.encoders,
                p.jpegs,
                p.ofas,
                p.memory_mib,
                p.placement_size,
                ",".join(str(start) for start in p.placements),
                p.name,
            ]
        )
    for gi in sorted(g.gpu_instances, key=lambda gi: gi.id):
        lines.append(["gi", g.index, gi.id, gi.profile.id, gi.placement])
    return lines


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
        cc_major, cc_minor = m.compute_capability.split(".")
        fields: list[object] = [
            "gpu",
            g.minor,
            g.uuid,
            *_pci_fields(g.bus_id),
            f"0x{(m.pci_device_id << 16) | 0x10DE:08x}",
            f"0x{m.pci_subsystem_id:08x}",
            ARCHITECTURES[m.architecture],
            cc_major,
            cc_minor,
            m.memory_mib << 20,
            m.reserved_mib << 20,
            sum(p.used_mib for p in g.processes) << 20,
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
    extra: list[list[object]] = []
    for g in prof.gpus:
        extra.append(_topology(prof, g))
        extra.append(_sensors(g))
        if g.model.cuda_cores:
            extra.append(["cores", g.index, g.model.cuda_cores])
        extra += [["proc", g.index, p.pid, p.used_mib << 20, p.name] for p in g.processes]
        if g.model.mig_capable:
            extra += _mig_profiles(g)
    if prof.nvlink is not None:
        link = prof.nvlink
        extra.append(["nvlink", link.links, link.version])
        device_id = f"0x{(link.switch_pci_device_id << 16) | 0x10DE:08x}"
        extra += [["nvswitch", *_pci_fields(b), device_id] for b in link.switch_bus_ids]
    lines += ["\t".join(str(f) for f in fields) for fields in extra]
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
