"""``nvhook bench``: what nvhook adds to a container start here (:mod:`nvhook.tools.startcost`)."""

from __future__ import annotations

import os
import sys

import click

__all__ = ["bench"]


@click.command()
@click.option("--runs", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="Timed runs per row.")  # fmt: skip
@click.option("--profile", default="h100-pcie", show_default=True,
              help="The mock machine of the GPU rows (`nvhook mock profiles`).")  # fmt: skip
@click.option("--runc", type=click.Path(dir_okay=False, exists=True),
              help="The runc to compare with (default: runc on PATH).")  # fmt: skip
@click.option("--bin-dir", type=click.Path(file_okay=False),
              help="Where the nvhook-runtime and nvhook-hook launchers are (default: beside "
              "this Python).")  # fmt: skip
def bench(runs: int, profile: str, runc: str | None, bin_dir: str | None) -> None:
    """Measure, in a few seconds, what nvhook adds to a container start here: a pass-through
    call against runc's own, a create without and with a GPU request (on a private mock
    machine; with the server as root) and the createContainer hook (as root).

    Everything runs in a temporary directory that is removed afterwards: the node's
    settings, CDI specs, server and /run/nvhook are not used, and no container starts."""
    from nvhook.tools.startcost import BenchError, measure, render

    directory = bin_dir or os.path.dirname(os.path.abspath(sys.executable))
    try:
        rows = measure(directory, runs=runs, profile=profile, runc=runc)
    except BenchError as e:
        raise click.ClickException(str(e)) from None
    click.echo(render(rows, runs, profile), nl=False)
