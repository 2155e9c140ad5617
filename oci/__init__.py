"""Vendor-neutral OCI runtime-spec and CDI machinery (never imports nvhook, pynvml, click).

The public API is re-exported here lazily (PEP 562 ``__getattr__``): ``import oci``
loads no submodule, because the runtime shim imports ``oci.argv`` on every call and
must not pay for the rest (DESIGN.md D5).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from oci.argv import RuntimeArgs
    from oci.bundle import Bundle
    from oci.cdi.apply import apply
    from oci.cdi.edits import DeviceNode, Edits, Hook, IntelRdt, Mount, NetDevice
    from oci.cdi.names import parse_qualified_name
    from oci.cdi.registry import Registry, resolve
    from oci.cdi.spec import Device, Spec, load_spec, parse_spec
    from oci.cdi.validate import validate_file
    from oci.cdi.write import dump_spec, write_spec
    from oci.errors import ExitCode, OciError
    from oci.runclog import write_runc_log
    from oci.state import State

__all__ = [
    "Bundle",
    "Device",
    "DeviceNode",
    "Edits",
    "ExitCode",
    "Hook",
    "IntelRdt",
    "Mount",
    "NetDevice",
    "OciError",
    "Registry",
    "RuntimeArgs",
    "Spec",
    "State",
    "apply",
    "dump_spec",
    "load_spec",
    "parse_qualified_name",
    "parse_spec",
    "resolve",
    "validate_file",
    "write_runc_log",
    "write_spec",
]

_WHERE = {
    "Bundle": "oci.bundle",
    "Device": "oci.cdi.spec",
    "DeviceNode": "oci.cdi.edits",
    "Edits": "oci.cdi.edits",
    "ExitCode": "oci.errors",
    "Hook": "oci.cdi.edits",
    "IntelRdt": "oci.cdi.edits",
    "Mount": "oci.cdi.edits",
    "NetDevice": "oci.cdi.edits",
    "OciError": "oci.errors",
    "Registry": "oci.cdi.registry",
    "RuntimeArgs": "oci.argv",
    "Spec": "oci.cdi.spec",
    "State": "oci.state",
    "apply": "oci.cdi.apply",
    "dump_spec": "oci.cdi.write",
    "load_spec": "oci.cdi.spec",
    "parse_qualified_name": "oci.cdi.names",
    "parse_spec": "oci.cdi.spec",
    "resolve": "oci.cdi.registry",
    "validate_file": "oci.cdi.validate",
    "write_runc_log": "oci.runclog",
    "write_spec": "oci.cdi.write",
}


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'oci' has no attribute {name!r}")
    import importlib  # only when a re-exported name is used

    return getattr(importlib.import_module(module), name)
