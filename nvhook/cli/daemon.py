"""What the Kubernetes daemons' commands share (``nvhook device-plugin``, ``dra-plugin``,
``labels``): their API and health options, and the stop on SIGTERM. A module of its own,
not :mod:`nvhook.cli.options`, as it imports :mod:`nvhook.kubeapi` (``ssl``,
``http.client``), which the other commands never need."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import click

from nvhook.kubeapi import SERVICE_ACCOUNT

__all__ = [
    "DEFAULT_HEALTH_STATE",
    "api_server_option",
    "health_interval_option",
    "health_state_option",
    "service_account_option",
    "stop_on_signals",
]

F = TypeVar("F", bound=Callable[..., Any])


def service_account_option(help: str) -> Callable[[F], F]:
    """``--service-account-dir``: where the pod's token and ``ca.crt`` are."""
    return click.option(
        "--service-account-dir",
        default=SERVICE_ACCOUNT,
        show_default=True,
        type=click.Path(file_okay=False),
        help=help,
    )


def api_server_option(flag: str) -> Callable[[F], F]:
    """``--api-server URL``, which goes with ``flag`` (the option naming the node)."""
    return click.option(
        "--api-server",
        metavar="URL",
        help=f"With {flag}: the API server (default: the pod's in-cluster one).",
    )


#: where ``nvhook device-plugin`` writes the GPUs' health, and ``labels``/``doctor`` read it
#: (``nvhook.deviceplugin.healthstate.DEFAULT_STATE_FILE``: the CLI must not import it)
DEFAULT_HEALTH_STATE = "/run/nvhook/device-plugin/gpu-health.json"


def health_state_option(help: str) -> Callable[[F], F]:
    """``--health-state-file``: the device plugin's GPU health file (written or read)."""
    return click.option(
        "--health-state-file",
        default=DEFAULT_HEALTH_STATE,
        show_default=True,
        type=click.Path(dir_okay=False),
        help=help,
    )


#: ``--health-interval``: seconds between the daemon's health checks of the GPUs.
health_interval_option = click.option(
    "--health-interval",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.05),
    help="Seconds between health checks of the GPUs.",
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
