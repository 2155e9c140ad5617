"""``nvhook doctor``: check this node's driver, settings, CDI specs, engines and cgroups."""

from __future__ import annotations

import json

import click

from nvhook.cli.options import host_options

__all__ = ["doctor"]


def _engine_config(value: str) -> tuple[str, str]:
    from nvhook.engines import ENGINES

    engine, sep, path = value.partition("=")
    if not sep or engine not in ENGINES or not path:
        raise click.BadParameter(
            f"{value!r}: expected ENGINE=PATH with ENGINE one of {', '.join(ENGINES)}",
            param_hint="--engine-config",
        )
    return engine, path


@click.command()
@host_options
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    help="nvhook's config file (default: $NVHOOK_CONFIG, else ROOT/etc/nvhook/config.toml).",
)
@click.option(
    "--bin-dir",
    type=click.Path(file_okay=False),
    help="Where the nvhook-runtime and nvhook-hook launchers are (default: beside this Python).",
)
@click.option(
    "--engine-config",
    "engine_configs",
    multiple=True,
    metavar="ENGINE=PATH",
    help="An engine's config file, instead of its usual one under --root (repeatable).",
)
@click.option(
    "--name",
    default="nvidia",
    show_default=True,
    help="The runtime name `nvhook runtime configure` was given.",
)
@click.option(
    "--backup-dir",
    type=click.Path(file_okay=False),
    help="configure's backups (default: ROOT/var/lib/nvhook/backups).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def doctor(
    root: str,
    driver_root: str | None,
    dev_root: str | None,
    config: str | None,
    bin_dir: str | None,
    engine_configs: tuple[str, ...],
    name: str,
    backup_dir: str | None,
    as_json: bool,
) -> int:
    """Check the driver, nvhook's settings and launchers, the CDI specs, each installed
    engine's configuration and the cgroup setup; for each problem, say what is wrong and
    the command that fixes it.

    Exits 0 when nothing is broken (warnings included), 12 when something is.
    """
    from nvhook.tools.doctor import Options, diagnose, exit_code, render_text, to_json

    opts = Options(
        root=root,
        driver_root=driver_root or "",
        dev_root=dev_root or "",
        config=config,
        bin_dir=bin_dir or "",
        engine_configs=tuple(_engine_config(v) for v in engine_configs),
        runtime_name=name,
        backup_dir=backup_dir or "",
    )
    checks = diagnose(opts)
    if as_json:
        click.echo(json.dumps(to_json(checks), indent=2, ensure_ascii=False))
    else:
        click.echo(render_text(checks), nl=False)
    return exit_code(checks)
