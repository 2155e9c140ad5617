"""``nvhook-hook``: the OCI hooks nvhook injects into containers (docs/architecture.md D7).

Each command reads the container's OCI state on stdin (runc writes it there),
finds what it needs from it, and does one small job:

=================  ===============  ===============================================
command            lifecycle        what it does
=================  ===============  ===============================================
create-container   createContainer  all of a container's createContainer work in one
                                    process (one interpreter start): the private driver
                                    params of ``--params`` (see :mod:`.device_files`), the
                                    links of ``--link`` and ``--device-link``, then the ld
                                    cache of ``--folder``; what
                                    nvhook injects (``create-symlinks`` and
                                    ``update-ldcache`` stay for specs made before)
update-ldcache     createContainer  writes ``/etc/ld.so.conf.d/00-nvhook.conf`` for the
                                    driver's library folders and runs the host's
                                    ``ldconfig -r ROOTFS`` (see :mod:`.ldcache`)
create-symlinks    createContainer  creates links such as ``libcuda.so -> libcuda.so.1``,
                                    idempotently (see :mod:`.symlinks`)
netdev             createRuntime    moves host network interfaces into the container's
                                    network namespace and renames them (see :mod:`.netdev`)
prestart           prestart         hook mode: devices, device cgroup, driver mounts, ld
                                    cache and links for a created container, as the shim
                                    would have put them in its spec (see :mod:`.prestart`)
=================  ===============  ===============================================

Hooks run as root on the host over a rootfs the image controls, so every path in
it goes through :mod:`.safepath`, and the injected hooks carry an explicit
environment and an isolated interpreter (:mod:`.edits`). This module stays
light: no click, no pyroute2 at import time; each command's module is imported
when it runs.

Exit codes (:class:`oci.errors.ExitCode`): 0 done (or an optional step skipped,
with the reason on stderr), 2 usage, 3 unreadable state or config.json, 11 the
hook refused to act (a path escaping the rootfs, a conflicting link, a missing
interface).
"""

from __future__ import annotations

import os
import sys

from nvhook.errors import HookError
from oci.errors import Error, ExitCode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from oci.state import State

__all__ = [
    "COMMANDS",
    "PROGRAM",
    "USAGE",
    "UsageError",
    "container_env",
    "create_container",
    "main",
    "parse_args",
    "read_state",
    "rootfs_of",
]

#: The program name (``args[0]`` of every injected hook).
PROGRAM = "nvhook-hook"

#: Each command: its options, each mapped to whether it may repeat (every option takes a value).
COMMANDS: dict[str, dict[str, bool]] = {
    "create-container": {
        "--params": False,
        "--link": True,
        "--device-link": True,
        "--folder": True,
        "--ldconfig": False,
        "--cuda-compat": False,
    },
    "update-ldcache": {"--folder": True, "--ldconfig": False},
    "create-symlinks": {"--link": True},
    "netdev": {"--device": True},
    "prestart": {},
}
#: Each command: the options of which at least one must be given.
_REQUIRED: dict[str, tuple[str, ...]] = {
    "create-container": ("--params", "--link", "--device-link", "--folder", "--cuda-compat"),
    "update-ldcache": ("--folder",),
    "create-symlinks": ("--link",),
    "netdev": ("--device",),
}

USAGE = f"""\
usage: {PROGRAM} COMMAND OPTIONS < STATE

The OCI state of the container is read from stdin.

commands:
  create-container [--params FILE] [--link TARGET::LINK]... [--device-link TARGET::LINK]...
                   [--folder DIR]... [--ldconfig PATH] [--cuda-compat HOST_DRIVER_VERSION]
      (createContainer) in one process: mount a copy of the host's driver params FILE
      with ModifyDeviceFiles: 0 read-only over /proc/driver/nvidia/params in the rootfs
      (skipped when the container has none), then create-symlinks (a --device-link only
      when its target is a character device in the rootfs), then update-ldcache; with
      --cuda-compat, the image's CUDA forward compatibility folder
      ($NVIDIA_CUDA_COMPAT_DIR or /usr/local/cuda/compat) comes first in the ld cache when
      its libcuda is newer than the host driver (not when the container sets
      NVIDIA_DISABLE_CUDA_COMPAT=true); at least one option besides --ldconfig
  update-ldcache --folder DIR [--folder DIR]... [--ldconfig PATH]
      (createContainer) list DIRs in /etc/ld.so.conf.d/00-nvhook.conf in the rootfs and run
      the host's ldconfig against the rootfs (default: /sbin/ldconfig.real, /sbin/ldconfig
      or /usr/sbin/ldconfig, whichever exists first)
  create-symlinks --link TARGET::LINK [--link TARGET::LINK]...
      (createContainer) create each symlink LINK -> TARGET in the rootfs; an existing
      identical link is fine, a different one is an error
  netdev --device HOST=NAME [--device HOST=NAME]...
      (createRuntime) move each host network interface HOST into the container's network
      namespace and rename it NAME
  prestart
      (prestart, createRuntime) hook mode: give the created container the GPUs its
      config.json asks for (nodes, device cgroup, driver mounts, ld cache, links), as
      nvhook-runtime would; also installed as nvidia-container-runtime-hook for Docker's
      --gpus
"""


class UsageError(HookError):
    """The command line cannot be understood (exit code 2)."""

    exit_code = ExitCode.USAGE


def parse_args(argv: Sequence[str]) -> tuple[str, dict[str, list[str]]]:
    """Parse ``COMMAND --opt VALUE|--opt=VALUE…``; return the command and each option's values."""
    if not argv:
        raise UsageError(f"no command given (one of: {', '.join(COMMANDS)})")
    command, rest = argv[0], list(argv[1:])
    if command not in COMMANDS:
        raise UsageError(f"unknown command {command!r} (one of: {', '.join(COMMANDS)})")
    known = COMMANDS[command]
    values: dict[str, list[str]] = {opt: [] for opt in known}
    while rest:
        arg = rest.pop(0)
        opt, eq, value = arg.partition("=")
        if opt not in known:
            raise UsageError(f"{command}: unknown option {arg!r} (known: {', '.join(known)})")
        if not eq:
            if not rest:
                raise UsageError(f"{command}: {opt} needs a value")
            value = rest.pop(0)
        if values[opt] and not known[opt]:
            raise UsageError(f"{command}: {opt} given more than once")
        values[opt].append(value)
    required = _REQUIRED.get(command)
    if required is not None and not any(values[opt] for opt in required):
        raise UsageError(f"{command}: at least one {' or '.join(required)} is required")
    return command, values


def read_state(data: bytes) -> State:
    """Parse the OCI state a runtime wrote on the hook's stdin."""
    from oci.state import State

    return State.parse(data, source="container state on stdin")


def rootfs_of(state: State) -> str:
    """The container's rootfs: ``root.path`` of the bundle's config.json, relative to the bundle."""
    from oci.bundle import Bundle

    spec = Bundle(state.bundle).load()
    root = spec.get("root")
    path = root.get("path") if isinstance(root, dict) else None
    if not isinstance(path, str) or not path:
        raise HookError(f"{state.bundle}/config.json: root.path is missing")
    return path if os.path.isabs(path) else os.path.join(state.bundle, path)


def create_container(
    rootfs: str,
    options: dict[str, list[str]],
    *,
    env: Mapping[str, str] | None = None,
    ldconfig: str | None = None,
    log: Callable[[str], None],
) -> None:
    """The steps of ``create-container`` (and of the two older commands) over ``rootfs``,
    from their parsed ``options``, in their order; hook mode (:mod:`.prestart`) runs the same.
    ``env`` is the container's (``--cuda-compat`` reads it), ``ldconfig`` the default for a
    missing ``--ldconfig``."""
    links = options.get("--link", [])
    device_links = options.get("--device-link", [])
    folders = options.get("--folder", [])
    params = options.get("--params", [])
    compat = options.get("--cuda-compat", [])
    if compat:  # the image's newer libcuda before the driver's folders (cuda_compat module)
        folders = _with_compat(rootfs, compat[0], env or {}, folders)
    if params:  # first: the driver must not make nodes for a later step's opens
        from nvhook.hook.device_files import disable_device_file_modification

        disable_device_file_modification(rootfs, params[0])
    if links or device_links:  # first: ldconfig then sees the SONAME links
        from nvhook.hook.create_symlinks import create_symlinks, parse_link

        create_symlinks(
            rootfs,
            [parse_link(spec) for spec in links],
            device_links=[parse_link(spec) for spec in device_links],
        )
    if folders:
        from nvhook.hook.update_ldcache import update_ldcache

        given = options.get("--ldconfig", [])
        update_ldcache(rootfs, folders, ldconfig=given[0] if given else ldconfig, log=log)


def _with_compat(
    rootfs: str, host_driver: str, env: Mapping[str, str], folders: list[str]
) -> list[str]:
    from nvhook.hook.cuda_compat import Compat, compat_in
    from nvhook.hook.update_ldcache import check_folder

    found = compat_in(rootfs, env, host_driver)
    if not isinstance(found, Compat) or not found.used:
        return folders
    try:
        check_folder(found.folder)  # a name ld.so.conf cannot hold is not used
    except Error:
        return folders
    return [found.folder, *(f for f in folders if f != found.folder)]


def container_env(spec: Mapping[str, object]) -> dict[str, str]:
    """``process.env`` of a config.json as a dict (the last definition of a name wins)."""
    process = spec.get("process")
    items = process.get("env") if isinstance(process, dict) else None
    env: dict[str, str] = {}
    for item in items if isinstance(items, list) else ():
        if isinstance(item, str) and "=" in item:
            name, _, value = item.partition("=")
            env[name] = value
    return env


def _run(command: str, options: dict[str, list[str]], stdin: bytes) -> int:
    state = read_state(stdin)

    def log(message: str) -> None:
        print(f"{PROGRAM} {command}: {message}", file=sys.stderr)

    if command == "prestart":
        from nvhook.hook.prestart import prestart

        prestart(state, log=log)
    elif command != "netdev":
        env = None
        if options.get("--cuda-compat"):
            from oci.bundle import Bundle

            env = container_env(Bundle(state.bundle).load())
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
        sys.stdout.write(USAGE)
        return ExitCode.OK
    command = args[0] if args else ""
    try:
        command, options = parse_args(args)
        return _run(command, options, sys.stdin.buffer.read())
    except Error as e:
        prefix = f"{PROGRAM} {command}" if command in COMMANDS else PROGRAM
        print(f"{prefix}: {e}", file=sys.stderr)
        if isinstance(e, UsageError):
            print(f"run `{PROGRAM} --help` for usage", file=sys.stderr)
        return int(e.exit_code)
