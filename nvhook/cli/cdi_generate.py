"""``nvhook cdi generate``: write a CDI spec for this host's GPUs (:mod:`nvhook.tools.generate`).

The click command: flags, help and usage errors. What it checks and does lives in
:mod:`nvhook.cli.cdi_generate_fast`, which :func:`nvhook.cli.main` also runs without click for
the argv it is sure of.
"""

from __future__ import annotations

import click

from nvhook.cli.cdi_generate_fast import (
    UsageProblem,
    check,
    kind_part,
    output_and_format,
    run,
)
from nvhook.cli.options import host_options
from nvhook.tools.generate import KINDS, NAME_STRATEGIES

__all__ = ["generate"]


def _output_and_format(output: str | None, fmt: str | None, kind: str = "gpu") -> tuple[str, str]:
    """The file to write (``-``: stdout) and its format, from the flags given."""
    try:
        return output_and_format(output, fmt, kind)
    except UsageProblem as e:
        raise click.BadParameter(e.message, param_hint=e.param_hint) from None


def _kind_part(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--vendor`` and ``--class`` as the CDI spec requires them (a bad one is a usage error)."""
    try:
        return kind_part(param.name or "", value)
    except UsageProblem as e:
        raise click.BadParameter(e.message) from None


@click.command("generate")
@host_options
@click.option(
    "--kind",
    type=click.Choice(KINDS),
    default="gpu",
    show_default=True,
    help="What the spec describes: GPUs and MIG devices; IMEX channels (<vendor>/imex-channel, "
    "a device per channel); management (management.<vendor>/gpu=all: every node, for "
    "monitoring containers); the NVSwitch, GPUDirect Storage, MOFED or GDRCopy nodes "
    "(<vendor>/<kind>=all).",
)
@click.option(
    "--output",
    "-o",
    metavar="PATH|-",
    help="Spec file to write atomically (mode 0644), or - for stdout "
    "[default: /var/run/cdi/nvidia.json for --kind gpu, else nvidia-<kind>.json; "
    ".yaml with --format yaml].",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["yaml", "json"]),
    help="Spec format [default: from the --output extension, else json, which the "
    "runtime shim parses ~20x faster than YAML the first time after a change].",
)
@click.option(
    "--vendor",
    default="nvidia.com",
    show_default=True,
    callback=_kind_part,
    help="Vendor part of the kind; or amd, intel, ascend: that vendor's spec instead "
    "(amd.com/gpu, intel.com/gpu, huawei.com/npu); auto: one for each of them present "
    "[/var/run/cdi/<vendor>.json].",
)
@click.option(
    "--class",
    "class_name",
    callback=_kind_part,
    help="Class of the kind [default: gpu for --kind gpu and management, else the kind].",
)
@click.option(
    "--device-name-strategy",
    "strategies",
    type=click.Choice(NAME_STRATEGIES),
    multiple=True,
    help="How GPUs and MIG devices are named (repeatable): index (0, 0:1), uuid (GPU-..., "
    "MIG-...), type-index (gpu0, mig0:1) [default: index and uuid, which the shim's cdi "
    "mode asks for].",
)
@click.option(
    "--no-all-device",
    is_flag=True,
    help="Leave out the device all (--kind gpu and imex-channel).",
)
@click.option(
    "--capabilities",
    metavar="LIST",
    help="Driver capabilities whose files the spec mounts, comma-separated "
    "(compute,utility,video,graphics,display,ngx,compat32 or all, which includes compat32) "
    "[default: all but compat32: the 32-bit libraries only when asked for].",
)
@click.option(
    "--hook-path",
    type=click.Path(dir_okay=False),
    help="Absolute path of nvhook-hook for the injected hooks "
    "[default: the launcher next to this Python].",
)
def generate(
    root: str,
    driver_root: str | None,
    dev_root: str | None,
    kind: str,
    output: str | None,
    fmt: str | None,
    vendor: str,
    class_name: str | None,
    strategies: tuple[str, ...],
    no_all_device: bool,
    capabilities: str | None,
    hook_path: str | None,
) -> None:
    """Write one CDI spec naming every GPU of this host by index and UUID, every MIG
    device by GPU:MIG index and MIG UUID, and `all`; or, with --kind, the IMEX channels,
    a management spec or the NVSwitch, GDS, MOFED or GDRCopy nodes.

    The spec's own edits hold the control nodes, the driver files of the capabilities
    and the ldcache and symlink hooks; each device holds its device nodes. Bytes are
    deterministic and cdiVersion is the lowest the content allows (0.5.0), which
    podman 4.3 reads.
    """
    params = {
        "root": root,
        "driver_root": driver_root,
        "dev_root": dev_root,
        "kind": kind,
        "output": output,
        "fmt": fmt,
        "vendor": vendor,
        "class_name": class_name,
        "strategies": strategies,
        "no_all_device": no_all_device,
        "capabilities": capabilities,
        "hook_path": hook_path,
    }
    try:
        job = check(params)
    except UsageProblem as e:
        raise click.BadParameter(e.message, param_hint=e.param_hint) from None
    line = run(job)
    if line is not None:
        click.echo(line, err=True)
