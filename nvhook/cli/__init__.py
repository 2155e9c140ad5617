"""The ``nvhook`` command line: one click group; each command lives in its own module,
imported only when it runs (:class:`nvhook.cli.lazy.LazyGroup`).

Commands parse flags, call one library function and render its result. Expected
failures (:class:`oci.errors.Error`, the root of the ``oci`` and ``nvhook`` errors) are
printed as one line on stderr and exit with their code; anything else is a bug and
shows a traceback (with locals when ``NVHOOK_DEBUG=1``).

This module imports no click: :func:`main` first offers ``nvhook cdi generate …`` to
:mod:`nvhook.cli.cdi_generate_fast` (the same job, same output, without click's import
cost), and otherwise runs the group of :mod:`nvhook.cli.group`, which ``cli`` also names.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    import click

__all__ = ["COMMANDS", "cli", "main", "report_bug"]


#: Every command, imported only when it runs (``nvhook --help`` imports them all).
COMMANDS: dict[str, str] = {
    "bench": "nvhook.cli.bench:bench",
    "bug-report": "nvhook.cli.bugreport:bug_report",
    "cdi": "nvhook.cli.cdi:cdi",
    "config": "nvhook.cli.config:config",
    "demo": "nvhook.cli.demo:demo",
    "device-plugin": "nvhook.cli.deviceplugin:device_plugin",
    "doctor": "nvhook.cli.doctor:doctor",
    "dra-plugin": "nvhook.cli.draplugin:dra_plugin",
    "explain": "nvhook.cli.explain:explain",
    "info": "nvhook.cli.info:info",
    "install-entrypoints": "nvhook.cli.entrypoints:install_entrypoints_command",
    "labels": "nvhook.cli.labels:labels",
    "mock": "nvhook.cli.mock:mock",
    "nri-plugin": "nvhook.cli.nri:nri_plugin",
    "runtime": "nvhook.cli.engines:runtime",
    "watch": "nvhook.cli.watch:watch",
}


def __getattr__(name: str) -> click.Group:
    """``cli``: the click group (:mod:`nvhook.cli.group`), imported when first named."""
    if name == "cli":
        from nvhook.cli.group import cli

        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``nvhook`` console script and launcher."""
    args = list(argv) if argv is not None else sys.argv[1:]
    if args[:2] == ["cdi", "generate"]:
        from nvhook.cli.cdi_generate_fast import main as generate_main

        rc = generate_main(args[2:])
        if rc is not None:
            return rc
    from nvhook.cli.group import run_click

    return run_click(args)


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
