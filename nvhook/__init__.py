"""nvhook: give containers NVIDIA GPUs.

The public API is re-exported here lazily (PEP 562 ``__getattr__``): ``import nvhook``
loads no submodule, because the runtime shim and hooks import ``nvhook.shim`` and
``nvhook.hook`` on every call and must not pay for the rest (DESIGN.md D5). A name that
is also a submodule's (``explain``) is not re-exported: once the submodule is imported,
the package attribute is the module.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.devices.gpus import HostGpus, resolve
    from nvhook.edits import Host, Plan, plan
    from nvhook.errors import NvhookError
    from nvhook.requests.parse import Requests, parse_requests
    from nvhook.requests.policy import Policy
    from nvhook.requests.requirements import check_requirements
    from nvhook.settings import load_settings
    from nvhook.tools.cdicheck import check_specs
    from nvhook.tools.generate import generate_spec
    from nvhook.tools.info import host_info

__all__ = [
    "Host",
    "HostGpus",
    "NvhookError",
    "Plan",
    "Policy",
    "Requests",
    "check_requirements",
    "check_specs",
    "generate_spec",
    "host_info",
    "load_settings",
    "parse_requests",
    "plan",
    "resolve",
]

_WHERE = {
    "Host": "nvhook.edits",
    "HostGpus": "nvhook.devices.gpus",
    "NvhookError": "nvhook.errors",
    "Plan": "nvhook.edits",
    "Policy": "nvhook.requests.policy",
    "Requests": "nvhook.requests.parse",
    "check_requirements": "nvhook.requests.requirements",
    "check_specs": "nvhook.tools.cdicheck",
    "generate_spec": "nvhook.tools.generate",
    "host_info": "nvhook.tools.info",
    "load_settings": "nvhook.settings",
    "parse_requests": "nvhook.requests.parse",
    "plan": "nvhook.edits",
    "resolve": "nvhook.devices.gpus",
}


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'nvhook' has no attribute {name!r}")
    import importlib  # only when a re-exported name is used

    return getattr(importlib.import_module(module), name)
