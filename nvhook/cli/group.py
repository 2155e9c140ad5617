"""The ``nvhook`` click group, and running it with nvhook's exit codes (:func:`run_click`).

:func:`nvhook.cli.main` imports this module for every command but the argv of
``nvhook cdi generate`` that :mod:`nvhook.cli.cdi_generate_fast` runs without click.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from nvhook.cli import COMMANDS, report_bug
from nvhook.cli.lazy import LazyGroup
from oci.errors import Error, ExitCode

__all__ = ["cli", "run_click"]


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="nvhook", prog_name="nvhook")
def cli() -> None:
    """Give containers NVIDIA GPUs: CDI specs, a runtime shim, hooks and a mock GPU machine."""


def run_click(argv: Sequence[str] | None) -> int:
    """Run the group on ``argv`` (None: ``sys.argv[1:]``); the exit code."""
    try:
        rv = cli.main(args=list(argv) if argv is not None else None, standalone_mode=False)
    except Error as e:
        click.echo(f"nvhook: {e}", err=True)
        return int(e.exit_code)
    except click.exceptions.Abort:
        click.echo("nvhook: aborted", err=True)
        return int(ExitCode.USAGE)
    except click.ClickException as e:
        e.show()
        return int(ExitCode.USAGE) if e.exit_code == 2 else e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except BrokenPipeError:
        return int(ExitCode.OK)
    except Exception:
        report_bug()
        return int(ExitCode.BUG)
    return rv if isinstance(rv, int) else int(ExitCode.OK)
