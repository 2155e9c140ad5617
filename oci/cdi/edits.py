"""Container edits as light immutable values, and their conversion from/to CDI JSON.

:class:`Edits` mirrors CDI's ``containerEdits`` (the same fields, snake_case).
It is what every producer of devices yields (a CDI spec, host discovery, a
volume-mount device list) and what :func:`oci.cdi.apply.apply` consumes.

These are plain frozen values on purpose: the runtime shim builds them on
every container start and cannot afford pydantic (docs/architecture.md D5). The strict,
stdlib-only parser in :mod:`oci.cdi.parse` validates spec files and converts
into these values.
"""

from __future__ import annotations

from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = [
    "HOOK_NAMES",
    "DeviceNode",
    "Edits",
    "Hook",
    "IntelRdt",
    "Mount",
    "NetDevice",
]

#: OCI hook lifecycles, in the order the runtime runs them.
HOOK_NAMES: tuple[str, ...] = (
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
)


class DeviceNode(Frozen):
    """A device node to create in the container (CDI ``deviceNodes`` item)."""

    path: str
    host_path: str | None = None
    type: str | None = None
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str | None = None
    uid: int | None = None
    gid: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeviceNode:
        return cls(
            path=d["path"],
            host_path=d.get("hostPath") or None,
            type=d.get("type") or None,
            major=d.get("major"),
            minor=d.get("minor"),
            file_mode=d.get("fileMode"),
            permissions=d.get("permissions") or None,
            uid=d.get("uid"),
            gid=d.get("gid"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        for key, value in (
            ("hostPath", self.host_path),
            ("type", self.type),
            ("major", self.major),
            ("minor", self.minor),
            ("fileMode", self.file_mode),
            ("permissions", self.permissions),
            ("uid", self.uid),
            ("gid", self.gid),
        ):
            if value is not None:
                out[key] = value
        return out


class Mount(Frozen):
    """A mount to add to the container (CDI ``mounts`` item)."""

    host_path: str
    container_path: str
    type: str | None = None
    options: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Mount:
        return cls(
            host_path=d["hostPath"],
            container_path=d["containerPath"],
            type=d.get("type") or None,
            options=tuple(d.get("options") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.type is not None:
            out["type"] = self.type
        if self.options:
            out["options"] = list(self.options)
        return out


class Hook(Frozen):
    """An OCI hook to add to one lifecycle (CDI ``hooks`` item)."""

    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Hook:
        return cls(
            hook_name=d["hookName"],
            path=d["path"],
            args=tuple(d.get("args") or ()),
            env=tuple(d.get("env") or ()),
            timeout=d.get("timeout"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hookName": self.hook_name, "path": self.path}
        if self.args:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = list(self.env)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        return out

    def to_oci(self) -> dict[str, Any]:
        """The OCI ``hooks.<lifecycle>[]`` item (``hookName`` is the list it goes in)."""
        out: dict[str, Any] = {"path": self.path}
        if self.args:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = list(self.env)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        return out


class NetDevice(Frozen):
    """A host network interface to move into the container (CDI ``netDevices`` item)."""

    host_interface_name: str
    name: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NetDevice:
        return cls(host_interface_name=d["hostInterfaceName"], name=d["name"])

    def to_dict(self) -> dict[str, Any]:
        return {"hostInterfaceName": self.host_interface_name, "name": self.name}


class IntelRdt(Frozen):
    """Intel RDT settings (CDI ``intelRdt``); replaces ``linux.intelRdt`` as a whole."""

    clos_id: str | None = None
    l3_cache_schema: str | None = None
    mem_bw_schema: str | None = None
    schemata: tuple[str, ...] = ()
    enable_monitoring: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> IntelRdt:
        return cls(
            clos_id=d.get("closID") or None,
            l3_cache_schema=d.get("l3CacheSchema") or None,
            mem_bw_schema=d.get("memBwSchema") or None,
            schemata=tuple(d.get("schemata") or ()),
            enable_monitoring=bool(d.get("enableMonitoring", False)),
        )

    def to_dict(self) -> dict[str, Any]:
        """CDI and OCI share these keys (all omitted when empty)."""
        out: dict[str, Any] = {}
        if self.clos_id:
            out["closID"] = self.clos_id
        if self.l3_cache_schema:
            out["l3CacheSchema"] = self.l3_cache_schema
        if self.mem_bw_schema:
            out["memBwSchema"] = self.mem_bw_schema
        if self.schemata:
            out["schemata"] = list(self.schemata)
        if self.enable_monitoring:
            out["enableMonitoring"] = True
        return out


class Edits(Frozen, kw_only=True):
    """CDI container edits: an immutable value; ``a + b`` concatenates, ``Edits()`` is the identity.

    Concatenation follows the reference ``ContainerEdits.Append``: lists are
    appended in order and a later ``intel_rdt`` replaces an earlier one.
    """

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    additional_gids: tuple[int, ...] = ()
    net_devices: tuple[NetDevice, ...] = ()
    intel_rdt: IntelRdt | None = None

    def __add__(self, other: Edits) -> Edits:
        return Edits(
            env=self.env + other.env,
            device_nodes=self.device_nodes + other.device_nodes,
            mounts=self.mounts + other.mounts,
            hooks=self.hooks + other.hooks,
            additional_gids=self.additional_gids + other.additional_gids,
            net_devices=self.net_devices + other.net_devices,
            intel_rdt=other.intel_rdt if other.intel_rdt is not None else self.intel_rdt,
        )

    def __bool__(self) -> bool:
        return bool(
            self.env
            or self.device_nodes
            or self.mounts
            or self.hooks
            or self.additional_gids
            or self.net_devices
            or self.intel_rdt is not None
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Edits:
        """Build from a CDI ``containerEdits`` JSON object (already validated)."""
        if not d:
            return cls()
        rdt = d.get("intelRdt")
        return cls(
            env=tuple(d.get("env") or ()),
            device_nodes=tuple(DeviceNode.from_dict(x) for x in d.get("deviceNodes") or ()),
            mounts=tuple(Mount.from_dict(x) for x in d.get("mounts") or ()),
            hooks=tuple(Hook.from_dict(x) for x in d.get("hooks") or ()),
            additional_gids=tuple(d.get("additionalGids") or ()),
            net_devices=tuple(NetDevice.from_dict(x) for x in d.get("netDevices") or ()),
            intel_rdt=IntelRdt.from_dict(rdt) if rdt is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The CDI ``containerEdits`` JSON object (empty fields omitted)."""
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [x.to_dict() for x in self.device_nodes]
        if self.mounts:
            out["mounts"] = [x.to_dict() for x in self.mounts]
        if self.hooks:
            out["hooks"] = [x.to_dict() for x in self.hooks]
        if self.additional_gids:
            out["additionalGids"] = list(self.additional_gids)
        if self.net_devices:
            out["netDevices"] = [x.to_dict() for x in self.net_devices]
        if self.intel_rdt is not None:
            out["intelRdt"] = self.intel_rdt.to_dict()
        return out
