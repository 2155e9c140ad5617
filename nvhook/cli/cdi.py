"""``nvhook cdi``: validate, list, check and inject CDI specs (and generate them from the host)."""

from __future__ import annotations

import json

import click

from nvhook.cli.lazy import LazyGroup
from nvhook.cli.options import config_option, load_config
from oci.cdi.registry import DEFAULT_SPEC_DIRS, Registry
from oci.errors import ExitCode

__all__ = ["cdi"]

_spec_dir_option = click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    metavar="DIR",
    help="CDI spec directory, lowest priority first (repeatable; default: the settings' "
    f"cdi.spec_dirs, {' '.join(DEFAULT_SPEC_DIRS)} unless set).",
)


@click.group(
    cls=LazyGroup,
    lazy_commands={
        "check": "nvhook.cli.cdi_check:check",
        "generate": "nvhook.cli.cdi_generate:generate",
        "validate": "nvhook.cli.cdi_validate:validate",
    },
)
def cdi() -> None:
    """Work with CDI (Container Device Interface) specs."""


@cdi.command("list")
@_spec_dir_option
@config_option
def list_(spec_dirs: tuple[str, ...], config_file: str | None) -> None:
    """Print every resolvable device name with the file that defines it, then any problems.

    Names go to stdout (NAME<TAB>FILE); each file of the directories that is not read
    (only *.json and *.yaml are) is named once on stderr; problems go to stderr, one
    line each, and make the exit code 4. A spec file the runtime would not trust (its
    owner, its mode, a symbolic link, its directory's) is a problem, or, under
    cdi.untrusted_specs = "warn" in the settings (--config), a warning on stderr and its
    devices listed. With no spec at all, stderr says so (exit code 0).
    """
    settings = load_config(config_file)
    dirs = spec_dirs or settings.cdi_spec_dirs
    registry = Registry(dirs, untrusted=settings.cdi_untrusted_specs)
    for name, definition in registry.devices.items():
        click.echo(f"{name}\t{definition.path}")
    for path, why in registry.ignored.items():
        click.echo(f"{path}: {why}", err=True)
    for line in registry.warnings:
        click.echo(line, err=True)
    problems = list(dict.fromkeys(msg for msgs in registry.errors.values() for msg in msgs))
    for msg in problems:
        click.echo(msg, err=True)
    if problems:
        raise click.exceptions.Exit(int(ExitCode.INVALID_CDI))
    if not registry.specs:
        from nvhook.cdihints import GENERATE_HINT

        click.echo(f"no CDI spec in {', '.join(dirs)}; {GENERATE_HINT}", err=True)


@cdi.command()
@click.option(
    "--bundle",
    "-b",
    "bundle",
    required=True,
    type=click.Path(file_okay=False),
    help="OCI bundle whose config.json is edited.",
)
@_spec_dir_option
@click.option("--dry-run", is_flag=True, help="Print the resulting config.json; write nothing.")
@config_option
@click.argument("names", nargs=-1, required=True)
def inject(
    bundle: str,
    spec_dirs: tuple[str, ...],
    dry_run: bool,
    config_file: str | None,
    names: tuple[str, ...],
) -> None:
    """Apply the CDI devices NAMES (vendor/class=name) to BUNDLE/config.json, atomically.

    A name no spec defines fails with the closest known name, or, when there is no
    spec at all, with the command that writes one. Spec files are judged as the runtime
    judges them: cdi.untrusted_specs of the settings (--config) refuses or warns about a
    file not owned by root, writable by group or others, or a symbolic link.
    """
    from nvhook.cdihints import with_hint
    from oci.cdi.inject import inject as do_inject
    from oci.errors import CdiResolveError

    settings = load_config(config_file)
    dirs = spec_dirs or settings.cdi_spec_dirs
    registry = Registry(dirs, untrusted=settings.cdi_untrusted_specs)
    try:
        result = do_inject(bundle, names, registry=registry, dry_run=dry_run)
    except CdiResolveError as e:
        raise with_hint(e, known=registry.devices) from None
    for line in registry.warnings:
        click.echo(line, err=True)
    if dry_run:
        click.echo(json.dumps(result.spec, indent=2, ensure_ascii=False))
    elif not result.written:
        click.echo(f"{bundle}/config.json already has these devices: unchanged", err=True)
