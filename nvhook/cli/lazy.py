"""A click group that imports a subcommand's module only when that subcommand runs.

``nvhook cdi generate`` used to import every command's module (click, the engine
configurators with tomlkit, the mock machine builder, ...) before running one, about two
thirds of its whole cost. A :class:`LazyGroup` knows its commands as ``name ->
"module:attribute"`` and imports one in :meth:`~LazyGroup.get_command`; ``--help`` lists
every name (and imports each, to show its short help). ``tests/nvhook/cli/test_lazy.py``
checks that every entry loads a command of its own name and that running one command
imports no other command's module.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

import click

__all__ = ["LazyGroup"]


class LazyGroup(click.Group):
    """A group whose ``lazy_commands`` (name -> ``"module:attribute"``) load when used."""

    def __init__(
        self, *args: object, lazy_commands: Mapping[str, str] | None = None, **kwargs: object
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy_commands: dict[str, str] = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy_commands.get(cmd_name)
        if target is None or cmd_name in self.commands:
            return super().get_command(ctx, cmd_name)
        module_name, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command) or command.name != cmd_name:
            raise TypeError(f"{target} is not the click command {cmd_name!r}")
        self.add_command(command)
        return command
