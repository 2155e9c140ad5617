"""The device plugin's YAML configuration, validated with pydantic (its one home in nvhook).

This is the edge the design card kept pydantic for: off the container-start path (the
plugin is a long-running daemon), with messages that name the key path and what is
allowed. The file follows NVIDIA's device plugin (``version: v1``)::

    version: v1
    flags:
      migStrategy: none            # none | single | mixed
      plugin:
        deviceListStrategy: [envvar]   # envvar | volume-mounts | cdi-annotations | cdi-cri
        cdiAnnotationPrefix: cdi.k8s.io/
    sharing:
      timeSlicing:
        renameByDefault: false
        failRequestsGreaterThanOne: false
        resources:
          - name: nvidia.com/gpu
            replicas: 4
            rename: nvidia.com/gpu.shared   # optional; without a "/", under nvidia.com/

:func:`load_config` returns the plain :class:`~nvhook.deviceplugin.model.PluginConfig`;
every problem is a :class:`~nvhook.deviceplugin.errors.PluginConfigError` whose one line
names the file and, per problem, the key path (``sharing.timeSlicing.resources[0].replicas``)
and what is allowed.
"""

from __future__ import annotations

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
from nvhook.deviceplugin.model import PluginConfig, TimeSlicedResource

__all__ = ["load_config", "parse_config"]

_RESOURCE = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$"


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


Strategy = Literal["envvar", "volume-mounts", "cdi-annotations", "cdi-cri"]


def _envvar() -> list[Strategy]:
    return ["envvar"]


class _Plugin(_Model):
    device_list_strategy: list[Strategy] = Field(default_factory=_envvar, min_length=1)
    cdi_annotation_prefix: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/$")] = (
        "cdi.k8s.io/"
    )

    @field_validator("device_list_strategy", mode="before")
    @classmethod
    def _one_or_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class _Flags(_Model):
    mig_strategy: Literal["none", "single", "mixed"] = "none"
    plugin: _Plugin = Field(default_factory=_Plugin)


class _Replicated(_Model):
    name: Annotated[str, Field(pattern=_RESOURCE)]
    replicas: Annotated[int, Field(ge=1, le=1024)]
    rename: str | None = None

    @field_validator("rename")
    @classmethod
    def _qualified(cls, value: str | None) -> str | None:
        if value is None:
            return None
        full = value if "/" in value else f"nvidia.com/{value}"
        import re

        if not re.match(_RESOURCE, full):
            raise ValueError(
                "should be a resource name such as nvidia.com/gpu.shared (or gpu.shared)"
            )
        return full


class _TimeSlicing(_Model):
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
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
    time_slicing: _TimeSlicing = Field(default_factory=_TimeSlicing)


class _File(_Model):
    version: Literal["v1"] = "v1"
    flags: _Flags = Field(default_factory=_Flags)
    sharing: _Sharing = Field(default_factory=_Sharing)


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in ("function-after", "function-before") and not part.startswith(
            ("literal[", "list[", "str", "int", "bool")
        ):
            out += f".{part}" if out else part
    return out or "(top level)"


def _allowed(model: type[BaseModel]) -> str:
    return ", ".join(f.alias or n for n, f in model.model_fields.items())


def _describe(error: Any, data: Any) -> str:
    loc = tuple(error["loc"])
    where = _path(loc)
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
        annotation = field.annotation
        inner = getattr(annotation, "__args__", (annotation,))[0]
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            model = inner
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        else:
            return None
    return model


def parse_config(data: Any, *, source: str = "device plugin config") -> PluginConfig:
    """Validate the YAML document ``data`` (None: an empty file, the defaults)."""
    if data is None:
        data = {}
    try:
        model = _File.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(_describe(err, data) for err in e.errors())
        raise PluginConfigError(f"{source}: {problems}") from None
    slicing = model.sharing.time_slicing
    return PluginConfig(
        mig_strategy=model.flags.mig_strategy,
        device_list_strategies=tuple(dict.fromkeys(model.flags.plugin.device_list_strategy)),
        cdi_annotation_prefix=model.flags.plugin.cdi_annotation_prefix,
        time_slicing=tuple(
            TimeSlicedResource(r.name, r.replicas, r.rename or "") for r in slicing.resources
        ),
        rename_by_default=slicing.rename_by_default,
        fail_requests_greater_than_one=slicing.fail_requests_greater_than_one,
    )


def load_config(path: str | None) -> PluginConfig:
    """The configuration in the YAML file at ``path`` (None: the defaults)."""
    if path is None:
        return PluginConfig()
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
    try:
        data = yaml.load(text, Loader=_Loader)  # safe_load's loader, nesting bounded
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PluginConfigError(f"{path}: not valid YAML{where}: fix the syntax") from None
    except NestingError as e:
        raise PluginConfigError(f"{path}: {e}") from None
    return parse_config(data, source=path)


#: ``yaml.safe_load``'s loader, refusing nesting deeper than :data:`YAML_MAX_DEPTH` (a real
#: configuration nests five levels; pydantic and the messages above walk what it returns).
_Loader = yaml_loader(yaml.SafeLoader, YAML_MAX_DEPTH)
