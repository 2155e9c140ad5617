"""``nvhook labels``: GPU Feature Discovery's node labels (:mod:`nvhook.deviceplugin.labels`)."""

from __future__ import annotations

from typing import Any

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
    "labels (default: every default).",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    help="Write the labels to this Node Feature Discovery feature file, atomically, instead of "
    "printing them (NFD reads /etc/kubernetes/node-feature-discovery/features.d/).",
)
@click.option(
    "--all-vendors",
    is_flag=True,
    help="Also AMD's, Intel's and Ascend's devices: their labellers' labels and the "
    "vendor-neutral accelerator.nvhook.io/ set (vendor, product, memory-mib, class…); NVIDIA's "
    "labels only where its driver is loaded.",
)
def labels(
    root: str,
    driver_root: str | None,
    dev_root: str | None,
    config_file: str | None,
    output: str | None,
    all_vendors: bool,
) -> None:
    """Print GPU Feature Discovery's labels for this node (nvidia.com/gpu.product, .count,
    .memory, .family, MIG and time-slicing labels…), one key=value line each: the format of
    Node Feature Discovery's local feature files."""
    from nvhook.deviceplugin.config import load_config
    from nvhook.deviceplugin.labels import labels_text, node_labels, read_node, write_feature_file
    from nvhook.planner import Host

    config = load_config(config_file)
    host = Host(root=root, driver_root=driver_root or "", dev_root=dev_root or "")
    if all_vendors:
        found = _all_vendors(host, config)
    else:
        driver, gpus = read_node(host)
        found = node_labels(driver, gpus, config)
    if output is None:
        click.echo(labels_text(found), nl=False)
    else:
        write_feature_file(output, found)
        click.echo(f"{output}: {len(found)} labels", err=True)


def _all_vendors(host: Any, config: Any) -> dict[str, str]:
    """NVIDIA's GFD labels where its driver answers, then every vendor's and the neutral set."""
    from nvhook.deviceplugin.labels import node_labels, read_node
    from nvhook.errors import NvhookError
    from nvhook.vendors import labels as vendor_labels
    from nvhook.vendors.model import Host as VendorHost
    from nvhook.vendors.registry import discover_all

    found: dict[str, str] = {}
    nvidia: list[vendor_labels.Facts] = []
    try:
        driver, gpus = read_node(host)
    except NvhookError:  # no NVIDIA driver here: the other vendors' labels alone
        pass
    else:
        found |= node_labels(driver, gpus, config)
        nvidia = [
            vendor_labels.facts_of_nvidia(g.name, g.memory_bytes, g.compute_capability)
            for g in gpus
        ]
    others = discover_all(VendorHost(root=host.root, dev_root=host.dev_root))
    return dict(sorted((found | vendor_labels.node_labels(others, nvidia)).items()))
