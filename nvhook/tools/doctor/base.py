"""What every doctor check shares: :class:`Check`, :class:`Options`, host paths under a root."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

from oci._frozen import Frozen

if TYPE_CHECKING:
    pass


Status = Literal["ok", "warn", "fail"]

NVIDIA_MAJOR = 195
CTL_MINOR = 255
PERSISTENCED_SOCKET = "/run/nvidia-persistenced/socket"
HOOKS_DIRS = ("/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d")
#: NVIDIA's programs that give a container devices outside its spec (devices.allow, eBPF)
LEGACY = ("nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-container-toolkit")
NOT_CONFIGURED = "nvhook's runtime is not configured"
RESTART = {
    "containerd": "systemctl restart containerd",
    "docker": "systemctl restart docker",
    "crio": "systemctl restart crio",
    "podman": "",
}


class Check(Frozen):
    """One finding: ``fix`` is the command that mends it ("" when ok)."""

    area: str
    status: Status
    message: str
    fix: str = ""


class Options(Frozen):
    """Where to look. Empty strings and None mean the defaults given per field."""

    root: str = "/"
    driver_root: str = ""  # default: root
    dev_root: str = ""  # default: root
    config: str | None = None  # default: $NVHOOK_CONFIG, else <root>/etc/nvhook/config.toml
    bin_dir: str = ""  # the launchers' directory; default: beside this interpreter
    #: (engine, config file) overrides; default: each engine's file under root
    engine_configs: tuple[tuple[str, str], ...] = ()
    runtime_name: str = "nvidia"
    backup_dir: str = ""  # default: <root>/var/lib/nvhook/backups
    cache_dir: str = ""  # default: $NVHOOK_CACHE_DIR, else /run/nvhook, under root
    health_state_file: str = (
        ""  # the device plugin's; default /run/nvhook/device-plugin/gpu-health.json
    )


def under(root: str, path: str) -> str:
    """The host path ``path`` as seen here, under ``root``."""
    return path if root in ("", "/") else os.path.join(root, path.lstrip("/"))


def shell_quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


def root_flag(opts: Options) -> str:
    return "" if opts.root in ("", "/") else f" --root {shell_quote(opts.root)}"
