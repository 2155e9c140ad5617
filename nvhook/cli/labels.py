"""``nvhook labels``: GPU Feature Discovery's node labels (:mod:`nvhook.deviceplugin.labels`)."""

from __future__ import annotations

import click

from nvhook.cli.options import host_options

__all__ = ["labels"]


@click.command()
@host_options
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="The device plugin's YAML configuration: its migStrategy and time-slicing shape the "
    "labels, its flags.gfd.outputFile is the default --output (default: every default).",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    help="Write the labels to this Node Feature Discovery feature file, atomically, instead of "
    "printing them (NFD reads /etc/kubernetes/node-feature-discovery/features.d/).",
)
@click.option(
    "--health-state-file",
    default="/run/nvhook/device-plugin/gpu-health.json",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The device plugin's health state file: where it exists, per-GPU health labels "
    "(nvidia.com/gpu.health, nvidia.com/gpu.N.health, .xid) are added (the config's "
    "health.stateFile wins).",
)
def labels(
    root: str,
    driver_root: str | None,
    dev_root: str | None,
    config_file: str | None,
    output: str | None,
    health_state_file: str,
) -> None:
    """Print GPU Feature Discovery's labels for this node (nvidia.com/gpu.product, .count,
    .memory, .family, MIG and time-slicing labels…), one key=value line each: the format of
    Node Feature Discovery's local feature files."""
    from nvhook.deviceplugin.config import load_config
    from nvhook.deviceplugin.healthstate import read_health_state
    from nvhook.deviceplugin.labels import (
        health_labels,
        labels_text,
        node_labels,
        read_node,
        write_feature_file,
    )
    from nvhook.planner import Host

    config = load_config(config_file)
    for note in config.notes:
        click.echo(f"nvhook labels: warning: {note}", err=True)
    output = output or config.gfd_output_file or None
    host = Host(root=root, driver_root=driver_root or "", dev_root=dev_root or "")
    driver, gpus = read_node(host)
    found = node_labels(driver, gpus, config)
    state = read_health_state(config.health.state_file or health_state_file)
    if state is not None:
        found = dict(sorted((found | health_labels(state)).items()))
    if output is None:
        click.echo(labels_text(found), nl=False)
    else:
        write_feature_file(output, found)
        click.echo(f"{output}: {len(found)} labels", err=True)
