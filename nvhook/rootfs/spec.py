"""What a config.json says of the container: its environment and where its rootfs is.

The create path (the jit planner's CUDA compat check), hook mode and the hook commands
read these the same way; the values live here, below all of them.
"""

from __future__ import annotations

import os

from nvhook.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["container_env", "require_rootfs", "rootfs_path"]


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


def rootfs_path(spec: Mapping[str, object], bundle: str) -> str | None:
    """The container's rootfs (``root.path``, relative to ``bundle``); None when unknown."""
    root = spec.get("root")
    path = root.get("path") if isinstance(root, dict) else None
    if not isinstance(path, str) or not path or not (bundle or os.path.isabs(path)):
        return None
    return path if os.path.isabs(path) else os.path.join(bundle, path)


def require_rootfs(spec: Mapping[str, object], bundle: str) -> str:
    """:func:`rootfs_path`, or a :class:`HookError` naming the bundle's config.json."""
    path = rootfs_path(spec, bundle)
    if path is None:
        raise HookError(f"{bundle}/config.json: root.path is missing")
    return path
