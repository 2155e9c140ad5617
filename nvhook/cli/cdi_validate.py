"""``nvhook cdi validate FILE...``: check CDI spec files; one line per problem."""

from __future__ import annotations

import click

from oci.cdi.validate import validate_file
from oci.errors import ExitCode

__all__ = ["ValidationFailed", "validate"]


class ValidationFailed(click.ClickException):
    """Some file is invalid: exit with ``ExitCode.VALIDATION``, the summary on stderr.

    A ClickException (not ``ctx.exit``) so that the code survives both click's
    standalone mode and :func:`nvhook.cli.main`, which runs click with
    ``standalone_mode=False`` and shows these itself.
    """

    exit_code = int(ExitCode.VALIDATION)


@click.command("validate")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--strict",
    is_flag=True,
    help="Treat warnings (what the CDI spec text requires but the reference library "
    "does not enforce: absolute paths, hook timeouts, annotation keys) as errors.",
)
def validate(files: tuple[str, ...], strict: bool) -> None:
    """Check CDI spec files against the official JSON schema and the reference library's rules.

    Prints one line per problem, `FILE: field.path: message` (warnings say
    `warning:`), and exits with 0 when every file is valid, 12 otherwise.
    """
    errors = warnings = invalid = 0
    for path in files:
        problems = validate_file(path, strict=strict)
        file_errors = 0
        for problem in problems:
            click.echo(str(problem))
            if problem.is_error:
                file_errors += 1
            else:
                warnings += 1
        errors += file_errors
        invalid += file_errors > 0
    noun = "file" if len(files) == 1 else "files"
    summary = f"{len(files)} {noun} checked: {len(files) - invalid} valid, {invalid} invalid"
    summary += f" ({errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)})"
    if errors:
        raise ValidationFailed(summary)
    click.echo(summary, err=True)
