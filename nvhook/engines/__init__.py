"""Container engines told about ``nvhook-runtime``: ``nvhook runtime configure|unconfigure``.

One module per engine computes a :class:`~nvhook.engines.changes.Plan` (the files it would
write, with their bytes before and after) from the engine's config; :mod:`.changes` shows a
plan as a diff, applies it with a backup of every original, and undoes it:

==============  ======================================  ======================================
engine          default file                            what is added
==============  ======================================  ======================================
``containerd``  /etc/containerd/config.toml             a CRI runtime (``runtime_handler``),
                (a drop-in when it has ``imports``)     version 1, 2 or 3 config
``docker``      /etc/docker/daemon.json                 ``runtimes.<name>.path``
``crio``        /etc/crio/crio.conf.d/99-nvhook.conf    ``[crio.runtime.runtimes.<name>]``
``podman``      /etc/containers/containers.conf         ``[engine.runtimes] <name>``
==============  ======================================  ======================================

The TOML engines import tomlkit, so this package imports them only when asked.
"""

from __future__ import annotations

import os
import re
import sys

from nvhook.engines.changes import (
    DEFAULT_BACKUP_DIR,
    FileChange,
    Plan,
    apply_plan,
    apply_unconfigure,
    plan_unconfigure,
    unified_diff,
)
from nvhook.errors import EngineConfigError

__all__ = [
    "DEFAULT_BACKUP_DIR",
    "DEFAULT_CONFIGS",
    "DEFAULT_NAME",
    "ENGINES",
    "FileChange",
    "Plan",
    "apply_plan",
    "apply_unconfigure",
    "check_name",
    "check_runtime_path",
    "default_runtime_path",
    "plan_configure",
    "plan_unconfigure",
    "unified_diff",
]

ENGINES = ("containerd", "docker", "crio", "podman")
DEFAULT_CONFIGS: dict[str, str] = {
    "containerd": "/etc/containerd/config.toml",
    "docker": "/etc/docker/daemon.json",
    "crio": "/etc/crio/crio.conf.d/99-nvhook.conf",
    "podman": "/etc/containers/containers.conf",
}
DEFAULT_NAME = "nvidia"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_name(name: str) -> str:
    """``name`` if it can name a runtime everywhere (and is not ``runc``)."""
    if not _NAME.fullmatch(name):
        raise EngineConfigError(
            f"runtime name {name!r}: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    if name == "runc":
        raise EngineConfigError(
            "runtime name 'runc' would replace the runc runtime that nvhook-runtime hands "
            "containers to; choose another (e.g. nvidia)"
        )
    return name


def default_runtime_path() -> str:
    """``nvhook-runtime`` beside this interpreter (``nvhook install-entrypoints`` writes it)."""
    return os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "nvhook-runtime")


def check_runtime_path(path: str) -> str:
    """``path`` if it is an absolute path to an executable file."""
    if not os.path.isabs(path):
        raise EngineConfigError(f"runtime path {path!r} must be absolute (engines have no PATH)")
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise EngineConfigError(
            f"{path} is not an executable file: run `nvhook install-entrypoints`, "
            "or pass --runtime-path"
        )
    return path


def plan_configure(
    engine: str,
    *,
    config: str | None = None,
    name: str = DEFAULT_NAME,
    runtime_path: str,
    set_as_default: bool = False,
    enable_cdi: bool = False,
    enable_nri: bool = False,
) -> Plan:
    """The changes that make ``engine`` (one of :data:`ENGINES`) know runtime ``name``
    (``enable_cdi``: and switch the engine's own CDI on; containerd and docker)."""
    check_name(name)
    if enable_cdi and engine not in ("containerd", "docker"):
        raise EngineConfigError(
            f"--enable-cdi is for --runtime containerd or docker; {engine} has no such "
            "setting to switch"
        )
    if enable_nri and engine != "containerd":
        raise EngineConfigError(
            f"--nri is for --runtime containerd; {engine} has no such setting to switch"
        )
    config = config or DEFAULT_CONFIGS[engine]
    if engine == "containerd":
        from nvhook.engines import containerd

        return containerd.plan_configure(
            config,
            name=name,
            runtime_path=runtime_path,
            set_as_default=set_as_default,
            enable_cdi=enable_cdi,
            enable_nri=enable_nri,
            containerd_major=(
                None if os.path.lexists(config) else containerd.installed_containerd_major()
            ),
        )
    if engine == "docker":
        from nvhook.engines import docker

        return docker.plan_configure(
            config,
            name=name,
            runtime_path=runtime_path,
            set_as_default=set_as_default,
            enable_cdi=enable_cdi,
        )
    if engine == "crio":
        from nvhook.engines import crio

        return crio.plan_configure(
            config, name=name, runtime_path=runtime_path, set_as_default=set_as_default
        )
    if engine == "podman":
        from nvhook.engines import podman

        return podman.plan_configure(
            config, name=name, runtime_path=runtime_path, set_as_default=set_as_default
        )
    raise EngineConfigError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
