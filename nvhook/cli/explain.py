"""``nvhook explain``: what the shim would inject into a bundle, and why.

The work is :mod:`nvhook.tools.explain`; this module only parses flags and renders.
"""

from __future__ import annotations

import json

import click

__all__ = ["explain"]


@click.command()
@click.option(
    "--bundle",
    "-b",
    required=True,
    type=click.Path(file_okay=False),
    help="OCI bundle whose config.json is read (never written).",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False),
    help="Use this host root instead of the configuration's host.root.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="nvhook configuration file (default: $NVHOOK_CONFIG, else /etc/nvhook/config.toml).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def explain(bundle: str, root: str | None, config_file: str | None, as_json: bool) -> None:
    """Show what the container of BUNDLE asks for and from where, the policy decisions,
    the requirement checks, the mode, and the edits the runtime shim would apply,
    grouped by kind. Writes nothing.

    When the shim would fail, the error is the answer ("would fail: ...") and the
    exit code is the shim's.
    """
    from nvhook.tools.explain import explain as do_explain
    from nvhook.tools.explain import render_text

    data = do_explain(bundle, config_path=config_file, root=root)
    if as_json:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        click.echo(render_text(data), nl=False)
    outcome = data["outcome"]
    if outcome["result"] == "fail":
        raise click.exceptions.Exit(outcome["exit_code"])
