"""``nvhook mock``: list the mock machine's profiles, lay one out as a fake host, and change a
laid-out one while it is in use (:mod:`nvhook.mock.mutate`): MIG layout, a GPU lost or
back, the driver version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from nvhook.errors import MockOptionError
from nvhook.mock import NodeMode, list_profiles, load_profile
from nvhook.mock import create as create_machine
from nvhook.mock.model import Gpu, Profile

if TYPE_CHECKING:
    from nvhook.mock.layout import MockMachine

__all__ = ["mock"]


@click.group()
def mock() -> None:
    """The mock GPU machine: profiles, and fake hosts laid out from them."""


@mock.command()
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def profiles(names: tuple[str, ...], as_json: bool) -> None:
    """List the machine profiles (or only NAMES) with their GPUs; then the other vendors'
    (AMD, Intel, Ascend, a mixed node)."""
    from nvhook.mock.vendors import is_vendor_profile, list_vendor_profiles, load_vendor_profile

    if names:
        others = [n for n in names if is_vendor_profile(n)]
        loaded = [load_profile(n) for n in names if not is_vendor_profile(n)]
    else:
        others = list(list_vendor_profiles())
        loaded = [load_profile(n) for n in list_profiles()]
    if as_json:
        click.echo(json.dumps([_profile_dict(p) for p in loaded], indent=2))
        return
    for i, p in enumerate(loaded):
        if i:
            click.echo("")
        click.echo(_profile_text(p))
    for n in others:
        if loaded or n != others[0]:
            click.echo("")
        text = " ".join(str(load_vendor_profile(n)["description"]).split())
        click.echo(f"{n} (other vendors): {text}")


@mock.command()
@click.option("--profile", "-p", "profile", required=True, help="Profile name (see `profiles`).")
@click.option(
    "--nodes",
    type=click.Choice(["auto", "char", "file"]),
    default="auto",
    show_default=True,
    help="Device nodes as character devices (root) or regular files; auto: char when root.",
)
@click.option(
    "--device-file-gid",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="The group of the GPU, control and UVM nodes (the driver's NVreg_DeviceFileGID; "
    "44: video). Needs root.",
)
@click.option(
    "--device-file-mode",
    default="0666",
    show_default=True,
    help="Their mode, octal (the driver's NVreg_DeviceFileMode; 0660: the group only).",
)
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def create(
    profile: str, nodes: str, device_file_gid: int, device_file_mode: str, directory: Path
) -> None:
    """Lay out PROFILE as a fake host root at DIRECTORY (new or empty)."""
    from nvhook.mock.vendors import is_vendor_profile

    if is_vendor_profile(profile):
        from nvhook.mock.vendors import create as create_vendor_machine
        from nvhook.vendors.model import Host
        from nvhook.vendors.registry import discover_all

        made = create_vendor_machine(profile, directory, nodes=nodes)
        found = discover_all(Host(str(made.root), str(made.root)))
        counts = ", ".join(f"{len(d)} {v} device(s)" for v, d in found.items())
        click.echo(f"mock machine {profile} at {made.root}: {counts}, nodes as {made.nodes} nodes")
        click.echo(f"  CDI specs: nvhook cdi generate --root {made.root} --vendor auto -o DIR")
        return
    try:
        mode = int(device_file_mode, 8)
    except ValueError:
        raise MockOptionError(
            f"--device-file-mode {device_file_mode!r}: expected an octal mode (e.g. 0660)"
        ) from None
    machine = create_machine(
        profile,
        directory,
        nodes=cast(NodeMode, nodes),
        device_file_gid=device_file_gid,
        device_file_mode=mode,
    )
    p = machine.profile
    migs = sum(len(g.mig_devices) for g in p.gpus)
    click.echo(
        f"mock machine {p.name} at {machine.root}: {len(p.gpus)} GPU(s), {migs} MIG device(s), "
        f"driver {p.driver.version}, device nodes as {machine.nodes} nodes"
    )
    click.echo(f"  NVML:       LD_LIBRARY_PATH={machine.lib_dir} python3 -c 'import pynvml; …'")
    click.echo(f"  nvidia-smi: {machine.bin_dir / 'nvidia-smi'} -L")
    click.echo(f"  ld cache:   ldconfig -p -C {machine.ldcache}")


_ROOT = click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
_SLOT = click.option(
    "--gpu",
    "slot",
    type=click.IntRange(min=0),
    required=True,
    help="The GPU's slot: its index in the profile (a removed GPU does not shift it).",
)


def _changed(machine: MockMachine, what: str) -> None:
    p = machine.profile
    migs = sum(len(g.mig_devices) for g in p.gpus)
    click.echo(
        f"mock machine at {machine.root}: {what}; now {len(p.gpus)} GPU(s), {migs} MIG "
        f"device(s), driver {p.driver.version}"
    )


@mock.command()
@_ROOT
@_SLOT
@click.option(
    "--layout",
    metavar="PROFILES",
    help="GPU-instance profiles, comma-separated, P*N (or N*P) for N of P: 1g.10gb*7, "
    "3g.40gb,2g.20gb*2; empty: MIG mode without instances.",
)
@click.option("--off", is_flag=True, help="Turn MIG mode off.")
def mig(directory: Path, slot: int, layout: str | None, off: bool) -> None:
    """Re-make the MIG layout of a GPU of the mock at DIRECTORY (new MIG UUIDs), in place."""
    from nvhook.mock.mutate import relayout_mig

    if off == (layout is not None):
        raise click.UsageError("give exactly one of --layout PROFILES and --off")
    names: list[str] | None = None
    if layout is not None:
        names = []
        for item in filter(None, (w.strip() for w in layout.split(","))):
            left, star, right = item.partition("*")
            name, count = (right, left) if left.isdigit() else (left, right if star else "1")
            if not count.isdigit() or not name:
                raise click.UsageError(f"--layout: {item!r} is not PROFILE, PROFILE*N or N*PROFILE")
            names += [name] * int(count)
    machine = relayout_mig(directory, slot, names)
    _changed(
        machine,
        f"GPU slot {slot} MIG {'off' if names is None else ','.join(names) or 'on, no instances'}",
    )


@mock.command("remove-gpu")
@_ROOT
@_SLOT
def remove_gpu(directory: Path, slot: int) -> None:
    """Take a GPU off the mock at DIRECTORY (node, procfs entry, NVML record), in place."""
    from nvhook.mock.mutate import remove_gpu as remove

    _changed(remove(directory, slot), f"GPU slot {slot} removed")


@mock.command("add-gpu")
@_ROOT
@_SLOT
def add_gpu(directory: Path, slot: int) -> None:
    """Bring a removed GPU back to the mock at DIRECTORY, in place."""
    from nvhook.mock.mutate import add_gpu as add

    _changed(add(directory, slot), f"GPU slot {slot} added")


@mock.command()
@_ROOT
@click.option("--version", "version", required=True, help="The new driver version (570.86.15).")
@click.option("--cuda", help="The CUDA version it reports (default: unchanged).")
def driver(directory: Path, version: str, cuda: str | None) -> None:
    """Replace the driver of the mock at DIRECTORY by another version, in place."""
    from nvhook.mock.mutate import set_driver

    _changed(set_driver(directory, version, cuda=cuda), f"driver {version}")


@mock.command("unload-driver")
@_ROOT
def unload_driver(directory: Path) -> None:
    """Unload the driver's kernel module of the mock at DIRECTORY (GPUs, nodes, procfs go)."""
    from nvhook.mock.mutate import unload_driver as unload

    _changed(unload(directory), "driver unloaded")


@mock.command("load-driver")
@_ROOT
def load_driver(directory: Path) -> None:
    """Load the driver's kernel module of the mock at DIRECTORY again (its GPUs come back)."""
    from nvhook.mock.mutate import load_driver as load

    _changed(load(directory), "driver loaded")


def _gpu_text(g: Gpu) -> str:
    m = g.model
    line = (
        f"  GPU {g.index}  {g.name}  {g.uuid}  bus {g.bus_id}  minor {g.minor}  "
        f"{m.architecture} {m.compute_capability}  {m.memory_mib} MiB"
    )
    if g.mig_enabled:
        devices = ", ".join(f"{d.profile.name} gi{d.gi}/ci{d.ci} {d.uuid}" for d in g.mig_devices)
        line += f"\n      MIG mode: {devices or 'no instances'}"
    return line


def _profile_text(p: Profile) -> str:
    d = p.driver
    extras = [
        f"{p.nvswitches} NVSwitches" if p.nvswitches else "",
        f"{p.imex_channels} IMEX channels" if p.imex_channels else "",
        "graphics" if p.graphics_config else "",
        "display" if p.display else "",
    ]
    state = "" if d.loaded else ", kernel module not loaded"
    lines = [
        f"{p.name}: {p.description}",
        f"  driver {d.version} ({d.kernel_module} kernel module{state}), CUDA {d.cuda}"
        + "".join(f", {e}" for e in extras if e),
        *(_gpu_text(g) for g in p.gpus),
    ]
    return "\n".join(lines)


def _profile_dict(p: Profile) -> dict[str, Any]:
    return {
        "name": p.name,
        "description": p.description,
        "driver": {
            "version": p.driver.version,
            "cuda": p.driver.cuda,
            "kernelModule": p.driver.kernel_module,
            "loaded": p.driver.loaded,
        },
        "nvswitches": p.nvswitches,
        "imexChannels": p.imex_channels,
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "uuid": g.uuid,
                "busId": g.bus_id,
                "minor": g.minor,
                "architecture": g.model.architecture,
                "computeCapability": g.model.compute_capability,
                "memoryMiB": g.model.memory_mib,
                "migEnabled": g.mig_enabled,
                "migDevices": [
                    {
                        "index": d.index,
                        "uuid": d.uuid,
                        "gi": d.gi,
                        "ci": d.ci,
                        "profile": d.profile.name,
                    }
                    for d in g.mig_devices
                ],
            }
            for g in p.gpus
        ],
    }
