"""``nvhook cdi generate`` without click: the checks and the job, and a parser for the common argv.

``nvhook cdi generate`` must cost at most 6x a bare ``python -I -S -c pass`` as a whole process
(``bench/cli.py``); importing click alone costs 2-3x. So this module, which imports no click,
holds what the command does, and :mod:`nvhook.cli.cdi_generate` (the click command: help,
usage errors) calls the same functions:

- :func:`check`: every usage check of the command body, raising :class:`UsageProblem` (the
  click command turns it into ``click.BadParameter``, with the same message and hint);
- :func:`run`: the job (discover, build, write), returning the summary line for stderr;
- :func:`parse`: the flags of ``argv`` as click would parse them, or None when ``argv`` has
  anything it does not handle itself;
- :func:`main`: what :func:`nvhook.cli.main` tries first for ``nvhook cdi generate …``.

**Falling back is the rule.** :func:`main` answers only when the outcome is sure to be what
click's path would produce; it returns None, having done nothing, for anything else, and the
caller then runs click: ``-h``/``--help``, an unknown or abbreviated flag, a short flag with an
attached value (``-oF``), ``--``, a positional argument, a missing value, a flag given a value,
a value outside a choice, a path click's ``Path`` type would refuse, any usage check that
fails, a shell-completion request (``_*_COMPLETE`` in the environment) or an ASCII stderr
(click re-wraps it). So every usage message still comes from click. What it handles is the
same parse as click's: ``--name VALUE`` and ``--name=VALUE`` (``-o VALUE``), the value taken
whatever it looks like, the last of a repeated flag winning, ``--device-name-strategy``
collected in order, the same defaults. ``tests/nvhook/cli/test_cdi_generate_fast.py`` runs
both paths over a table of argv and compares stdout, stderr and the exit code, checks the
option table against the click command's, and compares the parse with click's on random argv.
"""

from __future__ import annotations

import os
import stat
import sys

from nvhook.tools.generate import KINDS, NAME_STRATEGIES, default_output
from oci.errors import Error, ExitCode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["DEFAULTS", "OPTIONS", "UsageProblem", "check", "main", "parse", "run"]

#: Every option string of the command: (parameter, how it takes values).
OPTIONS: dict[str, tuple[str, str]] = {
    "--root": ("root", "value"),
    "--driver-root": ("driver_root", "value"),
    "--dev-root": ("dev_root", "value"),
    "--kind": ("kind", "value"),
    "--output": ("output", "value"),
    "-o": ("output", "value"),
    "--format": ("fmt", "value"),
    "--vendor": ("vendor", "value"),
    "--class": ("class_name", "value"),
    "--device-name-strategy": ("strategies", "multiple"),
    "--no-all-device": ("no_all_device", "flag"),
    "--capabilities": ("capabilities", "value"),
    "--hook-path": ("hook_path", "value"),
}
#: Each parameter's value when its flag is not given.
DEFAULTS: dict[str, object] = {
    "root": "/",
    "driver_root": None,
    "dev_root": None,
    "kind": "gpu",
    "output": None,
    "fmt": None,
    "vendor": "nvidia.com",
    "class_name": None,
    "strategies": (),
    "no_all_device": False,
    "capabilities": None,
    "hook_path": None,
}
#: The parameters click checks against a list of choices.
CHOICES: dict[str, tuple[str, ...]] = {
    "kind": KINDS,
    "fmt": ("yaml", "json"),
    "strategies": NAME_STRATEGIES,
}
#: The parameters of click's ``Path`` type: whether a directory (else a file) is wanted.
PATHS: dict[str, bool] = {"root": True, "driver_root": True, "dev_root": True, "hook_path": False}

#: What CDI registries read (the reference library: ``.json`` and ``.yaml``; not ``.yml``).
_SUFFIX_FORMATS = {".json": "json", ".yaml": "yaml"}


class UsageProblem(Exception):
    """A flag value the command refuses: ``message``, and the flag (None: the one being parsed)."""

    def __init__(self, message: str, param_hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param_hint = param_hint


def output_and_format(output: str | None, fmt: str | None, kind: str = "gpu") -> tuple[str, str]:
    """The file to write (``-``: stdout) and its format, from the flags given."""
    if output is None:
        chosen = fmt or "json"
        return default_output(kind, chosen), chosen
    if output == "-":
        return output, fmt or "json"
    by_suffix = _SUFFIX_FORMATS.get(os.path.splitext(output)[1])
    if by_suffix is None:
        raise UsageProblem(
            f"{output!r} must end in .json or .yaml (CDI registries read only those)", "--output"
        )
    if fmt is not None and fmt != by_suffix:
        raise UsageProblem(f"--format {fmt} does not match the extension of {output!r}", "--format")
    return output, by_suffix


def kind_part(name: str, value: str | None) -> str | None:
    """``--vendor`` (``name`` ``vendor``) or ``--class`` as the CDI spec requires them."""
    from oci.cdi.names import class_name_problem, vendor_name_problem

    if value is None:
        return None
    problem = (vendor_name_problem if name == "vendor" else class_name_problem)(value)
    if problem is not None:
        raise UsageProblem(problem)
    return value


def _kind_choices(
    kind: str, strategies: tuple[str, ...], no_all_device: bool, capabilities: str | None
) -> None:
    """The flags that apply to ``kind`` only (a usage error before any discovery)."""
    if strategies and kind != "gpu":
        raise UsageProblem(f"applies to --kind gpu only, not {kind}", "--device-name-strategy")
    if no_all_device and kind not in ("gpu", "imex-channel"):
        raise UsageProblem(f"--kind {kind} has the one device all", "--no-all-device")
    if capabilities is not None and kind not in ("gpu", "management"):
        raise UsageProblem(
            f"applies to --kind gpu and management only, not {kind}", "--capabilities"
        )


def _capabilities(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    from nvhook.requests.policy import canonical_capabilities

    items = [s.strip() for s in value.split(",") if s.strip()]
    if not items:
        raise UsageProblem("empty list", "--capabilities")
    try:
        return canonical_capabilities(items)
    except ValueError as e:
        raise UsageProblem(str(e), "--capabilities") from None


class Job:
    """The parameters, and what :func:`check` settled from them before any discovery."""

    def __init__(
        self,
        params: dict[str, Any],
        path: str,
        format: str,
        capabilities: tuple[str, ...] | None,
    ) -> None:
        self.params = params
        self.path = path  # "-": stdout
        self.format = format  # "json" | "yaml"
        self.capabilities = capabilities


def check(params: dict[str, Any]) -> Job:
    """The command body's usage checks, in its order; :class:`UsageProblem` for the first."""
    if params["vendor"] in _OTHER_VENDORS:
        return _other_vendor_job(params)
    _kind_choices(
        params["kind"], params["strategies"], params["no_all_device"], params["capabilities"]
    )
    path, fmt = output_and_format(params["output"], params["fmt"], params["kind"])
    hook_path = params["hook_path"]
    if hook_path is not None and not os.path.isabs(hook_path):
        raise UsageProblem(f"{hook_path!r} is not absolute", "--hook-path")
    return Job(params, path, fmt, _capabilities(params["capabilities"]))


#: ``--vendor`` values naming another vendor's spec (``nvhook.tools.vendor_specs``).
_OTHER_VENDORS = ("amd", "intel", "ascend", "auto")


def _other_vendor_job(params: dict[str, Any]) -> Job:
    """``--vendor amd|intel|ascend|auto``: only the host and output flags apply."""
    for name, flag in (
        ("class_name", "--class"),
        ("strategies", "--device-name-strategy"),
        ("capabilities", "--capabilities"),
    ):
        if params[name]:
            raise UsageProblem(f"does not apply to --vendor {params['vendor']}", flag)
    if params["kind"] != "gpu" or params["no_all_device"]:
        flag = "--kind" if params["kind"] != "gpu" else "--no-all-device"
        raise UsageProblem(f"does not apply to --vendor {params['vendor']}", flag)
    output, fmt = params["output"], params["fmt"]
    if params["vendor"] == "auto":
        if output == "-":
            raise UsageProblem(
                "--vendor auto writes one file per vendor: give a directory", "--output"
            )
        fmt = fmt or "json"
    else:
        output, fmt = output_and_format(output, fmt) if output else (None, fmt or "json")
    hook_path = params["hook_path"]
    if hook_path is not None and not os.path.isabs(hook_path):
        raise UsageProblem(f"{hook_path!r} is not absolute", "--hook-path")
    return Job(params, output or "", fmt, None)


def _run_other_vendor(job: Job) -> str | None:
    from nvhook.discover.hooks import default_hook_path
    from nvhook.tools.vendor_specs import write_vendor_specs
    from nvhook.vendors.model import Host

    p = job.params
    host = Host(root=p["root"], dev_root=p["dev_root"] or p["root"])
    lines = write_vendor_specs(
        p["vendor"],
        host,
        output=job.path or None,
        fmt=job.format,
        hook_path=p["hook_path"] or default_hook_path(),
    )
    return "\n".join(lines) or None


def run(job: Job) -> str | None:
    """Generate and write the spec; the summary line for stderr (None: written to stdout)."""
    if job.params["vendor"] in _OTHER_VENDORS:
        return _run_other_vendor(job)
    from nvhook.planner import Host
    from nvhook.tools.generate import generate_spec, summary
    from oci.cdi.version import minimum_version
    from oci.cdi.write import Format, dump_spec, write_spec

    p = job.params
    host = Host(
        root=p["root"],
        driver_root=p["driver_root"] or "",
        dev_root=p["dev_root"] or "",
        hook_path=p["hook_path"] or "",
    )
    generated = generate_spec(
        host,
        vendor=p["vendor"],
        class_name=p["class_name"],
        capabilities=job.capabilities,
        kind=p["kind"],
        name_strategies=p["strategies"] or None,
        all_device=not p["no_all_device"],
    )
    fmt: Format = "json" if job.format == "json" else "yaml"
    if job.path == "-":
        sys.stdout.buffer.write(dump_spec(generated.spec, format=fmt))
        sys.stdout.flush()
        return None
    write_spec(job.path, generated.spec, format=fmt)
    return summary(generated, output=job.path, version=minimum_version(generated.spec))


def parse(args: Sequence[str]) -> dict[str, Any] | None:
    """The parameters click would give the command for ``args`` (after ``cdi generate``).

    None when ``args`` holds anything this parser leaves to click (module docstring),
    including every argv click would refuse.
    """
    params: dict[str, Any] = dict(DEFAULTS)
    strategies: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        option = OPTIONS.get(name)
        if option is None:
            return None  # --help, --, a typo, a positional, -oVALUE: click's to answer
        dest, how = option
        if how == "flag":
            if eq:
                return None  # "does not take a value"
            params[dest] = True
            continue
        if not eq:
            if i == len(args):
                return None  # "requires an argument"
            value = args[i]
            i += 1
        if value not in CHOICES.get(dest, (value,)):
            return None
        if how == "multiple":
            strategies.append(value)
        else:
            params[dest] = value
    params["strategies"] = tuple(strategies)
    for dest, want_dir in PATHS.items():
        if params[dest] is not None and not _path_ok(params[dest], want_dir):
            return None
    for dest in ("vendor", "class_name"):
        try:
            kind_part("vendor" if dest == "vendor" else "class", params[dest])
        except UsageProblem:
            return None
    return params


def _path_ok(value: str, want_dir: bool) -> bool:
    """Whether click's ``Path(file_okay=not want_dir, dir_okay=want_dir)`` accepts ``value``."""
    try:
        st = os.stat(value)
    except OSError:
        return True  # exists=False: a path that is not there is taken as it is
    if stat.S_ISREG(st.st_mode) if want_dir else stat.S_ISDIR(st.st_mode):
        return False
    return os.access(value, os.R_OK)


def _click_would_rewrap_stderr() -> bool:
    """Whether click writes its messages through a stream of its own (stderr absent or ASCII)."""
    import codecs

    stream = sys.stderr
    if stream is None:
        return True
    try:
        return codecs.lookup(getattr(stream, "encoding", None) or "ascii").name == "ascii"
    except LookupError:
        return False


def _echo_err(message: str) -> None:
    """``click.echo(message, err=True)`` where click would not re-wrap stderr."""
    stream = sys.stderr
    if "\x1b" in message:
        try:
            tty = stream.isatty()
        except Exception:
            tty = False
        if not tty:  # click strips ANSI styles from what is not a terminal
            import re

            message = re.sub(r"\033\[[;?0-9]*[a-zA-Z]", "", message)
    stream.write(message + "\n")
    stream.flush()


def main(argv: Sequence[str]) -> int | None:
    """Run ``nvhook cdi generate`` for ``argv`` (after ``cdi generate``) as click's path would.

    None, having done nothing, when the outcome is click's to produce (module docstring).
    """
    if any(k.startswith("_") and k.endswith("_COMPLETE") and v for k, v in os.environ.items()):
        return None  # a shell-completion request
    if _click_would_rewrap_stderr():
        return None
    params = parse(argv)
    if params is None:
        return None
    try:
        job = check(params)
    except UsageProblem:
        return None
    try:
        line = run(job)
    except (EOFError, KeyboardInterrupt):
        _echo_err("")
        _echo_err("nvhook: aborted")
        return int(ExitCode.USAGE)
    except Error as e:
        _echo_err(f"nvhook: {e}")
        return int(e.exit_code)
    except OSError as e:
        import errno

        if e.errno != errno.EPIPE:
            return _bug()
        _pacify()
        raise SystemExit(1) from None  # click's main: a closed pipe exits 1, quietly
    except Exception:
        return _bug()
    if line is not None:
        _echo_err(line)
    return int(ExitCode.OK)


def _bug() -> int:
    from nvhook.cli import report_bug

    report_bug()
    return int(ExitCode.BUG)


class _Pacified:
    """A stream whose ``flush`` ignores a closed pipe (click's ``_PacifyFlushWrapper``)."""

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except OSError as e:
            import errno

            if e.errno != errno.EPIPE:
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


def _pacify() -> None:
    sys.stdout = _Pacified(sys.stdout)
    sys.stderr = _Pacified(sys.stderr)
