"""What the Kubernetes daemons' commands share (``nvhook device-plugin``, ``dra-plugin``,
``labels``): their API, health and follow options (their stop on SIGTERM, which ``nvhook
watch`` shares too, is :func:`nvhook.cli.options.stop_on_signals`). A module of its own, not
:mod:`nvhook.cli.options`, as it imports :mod:`nvhook.kubeapi` (``ssl``, ``http.client``),
which the other commands never need."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from nvhook.cli.options import poll_interval_option
from nvhook.kubeapi import SERVICE_ACCOUNT

__all__ = [
    "DEFAULT_HEALTH_STATE",
    "api_server_option",
    "follow_options",
    "followed_interval",
    "health_interval_option",
    "health_state_option",
    "service_account_option",
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


def follow_options(what: str) -> Callable[[F], F]:
    """``--follow-gpus/--no-follow-gpus`` (on by default) and ``--follow-interval``: the
    daemon follows the node's GPUs through the one watcher (:class:`nvhook.watch.Watcher`);
    ``what`` says what a change brings up to date. The command gets ``follow_gpus`` and
    ``follow_interval``; :func:`followed_interval` makes them the daemon's one argument."""

    def decorate(f: F) -> F:
        f = poll_interval_option(
            "--follow-interval",
            "With --follow-gpus: seconds between looks at /proc (procfs cannot be "
            "watched with inotify).",
        )(f)
        return click.option(
            "--follow-gpus/--no-follow-gpus",
            default=True,
            show_default=True,
            help="Follow the node's GPUs (nvhook watch's watcher): a MIG re-layout, MIG mode, "
            f"a GPU lost or added {what} without a restart.",
        )(f)

    return decorate


def followed_interval(follow_gpus: bool, interval: float) -> float | None:
    """The daemons' ``follow_interval`` argument: None when the GPUs are not followed."""
    return interval if follow_gpus else None
