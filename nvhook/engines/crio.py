"""CRI-O: a drop-in ``crio.conf.d/99-nvhook.conf`` with ``[crio.runtime.runtimes.<NAME>]``.

CRI-O reads ``/etc/crio/crio.conf`` and then every file of ``/etc/crio/crio.conf.d`` in
order, each overriding what it sets; a runtime handler table adds a handler. nvhook writes
(or edits, keeping the rest of it) one file there:

.. code-block:: toml

    [crio.runtime]
    default_runtime = "nvidia"          # with --set-as-default only

    [crio.runtime.runtimes.nvidia]
    runtime_path = "/…/nvhook-runtime"
    runtime_type = "oci"
    runtime_root = "/run/nvhook-runtime"

``runtime_root`` is what CRI-O passes to the runtime as ``--root``; the shim hands it to
runc, which keeps this handler's container state there. Reload or restart CRI-O afterwards.
"""

from __future__ import annotations

import os

from nvhook.engines import _toml
from nvhook.engines.changes import FileChange, Plan, read_file

__all__ = ["DEFAULT_CONFIG", "RUNTIME_ROOT", "plan_configure"]

DEFAULT_CONFIG = "/etc/crio/crio.conf.d/99-nvhook.conf"
RUNTIME_ROOT = "/run/nvhook-runtime"


def plan_configure(
    config: str = DEFAULT_CONFIG, *, name: str, runtime_path: str, set_as_default: bool = False
) -> Plan:
    """The change that adds runtime handler ``name`` (running ``runtime_path``) to ``config``."""
    config = os.path.abspath(config)
    data = read_file(config)
    text = _toml.config_text(config, data)
    edits: list[_toml.Edit] = []
    if set_as_default:
        edits.append((("crio", "runtime", "default_runtime"), name))
    runtime = {"runtime_path": runtime_path, "runtime_type": "oci", "runtime_root": RUNTIME_ROOT}
    edits.append((("crio", "runtime", "runtimes", name), runtime))
    header = [
        f"Written by `nvhook runtime configure --runtime crio`: runtime handler {name!r}.",
        "`nvhook runtime unconfigure --runtime crio` removes this file.",
    ]
    new = _toml.edit(config, text, edits, header=header)
    return Plan("crio", config, (FileChange(config, data, new.encode()),))
