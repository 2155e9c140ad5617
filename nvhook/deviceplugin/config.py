"""The device plugin's YAML configuration, validated with pydantic (its one home in nvhook).

This is the edge the design card kept pydantic for: off the container-start path (the
plugin is a long-running daemon), with messages that name the key path and what is
allowed. The file is NVIDIA's device plugin's (``version: v1``; the keys of
NVIDIA/k8s-device-plugin ``api/config/v1/``: ``config.go``, ``flags.go``, ``resources.go``,
``replicas.go``, ``sharing.go``, ``imex.go``), and every key of it is accepted::

    version: v1
    flags:
      migStrategy: none            # none | single | mixed
      failOnInitError: true        # false: no GPU or driver → serve nothing, stay up
      nvidiaDriverRoot: /          # the host's driver root: device specs' host paths
      nvidiaDevRoot: /             # (default: nvidiaDriverRoot)
      gdrcopyEnabled / gdsEnabled / mofedEnabled: false   # NVIDIA_GDRCOPY=enabled …
      deviceDiscoveryStrategy: auto                       # auto | nvml (tegra refused)
      plugin:
        passDeviceSpecs: false     # Allocate lists the device nodes
        deviceListStrategy: [envvar]   # envvar | volume-mounts | cdi-annotations | cdi-cri
        deviceIDStrategy: uuid     # uuid | index: how the container is told its devices
        cdiAnnotationPrefix: cdi.k8s.io/
    resources:
      gpus: [{pattern: "*A100*", name: a100}]   # → nvidia.com/a100; the rest nvidia.com/gpu
      mig:  [{pattern: "1g.10gb", name: mig-small}]
    sharing:
      timeSlicing:
        renameByDefault: false
        failRequestsGreaterThanOne: false
        resources:
          - name: nvidia.com/gpu
            replicas: 4
            rename: gpu.shared     # without "nvidia.com/", it is added (NVIDIA's rule)
            devices: all           # all | a count | [0, "1:0", "GPU-…"]
    imex:
      channelIDs: [0]              # [] or [0]
      required: false
    health:                        # nvhook's own section (NVIDIA's plugin ignores it)
      xids:
        ignored: [13, 31, 43, 45, 68, 109]   # NVIDIA's default: application errors
        fatal: all                 # or a list: only these make a GPU unhealthy
      recoverAfter: 10m            # healthy again 10 min after the last fatal XID, while
                                   # NVML answers for the GPU (default 0: never, as NVIDIA)
      kmsg: /dev/kmsg              # the kernel log read for "NVRM: Xid" lines (default: none)
      stateFile: /run/nvhook/device-plugin/gpu-health.json   # for nvhook labels / doctor (default:
                                   # the command's --health-state-file)

The keys that have no effect here (``flags.useNodeFeatureAPI``,
``flags.plugin.nvidiaCTKPath``, ``flags.plugin.containerDriverRoot``, the ``packed``
allocation policy, ``flags.gfd.*`` but ``outputFile``) are accepted, each with one line in
:attr:`PluginConfig.notes` naming it and why (:data:`NO_EFFECT`). ``sharing.mps`` shares
GPUs through MPS control daemons (:mod:`nvhook.deviceplugin.mps`) under ``flags.mpsRoot``,
and replaces ``sharing.timeSlicing`` when both are set, as in NVIDIA's plugin. Only a value
that cannot be honoured safely is an error: ``sharing.mps`` without ``flags.mpsRoot`` or
with ``migStrategy: mixed`` (NVIDIA's rules), ``deviceDiscoveryStrategy: tegra``. A key
NVIDIA's plugin does not know is an error too (NVIDIA ignores it silently; here a misspelt
key is not mistaken for a default).

The environment-variable and flag forms of NVIDIA's ``cmd/nvidia-device-plugin/main.go``
(``MIG_STRATEGY``, ``DEVICE_LIST_STRATEGY``…: :data:`ENVIRONMENT`) override the file's
keys, as there; :func:`load_config` takes them as ``overrides`` (key path → value, where
from), so an error names both the key path and the variable.

:func:`load_config` returns the plain :class:`~nvhook.deviceplugin.model.PluginConfig`;
every problem is a :class:`~nvhook.deviceplugin.errors.PluginConfigError` whose one line
names the file and, per problem, the key path (``sharing.timeSlicing.resources[0].replicas``)
and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import yaml

from nvhook.errors import MissingExtraError
from oci.nesting import YAML_MAX_DEPTH, NestingError, yaml_loader

try:
    from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
    from pydantic.alias_generators import to_camel
except ImportError as e:  # the kubernetes extra
    raise MissingExtraError("nvhook's device plugin configuration", e, "kubernetes") from e

from nvhook.deviceplugin.errors import PluginConfigError
from nvhook.deviceplugin.model import (
    NamedResource,
    PluginConfig,
    TimeSlicedResource,
    is_dns_subdomain,
)
from nvhook.deviceplugin.xid import DEFAULT_IGNORED, XidPolicy

__all__ = [
    "ENVIRONMENT",
    "NO_EFFECT",
    "Override",
    "environment_overrides",
    "health_environment",
    "load_config",
    "load_config_text",
    "parse_config",
]

#: NVIDIA's resource names: ``nvidia.com/`` and a DNS subdomain, 63 characters at most
#: (``api/config/v1/resources.go`` NewResourceName).
_PREFIX = "nvidia.com/"
_MAX_NAME = 63

#: The keys accepted without effect here, and why (one note each when set).
NO_EFFECT: dict[str, str] = {
    "flags.useNodeFeatureAPI": "nvhook labels writes Node Feature Discovery's feature file "
    "(--output), not NodeFeature objects",
    "flags.plugin.nvidiaCTKPath": "the CDI spec is nvhook cdi generate's, its hooks nvhook-hook",
    "flags.plugin.containerDriverRoot": "the plugin reads the host through nvhook's settings "
    "(host, driver and dev roots)",
    "flags.plugin.sharedDevicesAllocationPolicy": "replicas are always spread over the GPUs "
    "(distributed); packed is not implemented",
    "flags.gfd.oneshot": "nvhook labels runs once per call (as oneshot: true)",
    "flags.gfd.noTimestamp": "nvhook labels writes no timestamp label",
    "flags.gfd.sleepInterval": "nvhook labels runs once per call: run it from a timer",
    "flags.gfd.machineTypeFile": "nvhook labels writes no nvidia.com/gpu.machine label",
}


class Override:
    """A value for one key path from an environment variable or a flag (``origin``)."""

    __slots__ = ("origin", "value")

    def __init__(self, value: Any, origin: str) -> None:
        self.value, self.origin = value, origin


#: NVIDIA's environment variables (cmd/nvidia-device-plugin/main.go) → the key path each sets.
ENVIRONMENT: dict[str, tuple[str, ...]] = {
    "MIG_STRATEGY": ("flags", "migStrategy"),
    "FAIL_ON_INIT_ERROR": ("flags", "failOnInitError"),
    "NVIDIA_DRIVER_ROOT": ("flags", "nvidiaDriverRoot"),
    "NVIDIA_DEV_ROOT": ("flags", "nvidiaDevRoot"),
    "GDRCOPY_ENABLED": ("flags", "gdrcopyEnabled"),
    "GDS_ENABLED": ("flags", "gdsEnabled"),
    "MOFED_ENABLED": ("flags", "mofedEnabled"),
    "MPS_ROOT": ("flags", "mpsRoot"),
    "DEVICE_DISCOVERY_STRATEGY": ("flags", "deviceDiscoveryStrategy"),
    "PASS_DEVICE_SPECS": ("flags", "plugin", "passDeviceSpecs"),
    "DEVICE_LIST_STRATEGY": ("flags", "plugin", "deviceListStrategy"),
    "DEVICE_ID_STRATEGY": ("flags", "plugin", "deviceIDStrategy"),
    "CDI_ANNOTATION_PREFIX": ("flags", "plugin", "cdiAnnotationPrefix"),
    "NVIDIA_CDI_HOOK_PATH": ("flags", "plugin", "nvidiaCTKPath"),
    "NVIDIA_CTK_PATH": ("flags", "plugin", "nvidiaCTKPath"),
    "DRIVER_ROOT_CTR_PATH": ("flags", "plugin", "containerDriverRoot"),
    "CONTAINER_DRIVER_ROOT": ("flags", "plugin", "containerDriverRoot"),
    "SHARED_DEVICES_ALLOCATION_POLICY": ("flags", "plugin", "sharedDevicesAllocationPolicy"),
    "IMEX_CHANNEL_IDS": ("imex", "channelIDs"),
    "IMEX_REQUIRED": ("imex", "required"),
}
_LISTS = {"DEVICE_LIST_STRATEGY", "IMEX_CHANNEL_IDS"}  # urfave/cli slices: comma-separated


def environment_overrides(environ: Mapping[str, str]) -> dict[tuple[str, ...], Override]:
    """The key paths NVIDIA's environment variables in ``environ`` set (empty ones unset)."""
    out: dict[tuple[str, ...], Override] = {}
    for name, path in ENVIRONMENT.items():
        value = environ.get(name, "")
        if value == "":
            continue
        parsed: Any = value
        if name in _LISTS:
            parsed = [v.strip() for v in value.split(",") if v.strip()]
        out[path] = Override(parsed, f"${name}")
    return out


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


def _resource_name(value: str) -> str:
    """NVIDIA's ResourceName: ``nvidia.com/`` added when missing, the rest a DNS subdomain."""
    full = value if value.startswith(_PREFIX) else _PREFIX + value
    if len(full) > _MAX_NAME:
        raise ValueError(f"the full resource name {full} is longer than {_MAX_NAME} characters")
    name = full.removeprefix(_PREFIX)
    if not is_dns_subdomain(name):
        raise ValueError(
            f"{full} is not a resource name: after nvidia.com/, lower-case letters, digits, "
            "'-' and '.' (such as nvidia.com/gpu.shared, or gpu.shared)"
        )
    return full


ResourceName = Annotated[str, Field(min_length=1)]
Strategy = Literal["envvar", "volume-mounts", "cdi-annotations", "cdi-cri"]


class _Plugin(_Model):
    pass_device_specs: bool | None = None
    device_list_strategy: list[Strategy] | None = Field(default=None, min_length=1)
    device_id_strategy: Literal["uuid", "index"] | None = Field(
        default=None, alias="deviceIDStrategy"
    )
    cdi_annotation_prefix: (
        Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/$")] | None
    ) = None
    nvidia_ctk_path: str | None = Field(default=None, alias="nvidiaCTKPath")
    container_driver_root: str | None = None
    shared_devices_allocation_policy: Literal["distributed", "packed"] | None = None

    @field_validator("device_list_strategy", mode="before")
    @classmethod
    def _one_or_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class _Gfd(_Model):
    oneshot: bool | None = None
    no_timestamp: bool | None = None
    sleep_interval: str | int | None = None  # a Go duration ("60s") or nanoseconds
    output_file: str | None = None
    machine_type_file: str | None = None


class _Flags(_Model):
    mig_strategy: Literal["none", "single", "mixed"] | None = None
    fail_on_init_error: bool | None = None
    mps_root: str | None = None
    nvidia_driver_root: str | None = None
    nvidia_dev_root: str | None = None
    gdrcopy_enabled: bool | None = None
    gds_enabled: bool | None = None
    mofed_enabled: bool | None = None
    use_node_feature_api: bool | None = Field(default=None, alias="useNodeFeatureAPI")
    device_discovery_strategy: Literal["auto", "nvml", "tegra"] | None = None
    plugin: _Plugin | None = None
    gfd: _Gfd | None = None


class _Resource(_Model):
    pattern: Annotated[str, Field(min_length=1)]
    name: ResourceName

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _resource_name(value)


class _Resources(_Model):
    gpus: list[_Resource] | None = None
    mig: list[_Resource] | None = None


_DeviceRef = Annotated[int, Field(ge=0)] | Annotated[str, Field(min_length=1)]
_GPU_INDEX = re.compile(r"^\d+$")
_MIG_INDEX = re.compile(r"^\d+:\d+$")
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_DEVICE_UUID = re.compile(rf"^(GPU-{_UUID}|MIG-{_UUID}|MIG-GPU-{_UUID}/\d+/\d+)$")


class _Replicated(_Model):
    name: ResourceName
    replicas: Annotated[int, Field(ge=1, le=1024)]
    rename: str | None = None
    devices: Literal["all"] | Annotated[int, Field(gt=0)] | list[_DeviceRef] = "all"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _resource_name(value)

    @field_validator("rename")
    @classmethod
    def _rename(cls, value: str | None) -> str | None:
        return None if value in (None, "") else _resource_name(value)

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        out = []
        for ref in value:
            text = str(ref)
            if not (_GPU_INDEX.match(text) or _MIG_INDEX.match(text) or _DEVICE_UUID.match(text)):
                raise ValueError(
                    f"{text!r} is not a device: a GPU index (0), a MIG index (0:1) or a "
                    "GPU-/MIG- UUID"
                )
            out.append(text)
        return out


class _ReplicatedResources(_Model):
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool | None = None
    resources: list[_Replicated] = Field(default_factory=list)

    @field_validator("resources")
    @classmethod
    def _unique(cls, value: list[_Replicated]) -> list[_Replicated]:
        names = [r.name for r in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"each resource may be listed once; listed twice: {', '.join(twice)}")
        return value


class _Sharing(_Model):
    time_slicing: _ReplicatedResources | None = None
    mps: _ReplicatedResources | None = None


class _Imex(_Model):
    channel_ids: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list, alias="channelIDs")
    required: bool = False

    @field_validator("channel_ids")
    @classmethod
    def _zero(cls, value: list[int]) -> list[int]:
        if value not in ([], [0]):  # api/config/v1/imex.go AssertChannelIDsValid
            raise ValueError("should be [] or [0]")
        return value


_XID = Annotated[int, Field(ge=0, le=65535)]
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|m|s|ms))+$")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _seconds(value: Any) -> float:
    """A Go duration (``10m``, ``1h30m``, ``90s``) or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError("should be a duration such as 10m or a number of seconds")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("should not be negative")
        return float(value)
    text = str(value).strip()
    if text in ("0", "never"):
        return 0.0
    if not _DURATION.match(text):
        raise ValueError("should be a duration such as 10m, 1h30m, 90s, or never")
    return sum(float(n) * _UNIT[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(h|m|s|ms)", text))


class _Xids(_Model):
    ignored: list[_XID] | None = None
    fatal: Literal["all"] | list[_XID] = "all"


class _Health(_Model):
    xids: _Xids | None = None
    recover_after: float = 0.0
    kmsg: str = ""
    state_file: str = ""

    @field_validator("recover_after", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return _seconds(value)


class _File(_Model):
    version: Literal["v1"] = "v1"
    flags: _Flags | None = None
    resources: _Resources | None = None
    sharing: _Sharing | None = None
    imex: _Imex | None = None
    health: _Health | None = None


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in ("function-after", "function-before") and not part.startswith(
            ("literal[", "list[", "str", "int", "bool", "constrained-")
        ):
            out += f".{part}" if out else part
    return out or "(top level)"


def _allowed(model: type[BaseModel]) -> str:
    return ", ".join(f.alias or n for n, f in model.model_fields.items())


def _describe(error: Any, origins: Mapping[str, str]) -> str:
    loc = tuple(error["loc"])
    where = _path(loc)
    origin = next((o for p, o in origins.items() if where == p or where.startswith(p + "[")), "")
    if origin:
        where = f"{where} (from {origin})"
    if error["type"] == "extra_forbidden":
        model = _model_at(loc[:-1])
        allowed = f"; allowed: {_allowed(model)}" if model is not None else ""
        return f"{where}: unknown key{allowed}"
    if error["type"] in ("model_type", "dict_type"):
        return (
            f"{where}: should be a mapping of keys to values (got {type(error['input']).__name__})"
        )
    message = error["msg"]
    message = message.removeprefix("Value error, ")
    got = error.get("input")
    shown = "" if isinstance(got, dict) or error["type"] == "missing" else f" (got {got!r})"
    return f"{where}: {message[:1].lower()}{message[1:]}{shown}"


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] = _File
    for part in loc:
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return None
        found = _model_in(field.annotation)
        if found is None:
            return None
        model = found
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _apply(data: Any, overrides: Mapping[tuple[str, ...], Override]) -> Any:
    if not overrides or not isinstance(data, dict):
        return data
    data = _copy(data)
    for path, override in overrides.items():
        node = data
        for key in path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = {}
                node[key] = child
            node = child
        node[path[-1]] = override.value
    return data


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def parse_config(
    data: Any,
    *,
    source: str = "device plugin config",
    overrides: Mapping[tuple[str, ...], Override] | None = None,
) -> PluginConfig:
    """Validate the YAML document ``data`` (None: an empty file, the defaults), with
    ``overrides`` (key path → value) from the environment or flags applied over it."""
    if data is None:
        data = {}
    overrides = overrides or {}
    data = _apply(data, overrides)
    origins = {".".join(p): o.origin for p, o in overrides.items()}
    try:
        model = _File.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(_describe(err, origins) for err in e.errors())
        raise PluginConfigError(f"{source}: {problems}") from None
    return _meaning(model, source)


def _meaning(model: _File, source: str) -> PluginConfig:
    flags = model.flags or _Flags()
    plugin = flags.plugin or _Plugin()
    sharing = model.sharing or _Sharing()
    slicing = sharing.time_slicing or _ReplicatedResources()
    resources = model.resources or _Resources()
    imex = model.imex or _Imex()
    if flags.device_discovery_strategy == "tegra":
        raise PluginConfigError(
            f"{source}: flags.deviceDiscoveryStrategy: tegra is not supported: nvhook discovers "
            "GPUs through NVML only; use auto or nvml"
        )
    mps = sharing.mps
    notes = [f"{key}: set, but has no effect here: {why}" for key, why in _no_effect(model)]
    strategy = "time-slicing"
    if mps is not None and any(r.replicas > 1 for r in mps.resources):
        # NVIDIA's cmd/nvidia-device-plugin/main.go validateFlags, api/config/v1/sharing.go
        if not flags.mps_root:
            raise PluginConfigError(
                f"{source}: sharing.mps: needs flags.mpsRoot (or $MPS_ROOT), the host directory "
                "where each MPS control daemon's pipe and log directories are made"
            )
        if flags.mig_strategy == "mixed":
            raise PluginConfigError(
                f"{source}: sharing.mps: MPS cannot share MIG devices: use migStrategy none "
                "or single with whole GPUs, or sharing.timeSlicing"
            )
        if slicing.resources:
            notes.append(
                "sharing.timeSlicing: set, but has no effect here: sharing.mps is set, and "
                "replaces it (NVIDIA's rule)"
            )
        strategy = "mps"
        fail_default = True  # api/config/v1/config.go: MPS defaults it to true
        slicing = mps
    else:
        fail_default = False
    driver_root = flags.nvidia_driver_root or "/"
    return PluginConfig(
        mig_strategy=flags.mig_strategy or "none",
        device_list_strategies=tuple(dict.fromkeys(plugin.device_list_strategy or ["envvar"])),
        device_id_strategy=plugin.device_id_strategy or "uuid",
        cdi_annotation_prefix=plugin.cdi_annotation_prefix or "cdi.k8s.io/",
        time_slicing=tuple(
            TimeSlicedResource(
                r.name,
                r.replicas,
                r.rename or (f"{r.name}.shared" if slicing.rename_by_default else ""),
                count=r.devices if isinstance(r.devices, int) else 0,
                devices=tuple(str(d) for d in r.devices) if isinstance(r.devices, list) else None,
            )
            for r in slicing.resources
        ),
        rename_by_default=slicing.rename_by_default,
        fail_requests_greater_than_one=(
            fail_default
            if slicing.fail_requests_greater_than_one is None
            else slicing.fail_requests_greater_than_one
        ),
        sharing_strategy=strategy,
        mps_root=flags.mps_root or "",
        fail_on_init_error=flags.fail_on_init_error is not False,
        pass_device_specs=bool(plugin.pass_device_specs),
        dev_root=flags.nvidia_dev_root or driver_root,
        gpu_resources=tuple(NamedResource(r.pattern, r.name) for r in resources.gpus or ()),
        mig_resources=tuple(NamedResource(r.pattern, r.name) for r in resources.mig or ()),
        features=tuple(
            name
            for name, on in (
                ("NVIDIA_GDRCOPY", flags.gdrcopy_enabled),
                ("NVIDIA_GDS", flags.gds_enabled),
                ("NVIDIA_MOFED", flags.mofed_enabled),
            )
            if on
        ),
        imex_channel_ids=tuple(imex.channel_ids),
        imex_required=imex.required,
        gfd_output_file=(flags.gfd.output_file if flags.gfd else None) or "",
        health=_policy(model.health or _Health()),
        notes=tuple(notes),
    )


def _policy(health: _Health) -> XidPolicy:
    xids = health.xids or _Xids()
    return XidPolicy(
        ignored=tuple(xids.ignored) if xids.ignored is not None else DEFAULT_IGNORED,
        fatal=None if xids.fatal == "all" else tuple(xids.fatal),
        recover_after=health.recover_after,
        kmsg=health.kmsg,
        state_file=health.state_file,
    )


def health_environment(policy: XidPolicy, environ: Mapping[str, str]) -> XidPolicy:
    """``policy`` with NVIDIA's ``DP_DISABLE_HEALTHCHECKS`` (``all``/``xids``: no XID health;
    a comma list: also ignored) and ``DP_ENABLE_HEALTHCHECKS`` (a comma list: not ignored
    even by default; ``all``: nothing ignored) applied, as NVIDIA's ``internal/rm/health.go``."""
    disable = [v.strip().lower() for v in environ.get("DP_DISABLE_HEALTHCHECKS", "").split(",")]
    enable = [v.strip().lower() for v in environ.get("DP_ENABLE_HEALTHCHECKS", "").split(",")]
    ignored = set(policy.ignored)
    enabled = policy.enabled
    if "all" in disable or "xids" in disable:
        enabled = False
    ignored |= {int(v) for v in disable if v.isdigit()}
    if "all" in enable:
        ignored, enabled = set(), True
    explicit = {int(v) for v in enable if v.isdigit()}
    if explicit:
        ignored -= explicit
        enabled = True
    return XidPolicy(
        ignored=tuple(sorted(ignored)),
        fatal=policy.fatal,
        recover_after=policy.recover_after,
        enabled=enabled,
        kmsg=policy.kmsg,
        state_file=policy.state_file,
    )


def _no_effect(model: _File) -> list[tuple[str, str]]:
    flags = model.flags or _Flags()
    values: dict[str, Any] = {"flags.useNodeFeatureAPI": flags.use_node_feature_api}
    if flags.plugin is not None:
        values["flags.plugin.nvidiaCTKPath"] = flags.plugin.nvidia_ctk_path
        values["flags.plugin.containerDriverRoot"] = flags.plugin.container_driver_root
        if flags.plugin.shared_devices_allocation_policy == "packed":
            values["flags.plugin.sharedDevicesAllocationPolicy"] = "packed"
    if flags.gfd is not None:
        values["flags.gfd.oneshot"] = flags.gfd.oneshot
        values["flags.gfd.noTimestamp"] = flags.gfd.no_timestamp
        values["flags.gfd.sleepInterval"] = flags.gfd.sleep_interval
        values["flags.gfd.machineTypeFile"] = flags.gfd.machine_type_file
    return [(key, NO_EFFECT[key]) for key, value in values.items() if value not in (None, "")]


def load_config(
    path: str | None, *, overrides: Mapping[tuple[str, ...], Override] | None = None
) -> PluginConfig:
    """The configuration in the YAML file at ``path`` (None: the defaults), with
    ``overrides`` applied over it."""
    if path is None:
        return parse_config(None, source="device plugin settings", overrides=overrides)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise PluginConfigError(
            f"{path}: cannot read the device plugin config: {e.strerror}"
        ) from e
    except UnicodeDecodeError as e:
        raise PluginConfigError(
            f"{path}: not UTF-8 (byte {e.start}): save the device plugin config as UTF-8"
        ) from None
    return load_config_text(text, source=path, overrides=overrides)


def load_config_text(
    text: str, *, source: str, overrides: Mapping[tuple[str, ...], Override] | None = None
) -> PluginConfig:
    """The configuration in the YAML ``text`` (a file's, a ConfigMap key's), ``source``
    naming it in every message, with ``overrides`` applied over it."""
    try:
        data = yaml.load(text, Loader=_Loader)  # safe_load's loader, nesting bounded
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PluginConfigError(f"{source}: not valid YAML{where}: fix the syntax") from None
    except NestingError as e:
        raise PluginConfigError(f"{source}: {e}") from None
    return parse_config(data, source=source, overrides=overrides)


#: ``yaml.safe_load``'s loader, refusing nesting deeper than :data:`YAML_MAX_DEPTH` (a real
#: configuration nests five levels; pydantic and the messages above walk what it returns).
_Loader = yaml_loader(yaml.SafeLoader, YAML_MAX_DEPTH)
