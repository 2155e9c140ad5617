"""``nvhook cdi generate``: write a CDI spec for this host's GPUs (:mod:`nvhook.tools.generate`)."""

from __future__ import annotations

import os
import sys

import click

from nvhook.cli.options import host_options
from nvhook.tools.generate import KINDS, NAME_STRATEGIES, default_output

__all__ = ["generate"]

#: What CDI registries read (the reference library: ``.json`` and ``.yaml``; not ``.yml``).
_SUFFIX_FORMATS = {".json": "json", ".yaml": "yaml"}


def _output_and_format(output: str | None, fmt: str | None, kind: str = "gpu") -> tuple[str, str]:
    """The file to write (``-``: stdout) and its format, from the flags given."""
    if output is None:
        chosen = fmt or "json"
        return default_output(kind, chosen), chosen
    if output == "-":
        return output, fmt or "json"
    by_suffix = _SUFFIX_FORMATS.get(os.path.splitext(output)[1])
    if by_suffix is None:
        raise click.BadParameter(
            f"{output!r} must end in .json or .yaml (CDI registries read only those)",
            param_hint="--output",
        )
    if fmt is not None and fmt != by_suffix:
        raise click.BadParameter(
            f"--format {fmt} does not match the extension of {output!r}", param_hint="--format"
        )
    return output, by_suffix


def _kind_part(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--vendor`` and ``--class`` as the CDI spec requires them (a bad one is a usage error)."""
    from oci.cdi.names import class_name_problem, vendor_name_problem

    if value is None:
        return None
    problem = (vendor_name_problem if param.name == "vendor" else class_name_problem)(value)
    if problem is not None:
        raise click.BadParameter(problem)
    return value


def _kind_choices(
    kind: str, strategies: tuple[str, ...], no_all_device: bool, capabilities: str | None
) -> None:
    """The flags that apply to ``kind`` only (a usage error before any discovery)."""
    if strategies and kind != "gpu":
        raise click.BadParameter(
            f"applies to --kind gpu only, not {kind}", param_hint="--device-name-strategy"
        )
    if no_all_device and kind not in ("gpu", "imex-channel"):
        raise click.BadParameter(
            f"--kind {kind} has the one device all", param_hint="--no-all-device"
        )
    if capabilities is not None and kind not in ("gpu", "management"):
        raise click.BadParameter(
            f"applies to --kind gpu and management only, not {kind}",
            param_hint="--capabilities",
        )


def _capabilities(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    from nvhook.requests.policy import canonical_capabilities

    items = [s.strip() for s in value.split(",") if s.strip()]
    if not items:
        raise click.BadParameter("empty list", param_hint="--capabilities")
    try:
        return canonical_capabilities(items)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--capabilities") from None


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
    help="Vendor part of the kind.",
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
    from nvhook.edits import Host
    from nvhook.tools.generate import generate_spec, summary
    from oci.cdi.version import minimum_version
    from oci.cdi.write import Format, dump_spec, write_spec

    _kind_choices(kind, strategies, no_all_device, capabilities)
    path, chosen = _output_and_format(output, fmt, kind)
    if hook_path is not None and not os.path.isabs(hook_path):
        raise click.BadParameter(f"{hook_path!r} is not absolute", param_hint="--hook-path")
    host = Host(
        root=root,
        driver_root=driver_root or "",
        dev_root=dev_root or "",
        hook_path=hook_path or "",
    )
    generated = generate_spec(
        host,
        vendor=vendor,
        class_name=class_name,
        capabilities=_capabilities(capabilities),
        kind=kind,
        name_strategies=strategies or None,
        all_device=not no_all_device,
    )
    fmt_: Format = "json" if chosen == "json" else "yaml"
    if path == "-":
        sys.stdout.buffer.write(dump_spec(generated.spec, format=fmt_))
        sys.stdout.flush()
        return
    write_spec(path, generated.spec, format=fmt_)
    version = minimum_version(generated.spec)
    click.echo(summary(generated, output=path, version=version), err=True)
