"""Click options that several commands share."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from nvhook.settings import Settings

__all__ = [
    "config_option",
    "host_options",
    "load_config",
    "poll_interval_option",
    "stop_on_signals",
]

F = TypeVar("F", bound=Callable[..., Any])

#: ``--config FILE`` (the parameter ``config_file``): which settings file the command reads.
config_option = click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="nvhook configuration file (default: $NVHOOK_CONFIG, else /etc/nvhook/config.toml).",
)


def load_config(config_file: str | None) -> Settings:
    """The settings a command given ``--config config_file`` (None: not given) runs on, as the
    runtime loads them; a ``--config`` file that does not exist is a :class:`ConfigError`."""
    from nvhook.errors import ConfigError
    from nvhook.settings import load_settings

    if config_file is not None and not os.path.exists(config_file):
        raise ConfigError(f"{config_file}: configuration file not found (named by --config)")
    return load_settings(config_file)


def host_options(func: F) -> F:
    """``--root``, ``--driver-root`` and ``--dev-root``: where the host's parts are."""
    for option in reversed(
        (
            click.option(
                "--root",
                default="/",
                show_default=True,
                type=click.Path(file_okay=False),
                help="The host's root: /proc/driver/nvidia and IPC sockets are read under it.",
            ),
            click.option(
                "--driver-root",
                type=click.Path(file_okay=False),
                help="Where the driver's libraries and binaries are (default: --root).",
            ),
            click.option(
                "--dev-root",
                type=click.Path(file_okay=False),
                help="Where the /dev/nvidia* nodes are (default: --root).",
            ),
        )
    ):
        func = option(func)
    return func


def poll_interval_option(name: str, help: str) -> Callable[[F], F]:
    """``name``: seconds between the GPU watcher's looks at /proc (:class:`nvhook.watch.Watcher`;
    its default, :data:`nvhook.watch.DEFAULT_INTERVAL`, and the one bound)."""
    return click.option(
        name,
        default=0.5,
        show_default=True,
        type=click.FloatRange(min=0.05, max=60),
        help=help,
    )


def stop_on_signals(then: Callable[[], None] = lambda: None) -> threading.Event:
    """An event set (and ``then`` called) on SIGTERM or SIGINT: a daemon's clean stop."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        then()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
