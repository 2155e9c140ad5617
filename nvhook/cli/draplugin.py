"""``nvhook dra-plugin``: the Kubernetes DRA driver (:mod:`nvhook.dra.plugin`)."""

from __future__ import annotations

import click

from nvhook.cli.daemon import (
    follow_options,
    followed_interval,
    health_interval_option,
    service_account_option,
)
from nvhook.cli.options import stop_on_signals

__all__ = ["dra_plugin"]


@click.command("dra-plugin")
@click.option(
    "--vendor",
    type=click.Choice(["nvidia", "amd", "intel", "ascend"]),
    default="nvidia",
    show_default=True,
    envvar="NVHOOK_DRA_VENDOR",
    help="Whose devices this driver serves, under that vendor's DRA driver name: nvidia "
    "gpu.nvidia.com, amd gpu.amd.com, intel gpu.intel.com, ascend npu.huawei.com (one "
    "process per vendor on a node with several).",
)
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    required=True,
    help="This node's name (the pool's name; a DaemonSet sets NODE_NAME from spec.nodeName).",
)
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    type=click.Path(dir_okay=False),
    help="A kubeconfig file (default: the pod's service account).",
)
@service_account_option(
    "Where the pod's service-account token and ca.crt are (without --kubeconfig)."
)
@click.option(
    "--plugins-dir",
    default="/var/lib/kubelet/plugins",
    show_default=True,
    type=click.Path(file_okay=False),
    help="kubelet's plugin directory: the driver serves <dir>/<driver name>/dra.sock.",
)
@click.option(
    "--registry-dir",
    default="/var/lib/kubelet/plugins_registry",
    show_default=True,
    type=click.Path(file_okay=False),
    help="kubelet's plugin-watcher directory: the registration socket goes there.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False),
    help="Where the checkpoint of prepared claims lives (default: <plugins-dir>/<driver name>).",
)
@click.option(
    "--cdi-root",
    default="/var/run/cdi",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where the claims' transient CDI specs are written (the runtime's CDI directory).",
)
@health_interval_option
@follow_options("republishes the ResourceSlices (a new pool generation)")
@click.option(
    "--rescan-interval",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0.05),
    help="With --no-follow-gpus: seconds between re-reads of the node's devices (a change "
    "republishes).",
)
@click.option(
    "--device-plugin-dir",
    default="/var/lib/kubelet/device-plugins",
    show_default=True,
    help="kubelet's device-plugin directory: the driver refuses to start when a GPU device "
    "plugin's socket is there (one inventory per node); '' skips the check.",
)
@click.option(
    "--withdraw",
    is_flag=True,
    help="Delete this node's ResourceSlices of the vendor's driver and exit (uninstall).",
)
def dra_plugin(
    vendor: str,
    node_name: str,
    kubeconfig: str | None,
    service_account_dir: str,
    plugins_dir: str,
    registry_dir: str,
    state_dir: str | None,
    cdi_root: str,
    health_interval: float,
    follow_gpus: bool,
    follow_interval: float,
    rescan_interval: float,
    device_plugin_dir: str,
    withdraw: bool,
) -> None:
    """Publish the node's GPUs, MIG devices and IMEX channels as ResourceSlices (driver
    gpu.nvidia.com) and prepare kubelet's claims as transient CDI specs (docs/dra.md);
    with --vendor amd|intel|ascend, that vendor's devices under its own DRA driver's name
    and attributes.

    The host, driver and dev roots come from nvhook's settings ($NVHOOK_CONFIG or
    /etc/nvhook/config.toml), so it runs on a mock machine too. Stops cleanly on SIGTERM,
    removing its sockets; the slices and prepared claims stay for the next start."""
    from nvhook.dra.kubeapi import connect
    from nvhook.dra.plugin import DraPlugin, Publisher
    from nvhook.dra.vendors import driver_name

    api = connect(kubeconfig, service_account=service_account_dir)
    if withdraw:
        driver = driver_name(vendor)
        count = Publisher(api, node_name, driver).withdraw()
        click.echo(
            f"nvhook dra-plugin: deleted {count} ResourceSlices of {driver} on node {node_name}"
        )
        return
    from nvhook.planner import Host
    from nvhook.settings import load_settings

    host = Host.from_settings(load_settings())
    stop = stop_on_signals()
    DraPlugin(
        host,
        node=node_name,
        api=api,
        plugins_dir=plugins_dir,
        registry_dir=registry_dir,
        state_dir=state_dir,
        cdi_root=cdi_root,
        health_interval=health_interval,
        rescan_interval=rescan_interval,
        follow_interval=followed_interval(follow_gpus, follow_interval),
        device_plugin_dir=device_plugin_dir,
        vendor=vendor,
        log=lambda line: click.echo(f"nvhook dra-plugin: {line}", err=True),
    ).run(stop)
