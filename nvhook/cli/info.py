"""``nvhook info``: the host's driver, GPUs and driver files (:mod:`nvhook.tools.info`)."""

from __future__ import annotations

import json

import click

from nvhook.cli.options import host_options

__all__ = ["info"]


@click.command()
@host_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def info(root: str, driver_root: str | None, dev_root: str | None, as_json: bool) -> None:
    """Show the driver and CUDA versions, the GPUs and MIG devices, NVSwitches and IMEX
    channels, and per driver capability what was found and what is missing.

    Exits 6, with one line on stderr saying what to do, when the driver is not loaded or
    no GPU is usable (the report is printed all the same)."""
    from nvhook.errors import DriverError
    from nvhook.planner import Host
    from nvhook.tools.info import host_info, render_text

    data = host_info(Host(root=root, driver_root=driver_root or "", dev_root=dev_root or ""))
    if as_json:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        click.echo(render_text(data), nl=False)
    if data["error"]:
        raise DriverError(data["error"])
