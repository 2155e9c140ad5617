"""``nvhook nri-plugin``: the NRI plugin daemon (:mod:`nvhook.nri.plugin`)."""

from __future__ import annotations

import signal
import sys
import threading
import time
from types import FrameType

import click

__all__ = ["nri_plugin"]


@click.command("nri-plugin")
@click.option(
    "--socket",
    "socket_path",
    type=click.Path(dir_okay=False),
    help="The runtime's NRI socket (default: nri.socket of the settings, /var/run/nri/nri.sock).",
)
@click.option("--name", help="The plugin name to register (default: nri.plugin_name, nvhook).")
@click.option("--index", help="The plugin index, two digits (default: nri.plugin_index, 10).")
def nri_plugin(socket_path: str | None, name: str | None, index: str | None) -> None:
    """Give containers their GPUs through the runtime's NRI, without a RuntimeClass.

    Connects to the runtime's NRI socket and registers; for each container created, makes the
    edits nvhook's runtime shim would make (the same decision, from nvhook's settings:
    $NVHOOK_CONFIG or /etc/nvhook/config.toml) and enforces [policy] and [nri]; reconnects
    when the runtime restarts. Stops cleanly on SIGTERM."""
    from nvhook.nri.plugin import NriPlugin
    from nvhook.settings import load_settings

    settings = load_settings()
    changes = {"nri_socket": socket_path, "nri_plugin_name": name, "nri_plugin_index": index}
    settings = settings._replace(**{k: v for k, v in changes.items() if v is not None})
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        session = plugin.session
        if session is not None:
            session.close()

    def log(line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(f"{stamp} nvhook nri-plugin: {line}", file=sys.stderr, flush=True)

    plugin = NriPlugin(settings, log=log)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    plugin.run(stop)
    log("stopped")
