"""``nvhook-hook``'s entry point: parse argv, read the state on stdin, run one command.

The commands and what they do are in :mod:`nvhook.hook`; their command line in
:mod:`.args`. Nothing imports this module: it is the launcher's (and the native hook
hands every call it does not do itself to that launcher, docs/architecture.md D13).

Exit codes (:class:`oci.errors.ExitCode`): 0 done (or an optional step skipped,
with the reason on stderr), 2 usage, 3 unreadable state or config.json, 11 the
hook refused to act (a path escaping the rootfs, a conflicting link, a missing
interface, a GPU or MIG layout the container's CDI spec recorded that no longer holds).

Before any step, ``create-container`` checks the records a generated CDI spec (or jit mode)
puts in the container's env (:mod:`nvhook.gpurecords`: each GPU's ``/proc`` entry, each
MIG-mode GPU's layout): :func:`check_records`. An engine that resolves CDI itself (podman,
containerd, Docker) runs this hook but not ``nvhook-runtime``'s check, so this is where a
start from a spec written before a MIG re-layout or a GPU loss is refused, with one line,
instead of starting with the old names' nodes. Hook mode (``prestart``) does not check: its
edits are made for the container at hand.
"""

from __future__ import annotations

import sys

from nvhook.errors import HookError, UsageError
from nvhook.hook import args as cmdline
from oci.errors import Error, ExitCode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from oci.state import State

__all__ = ["check_records", "main", "read_state", "rootfs_of"]


def read_state(data: bytes) -> State:
    """Parse the OCI state a runtime wrote on the hook's stdin."""
    from oci.state import State

    return State.parse(data, source="container state on stdin")


def rootfs_of(state: State) -> str:
    """The container's rootfs: ``root.path`` of the bundle's config.json, relative to the bundle."""
    from nvhook.rootfs.spec import require_rootfs
    from oci.bundle import Bundle

    return require_rootfs(Bundle(state.bundle).load(), state.bundle)


def check_records(env: Mapping[str, str]) -> None:
    """Refuse (:class:`~nvhook.errors.HookError`, exit 11) when a GPU the container's env
    records is gone from ``/proc`` or a recorded MIG layout no longer holds (the native hook
    hands such a call over here)."""
    from nvhook.gpurecords import gone_gpus, stale_layouts

    entries = [f"{k}={v}" for k, v in env.items()]
    retry = (
        "its CDI spec was written before the change: run: nvhook cdi generate (nvhook watch "
        "rewrites the spec within a second of the change), then retry"
    )
    for minor, uuid, where in gone_gpus(entries):
        raise HookError(f"GPU {minor} ({uuid}) is gone: {where} does not exist; {retry}")
    for minor, then, now in stale_layouts(entries):
        state = "MIG mode is off or the GPU is gone" if now is None else f"now {now or 'none'}"
        raise HookError(
            f"GPU {minor}'s MIG layout changed (GPU.compute instances {then} then, {state}), "
            f"so the container's MIG device names mean other instances; {retry}"
        )


def _run(command: str, options: dict[str, list[str]], stdin: bytes) -> int:
    state = read_state(stdin)

    def log(message: str) -> None:
        print(f"{cmdline.PROGRAM} {command}: {message}", file=sys.stderr)

    if command == "prestart":
        from nvhook.hook.prestart import prestart

        prestart(state, log=log)
    elif command != "netdev":
        env = None
        full = command == "create-container"
        if options.get("--cuda-compat") or full:
            from nvhook.rootfs.spec import container_env
            from oci.bundle import Bundle

            env = container_env(Bundle(state.bundle).load())
        if full and env:
            check_records(env)
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
