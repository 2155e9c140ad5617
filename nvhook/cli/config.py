"""``nvhook config import FILE``: nvhook's settings for an nvidia-container-runtime config."""

from __future__ import annotations

import click

__all__ = ["config"]


@click.group()
def config() -> None:
    """nvhook's configuration file (/etc/nvhook/config.toml)."""


@config.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
def import_command(file: str) -> None:
    """Print the nvhook settings equivalent to FILE, a config.toml written for NVIDIA's
    nvidia-container-runtime (/etc/nvidia-container-runtime/config.toml).

    Every key of FILE is either carried over (with the key it came from) or listed,
    commented out, with the reason nvhook has no equivalent. Review the output, then
    save it as /etc/nvhook/config.toml.
    """
    from nvhook.tools.toolkit_import import import_toolkit_config, render_toml

    click.echo(render_toml(import_toolkit_config(file)), nl=False)
