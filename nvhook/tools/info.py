"""``nvhook info``: what this host has for containers, as plain data.

:func:`host_info` returns a dict of plain values (str, int, bool, None, lists,
dicts; JSON as is), always in the same order for the same host:

- ``roots``: the host, driver and dev roots looked under;
- ``driver``: whether the kernel module is loaded, its version and kind (``/proc``),
  the CUDA version (NVML), and the problem when the module or NVML is unusable;
- ``gpus``: in NVML index order, each GPU's index, name, UUID, PCI bus id, device
  minor and node, whether MIG mode is on (NVML; None without it), and its MIG devices
  (``<gpu>:<mig>`` name, UUID, GPU/compute instance ids, profile, the ``nvidia-caps``
  nodes); ``nodes_missing`` lists those of its nodes that the dev root lacks;
- ``nvswitches`` and ``imex_channels``: the NVSwitch and IMEX channel nodes the dev
  root has (what ``NVIDIA_NVSWITCH=enabled`` and ``NVIDIA_IMEX_CHANNELS=all`` give);
- ``capabilities``: per driver capability, in canonical order, the libraries,
  binaries and configuration files found (paths inside the driver root), and what is
  missing: only files this driver version ships (:func:`nvhook.discover.catalog.expected`),
  and the fabric manager and IMEX files only on hosts with NVSwitches or IMEX channels;
- ``searched``: where driver files were looked for, once for every capability;
- ``firmware``, ``ipc`` (sockets found), ``problems`` (one line each);
- ``error``: None when at least one GPU is usable, else one line saying what is wrong
  and what to do (the driver is not loaded, it sees no GPU, the GPUs' nodes are missing,
  or every GPU is in MIG mode without MIG devices); ``nvhook info`` then exits 6.

It never raises for what a host lacks: a driver that is not loaded, or NVML that
cannot be initialised, is reported in ``driver.problem`` and the rest is filled
from what is still there (``/proc`` without NVML has no MIG UUIDs, no MIG mode and
no CUDA version; without the module, the driver files are still listed, their version
taken from the libraries).
"""

from __future__ import annotations

import os
from typing import Any

from nvhook.constants import ALL_CAPABILITIES
from nvhook.devices.gpus import HostGpus, from_nvml, from_procfs
from nvhook.devices.procfs import ProcDriver, read_driver, read_mig_minors
from nvhook.discover import discover_driver_files
from nvhook.discover.nodes import imex_nodes, nvswitch_nodes
from nvhook.errors import DriverError
from nvhook.planner import Host, nvml_library_dir

__all__ = ["host_info", "render_text"]

#: ``/dev/nvidia-nvswitchctl``'s minor: the control node, not a switch.
_NVSWITCHCTL_MINOR = 255


def host_info(host: Host) -> dict[str, Any]:
    """Everything ``nvhook info`` shows about ``host`` (see the module docstring)."""
    problems: list[str] = []
    driver: dict[str, Any] = {
        "loaded": False,
        "version": None,
        "kernel_module": None,
        "cuda_version": None,
        "problem": None,
    }
    proc: ProcDriver | None = None
    try:
        proc = read_driver(host.root)
    except DriverError as e:
        driver["problem"] = e.message
    gpus: HostGpus | None = None
    profiles: dict[tuple[int, int], str] = {}
    mig_modes: dict[int, bool] = {}
    nvswitches: list[str] = []
    imex: list[str] = []
    if proc is not None:
        driver.update(
            loaded=True,
            version=proc.version,
            kernel_module="open" if proc.open_module else "proprietary",
        )
        try:
            gpus, cuda, profiles, mig_modes = _nvml(host)
            driver["cuda_version"] = cuda
        except DriverError as e:
            driver["problem"] = (
                f"{e.message} (GPUs from /proc: no MIG UUIDs, no MIG mode, no CUDA version)"
            )
            gpus = from_procfs(proc)
        try:
            nodes = nvswitch_nodes(dev_root=host.dev_root, majors=proc.majors)
            nvswitches = [n.path for n in nodes.device_nodes if n.minor != _NVSWITCHCTL_MINOR]
            nodes = imex_nodes(None, dev_root=host.dev_root, majors=proc.majors)
            imex = [n.path for n in nodes.device_nodes]
        except DriverError as e:
            problems.append(e.message)
    files = discover_driver_files(
        host.driver_root,
        ALL_CAPABILITIES,
        driver_version=proc.version if proc is not None else None,
        host_root=host.root,
    )
    if driver["version"] is None:
        driver["version"] = files.driver_version
    problems += files.problems
    # the fabric manager and IMEX files belong only on hosts with that hardware, the Xorg
    # files only where a GPU has a display engine, a config only beside its library
    lacking = files.lacking(
        models=tuple(g.model for g in gpus.gpus) if gpus is not None else (),
        nvswitch=bool(nvswitches),
        imex_channels=bool(imex),
    )
    searched = [path for c in files.capabilities for path in c.searched]
    gpu_list = [] if gpus is None else _gpus(gpus, profiles, mig_modes, host.dev_root)
    return {
        "roots": {"root": host.root, "driver_root": host.driver_root, "dev_root": host.dev_root},
        "driver": driver,
        "gpus": gpu_list,
        "nvswitches": nvswitches,
        "imex_channels": imex,
        "capabilities": [
            {
                "name": c.capability,
                "libraries": list(c.libraries),
                "binaries": list(c.binaries),
                "configs": list(c.configs),
                "missing": list(lacking.get(c.capability, ())),
            }
            for c in files.capabilities
        ],
        "searched": list(dict.fromkeys(searched)),
        "firmware": list(files.firmware),
        "ipc": [*files.ipc, *([files.mps_pipe_dir] if files.mps_pipe_dir else [])],
        "problems": problems,
        "error": _error(host, proc, driver, gpu_list),
    }


def _error(
    host: Host, proc: ProcDriver | None, driver: dict[str, Any], gpus: list[dict[str, Any]]
) -> str | None:
    """Why no GPU is usable, and what to do, in one line; None when one is."""
    if proc is None:
        version_file = os.path.join(host.root, "proc/driver/nvidia/version")
        if not os.path.exists(version_file):
            found = f" (user space {driver['version']} is installed)" if driver["version"] else ""
            return (
                f"no usable GPU: the NVIDIA kernel module is not loaded{found}, {version_file} "
                "does not exist: load it (modprobe nvidia; dmesg tells why it refuses), or "
                "pass the host's root with --root"
            )
        return f"no usable GPU: {driver['problem']}: reinstall the driver or check --root"
    if not gpus:
        gpus_dir = os.path.join(host.root, "proc/driver/nvidia/gpus")
        return (
            f"no usable GPU: the driver is loaded but sees no GPU ({gpus_dir} is empty): "
            "check that the GPU is on the PCI bus (lspci -d 10de:) and dmesg for NVRM errors"
        )
    if all(g["node"] in g["nodes_missing"] for g in gpus):
        nodes = ", ".join(g["node"] for g in gpus)
        return (
            f"no usable GPU: no GPU device node under {host.dev_root} ({nodes}): create them "
            "(nvidia-modprobe -c <minor>, or udev), or pass the right --dev-root"
        )
    if all(g["mig_enabled"] and not g["migs"] for g in gpus):
        return (
            "no usable GPU: every GPU is in MIG mode without MIG devices: create instances "
            "(nvidia-smi mig -cgi <profile> -C) or disable MIG mode (nvidia-smi -mig 0)"
        )
    return None


def _nvml(host: Host) -> tuple[HostGpus, str, dict[tuple[int, int], str], dict[int, bool]]:
    """The NVML view, the CUDA version, each MIG device's profile by (gpu, mig index), and
    each GPU's MIG mode by index."""
    from nvhook.devices.nvml import open_nvml

    with open_nvml(nvml_library_dir(host.driver_root)) as nvml:
        cuda = nvml.driver().cuda_version
        infos = nvml.gpus()
    profiles = {(g.index, m.index): m.profile for g in infos for m in g.migs}
    modes = {g.index: g.mig_enabled for g in infos}
    return from_nvml(infos, read_mig_minors(host.root)), cuda, profiles, modes


def _gpus(
    gpus: HostGpus,
    profiles: dict[tuple[int, int], str],
    mig_modes: dict[int, bool],
    dev_root: str,
) -> list[dict[str, Any]]:
    def missing(*nodes: str) -> list[str]:
        return [n for n in nodes if not os.path.exists(os.path.join(dev_root, n.lstrip("/")))]

    return [
        {
            "index": g.index,
            "name": g.model,
            "uuid": g.uuid,
            "bus_id": g.bus_id,
            "minor": g.minor,
            "node": f"/dev/nvidia{g.minor}",
            "mig_enabled": mig_modes.get(g.index, True if g.migs else None),
            "nodes_missing": missing(f"/dev/nvidia{g.minor}")
            + [
                n
                for m in g.migs
                for n in missing(
                    f"/dev/nvidia-caps/nvidia-cap{m.gi_caps_minor}",
                    f"/dev/nvidia-caps/nvidia-cap{m.ci_caps_minor}",
                )
            ],
            "migs": [
                {
                    "name": m.name,
                    "uuid": m.uuid,
                    "gi": m.gi,
                    "ci": m.ci,
                    "profile": profiles.get((g.index, m.index)),
                    "nodes": [
                        f"/dev/nvidia-caps/nvidia-cap{m.gi_caps_minor}",
                        f"/dev/nvidia-caps/nvidia-cap{m.ci_caps_minor}",
                    ],
                }
                for m in g.migs
            ],
        }
        for g in gpus.gpus
    ]


def render_text(info: dict[str, Any]) -> str:
    """``info`` for a person: one section per part, the same text for the same data."""
    lines: list[str] = []
    driver = info["driver"]
    roots = info["roots"]
    lines.append(
        f"Roots: host {roots['root']}, driver {roots['driver_root']}, devices {roots['dev_root']}"
    )
    if driver["loaded"]:
        cuda = f", CUDA {driver['cuda_version']}" if driver["cuda_version"] else ""
        lines.append(f"Driver: {driver['version']} ({driver['kernel_module']} kernel module){cuda}")
    else:
        found = f" (user space {driver['version']} found)" if driver["version"] else ""
        lines.append(f"Driver: kernel module not loaded{found}")
    if driver["problem"]:
        lines.append(f"  problem: {driver['problem']}")
    lines.append(f"GPUs: {len(info['gpus'])}")
    for g in info["gpus"]:
        lines.append(
            f"  {g['index']}  {g['name']}  {g['uuid']}  bus {g['bus_id']}  "
            f"minor {g['minor']} ({g['node']})"
        )
        if g["mig_enabled"] and not g["migs"]:
            lines.append(
                "     MIG mode on, no MIG devices: not usable until instances are created "
                "(nvidia-smi mig -cgi)"
            )
        for m in g["migs"]:
            profile = f"  {m['profile']}" if m["profile"] else ""
            uuid = m["uuid"] or "(UUID: NVML only)"
            lines.append(
                f"     MIG {m['name']}  {uuid}  gi {m['gi']} ci {m['ci']}{profile}  "
                f"{', '.join(m['nodes'])}"
            )
        if g["nodes_missing"]:
            lines.append(f"     missing under {roots['dev_root']}: {', '.join(g['nodes_missing'])}")
    for title, nodes in (
        ("NVSwitches", info["nvswitches"]),
        ("IMEX channels", info["imex_channels"]),
    ):
        lines.append(f"{title}: {len(nodes)}" + (f" ({', '.join(nodes)})" if nodes else ""))
    lines.append("Capabilities:")
    for c in info["capabilities"]:
        counts = ", ".join(
            f"{len(c[k])} {k if len(c[k]) != 1 else k[:-1]}"
            for k in ("libraries", "binaries", "configs")
            if c[k]
        )
        state = "found " + counts if counts else "nothing found"
        lines.append(f"  {c['name']}: {state}")
        for path in (*c["libraries"], *c["binaries"], *c["configs"]):
            lines.append(f"      {path}")
        if c["missing"]:
            lines.append(f"    missing: {', '.join(c['missing'])}")
    lines.append(f"Searched: {', '.join(info['searched'])}")
    lines.append(f"Firmware: {', '.join(info['firmware']) or 'none'}")
    lines.append(f"IPC: {', '.join(info['ipc']) or 'none'}")
    for problem in info["problems"]:
        lines.append(f"Problem: {problem}")
    return "\n".join(lines) + "\n"
