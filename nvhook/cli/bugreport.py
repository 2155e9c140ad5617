"""``nvhook bug-report [BUNDLE]``: one archive to attach to an issue.

The work is :mod:`nvhook.tools.bugreport`; this module only parses flags and says where
the archive is.
"""

from __future__ import annotations

import click

__all__ = ["bug_report"]


@click.command("bug-report")
@click.argument("bundle", required=False, type=click.Path(file_okay=False, exists=True))
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    help="Where to write the archive (default: ./nvhook-bug-report-<time>.tar.gz).",
)
@click.option(
    "--root",
    default="/",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The host's root (a mock machine's directory, a mounted node).",
)
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    help="nvhook configuration file (default: $NVHOOK_CONFIG, else /etc/nvhook/config.toml).",
)
@click.option(
    "--bin-dir",
    type=click.Path(file_okay=False),
    help="Where nvhook's launchers are (default: beside this interpreter).",
)
def bug_report(
    bundle: str | None,
    output: str | None,
    root: str,
    config: str | None,
    bin_dir: str | None,
) -> None:
    """Write one .tar.gz to attach to an issue: versions, settings, `nvhook doctor --json`,
    `nvhook cdi check`, `nvhook explain --json` of BUNDLE (optional), each engine config
    against nvhook's backup, the shim log's last lines and the MIG layout. Secrets and the
    container's environment values are redacted; the archive stays under 2 MiB. Works
    without the driver loaded.
    """
    import time

    from nvhook.tools.bugreport import bug_report as write

    path = output or time.strftime("nvhook-bug-report-%Y%m%d-%H%M%S.tar.gz")
    try:
        report = write(path, bundle=bundle, root=root, config=config, bin_dir=bin_dir or "")
    except OSError as e:
        raise click.ClickException(f"{path}: cannot write the archive: {e.strerror}") from None
    click.echo(
        f"{report.path}: {report.size} bytes, {len(report.members)} parts; attach it to the issue"
    )
