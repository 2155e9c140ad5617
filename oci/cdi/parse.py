"""CDI spec files: a strict parser in plain Python.

:func:`parse_spec` turns a loaded JSON/YAML object into a :class:`~oci.cdi.spec.Spec`
whose edits are :class:`oci.cdi.edits.Edits`, or raises :class:`CdiSpecError` with
``source: field.path: message``. :func:`load_spec` reads a ``.json`` file with
the stdlib and a ``.yaml``/``.yml`` file with PyYAML (imported only then; see
:mod:`oci.cdi.decode`).

Why one module of some 600 lines: one walk over a spec (:class:`_Checker`) applies
every rule below in the order of the spec's fields, as the reference's validator
does, and collects every error; cutting it apart would separate each CDI object
from the rules that check it.

Plain code, no pydantic, no ``re``: the registry runs this inside the runtime
shim on every container start (docs/architecture.md D5). The rules are those of the
reference library (tags.cncf.io/container-device-interface 1.1,
``pkg/cdi/spec.go``, ``container-edits.go``, the default validator and
``specs-go/version.go``):

- unknown fields and duplicate keys are errors (the reference unmarshals with
  ``yaml.UnmarshalStrict``); field names are matched exactly (Go's decoder
  would also accept another letter case; we name the right spelling instead);
- JSON ``null`` is the field's zero value, as in Go; types are strict (no
  number for a string, no float or bool for an integer), integers in range;
- ``cdiVersion`` must be a released version (an optional leading ``v`` is
  accepted, like the reference) at least as high as the spec's features need
  (:mod:`oci.cdi.version`); the error names the field that needs more;
- ``kind`` is ``vendor/class`` and the names follow :mod:`oci.cdi.names`;
- at least one device; device names are valid and unique; a device's edits must
  not be empty (the spec's own may);
- env entries are ``NAME=value`` with a non-empty name (hook env too);
- device nodes: a path, type one of ``b c u p`` or empty, device numbers not
  negative, permissions made of ``r``, ``w``, ``m`` (``none`` is rejected, as
  the 1.1 default validator does);
- mounts need ``hostPath`` and ``containerPath``; hooks a known lifecycle name
  and a path;
- net devices need both names, and neither name may repeat within one edits;
- ``intelRdt.closID`` must be a valid file name (``/``, the root CLOS, is fine).

What the CDI spec text asks for but the reference does not enforce (absolute
paths, hook timeout > 0, Kubernetes rules for annotation keys) is collected as
*warnings* by :func:`check_spec` for ``nvhook cdi validate``; the shim ignores them.
"""

from __future__ import annotations

import os

from oci._frozen import EMPTY_MAPPING, MappingProxyType
from oci.cdi.decode import DuplicateKeyDict, decode_spec
from oci.cdi.edits import HOOK_NAMES, DeviceNode, Edits, Hook, IntelRdt, Mount, NetDevice
from oci.cdi.names import (
    class_name_problem,
    device_name_problem,
    parse_kind,
    quote,
    vendor_name_problem,
)
from oci.cdi.spec import Device, Issue, Spec, SpecCheck
from oci.cdi.version import (
    EARLIEST,
    KNOWN_VERSIONS,
    normalize_version,
    required_version,
    version_key,
)
from oci.errors import CdiSpecError
from oci.jsoncodec import type_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["check_spec", "decode_spec_file", "load_spec", "parse_spec", "read_spec_data"]

# ---------------------------------------------------------------------------
# field names, in the reference's order (specs-go/config.go at 1.1.0)

_SPEC_FIELDS = ("cdiVersion", "kind", "annotations", "devices", "containerEdits")
_DEVICE_FIELDS = ("name", "annotations", "containerEdits")
_EDITS_FIELDS = (
    "env",
    "deviceNodes",
    "netDevices",
    "hooks",
    "mounts",
    "intelRdt",
    "additionalGids",
)
_NODE_FIELDS = (
    "path",
    "hostPath",
    "type",
    "major",
    "minor",
    "fileMode",
    "permissions",
    "uid",
    "gid",
)
_MOUNT_FIELDS = ("hostPath", "containerPath", "options", "type")
_HOOK_FIELDS = ("hookName", "path", "args", "env", "timeout")
_RDT_FIELDS = ("closID", "l3CacheSchema", "memBwSchema", "schemata", "enableMonitoring")
_NETDEV_FIELDS = ("hostInterfaceName", "name")

_REMOVED_FIELDS = {
    "enableCMT": "removed in CDI 1.1.0 (use enableMonitoring)",
    "enableMBM": "removed in CDI 1.1.0 (use enableMonitoring)",
}
_NODE_TYPES = frozenset(("", "b", "c", "u", "p"))
_PERMISSION_BITS = frozenset("rwm")
_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT32 = (0, (1 << 32) - 1)
_ANNOTATION_SIZE_LIMIT = 256 * 1024  # Kubernetes TotalAnnotationSizeLimitB

_FIELD_SETS: dict[tuple[str, ...], tuple[frozenset[str], dict[str, str]]] = {}


def _field_set(fields: tuple[str, ...]) -> tuple[frozenset[str], dict[str, str]]:
    cached = _FIELD_SETS.get(fields)
    if cached is None:
        cached = (frozenset(fields), {f.lower(): f for f in fields})
        _FIELD_SETS[fields] = cached
    return cached


def _type_name(value: object) -> str:
    """:func:`oci.jsoncodec.type_name`, telling integers from other numbers (the parser checks
    integer fields)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return "integer"
    return type_name(value)


def _key_path(path: str, key: str) -> str:
    """``path["key"]``: map keys may contain dots."""
    return f"{path}[{quote(key)}]"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class _Checker:
    """One walk over a decoded spec that collects every error (and optionally warnings)."""

    def __init__(self, *, warnings: bool) -> None:
        self.errors: list[Issue] = []
        self.warnings: list[Issue] | None = [] if warnings else None
        self.raw_requirements: list[tuple[str, str]] = []  # (version, path) seen only in raw data

    # -- reporting ---------------------------------------------------------
    def error(self, path: str, message: str) -> None:
        self.errors.append(Issue(path, message))

    def warn(self, path: str, message: str) -> None:
        if self.warnings is not None:
            self.warnings.append(Issue(path, message))

    # -- shapes --------------------------------------------------------------
    def obj(self, value: object, path: str, fields: tuple[str, ...]) -> dict[str, Any] | None:
        """An object with only ``fields``; None (after an error) when it is not an object."""
        if not isinstance(value, dict):
            self.error(path, f"expected an object, got {_type_name(value)}")
            return None
        known, by_lower = _field_set(fields)
        for key in value:
            if key in known:
                continue
            key_path = _join(path, str(key))
            if not isinstance(key, str):
                self.error(key_path, f"field names must be strings, got {_type_name(key)}")
            elif key in _REMOVED_FIELDS:
                self.error(key_path, f"unknown field: {_REMOVED_FIELDS[key]}")
            elif key.lower() in by_lower:
                right = by_lower[key.lower()]
                self.error(key_path, f"unknown field, did you mean {quote(right)}?")
            else:
                self.error(key_path, "unknown field")
        if isinstance(value, DuplicateKeyDict):
            for key in value.duplicates:
                self.error(_join(path, key), "duplicate field")
        return value

    def string(self, value: object, path: str) -> str | None:
        """The string (``""`` for null), or None after reporting another type."""
        if value is None:
            return ""
        if isinstance(value, str):
            return value
        self.error(path, f"expected a string, got {_type_name(value)}")
        return None

    def integer(self, value: object, path: str, bounds: tuple[int, int]) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"expected an integer, got {_type_name(value)}")
            return None
        if not bounds[0] <= value <= bounds[1]:
            self.error(path, f"{value} is out of range [{bounds[0]}, {bounds[1]}]")
            return None
        return value

    def boolean(self, value: object, path: str) -> bool:
        if value is None:
            return False
        if isinstance(value, bool):
            return value
        self.error(path, f"expected a boolean, got {_type_name(value)}")
        return False

    def array(self, value: object, path: str) -> list[Any]:
        if value is None:
            return []
        if isinstance(value, list | tuple):  # a tuple only from a producer's dict
            return value if isinstance(value, list) else list(value)
        self.error(path, f"expected an array, got {_type_name(value)}")
        return []

    def strings(self, value: object, path: str, *, env: bool = False) -> tuple[str, ...]:
        """A list of strings (null items are ``""``); ``env``: each must be ``NAME=value``."""
        out: list[str] = []
        for i, item in enumerate(self.array(value, path)):
            text = item if isinstance(item, str) else self.string(item, f"{path}[{i}]")
            if text is None:
                continue
            if env and text.find("=") <= 0:
                self.error(f"{path}[{i}]", f"invalid environment variable {quote(text)}")
            out.append(text)
        return tuple(out)

    def annotations(self, value: object, path: str) -> Mapping[str, str]:
        if value is None:
            return EMPTY_MAPPING
        if not isinstance(value, dict):
            self.error(path, f"expected an object, got {_type_name(value)}")
            return EMPTY_MAPPING
        if isinstance(value, DuplicateKeyDict):
            for key in value.duplicates:
                self.error(_key_path(path, key), "duplicate key")
        out: dict[str, str] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                self.error(_join(path, str(key)), f"keys must be strings, got {_type_name(key)}")
                continue
            if not isinstance(item, str):
                if item is not None:
                    self.error(_key_path(path, key), f"expected a string, got {_type_name(item)}")
                    continue
                item = ""
            out[key] = item
        if self.warnings is not None:
            self._annotation_warnings(out, path)
        return MappingProxyType(out) if out else EMPTY_MAPPING

    def _annotation_warnings(self, annotations: Mapping[str, str], path: str) -> None:
        size = 0
        for key, item in annotations.items():
            size += len(key) + len(item)
            problem = _qualified_name_problem(key.lower())
            if problem is not None:
                self.warn(
                    _key_path(path, key),
                    f"annotation key is not a Kubernetes qualified name: {problem}",
                )
        if size > _ANNOTATION_SIZE_LIMIT:
            self.warn(
                path, f"annotations total {size} bytes, over the {_ANNOTATION_SIZE_LIMIT} limit"
            )

    # -- CDI objects -----------------------------------------------------------
    def edits(self, value: object, path: str) -> Edits:
        d = self.obj(value, path, _EDITS_FIELDS)
        if d is None:
            return Edits()
        env = self.strings(d.get("env"), _join(path, "env"), env=True)
        nodes_path = _join(path, "deviceNodes")
        nodes = tuple(
            n
            for i, item in enumerate(self.array(d.get("deviceNodes"), nodes_path))
            if (n := self.device_node(item, f"{nodes_path}[{i}]")) is not None
        )
        net_devices = self.net_devices(d.get("netDevices"), _join(path, "netDevices"))
        hooks_path = _join(path, "hooks")
        hooks = tuple(
            h
            for i, item in enumerate(self.array(d.get("hooks"), hooks_path))
            if (h := self.hook(item, f"{hooks_path}[{i}]")) is not None
        )
        mounts_path = _join(path, "mounts")
        mounts = tuple(
            m
            for i, item in enumerate(self.array(d.get("mounts"), mounts_path))
            if (m := self.mount(item, f"{mounts_path}[{i}]")) is not None
        )
        rdt = d.get("intelRdt")
        intel_rdt = self.intel_rdt(rdt, _join(path, "intelRdt")) if rdt is not None else None
        gids_path = _join(path, "additionalGids")
        gids = tuple(
            g
            for i, item in enumerate(self.array(d.get("additionalGids"), gids_path))
            if (g := self.integer(item, f"{gids_path}[{i}]", _UINT32)) is not None
        )
        return Edits(
            env=env,
            device_nodes=nodes,
            mounts=mounts,
            hooks=hooks,
            additional_gids=gids,
            net_devices=net_devices,
            intel_rdt=intel_rdt,
        )

    def device_node(self, value: object, path: str) -> DeviceNode | None:
        d = self.obj(value, path, _NODE_FIELDS)
        if d is None:
            return None
        node_path = self.string(d.get("path"), _join(path, "path"))
        if node_path == "":
            self.error(_join(path, "path"), "invalid (empty) device path")
        elif node_path is not None and not node_path.startswith("/"):
            self.warn(_join(path, "path"), f"device path {quote(node_path)} is not absolute")
        node_type = self.string(d.get("type"), _join(path, "type"))
        if node_type is not None and node_type not in _NODE_TYPES:
            self.error(
                _join(path, "type"),
                f"invalid type {quote(node_type)} (one of b, c, u, p, or empty)",
            )
        major = self.integer(d.get("major"), _join(path, "major"), _INT64)
        minor = self.integer(d.get("minor"), _join(path, "minor"), _INT64)
        for name, number in (("major", major), ("minor", minor)):
            if number is not None and number < 0:
                self.error(_join(path, name), f"invalid (negative) device number {number}")
        permissions = self.string(d.get("permissions"), _join(path, "permissions"))
        if permissions is not None and not _PERMISSION_BITS.issuperset(permissions):
            self.error(
                _join(path, "permissions"),
                f"invalid permissions {quote(permissions)} (letters r, w, m)",
            )
        return DeviceNode(
            path=node_path or "",
            host_path=self.string(d.get("hostPath"), _join(path, "hostPath")) or None,
            type=node_type or None,
            major=major,
            minor=minor,
            file_mode=self.integer(d.get("fileMode"), _join(path, "fileMode"), _UINT32),
            permissions=permissions or None,
            uid=self.integer(d.get("uid"), _join(path, "uid"), _UINT32),
            gid=self.integer(d.get("gid"), _join(path, "gid"), _UINT32),
        )

    def mount(self, value: object, path: str) -> Mount | None:
        d = self.obj(value, path, _MOUNT_FIELDS)
        if d is None:
            return None
        host_path = self.string(d.get("hostPath"), _join(path, "hostPath"))
        if host_path == "":
            self.error(_join(path, "hostPath"), "invalid mount, empty host path")
        container_path = self.string(d.get("containerPath"), _join(path, "containerPath"))
        if container_path == "":
            self.error(_join(path, "containerPath"), "invalid mount, empty container path")
        elif container_path is not None and not container_path.startswith("/"):
            self.warn(
                _join(path, "containerPath"),
                f"container path {quote(container_path)} is not absolute",
            )
        return Mount(
            host_path=host_path or "",
            container_path=container_path or "",
            type=self.string(d.get("type"), _join(path, "type")) or None,
            options=self.strings(d.get("options"), _join(path, "options")),
        )

    def hook(self, value: object, path: str) -> Hook | None:
        d = self.obj(value, path, _HOOK_FIELDS)
        if d is None:
            return None
        hook_name = self.string(d.get("hookName"), _join(path, "hookName"))
        if hook_name is not None and hook_name not in HOOK_NAMES:
            self.error(
                _join(path, "hookName"),
                f"invalid hook name {quote(hook_name)} (one of {', '.join(HOOK_NAMES)})",
            )
        hook_path = self.string(d.get("path"), _join(path, "path"))
        if hook_path == "":
            self.error(
                _join(path, "path"), f"invalid hook {quote(hook_name or '')} with empty path"
            )
        elif hook_path is not None and not hook_path.startswith("/"):
            self.warn(_join(path, "path"), f"hook path {quote(hook_path)} is not absolute")
        timeout = self.integer(d.get("timeout"), _join(path, "timeout"), _INT64)
        if timeout is not None and timeout <= 0:
            self.warn(_join(path, "timeout"), f"hook timeout {timeout} is not greater than zero")
        return Hook(
            hook_name=hook_name or "",
            path=hook_path or "",
            args=self.strings(d.get("args"), _join(path, "args")),
            env=self.strings(d.get("env"), _join(path, "env"), env=True),
            timeout=timeout,
        )

    def net_devices(self, value: object, path: str) -> tuple[NetDevice, ...]:
        out: list[NetDevice] = []
        seen: dict[str, dict[str, int]] = {"hostInterfaceName": {}, "name": {}}
        for i, item in enumerate(self.array(value, path)):
            item_path = f"{path}[{i}]"
            d = self.obj(item, item_path, _NETDEV_FIELDS)
            if d is None:
                continue
            names: dict[str, str] = {}
            for key, what in (("hostInterfaceName", "host interface"), ("name", "interface")):
                key_path = _join(item_path, key)
                text = self.string(d.get(key), key_path)
                names[key] = text or ""
                if text is None:
                    continue
                if not text:
                    self.error(key_path, f"invalid linux net device, empty {what} name")
                elif text in seen[key]:
                    other = seen[key][text]
                    self.error(
                        key_path, f"duplicate {what} name {quote(text)} (also {path}[{other}])"
                    )
                else:
                    seen[key][text] = i
            out.append(
                NetDevice(host_interface_name=names["hostInterfaceName"], name=names["name"])
            )
        return tuple(out)

    def intel_rdt(self, value: object, path: str) -> IntelRdt | None:
        d = self.obj(value, path, _RDT_FIELDS)
        if d is None:
            return None
        clos_id = self.string(d.get("closID"), _join(path, "closID")) or ""
        if clos_id != "/" and (
            len(clos_id) >= 4096 or clos_id in (".", "..") or "/" in clos_id or "\n" in clos_id
        ):
            self.error(_join(path, "closID"), f"invalid closID {quote(clos_id)}")
        if d.get("schemata") is not None:
            # The reference tests ``Schemata != nil``: even an empty list needs 1.1.0.
            self.raw_requirements.append(("1.1.0", _join(path, "schemata")))
        return IntelRdt(
            clos_id=clos_id or None,
            l3_cache_schema=self.string(d.get("l3CacheSchema"), _join(path, "l3CacheSchema"))
            or None,
            mem_bw_schema=self.string(d.get("memBwSchema"), _join(path, "memBwSchema")) or None,
            schemata=self.strings(d.get("schemata"), _join(path, "schemata")),
            enable_monitoring=self.boolean(
                d.get("enableMonitoring"), _join(path, "enableMonitoring")
            ),
        )

    def device(self, value: object, path: str) -> Device | None:
        d = self.obj(value, path, _DEVICE_FIELDS)
        if d is None:
            return None
        name = self.string(d.get("name"), _join(path, "name"))
        if "name" not in d:
            self.error(_join(path, "name"), "missing required field")
        elif name is not None:
            problem = device_name_problem(name)
            if problem is not None:
                self.error(_join(path, "name"), problem)
        annotations = self.annotations(d.get("annotations"), _join(path, "annotations"))
        edits_path = _join(path, "containerEdits")
        if "containerEdits" not in d:
            self.error(edits_path, "missing required field")
            edits = Edits()
        elif d["containerEdits"] is None:  # Go's zero value: empty edits
            self.error(edits_path, "empty container edits (a device needs at least one)")
            edits = Edits()
        else:
            n_errors = len(self.errors)
            edits = self.edits(d["containerEdits"], edits_path)
            if not edits and len(self.errors) == n_errors:
                self.error(edits_path, "empty container edits (a device needs at least one)")
        return Device(name=name or "", edits=edits, annotations=annotations)

    def spec(self, data: object, source: str, *, check_version: bool) -> Spec | None:
        if data is None:
            self.error("", "empty spec (no data)")
            return None
        top = self.obj(data, "", _SPEC_FIELDS)
        if top is None:
            return None
        version = self.string(top.get("cdiVersion"), "cdiVersion")
        if check_version:
            if "cdiVersion" not in top:
                self.error("cdiVersion", "missing required field")
            elif version is not None and normalize_version(version) not in KNOWN_VERSIONS:
                self.error(
                    "cdiVersion",
                    f"invalid version {quote(version)} "
                    f"(known: {KNOWN_VERSIONS[2]} to {KNOWN_VERSIONS[-1]})",
                )
        kind = self.string(top.get("kind"), "kind")
        vendor, class_name = parse_kind(kind or "")
        if "kind" not in top:
            self.error("kind", "missing required field")
        elif kind is not None and not vendor:
            self.error("kind", f"invalid kind {quote(kind)}, expected vendor/class")
        elif kind is not None:
            problem = vendor_name_problem(vendor) or class_name_problem(class_name)
            if problem is not None:
                self.error("kind", problem)
        annotations = self.annotations(top.get("annotations"), "annotations")
        spec_edits = top.get("containerEdits")
        edits = self.edits(spec_edits, "containerEdits") if spec_edits is not None else Edits()
        devices: list[Device] = []
        if "devices" not in top:
            self.error("devices", "missing required field")
        else:
            seen: dict[str, int] = {}
            items = self.array(top["devices"], "devices")
            if not items and (top["devices"] is None or isinstance(top["devices"], list | tuple)):
                self.error("devices", "no devices (a spec needs at least one)")
            for i, item in enumerate(items):
                device = self.device(item, f"devices[{i}]")
                if device is None:
                    continue
                if device.name in seen:
                    self.error(
                        f"devices[{i}].name",
                        f"duplicate device name {quote(device.name)} "
                        f"(also devices[{seen[device.name]}])",
                    )
                else:
                    seen[device.name] = i
                devices.append(device)
        version = version or ""
        spec = Spec(
            version=version,
            kind=kind or "",
            vendor=vendor,
            class_name=class_name,
            devices=tuple(devices),
            edits=edits,
            annotations=annotations,
            source=source,
        )
        if check_version and normalize_version(version) in KNOWN_VERSIONS:
            self.check_version(spec)
        return spec

    def check_version(self, spec: Spec) -> None:
        declared = normalize_version(spec.version)
        needed, where = required_version(spec)
        for version, path in self.raw_requirements:
            if version_key(version) > version_key(needed):
                needed, where = version, path
        if version_key(needed) <= version_key(declared):
            return
        if where is None:  # 0.1.0 and 0.2.0: known, no longer supported
            self.error(
                "cdiVersion",
                f"version {quote(spec.version)} is no longer supported, the earliest is {EARLIEST}",
            )
        else:
            self.error(
                where,
                f"needs cdiVersion {needed} or later, the spec declares {quote(spec.version)}",
            )


def _qualified_name_problem(key: str) -> str | None:
    """Kubernetes ``IsQualifiedName`` (prefix a DNS-1123 subdomain, name up to 63 characters)."""
    prefix, sep, name = key.rpartition("/")
    if sep:
        if "/" in prefix:
            return "at most one '/'"
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253:
            return "prefix part must be no more than 253 characters"
        for label in prefix.split("."):
            if not label or not (label[0].isalnum() and label[-1].isalnum()):
                return "prefix part must be a lowercase DNS-1123 subdomain"
            if not all(c.isascii() and (c.isalnum() or c == "-") for c in label):
                return "prefix part must be a lowercase DNS-1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    ends_ok = name[0].isascii() and name[0].isalnum() and name[-1].isascii() and name[-1].isalnum()
    if not ends_ok or not all(c.isascii() and (c.isalnum() or c in "-_.") for c in name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


# ---------------------------------------------------------------------------
# public API


def check_spec(
    data: object, *, source: str, check_version: bool = True, warnings: bool = False
) -> SpecCheck:
    """Check a decoded spec against every rule; collect all errors (and warnings when asked).

    ``check_version=False`` skips the ``cdiVersion`` checks (for a producer's
    spec, whose version :func:`oci.cdi.write.dump_spec` computes).
    """
    checker = _Checker(warnings=warnings)
    spec = checker.spec(data, source, check_version=check_version)
    errors = tuple(checker.errors)
    return SpecCheck(
        spec=spec if not errors else None,
        errors=errors,
        warnings=tuple(checker.warnings or ()),
    )


def _error_message(source: str, issues: tuple[Issue, ...]) -> str:
    first = issues[0]
    message = (
        f"{source}: {first.path}: {first.message}" if first.path else f"{source}: {first.message}"
    )
    if len(issues) > 1:
        message += f" (and {len(issues) - 1} more; `nvhook cdi validate` lists them all)"
    return message


def parse_spec(data: object, *, source: str) -> Spec:
    """Validate a decoded JSON/YAML spec; raise :class:`CdiSpecError` naming the first problem."""
    checker = _Checker(warnings=False)
    spec = checker.spec(data, source, check_version=True)
    if checker.errors or spec is None:
        raise CdiSpecError(_error_message(source, tuple(checker.errors)))
    return spec


def read_spec_data(path: str) -> object:
    """One spec file read and decoded by its suffix, not yet validated; every failure is a
    :class:`CdiSpecError` naming it."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise CdiSpecError(f"{path}: cannot read: {e.strerror or e}") from e
    return decode_spec_file(raw, path)


def decode_spec_file(raw: bytes, path: str) -> object:
    """The bytes ``raw`` of the spec file ``path`` decoded by its suffix (JSON or YAML); a
    :class:`CdiSpecError` naming it when they do not decode."""
    try:
        return decode_spec(raw, suffix=os.path.splitext(path)[1])
    except ValueError as e:
        raise CdiSpecError(f"{path}: {e}") from None


def load_spec(path: str | os.PathLike[str]) -> Spec:
    """Read and validate one spec file; every failure is a :class:`CdiSpecError` naming it."""
    source = os.fspath(path)
    return parse_spec(read_spec_data(source), source=source)
