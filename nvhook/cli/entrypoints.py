"""``nvhook install-entrypoints``: write the isolated launchers nvhook-runtime and nvhook-hook."""

from __future__ import annotations

import click

from nvhook.tools.entrypoints import install_entrypoints

__all__ = ["install_entrypoints_command"]


@click.command("install-entrypoints")
@click.option(
    "--bin-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where to write the launchers (default: next to this Python interpreter).",
)
@click.option(
    "--python",
    "interpreter",
    default=None,
    help="Absolute path of the interpreter the launchers run (default: this one).",
)
@click.option(
    "--frontend",
    default="auto",
    show_default=True,
    help="nvhook-runtime as the native front-end: auto (built when a C compiler works), "
    "off (the Python launcher), or the path of one built for this --bin-dir.",
)
def install_entrypoints_command(
    bin_dir: str | None, interpreter: str | None, frontend: str
) -> None:
    """Write nvhook-runtime, nvhook-hook, nvidia-container-runtime-hook and nvidia-cdi-hook
    (-I launchers)."""
    notes: list[str] = []
    for path in install_entrypoints(bin_dir, interpreter, notes=notes, frontend=frontend):
        click.echo(str(path))
    for note in notes:
        click.echo(f"note: {note}", err=True)
