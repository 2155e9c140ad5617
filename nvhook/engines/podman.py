"""podman: ``[engine.runtimes] <NAME> = ["/…/nvhook-runtime"]`` in containers.conf.

Then ``podman --runtime NAME run …`` (or, with ``--set-as-default``, ``[engine] runtime =
NAME``: every container) runs through the shim. The file is edited in place, keeping the
rest of it; no file: a new one with only these settings (containers.conf files add up,
key by key, over podman's built-in defaults, so the other runtimes stay known).
"""

from __future__ import annotations

import os

from nvhook.engines import _toml
from nvhook.engines.changes import FileChange, Plan, read_file

__all__ = ["DEFAULT_CONFIG", "plan_configure"]

DEFAULT_CONFIG = "/etc/containers/containers.conf"


def plan_configure(
    config: str = DEFAULT_CONFIG, *, name: str, runtime_path: str, set_as_default: bool = False
) -> Plan:
    """The change that adds runtime ``name`` (running ``runtime_path``) to ``config``."""
    config = os.path.abspath(config)
    data = read_file(config)
    text = _toml.config_text(config, data)
    edits: list[_toml.Edit] = []
    if set_as_default:
        edits.append((("engine", "runtime"), name))
    edits.append((("engine", "runtimes", name), [runtime_path]))
    header = [
        f"Written by `nvhook runtime configure --runtime podman`: runtime {name!r}.",
        "`nvhook runtime unconfigure --runtime podman` removes this file.",
    ]
    new = _toml.edit(config, text, edits, header=header)
    return Plan("podman", config, (FileChange(config, data, new.encode()),))
