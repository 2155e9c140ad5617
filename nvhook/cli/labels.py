"""``nvhook labels``: GPU Feature Discovery's node labels (:mod:`nvhook.deviceplugin.labels`)."""

from __future__ import annotations

import threading
from typing import Any

import click

from nvhook.cli.daemon import (
    api_server_option,
    health_state_option,
    service_account_option,
)
from nvhook.cli.options import stop_on_signals

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.deviceplugin.model import PluginConfig
    from nvhook.planner import Host

__all__ = ["labels"]


@click.command()
@click.option(
    "--root",
    type=click.Path(file_okay=False),
    help="The host's root (default: nvhook's settings, host.root, as nvhook device-plugin).",
)
@click.option(
    "--driver-root",
    type=click.Path(file_okay=False),
    help="Where the driver's libraries are (default: --root, else the settings' host.driver_root).",
)
@click.option(
    "--dev-root",
    type=click.Path(file_okay=False),
    help="Where the /dev/nvidia* nodes are (default: --root, else the settings' host.dev_root).",
)
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
@health_state_option(
    "The device plugin's health state file: where it exists, per-GPU health labels "
    "(nvidia.com/gpu.health, nvidia.com/gpu.N.health, .xid) are added (the config's "
    "health.stateFile wins)."
)
@click.option(
    "--node",
    envvar="NODE_NAME",
    help="Apply the labels to this Node through the Kubernetes API (default: $NODE_NAME), with "
    "the pod's service account, instead of printing them; only nvhook's labels under "
    "nvidia.com/ are set or removed.",
)
@api_server_option("--node")
@service_account_option(
    "With --node: where the pod's service account token and ca.crt are (the server is "
    "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)."
)
@click.option(
    "--interval",
    default=0.0,
    type=click.FloatRange(min=0),
    help="Label again every this many seconds until SIGTERM (0: once).",
)
@click.option(
    "--all-vendors",
    is_flag=True,
    help="Also AMD's, Intel's and Ascend's devices: their labellers' labels and the "
    "vendor-neutral accelerator.nvhook.io/ set (vendor, product, memory-mib, class…); NVIDIA's "
    "labels only where its driver is loaded.",
)
@click.option(
    "--presence",
    is_flag=True,
    help="Only nvidia.com/gpu.present, from the PCI bus (an NVIDIA display controller in "
    "/sys/bus/pci/devices under --root): no driver, NVML or /dev/nvidia* needed, so a fresh "
    "node gets the label its GPU DaemonSets select; set when one is there, removed when none "
    "is, no other label touched. With --node; --config, --output and --all-vendors do not "
    "apply.",
)
def labels(
    root: str | None,
    driver_root: str | None,
    dev_root: str | None,
    config_file: str | None,
    output: str | None,
    health_state_file: str,
    node: str | None,
    api_server: str | None,
    service_account_dir: str,
    interval: float,
    all_vendors: bool,
    presence: bool,
) -> None:
    """Print GPU Feature Discovery's labels for this node (nvidia.com/gpu.product, .count,
    .memory, .family, MIG and time-slicing labels…), one key=value line each: the format of
    Node Feature Discovery's local feature files; or write them to such a file (--output), or
    to this node's Node object (--node)."""
    if presence:
        if not node:
            raise click.UsageError("--presence labels a Node: give --node (or set $NODE_NAME)")
        if config_file or output or all_vendors:
            raise click.UsageError(
                "--presence sets one label: --config, --output and --all-vendors do not apply"
            )
        _presence(root, node, api_server, service_account_dir, interval)
        return
    from nvhook.deviceplugin.config import load_config
    from nvhook.planner import Host

    config = load_config(config_file)
    for note in config.notes:
        click.echo(f"nvhook labels: warning: {note}", err=True)
    output = output or config.gfd_output_file or None
    if root is not None:
        host = Host(root=root, driver_root=driver_root or "", dev_root=dev_root or "")
    else:
        from nvhook.settings import load_settings

        host = Host.from_settings(load_settings())
        host = host._replace(
            driver_root=driver_root or host.driver_root, dev_root=dev_root or host.dev_root
        )
    stop = stop_on_signals() if interval else threading.Event()
    while True:
        _once(
            host,
            config,
            output,
            health_state_file,
            node,
            api_server,
            service_account_dir,
            all_vendors,
        )
        if not interval or stop.wait(interval):
            return


def _presence(
    root: str | None, node: str, api_server: str | None, account: str, interval: float
) -> None:
    """``--presence``: the PCI bus's answer on the Node, once or every ``interval`` seconds
    (a failed turn is one line and the next turn tries again)."""
    from nvhook.deviceplugin.nodeapi import client
    from nvhook.deviceplugin.presence import PRESENT, label_presence, presence
    from nvhook.errors import NvhookError
    from nvhook.vendors.model import Host as VendorHost

    if root is None:
        from nvhook.settings import load_settings

        root = load_settings().host_root
    host = VendorHost(root=root or "/")
    creds = client(api_server, account)
    stop = stop_on_signals() if interval else threading.Event()
    said = ""
    while True:
        present = presence(host)
        try:
            patch = label_presence(creds, node, present)
        except NvhookError as e:
            if not interval:
                raise
            line, said = f"nvhook labels: warning: {e.message}; trying again", ""
            click.echo(line, err=True)
        else:
            if present is None:
                bus = host.sys("/sys/bus/pci/devices")
                line = f"node {node}: {bus} cannot be read; {PRESENT} left as it is"
            elif patch:
                line = f"node {node}: {PRESENT} " + (
                    "set" if present else "removed: no NVIDIA GPU on the PCI bus"
                )
            else:
                line = f"node {node}: {PRESENT} " + (
                    "is set" if present else "is not set: no NVIDIA GPU on the PCI bus"
                )
            if line != said:
                click.echo(line, err=True)
                said = line
        if not interval or stop.wait(interval):
            return


def _once(
    host: Host,
    config: PluginConfig,
    output: str | None,
    health_state_file: str,
    node: str | None,
    api_server: str | None,
    service_account_dir: str,
    all_vendors: bool,
) -> None:
    from nvhook.deviceplugin.healthstate import read_health_state
    from nvhook.deviceplugin.labels import (
        health_labels,
        labels_text,
        node_labels,
        read_node,
        write_feature_file,
    )

    if all_vendors:
        found = _all_vendors(host, config)
    else:
        driver, gpus = read_node(host)
        found = node_labels(driver, gpus, config)
    state = read_health_state(config.health.state_file or health_state_file)
    if state is not None:
        found = dict(sorted((found | health_labels(state)).items()))
    if node:
        from nvhook.deviceplugin.nodeapi import client, label_node

        creds = client(api_server, service_account_dir)
        patch = label_node(creds, node, found)
        removed = sum(1 for v in patch.values() if v is None)
        click.echo(
            f"node {node}: {len(patch) - removed} labels set, {removed} removed "
            f"({len(found)} of nvhook's)",
            err=True,
        )
    elif output is None:
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
            vendor_labels.facts_of_nvidia(name, memory, g.compute_capability, sms)
            for g in gpus
            for name, memory, sms in (
                [(f"{g.name} MIG {m.profile}", m.memory_bytes, m.multiprocessors) for m in g.migs]
                if g.mig_enabled
                else [(g.name, g.memory_bytes, g.multiprocessors)]
            )
        ]
    others = discover_all(VendorHost(root=host.root, dev_root=host.dev_root))
    return dict(sorted((found | vendor_labels.node_labels(others, nvidia)).items()))
