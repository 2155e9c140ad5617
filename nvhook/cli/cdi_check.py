"""``nvhook cdi check``: compare every CDI spec with the host (:mod:`nvhook.tools.cdicheck`)."""

from __future__ import annotations

import click

from nvhook.cli.options import config_option, load_config
from oci.cdi.registry import DEFAULT_SPEC_DIRS
from oci.errors import ExitCode

__all__ = ["check"]


@click.command("check")
@click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    metavar="DIR",
    help="CDI spec directory (repeatable; default: the settings' cdi.spec_dirs, "
    f"{' '.join(DEFAULT_SPEC_DIRS)} unless set).",
)
@click.option(
    "--root",
    default="/",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The host's root: the loaded driver is read from ROOT/proc/driver/nvidia/version, "
    "and the specs' host paths are looked up under it (a path already under ROOT, as "
    "`nvhook cdi generate --root ROOT` writes them, as it is).",
)
@config_option
def check(spec_dirs: tuple[str, ...], root: str, config_file: str | None) -> None:
    """Check that every CDI spec (nvhook's and other tools') is still true to this host.

    For each spec file: every bind mount's host file exists and is the kind of file
    its name says (library, program or config: a regular file; socket), every device
    node exists with the spec's type, major and minor, every hook path is an
    executable, and the file parses. For a spec `nvhook cdi generate` wrote (its hooks
    run nvhook-hook), the driver version it was generated for must be the loaded
    driver's. That version is read from the names of the driver libraries the spec
    mounts (libnvidia-ml.so.550.54.15 records 550.54.15), not from a field: spec
    annotations would need cdiVersion 0.6.0, which podman 4.3 refuses.

    A spec file the runtime would not trust (not owned by root, writable by group or
    others, a symbolic link, or in a directory that is: its hooks run as root) is a
    finding too, under cdi.untrusted_specs of the settings (--config): refuse, the
    default, fails the check and the file is not checked further; warn reports it as a
    warning and checks the spec.

    Prints one line per finding (FILE: device 'NAME': ENTRY: PROBLEM; FILE: warning: …),
    then each fix once (`run: nvhook cdi generate`). Exits 0 when every spec matches the
    host (or there is none, or there are only warnings), 12 when anything is stale,
    invalid or refused as untrusted.
    """
    from nvhook.tools.cdicheck import check_specs, spec_files

    settings = load_config(config_file)
    dirs = spec_dirs or settings.cdi_spec_dirs
    findings = check_specs(dirs, root=root, untrusted=settings.cdi_untrusted_specs)
    for finding in findings:
        click.echo(finding.line)
    for fix in dict.fromkeys(f.fix for f in findings):
        click.echo(fix)
    if any(f.severity == "error" for f in findings):
        raise click.exceptions.Exit(int(ExitCode.VALIDATION))
    count = len(spec_files(dirs))
    if count:
        click.echo(f"{count} CDI spec file(s) in {', '.join(dirs)}: all match the host")
    else:
        click.echo(f"no CDI spec in {', '.join(dirs)}; run: nvhook cdi generate")
