"""One runtime call: argv, settings, the create's decision and edit, up to the exec.

:func:`handle` is everything ``nvhook-runtime`` does before it execs the low-level runtime:
read argv as runc reads it (:mod:`oci.argv`), load the settings (and keep the native
front-end's data file for them, :mod:`nvhook.native`), and for a ``create`` (or runc's
``run``) whose container asks for GPUs edit the bundle's config.json
(:func:`nvhook.create.prepare`). It returns the :class:`Exec` to run, or an exit code
once its message is out. Two entry points run it: :mod:`nvhook.shim` (the
``nvhook-runtime`` launcher: :func:`handle`, then :meth:`Exec.run`) and
:mod:`nvhook.server` (``nvhook-shim-server``, in a forked child, for the native
front-end: docs/architecture.md D12). One implementation, two ways to start it.

On every call other than a GPU create this module imports almost nothing (``os``,
``sys``, the argv parser and the settings loader): no pydantic, pynvml, click, yaml or
pyroute2, and no ``json``/``dataclasses`` (docs/architecture.md D5; a test checks
``sys.modules``).

A failure is one line on stderr (``nvhook-runtime: …``), the same message in runc's log
format in the ``--log`` file the caller passed (containerd shows it to the user), a
non-zero exit, the bundle untouched, and no runtime started.

Settings that cannot be loaded (a typo in the config file, a FIFO in its place…) fail
only a ``create`` that asks for GPUs; every other call is passed through with one
warning line (:func:`_without_settings`; README, "When the settings cannot be loaded"),
so one typo cannot stop every container on a node. ``--version`` prints nvhook's
version, then the runtime's.
"""

from __future__ import annotations

import os
import sys
import time
from stat import S_ISREG

from nvhook.constants import FALLBACK_RUNTIMES, VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from nvhook.settings import Settings
    from oci.argv import RuntimeArgs

__all__ = ["PROG", "Exec", "find_runtime", "handle"]

PROG = "nvhook-runtime"
#: PATH when the caller gave none (podman's cleanup call).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The pid the log names: the process that execs the runtime. Set by :mod:`nvhook.server`,
#: whose child runs a call for the native front-end (that process); 0: this one.
_caller_pid = 0


class Exec:
    """How a call ends when nothing failed: ``runtime`` exec'd with the original ``argv``.

    :func:`handle` returns it; :meth:`run` is the shim's last step. ``nvhook-shim-server``
    (:mod:`nvhook.server`, docs/architecture.md D12) runs :func:`handle` in a child of its
    own and calls only :meth:`announce`: the native front-end execs the runtime itself.
    """

    __slots__ = ("args", "argv", "runtime", "settings", "started")

    def __init__(
        self,
        runtime: str,
        argv: Sequence[str],
        args: RuntimeArgs | None,
        settings: Settings | None,
        started: float,
    ) -> None:
        self.runtime = runtime
        self.argv = tuple(argv)
        self.args = args
        self.settings = settings
        self.started = started

    def announce(self) -> None:
        """What is written before the exec: ``--version`` first prints nvhook's version.

        The runtime's own lines follow (Docker, which reads the default runtime's
        ``--version``, takes the last line naming a version). Flushes both streams.
        """
        if self.args is not None and self.args.version:
            sys.stdout.write(f"{PROG} version {VERSION}\n")
        sys.stdout.flush()
        sys.stderr.flush()

    def run(self) -> int:
        """Replace this process with the runtime; returns an exit code only if exec fails."""
        self.announce()
        try:
            os.execv(self.runtime, [self.runtime, *self.argv])
        except OSError as e:
            from nvhook.errors import RuntimeNotFound

            error = RuntimeNotFound(f"cannot exec {self.runtime}: {e.strerror}")
            return _fail(error, self.args, self.settings, self.started)
        raise AssertionError("unreachable")  # pragma: no cover


def handle(argv: Sequence[str] | None = None) -> Exec | int:
    """Everything a call does up to the exec: the :class:`Exec` to run, or an exit code.

    Messages are written to stderr (and the caller's ``--log``) as they happen; a
    failure's code is returned after its message. ``argv``: after the program name
    (default ``sys.argv[1:]``); the cwd, the environment and ``sys.argv[0]`` (this program,
    never chosen as the runtime) are the process's.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    from oci.argv import RuntimeArgs
    from oci.errors import ArgvError

    try:
        args: RuntimeArgs | None = RuntimeArgs.parse(argv, cwd=os.getcwd())
    except ArgvError:
        args = None  # runc refuses this command line itself; let it say so
    settings: Settings | None = None
    warnings: list[str] = []  # for the log: what went wrong without failing the call
    try:
        from nvhook.settings import load_settings

        def frontend_data(
            path: str, st: os.stat_result | None, loaded: Settings, directory: str
        ) -> None:  # the native front-end's data for these settings: one stat when it is there
            from nvhook.native import ensure_data

            ensure_data(path, st, loaded, directory, warnings)

        settings = load_settings(warnings=warnings, loaded=frontend_data)
    except Exception as e:  # ConfigError, or a bug: either way only a GPU create needs them
        return _without_settings(e, argv, args, started)
    try:
        _warn(settings, args, started, warnings)
        runtime = find_runtime(settings.runtime_runtimes)
        if args is not None and args.creates and not args.help and args.bundle is not None:
            from nvhook.create import prepare

            outcome = prepare(args, settings)
            more = [w for w in outcome.decision.warnings if w not in warnings]  # same dir
            _warn(settings, args, started, more)
            _log(settings, args, started, outcome.fields())
        elif settings.runtime_log_level == "debug":
            _log(settings, args, started, {"msg": "pass-through"})
    except Exception as e:
        return _fail(e, args, settings, started)
    return Exec(runtime, argv, args, settings, started)


def _without_settings(
    error: Exception, argv: Sequence[str], args: RuntimeArgs | None, started: float
) -> Exec | int:
    """The settings cannot be loaded (``error``): fail a create that asks for GPUs, pass the rest.

    Passed through with :func:`nvhook.settings.fallback_settings` (the configured runtime
    and log where the file parses as TOML, else the defaults), after one warning line in
    the shim's log and in the caller's ``--log``. Whether a create asks for GPUs is
    decided with the built-in default policy, device-list mounts counted too (they are
    only ever GPU requests): a create that might ask fails visibly with ``error`` rather
    than starting without its GPUs; one that cannot be read is counted as asking.
    """
    settings: Settings | None = None
    try:
        from nvhook.settings import fallback_settings

        settings = fallback_settings()
        if args is not None and args.creates and args.bundle is not None:
            from nvhook.create import asks_for_anything

            policy = settings._replace(policy_accept_volume_mounts=True)
            if asks_for_anything(args.bundle, policy):
                return _fail(error, args, settings, started)
        runtime = find_runtime(settings.runtime_runtimes)
    except Exception as e:
        return _fail(e, args, settings, started)
    from oci.errors import Error

    if isinstance(error, Error):
        problem = str(error)
    else:
        from nvhook.settings import config_path

        problem = (
            f"{config_path()[0]}: internal error loading the settings: "
            f"{type(error).__name__}: {error} (this is a bug)"
        )
    command = args.command if args is not None and args.command else "the call"
    message = (
        f"{problem}; passing {command} through to {runtime} unchanged "
        "(only a create that asks for GPUs needs the settings)"
    )
    _log(settings, args, started, {"level": "warning", "msg": message})
    if args is not None and args.log_path:
        from oci.runclog import write_runc_log

        write_runc_log(
            args.log_path, "warning", f"{PROG}: {message}", log_format=args.log_format or "text"
        )
    return Exec(runtime, argv, args, settings, started)


def find_runtime(candidates: Sequence[str]) -> str:
    """The first executable of ``candidates`` (absolute paths, or names on PATH), else runc.

    This program itself is never chosen, so that it can be installed as ``runc``
    earlier on PATH: no file that is ``sys.argv[0]`` (device and inode, links followed:
    a symbolic or a hard link to it), as the native front-end skips itself.
    """
    me = _identity(sys.argv[0]) if sys.argv and sys.argv[0] else None
    search = (os.environ.get("PATH") or DEFAULT_PATH).split(os.pathsep)
    for name in (*candidates, *FALLBACK_RUNTIMES):
        paths = [name] if "/" in name else [os.path.join(d or ".", name) for d in search]
        for path in paths:
            try:
                st = os.stat(path)
            except (OSError, ValueError):
                continue
            if S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) != me and os.access(path, os.X_OK):
                return path
    from nvhook.errors import RuntimeNotFound

    raise RuntimeNotFound(
        "no low-level runtime found (runtime.runtimes: "
        + ", ".join(candidates)
        + "; also tried "
        + ", ".join(FALLBACK_RUNTIMES)
        + "): install runc or set runtime.runtimes in the configuration"
    )


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _fail(
    error: BaseException,
    args: RuntimeArgs | None,
    settings: Settings | None,
    started: float,
) -> int:
    from oci.errors import Error, ExitCode

    if isinstance(error, Error):
        message = str(error)
        code = int(error.exit_code)
    else:
        import traceback

        traceback.print_exception(error)
        message = f"internal error: {type(error).__name__}: {error} (this is a bug; see stderr)"
        code = int(ExitCode.BUG)
    sys.stderr.write(f"{PROG}: {message}\n")
    if args is not None and args.log_path:
        from oci.runclog import write_runc_log

        write_runc_log(
            args.log_path, "error", f"{PROG}: {message}", log_format=args.log_format or "text"
        )
    if settings is not None:
        _log(settings, args, started, {"level": "error", "msg": message, "exit": code})
    return code


_LEVELS = {"debug": 0, "info": 1, "warning": 2, "error": 3}


def _warn(
    settings: Settings, args: RuntimeArgs | None, started: float, warnings: Sequence[str]
) -> None:
    """Log each of ``warnings`` (a cache directory refused as unsafe, say) at level warning."""
    for message in warnings:
        _log(settings, args, started, {"level": "warning", "msg": message})


#: The mode of a log file the shim creates (the front-end creates it the same).
LOG_MODE = 0o640


def _log(
    settings: Settings,
    args: RuntimeArgs | None,
    started: float,
    fields: dict[str, Any],
) -> None:
    """Append one JSON line to the shim's own log; never raises (a log must not fail a start)."""
    path = settings.runtime_log_file
    level = fields.get("level", "info")
    if not path or _LEVELS.get(level, 1) < _LEVELS.get(settings.runtime_log_level, 1):
        return
    try:
        from oci import jsoncodec

        record: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "level": level,
            "id": args.container_id if args else None,
            "command": args.command if args else None,
            **{k: v for k, v in fields.items() if k != "level"},
            "duration_ms": round((time.monotonic() - started) * 1000, 2),
            "pid": _caller_pid or os.getpid(),
        }
        line = jsoncodec.dumpb(record) + b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, LOG_MODE)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except Exception:
        pass
