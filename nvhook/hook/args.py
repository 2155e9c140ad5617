"""``nvhook-hook``'s command line: the commands, their options, the usage text.

Read by the dispatcher (:mod:`nvhook.hook.dispatch`) and by hook mode
(:mod:`nvhook.hook.prestart`), which runs the createContainer hooks of the edits in
process and parses their args the same way.
"""

from __future__ import annotations

from nvhook.constants import HOOK_PROGRAM as PROGRAM
from nvhook.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["COMMANDS", "PROGRAM", "USAGE", "parse_args"]

#: Each command: its options, each mapped to whether it may repeat (every option takes a value).
COMMANDS: dict[str, dict[str, bool]] = {
    "create-container": {
        "--params": False,
        "--link": True,
        "--device-link": True,
        "--folder": True,
        "--ldconfig": False,
        "--cuda-compat": False,
        "--application-profile": False,
    },
    "update-ldcache": {"--folder": True, "--ldconfig": False},
    "create-symlinks": {"--link": True},
    "netdev": {"--device": True},
    "prestart": {},
}
#: Each command: the options of which at least one must be given.
_REQUIRED: dict[str, tuple[str, ...]] = {
    "create-container": (
        "--params",
        "--link",
        "--device-link",
        "--folder",
        "--cuda-compat",
        "--application-profile",
    ),
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
                   [--application-profile PROFILE]
      (createContainer) in one process: mount a copy of the host's driver params FILE
      with ModifyDeviceFiles: 0 read-only over /proc/driver/nvidia/params in the rootfs
      (skipped when the container has none), then create-symlinks (a --device-link only
      when its target is a character device in the rootfs), then write PROFILE in the
      rootfs, an NVIDIA application profile whose EGLVisibleDGPUDevices are the
      container's /dev/nvidiaN nodes (skipped when it has none), then update-ldcache; with
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
