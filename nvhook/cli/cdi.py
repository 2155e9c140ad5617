"""``nvhook cdi``: validate, list and inject CDI specs (and generate them from the host)."""

from __future__ import annotations

import click

__all__ = ["cdi"]


@click.group()
def cdi() -> None:
    """Work with CDI (Container Device Interface) specs."""
