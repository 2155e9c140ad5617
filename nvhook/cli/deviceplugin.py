"""``nvhook device-plugin``: the Kubernetes device plugin (:mod:`nvhook.deviceplugin.plugin`)."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

__all__ = ["device_plugin"]


@click.command("device-plugin")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="The device plugin's YAML configuration (default: every default).",
)
@click.option(
    "--device-plugin-path",
    default="/var/lib/kubelet/device-plugins/",
    show_default=True,
    type=click.Path(file_okay=False),
    help="kubelet's device-plugin directory: kubelet.sock is there, the plugin's sockets go there.",
)
@click.option(
    "--check-config",
    "check_file",
    type=click.Path(dir_okay=False),
    help="Validate this configuration file and exit (0 when valid).",
)
@click.option(
    "--health-interval",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.05),
    help="Seconds between health checks of the GPUs.",
)
def device_plugin(
    config_file: str | None,
    device_plugin_path: str,
    check_file: str | None,
    health_interval: float,
) -> None:
    """Serve the host's GPUs to kubelet (device plugin API v1beta1), one socket per resource.

    The host, driver and dev roots come from nvhook's settings ($NVHOOK_CONFIG or
    /etc/nvhook/config.toml), so it runs on a mock machine too. Stops cleanly on SIGTERM,
    removing its sockets."""
    from nvhook.deviceplugin.config import load_config

    if check_file is not None:
        load_config(check_file)
        click.echo(f"{check_file}: valid device plugin configuration")
        return
    from nvhook.deviceplugin.plugin import DevicePlugin
    from nvhook.planner import Host
    from nvhook.settings import load_settings

    config = load_config(config_file)
    host = Host.from_settings(load_settings())
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    plugin = DevicePlugin(
        host,
        config,
        device_plugin_path,
        health_interval=health_interval,
        log=lambda line: click.echo(f"nvhook device-plugin: {line}", err=True),
    )
    plugin.run(stop)
