"""Errors of the vendor-neutral ``oci`` package.

Every error carries a message meant for a person (it names the file, field or
device at fault) and an ``exit_code`` from :class:`ExitCode`, the one table of
exit codes that the README documents.

Hierarchy::

    Error                  the root shared with ``nvhook.errors``: catch it for "any
    │                      expected failure" (a message for a person and an exit code)
    ├── nvhook.errors.NvhookError   the NVIDIA side, drawn in ``nvhook/errors.py``
    └── OciError
        ├── SpecError          config.json missing, unreadable or not a valid runtime spec
        ├── BundleError        the bundle cannot be read or written (permissions, disk)
        ├── ArgvError          runtime command line that cannot be understood
        └── CdiError
            ├── CdiSpecError     a CDI spec file is invalid (names the file and the field)
            │   └── CdiTrustError  a CDI spec file anyone but root may write (names owner, mode)
            ├── CdiNameError     a qualified device name is malformed
            ├── CdiResolveError  requested devices that no spec defines (names every one)
            ├── CdiApplyError    edits that cannot be applied (host device missing, type)
            └── CdiWriteError    a CDI spec file cannot be written (directory, permissions)

Anything else that escapes a program is a bug (exit code :attr:`ExitCode.BUG`, with a
traceback).
"""

from __future__ import annotations

__all__ = [
    "EXIT_CODE_DOCS",
    "ArgvError",
    "BundleError",
    "CdiApplyError",
    "CdiError",
    "CdiNameError",
    "CdiResolveError",
    "CdiSpecError",
    "CdiTrustError",
    "CdiWriteError",
    "Error",
    "ExitCode",
    "OciError",
    "SpecError",
    "exit_code_table",
]


class ExitCode:
    """Exit codes of every nvhook program (README, "Exit codes").

    Plain ``int`` constants, not an ``IntEnum``: importing ``enum`` has a cost (a row of
    ``bench/figures.py``), and every runtime-shim call imports this module.
    """

    OK = 0
    BUG = 1  # an unexpected exception: a traceback is printed
    USAGE = 2  # bad command-line usage (click's own code too)
    INVALID_SPEC = 3  # config.json is missing or invalid
    INVALID_CDI = 4  # a CDI spec file is invalid
    UNRESOLVED = 5  # a requested device does not exist (CDI name, index, UUID)
    DEVICE = 6  # host discovery failed: driver, NVML, device node
    REQUIREMENT = 7  # an NVIDIA_REQUIRE_* constraint or policy refuses the request
    CONFIG = 8  # nvhook's own configuration file is invalid
    IO = 9  # a file could not be read or written (bundle, spec dir, output)
    RUNTIME = 10  # no low-level runtime found, or exec failed
    HOOK = 11  # a hook refused to act (unsafe path, wrong link)
    VALIDATION = 12  # `cdi validate` found problems, `cdi check` a stale spec, `doctor` a fault


#: What each exit code means, for people (the README's table is made from this).
EXIT_CODE_DOCS: dict[int, str] = {
    ExitCode.OK: "success (the runtime shim execs the low-level runtime, whose code you see)",
    ExitCode.BUG: "an unexpected error: a bug; a traceback is printed (locals with NVHOOK_DEBUG=1)",
    ExitCode.USAGE: "bad command-line usage",
    ExitCode.INVALID_SPEC: "config.json is missing or invalid, or the container's request "
    "(NVIDIA_* variables, annotations, mounts) cannot be parsed",
    ExitCode.INVALID_CDI: "a CDI spec file is invalid (`cdi list` also exits so when any is)",
    ExitCode.UNRESOLVED: "a requested device does not exist: CDI name, GPU index or UUID, MIG id",
    ExitCode.DEVICE: "the driver, /proc, NVML or a host device node cannot be read",
    ExitCode.REQUIREMENT: "an NVIDIA_REQUIRE_* constraint is unmet",
    ExitCode.CONFIG: "nvhook's configuration file, or an engine's config file that "
    "`nvhook runtime configure` edits, is invalid or unsupported",
    ExitCode.IO: "a file could not be read or written (bundle, spec directory, output)",
    ExitCode.RUNTIME: "no low-level runtime was found, or it could not be executed",
    ExitCode.HOOK: "a hook refused to act (a path escaping the rootfs, a conflicting link)",
    ExitCode.VALIDATION: "`cdi validate` found problems, `cdi check` found a spec that no "
    "longer matches the host, or `nvhook doctor` found something broken",
}


def exit_code_table() -> str:
    """The exit codes as a Markdown table."""
    rows = ["| code | name | meaning |", "|---|---|---|"]
    names = {v: k for k, v in vars(ExitCode).items() if k.isupper() and isinstance(v, int)}
    rows += [f"| {code} | `{names[code]}` | {doc} |" for code, doc in EXIT_CODE_DOCS.items()]
    return "\n".join(rows) + "\n"


class Error(Exception):
    """Root of every expected ``oci`` and ``nvhook`` error: a message for a person and an
    exit code (``str()`` is the message alone)."""

    exit_code: int = ExitCode.BUG

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class OciError(Error):
    """Root of the ``oci`` errors (OCI bundles, specs, runtime arguments, CDI)."""


class SpecError(OciError):
    """config.json is missing, unreadable or not a valid runtime spec."""

    exit_code = ExitCode.INVALID_SPEC


class BundleError(OciError):
    """The bundle directory cannot be read or written."""

    exit_code = ExitCode.IO


class ArgvError(OciError):
    """The runtime command line cannot be understood."""

    exit_code = ExitCode.USAGE


class CdiError(OciError):
    """Root of the CDI errors."""

    exit_code = ExitCode.INVALID_CDI


class CdiSpecError(CdiError):
    """A CDI spec file is invalid; the message names the file and the field."""

    exit_code = ExitCode.INVALID_CDI


class CdiTrustError(CdiSpecError):
    """A CDI spec file (or its directory) that someone other than root may write: not read
    (:mod:`oci.cdi.trust`); the message names the file, its owner and mode, and the fix."""

    exit_code = ExitCode.INVALID_CDI


class CdiNameError(CdiError):
    """A qualified device name (``vendor/class=name``) is malformed."""

    exit_code = ExitCode.UNRESOLVED


class CdiResolveError(CdiError):
    """Requested CDI devices that no spec defines; names every one.

    ``no_specs``: the spec directories hold no spec file at all (a producer that
    writes specs can then say which command to run).
    """

    exit_code = ExitCode.UNRESOLVED

    def __init__(
        self, message: str, *, names: tuple[str, ...] = (), no_specs: bool = False
    ) -> None:
        super().__init__(message)
        self.names = names
        self.no_specs = no_specs


class CdiApplyError(CdiError):
    """Edits that cannot be applied to a spec (a host device is missing, a type mismatch)."""

    exit_code = ExitCode.DEVICE


class CdiWriteError(CdiError):
    """A CDI spec file cannot be written (directory, permissions, disk)."""

    exit_code = ExitCode.IO
