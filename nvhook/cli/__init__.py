"""The ``nvhook`` command line: one click group; each command lives in its own module,
imported only when it runs (:class:`nvhook.cli.lazy.LazyGroup`).

Commands parse flags, call one library function and render its result. Expected
failures (:class:`oci.errors.Error`, the root of the ``oci`` and ``nvhook`` errors) are
printed as one line on stderr and exit with their code; anything else is a bug and
shows a traceback (with locals when ``NVHOOK_DEBUG=1``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from nvhook.cli.lazy import LazyGroup
from oci.errors import Error, ExitCode

__all__ = ["COMMANDS", "cli", "main"]


#: Every command, imported only when it runs (``nvhook --help`` imports them all).
COMMANDS: dict[str, str] = {
    "cdi": "nvhook.cli.cdi:cdi",
    "config": "nvhook.cli.config:config",
    "demo": "nvhook.cli.demo:demo",
    "device-plugin": "nvhook.cli.deviceplugin:device_plugin",
    "doctor": "nvhook.cli.doctor:doctor",
    "explain": "nvhook.cli.explain:explain",
    "info": "nvhook.cli.info:info",
    "install-entrypoints": "nvhook.cli.entrypoints:install_entrypoints_command",
    "labels": "nvhook.cli.labels:labels",
    "mock": "nvhook.cli.mock:mock",
    "runtime": "nvhook.cli.engines:runtime",
}


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="nvhook", prog_name="nvhook")
def cli() -> None:
    """Give containers NVIDIA GPUs: CDI specs, a runtime shim, hooks and a mock GPU machine."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``nvhook`` console script."""
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


def report_bug() -> None:
    """Print the traceback of an unexpected exception; with ``NVHOOK_DEBUG=1`` the locals too."""
    exc = sys.exc_info()[1]
    if exc is None:
        return
    import traceback  # ~6 ms: only a bug pays it

    if os.environ.get("NVHOOK_DEBUG") == "1":
        te = traceback.TracebackException.from_exception(exc, capture_locals=True)
        sys.stderr.write("".join(te.format()))
    else:
        traceback.print_exc()
    sys.stderr.write(
        "nvhook: this is a bug; please report it with the traceback above "
        "(set NVHOOK_DEBUG=1 to include local variables)\n"
    )
