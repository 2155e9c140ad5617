"""``nvhook runtime configure|unconfigure``: point an engine at nvhook-runtime (engines)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import click

from nvhook.engines import (
    DEFAULT_BACKUP_DIR,
    DEFAULT_CONFIGS,
    DEFAULT_NAME,
    ENGINES,
    apply_plan,
    apply_unconfigure,
    check_runtime_path,
    default_runtime_path,
    plan_configure,
    plan_unconfigure,
    unified_diff,
)
from nvhook.errors import EngineConfigError, EngineWriteError

__all__ = ["runtime"]

_RESTART = {
    "containerd": "restart containerd (systemctl restart containerd) to load it",
    "docker": "restart dockerd (systemctl restart docker) to load it",
    "crio": "reload CRI-O (systemctl reload crio) to load it",
    "podman": "podman reads it at its next command",
}

_engine_option = click.option(
    "--runtime",
    "engine",
    required=True,
    type=click.Choice(ENGINES),
    help="The container engine whose configuration to change.",
)
_config_option = click.option(
    "--config",
    type=click.Path(dir_okay=False),
    help="The engine's config file; default: "
    + ", ".join(f"{e} {path}" for e, path in DEFAULT_CONFIGS.items())
    + ".",
)
_backup_option = click.option(
    "--backup-dir",
    default=DEFAULT_BACKUP_DIR,
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where the originals of changed files are kept for `unconfigure`.",
)
_dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Print a unified diff of the changes; write nothing."
)


@click.group()
def runtime() -> None:
    """Configure containerd, Docker, CRI-O or podman to run containers through nvhook-runtime."""


@runtime.command()
@_engine_option
@_config_option
@click.option(
    "--name",
    default=DEFAULT_NAME,
    show_default=True,
    help="The runtime's name: containerd's runtime handler (a RuntimeClass's handler), "
    "docker/podman --runtime NAME, CRI-O's runtime handler.",
)
@click.option("--set-as-default", is_flag=True, help="Also make it the default runtime.")
@click.option(
    "--enable-cdi",
    is_flag=True,
    help="Also switch the engine's own CDI on, which applies the specs in /etc/cdi and "
    "/var/run/cdi: containerd enable_cdi = true (off by default in 1.7, on in 2.x) for CRI "
    "CDI devices; docker features.cdi = true in daemon.json (off by default before 28.2) "
    "for docker run --device nvidia.com/gpu=N.",
)
@click.option(
    "--nri",
    "enable_nri",
    is_flag=True,
    help='containerd: also switch NRI on (plugins."io.containerd.nri.v1.nri".disable = '
    "false; off by default in 1.7, on in 2.x), for nvhook nri-plugin.",
)
@click.option(
    "--runtime-path",
    help="The nvhook-runtime to run (absolute; default: the one beside this Python).",
)
@_backup_option
@_dry_run_option
def configure(
    engine: str,
    config: str | None,
    name: str,
    set_as_default: bool,
    enable_cdi: bool,
    enable_nri: bool,
    runtime_path: str | None,
    backup_dir: str,
    dry_run: bool,
) -> None:
    """Add runtime NAME, running nvhook-runtime, to the engine's configuration.

    Everything else in the file is kept (comments, order, formatting); the original is
    saved under --backup-dir first, and running it again changes nothing.
    """
    binary = check_runtime_path(runtime_path or default_runtime_path())
    with _needs_root("configure"):
        plan = plan_configure(
            engine,
            config=config,
            name=name,
            runtime_path=binary,
            set_as_default=set_as_default,
            enable_cdi=enable_cdi,
            enable_nri=enable_nri,
        )
    for note in plan.notes:
        click.echo(f"nvhook: {note}", err=True)
    if dry_run:
        click.echo(unified_diff(plan.changes), nl=False)
        if not plan.changed:
            click.echo(f"nvhook: {plan.config} already has runtime {name!r}", err=True)
        return
    with _needs_root("configure"):
        written = apply_plan(plan, backup_dir)
    if not written:
        click.echo(f"{plan.config} already has runtime {name!r}: nothing changed")
        return
    for path in written:
        click.echo(f"wrote {path}")
    click.echo(f"originals saved under {backup_dir}; {_RESTART[engine]}")


@runtime.command()
@_engine_option
@_config_option
@_backup_option
@_dry_run_option
@click.option("--force", is_flag=True, help="Also restore files changed since nvhook wrote them.")
def unconfigure(
    engine: str, config: str | None, backup_dir: str, dry_run: bool, force: bool
) -> None:
    """Put back the files `configure` changed: the original bytes, or no file at all.

    Refuses a file changed since nvhook wrote it, unless --force.
    """
    with _needs_root("unconfigure"):
        plan = plan_unconfigure(engine, config or DEFAULT_CONFIGS[engine], backup_dir, force=force)
    for note in plan.notes:
        click.echo(f"nvhook: {note}", err=True)
    if dry_run:
        click.echo(unified_diff(plan.changes), nl=False)
        return
    changes = plan.changed
    with _needs_root("unconfigure"):
        apply_unconfigure(plan, backup_dir)
    for change in changes:
        click.echo(f"{'restored' if change.new is not None else 'removed'} {change.path}")
    if plan.record is not None:
        click.echo(_RESTART[engine])


@contextlib.contextmanager
def _needs_root(command: str) -> Iterator[None]:
    """Turn a permission failure of a user other than root into "needs root".

    Engines' configs and the backup directory belong to root; a plain user gets
    "permission denied" on whichever file comes first (often the backup directory), which
    reads as if --backup-dir were wrong. Any other failure passes through unchanged.
    """
    try:
        yield
    except EngineConfigError as e:
        if os.geteuid() == 0 or not isinstance(e.__cause__, PermissionError):
            raise
        review = ", or review the change first with --dry-run" if command == "configure" else ""
        raise EngineWriteError(
            f"runtime {command} needs root (running as uid {os.geteuid()}): "
            f"{e.message}; run it with sudo{review}"
        ) from e
