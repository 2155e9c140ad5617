"""Click options that several commands share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["host_options"]

F = TypeVar("F", bound=Callable[..., Any])


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
