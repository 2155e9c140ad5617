"""nvhook.cli.lazy: commands load when they run, and --help still lists every one."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
import pytest

from nvhook.cli import COMMANDS, cli
from nvhook.cli.cdi import cdi
from nvhook.cli.lazy import LazyGroup

#: Every lazy table of the CLI: the top-level group's and the cdi group's.
GROUPS: list[click.Group] = [cli, cdi]


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.name or "nvhook")
def test_every_entry_loads_the_command_of_its_name(group: click.Group) -> None:
    assert isinstance(group, LazyGroup)
    ctx = click.Context(group)
    for name in group.lazy_commands:
        command = group.get_command(ctx, name)
        assert command is not None and command.name == name


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    from nvhook.cli import main

    assert main(["--help"]) == 0
    commands = capsys.readouterr().out.split("Commands:\n", 1)[1]
    assert [line.split()[0] for line in commands.splitlines() if line.strip()] == sorted(COMMANDS)


def test_a_wrong_entry_is_refused() -> None:
    group = LazyGroup(name="g", lazy_commands={"cdi": "nvhook.cli.demo:demo"})
    with pytest.raises(TypeError, match="is not the click command 'cdi'"):
        group.get_command(click.Context(group), "cdi")


def _modules_after(argv: list[str]) -> list[str]:
    """The nvhook.cli modules a fresh interpreter has imported after running ``nvhook ARGV``."""
    code = (
        "import json, sys\nfrom nvhook.cli import main\nrc = main(sys.argv[1:])\n"
        "print(json.dumps([rc, sorted(m for m in sys.modules if m.startswith("
        "('nvhook.cli', 'nvhook.engines', 'nvhook.mock', 'tomlkit')))]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60, check=True
    )
    rc, modules = json.loads(done.stdout.splitlines()[-1])
    assert rc == 0, done.stderr
    return list(modules)


def test_cdi_generate_imports_no_other_command(
    mock_machine: Callable[..., Path], tmp_path: Path
) -> None:
    root = mock_machine("l40s-x4")
    argv = ["cdi", "generate", "--root", str(root), "--output", str(tmp_path / "nvidia.json")]
    # the click-free path (nvhook.cli.cdi_generate_fast) takes this argv
    assert _modules_after(argv) == ["nvhook.cli", "nvhook.cli.cdi_generate_fast"]
    assert (tmp_path / "nvidia.json").exists()
    (tmp_path / "nvidia.json").unlink()
    # a trailing "--" is valid for click but left to it by the fast path: the lazy groups
    assert _modules_after([*argv, "--"]) == [
        "nvhook.cli",
        "nvhook.cli.cdi",
        "nvhook.cli.cdi_generate",
        "nvhook.cli.cdi_generate_fast",
        "nvhook.cli.group",
        "nvhook.cli.lazy",
        "nvhook.cli.options",
    ]
    assert (tmp_path / "nvidia.json").exists()
