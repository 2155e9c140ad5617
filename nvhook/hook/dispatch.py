"""``nvhook-hook``'s entry point: parse argv, read the state on stdin, run one command.

The commands and what they do are in :mod:`nvhook.hook`; their command line in
:mod:`.args`. Nothing imports this module: it is the launcher's (and the native hook
hands every call it does not do itself to that launcher, docs/architecture.md D13).

Exit codes (:class:`oci.errors.ExitCode`): 0 done (or an optional step skipped,
with the reason on stderr), 2 usage, 3 unreadable state or config.json, 11 the
hook refused to act (a path escaping the rootfs, a conflicting link, a missing
interface).
"""

from __future__ import annotations

import sys

from nvhook.errors import HookError, UsageError
from nvhook.hook import args as cmdline
from oci.errors import Error, ExitCode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from oci.state import State

__all__ = ["main", "read_state", "rootfs_of"]


def read_state(data: bytes) -> State:
    """Parse the OCI state a runtime wrote on the hook's stdin."""
    from oci.state import State

    return State.parse(data, source="container state on stdin")


def rootfs_of(state: State) -> str:
    """The container's rootfs: ``root.path`` of the bundle's config.json, relative to the bundle."""
    from nvhook.rootfs.spec import require_rootfs
    from oci.bundle import Bundle

    return require_rootfs(Bundle(state.bundle).load(), state.bundle)


def _run(command: str, options: dict[str, list[str]], stdin: bytes) -> int:
    state = read_state(stdin)

    def log(message: str) -> None:
        print(f"{cmdline.PROGRAM} {command}: {message}", file=sys.stderr)

    if command == "prestart":
        from nvhook.hook.prestart import prestart

        prestart(state, log=log)
    elif command != "netdev":
        env = None
        if options.get("--cuda-compat"):
            from nvhook.rootfs.spec import container_env
            from oci.bundle import Bundle

            env = container_env(Bundle(state.bundle).load())
        from nvhook.hook.create_container import create_container

        create_container(rootfs_of(state), options, env=env, log=log)
    else:
        from nvhook.hook.netdev import move_devices, parse_device

        devices = [parse_device(spec) for spec in options["--device"]]
        if state.pid is None or state.pid <= 0:
            raise HookError("the container state has no pid: run netdev as a createRuntime hook")
        move_devices(state.pid, devices)
    return ExitCode.OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``nvhook-hook``: parse argv, read the state on stdin, run one command."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help", "help"):
        sys.stdout.write(cmdline.USAGE)
        return ExitCode.OK
    command = args[0] if args else ""
    try:
        command, options = cmdline.parse_args(args)
        return _run(command, options, sys.stdin.buffer.read())
    except Error as e:
        prefix = f"{cmdline.PROGRAM} {command}" if command in cmdline.COMMANDS else cmdline.PROGRAM
        print(f"{prefix}: {e}", file=sys.stderr)
        if isinstance(e, UsageError):
            print(f"run `{cmdline.PROGRAM} --help` for usage", file=sys.stderr)
        return int(e.exit_code)
