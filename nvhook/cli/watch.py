"""``nvhook watch``: follow the node's GPUs and keep the generated CDI spec (and labels) current,
for a node where neither the device plugin nor the DRA driver runs (:mod:`nvhook.watch`)."""

from __future__ import annotations

import click

from nvhook.cli.options import host_options, poll_interval_option, stop_on_signals
from nvhook.constants import CDI_OUTPUT

__all__ = ["watch"]


@click.command()
@host_options
@click.option(
    "-o",
    "--output",
    default=CDI_OUTPUT,
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The generated CDI spec to keep current (replaced by rename on each change).",
)
@poll_interval_option(
    "--interval",
    "Seconds between looks at /proc and /dev (procfs cannot be watched with inotify).",
)
@click.option(
    "--nvml-interval",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=1, max=3600),
    help="Seconds between NVML checks when /proc shows no change (NVML is also asked on "
    "each /proc change).",
)
@click.option("--no-nvml", is_flag=True, help="Never ask NVML (no MIG UUID changes seen).")
@click.option(
    "--labels-output",
    type=click.Path(dir_okay=False),
    help="Also keep this NFD feature file of `nvhook labels` current (needs nvhook[kubernetes]).",
)
@click.option(
    "--config",
    "labels_config",
    type=click.Path(dir_okay=False, exists=True),
    help="The device plugin's config for the labels (MIG strategy, sharing).",
)
@click.option("--once", is_flag=True, help="Bring the spec (and labels) up to date, then exit.")
def watch(
    root: str,
    driver_root: str | None,
    dev_root: str | None,
    output: str,
    interval: float,
    nvml_interval: float,
    no_nvml: bool,
    labels_output: str | None,
    labels_config: str | None,
    once: bool,
) -> None:
    """Watch the driver, the GPUs, their MIG layouts, IMEX channels, device majors and the
    spec's driver files; on a change, rewrite the CDI spec (then the labels file), logging
    each step with what changed. Stops cleanly on SIGTERM."""
    from nvhook.planner import Host
    from nvhook.watch import Refresher, Watcher

    host = Host(root=root, driver_root=driver_root or "", dev_root=dev_root or "")
    refresher = Refresher(
        host, output=output, labels_output=labels_output, labels_config=labels_config
    )
    if once:
        refresher.refresh()
        return
    stop = stop_on_signals()
    watcher = Watcher(host, interval=interval, nvml_interval=nvml_interval, nvml=not no_nvml)
    refresher.watcher = watcher
    refresher.refresh()
    watcher.subscribe(refresher)
    watcher.log(f"watching {root} every {interval:g} s (NVML every {nvml_interval:g} s)")
    watcher.run(stop)
    watcher.log("stopped")
