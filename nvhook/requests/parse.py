"""What a container asks for, parsed from its OCI spec under a :class:`~.policy.Policy`.

The values it builds (device ids, device requests, :class:`~.ids.Requests`) are in
:mod:`nvhook.requests.ids`. Why the rest stays one module of some 600 lines: it is one
pure function over one input, and the order in which the sources win, the checks on
each value and the decisions recorded below are read together; a tenth of it is this
docstring.

:func:`parse_requests` is a pure function of the spec (a dict as loaded from
``config.json``) and the policy: no I/O, stdlib only (docs/architecture.md D5). It never lets
a stray exception out on hostile input; everything malformed raises
:class:`~nvhook.errors.RequestError` with a one-line message naming the variable,
annotation or mount and the bad item (cut to about 80 characters).

Where requests come from, first match wins (the others land in ``Requests.ignored``
with the reason, so that ``nvhook explain`` can say so):

1. annotations whose key starts with one of ``policy.annotation_prefixes``
   (default ``cdi.k8s.io/``), each a comma list of CDI names ``vendor/class=name``;
2. when ``policy.accept_volume_mounts``, mounts whose destination is
   ``/var/run/nvidia-container-devices/<id>`` or ``…/cdi/<vendor>/<class>/<name>``
   and whose source is ``/dev/null`` (others are ignored with a warning);
3. ``NVIDIA_VISIBLE_DEVICES`` in ``process.env`` — honoured for an unprivileged
   container only when ``policy.accept_env_unprivileged``; unset in a legacy CUDA image
   (``CUDA_VERSION`` set, ``NVIDIA_REQUIRE_CUDA`` not) it means ``all``;
4. nothing asked: ``all`` for a privileged container when ``policy.privileged_gets_all``,
   else :class:`Void`.

Decisions:

- **Duplicate env names: the LAST entry wins.** That is what the process sees: runc
  1.1 sets each entry in turn (checked here with runc 1.1.5: ``X=first``, ``X=second``
  in config.json, the process's environ holds only ``X=second``), runc 1.2+'s
  ``prepareEnv`` keeps "the last value for each key", and NVIDIA's toolkit reads env
  into a map, so it agrees; glibc's ``getenv`` would return the first match only on a
  raw, undeduplicated environ, which runc never passes. Kubernetes relies on it: the
  image's ``NVIDIA_VISIBLE_DEVICES=all`` comes first, the device plugin's value after
  it. A duplicated ``NVIDIA_*`` name with differing values adds a warning.
- Env entries must be strings of the form ``NAME=value`` with a non-empty name and
  no NUL, as runc demands; anything else is a ``RequestError`` (runc would refuse the
  spec anyway).
- A device list is split at commas, items trimmed of blanks; empty items are skipped
  (``0,,1`` is ``0,1``, as NVIDIA's toolkit does); duplicates are dropped keeping the
  first. ``all``, ``none`` and ``void`` stand alone: mixed with other items (``all,0``)
  they are an error rather than NVIDIA's silent precedence. Values are case-sensitive.
- ``NVIDIA_DISABLE_REQUIRE`` is a boolean spelled as Go's ``strconv.ParseBool`` takes
  it (``1 t T TRUE true True`` / ``0 f F FALSE false False``), as NVIDIA's toolkit
  reads it; any other value (``yes``, empty) is false, with a warning so the user sees
  why requirements were still checked. When true, requirements are still parsed for
  ``explain`` but a malformed one becomes a warning instead of an error.
- ``NVIDIA_GDS`` / ``NVIDIA_MOFED`` / ``NVIDIA_GDRCOPY`` / ``NVIDIA_NVSWITCH`` accept
  ``enabled``, ``disabled`` or empty; anything else is an error (NVIDIA's toolkit would
  silently ignore ``true``; we say so instead).
- ``NVIDIA_IMEX_CHANNELS``: ``all``, a comma list of channel numbers, or
  empty/``void``/``none`` for none. IMEX channels and features come from env, so the
  same privilege rule as ``NVIDIA_VISIBLE_DEVICES`` applies to them.
- ``Requests.wants_anything`` is true when a device request is not :class:`Void`
  (``none`` still injects driver files and control nodes) or IMEX channels are asked
  for; features alone do not make a GPU container. When it is false, capabilities,
  requirements and features are not even parsed, so a mistake in them never fails a
  container that does not use GPUs (and the common path stays short).
- Legacy CUDA images (``CUDA_VERSION`` set, ``NVIDIA_REQUIRE_CUDA`` unset or empty) also
  get every capability when ``NVIDIA_DRIVER_CAPABILITIES`` is unset, and the requirement
  ``cuda>=<major.minor of CUDA_VERSION>``, as NVIDIA's toolkit does.
"""

from __future__ import annotations

import posixpath

from nvhook.constants import (
    ALL_CAPABILITIES,
    CAP_SYS_ADMIN,
    DEVICE_ALL,
    DEVICE_LIST_MOUNT_ROOT,
    DEVICE_LIST_MOUNT_SOURCE,
    DEVICE_NONE,
    DEVICE_VOID,
    ENV_CUDA_VERSION,
    ENV_DISABLE_REQUIRE,
    ENV_DRIVER_CAPABILITIES,
    ENV_FEATURES,
    ENV_IMEX_CHANNELS,
    ENV_REQUIRE_CUDA,
    ENV_REQUIRE_IGNORED,
    ENV_REQUIRE_PREFIX,
    ENV_VISIBLE_DEVICES,
    FEATURE_DISABLED,
    FEATURE_ENABLED,
    MAX_ENV_VALUE_CHARS,
)
from nvhook.errors import RequestError
from nvhook.requests.ids import (
    All,
    CdiName,
    DeviceId,
    DeviceRequest,
    Devices,
    Features,
    Ignored,
    Index,
    LegacyMig,
    MigIndex,
    MigUuid,
    NoGpus,
    Requests,
    Source,
    SourceKind,
    Uuid,
    Void,
)
from nvhook.requests.policy import Policy, canonical_capabilities
from nvhook.requests.requirements import Requirement, legacy_requirement, parse_requirement

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

__all__ = [
    "parse_capabilities",
    "parse_device_id",
    "parse_device_list",
    "parse_env",
    "parse_requests",
]

_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_UUID_DASHES = (8, 13, 18, 23)
#: Largest index or channel number we accept: a Linux device minor has 20 bits.
_MAX_NUMBER = (1 << 20) - 1
_BLANKS = " \t"
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")
_DEVICE_FORMS = (
    "expected all, none, void, an index (0), a UUID (GPU-…), "
    "a MIG device (0:1, MIG-…, MIG-GPU-…/gi/ci) or a CDI name (nvidia.com/gpu=0)"
)


def _show(text: str, limit: int = 80) -> str:
    """``text`` quoted for a one-line message, cut to about ``limit`` characters."""
    if len(text) > limit:
        return repr(text[: limit - 3] + "...") + f" ({len(text)} characters)"
    return repr(text)


# --- parsing helpers -----------------------------------------------------------------------


def _decimal(text: str) -> int | None:
    """A small non-negative decimal number, or None."""
    if not text or len(text) > 7 or not _DIGITS.issuperset(text):
        return None
    n = int(text)
    return n if n <= _MAX_NUMBER else None


def _is_uuid(text: str) -> bool:
    """``8-4-4-4-12`` hexadecimal digits."""
    if len(text) != 36:
        return False
    return all((c == "-") if i in _UUID_DASHES else (c in _HEX) for i, c in enumerate(text))


def _check_value(value: str, where: str) -> None:
    """Refuse values too long to be real and control characters (a tab counts as a blank)."""
    if len(value) > MAX_ENV_VALUE_CHARS:
        raise RequestError(
            f"{where} is {len(value)} characters long, more than {MAX_ENV_VALUE_CHARS}: "
            f"{_show(value)}"
        )
    if not value.replace("\t", " ").isprintable():
        bad = next(c for c in value if c != "\t" and not c.isprintable())
        raise RequestError(f"{where} contains the control character {bad!r}: {_show(value)}")


def _items(value: str, where: str) -> list[str]:
    """Comma-separated items, blanks trimmed, empty ones skipped."""
    _check_value(value.strip(_BLANKS), where)
    return [s for s in (item.strip(_BLANKS) for item in value.split(",")) if s]


def _cdi_name(text: str, where: str) -> CdiName:
    # Imported here: only a CDI request needs oci.cdi.
    from oci.cdi.names import parse_qualified_name
    from oci.errors import CdiNameError

    try:
        parse_qualified_name(text)
    except CdiNameError as e:
        raise RequestError(f"{where}: {e.message}") from None
    return CdiName(text)


def parse_device_id(item: str, *, where: str = ENV_VISIBLE_DEVICES) -> DeviceId:
    """One device item (blanks already trimmed); ``where`` names its origin in messages."""
    bad = f"{where}: invalid device {_show(item)}"
    if item.startswith("MIG-GPU-"):
        parts = item[4:].split("/")
        if len(parts) == 3 and _is_uuid(parts[0][4:]):
            gi, ci = _decimal(parts[1]), _decimal(parts[2])
            if gi is not None and ci is not None:
                return LegacyMig(parts[0], gi, ci)
        raise RequestError(f"{bad}: expected MIG-GPU-<uuid>/<gi>/<ci>")
    if item.startswith("GPU-"):
        if _is_uuid(item[4:]):
            return Uuid(item)
        raise RequestError(f"{bad}: expected GPU-<8-4-4-4-12 hex digits>")
    if item.startswith("MIG-"):
        if _is_uuid(item[4:]):
            return MigUuid(item)
        raise RequestError(f"{bad}: expected MIG-<8-4-4-4-12 hex digits>")
    if "=" in item:
        return _cdi_name(item, where)
    if ":" in item:
        gpu, _, mig = item.partition(":")
        gpu_n, mig_n = _decimal(gpu), _decimal(mig)
        if gpu_n is not None and mig_n is not None:
            return MigIndex(gpu_n, mig_n)
        raise RequestError(f"{bad}: expected <gpu index>:<mig index>, e.g. 0:1")
    n = _decimal(item)
    if n is not None:
        return Index(n)
    raise RequestError(f"{bad}: {_DEVICE_FORMS}")


def _combine(items: Iterable[str], where: str) -> DeviceRequest:
    """The request a list of items makes (specials stand alone, duplicates dropped)."""
    unique = list(dict.fromkeys(items))
    if not unique:
        return Void()
    specials: dict[str, DeviceRequest] = {
        DEVICE_ALL: All(),
        DEVICE_NONE: NoGpus(),
        DEVICE_VOID: Void(),
    }
    for item in unique:
        if item in specials:
            if len(unique) > 1:
                others = ",".join(unique)
                raise RequestError(
                    f"{where}: {item!r} cannot be combined with other devices: {_show(others)}"
                )
            return specials[item]
    ids = dict.fromkeys(parse_device_id(item, where=where) for item in unique)
    return Devices(tuple(ids))


def parse_device_list(value: str, *, where: str = ENV_VISIBLE_DEVICES) -> DeviceRequest:
    """Parse an ``NVIDIA_VISIBLE_DEVICES``-style value: empty means :class:`Void`."""
    return _combine(_items(value, where), where)


def parse_capabilities(value: str | None, *, default: tuple[str, ...]) -> tuple[str, ...]:
    """``NVIDIA_DRIVER_CAPABILITIES``: canonical order, ``all`` expanded; unset/empty -> default."""
    if value is None:
        return default
    items = _items(value, ENV_DRIVER_CAPABILITIES)
    if not items:
        return default
    try:
        return canonical_capabilities(items)
    except ValueError as e:
        raise RequestError(f"{ENV_DRIVER_CAPABILITIES}: {e}") from None


def _parse_imex(value: str) -> All | tuple[int, ...]:
    items = _items(value, ENV_IMEX_CHANNELS)
    unique = list(dict.fromkeys(items))
    if not unique or unique in ([DEVICE_VOID], [DEVICE_NONE]):
        return ()
    if unique == [DEVICE_ALL]:
        return All()
    channels: list[int] = []
    for item in unique:
        n = _decimal(item)
        if n is None:
            raise RequestError(
                f"{ENV_IMEX_CHANNELS}: invalid channel {_show(item)}: "
                "expected all or a comma list of channel numbers"
            )
        channels.append(n)
    return tuple(dict.fromkeys(channels))


def _parse_feature(name: str, value: str) -> bool:
    flag = value.strip(_BLANKS)
    if flag == FEATURE_ENABLED:
        return True
    if flag in ("", FEATURE_DISABLED):
        return False
    raise RequestError(
        f"{name} must be {FEATURE_ENABLED!r} or {FEATURE_DISABLED!r}, not {_show(flag)}"
    )


def parse_env(env: object) -> tuple[dict[str, str], tuple[str, ...]]:
    """``process.env`` as a dict (the last entry of a name wins), and warnings.

    Raise :class:`RequestError` for what runc would refuse: a non-list, a non-string
    entry, an entry without ``=``, an empty name, a NUL.
    """
    if env is None:
        return {}, ()
    if not isinstance(env, list):
        raise RequestError(f"process.env must be a list of strings, not {type(env).__name__}")
    out: dict[str, str] = {}
    duplicated: dict[str, None] = {}
    for i, entry in enumerate(env):
        if not isinstance(entry, str):
            raise RequestError(
                f"process.env[{i}] must be a string NAME=value, not {type(entry).__name__}"
            )
        name, sep, value = entry.partition("=")
        if not sep or not name or "\0" in entry:
            problem = "has no '='" if not sep else "has an empty name" if not name else "has a NUL"
            raise RequestError(f"process.env[{i}] {problem}: {_show(entry)}")
        if name.startswith("NVIDIA_") and name in out and out[name] != value:
            duplicated[name] = None
        out[name] = value
    warnings = tuple(
        f"{name} is set more than once in process.env; the last value, {_show(out[name])}, "
        "counts (as runc does)"
        for name in duplicated
    )
    return out, warnings


def _is_privileged(process: Mapping[str, Any]) -> bool:
    caps = process.get("capabilities")
    if caps is None:
        return False
    if not isinstance(caps, dict):
        raise RequestError("process.capabilities must be an object")
    bounding = caps.get("bounding")
    if bounding is None:
        return False
    if not isinstance(bounding, list):
        raise RequestError("process.capabilities.bounding must be a list of strings")
    return CAP_SYS_ADMIN in bounding


def _cut(value: str, limit: int = 200) -> str:
    return value if len(value) <= limit else value[: limit - 3] + "..."


# --- the sources ---------------------------------------------------------------------------


def _from_annotations(spec: Mapping[str, Any], prefixes: tuple[str, ...]) -> list[Source]:
    if not prefixes:
        return []
    annotations = spec.get("annotations")
    if annotations is None:
        return []
    if not isinstance(annotations, dict):
        raise RequestError("annotations must be an object of strings")
    sources = []
    for key, value in annotations.items():
        if not isinstance(key, str) or not key.startswith(prefixes):
            continue
        where = f"annotation {_show(key)}"
        if not isinstance(value, str):
            raise RequestError(f"{where} must be a string, not {type(value).__name__}")
        items = _items(value, where)
        if not items:
            continue
        names = dict.fromkeys(_cdi_name(item, where) for item in items)
        sources.append(Source(SourceKind.ANNOTATION, key, _cut(value), Devices(tuple(names))))
    return sources


def _from_mounts(spec: Mapping[str, Any]) -> tuple[list[Source], list[Ignored], list[str]]:
    mounts = spec.get("mounts")
    if mounts is None:
        return [], [], []
    if not isinstance(mounts, list):
        raise RequestError("mounts must be a list of objects")
    root = DEVICE_LIST_MOUNT_ROOT + "/"
    sources: list[Source] = []
    ignored: list[Ignored] = []
    warnings: list[str] = []
    for i, mount in enumerate(mounts):
        if not isinstance(mount, dict):
            raise RequestError(f"mounts[{i}] must be an object, not {type(mount).__name__}")
        destination = mount.get("destination")
        if not isinstance(destination, str):
            raise RequestError(f"mounts[{i}].destination must be a string")
        path = posixpath.normpath(destination)
        if not path.startswith(root):
            continue
        where = f"mount {_show(path)}"
        _check_value(path, where)
        source = mount.get("source")
        if not isinstance(source, str) or posixpath.normpath(source) != DEVICE_LIST_MOUNT_SOURCE:
            reason = f"its source is {_show(str(source))}, not {DEVICE_LIST_MOUNT_SOURCE}"
            ignored.append(Ignored(SourceKind.MOUNT, path, "", reason))
            warnings.append(f"ignored device-list {where}: {reason}")
            continue
        parts = path[len(root) :].split("/")
        request: DeviceRequest
        if parts[0] == "cdi" and len(parts) == 4:
            request = Devices((_cdi_name(f"{parts[1]}/{parts[2]}={parts[3]}", where),))
        elif parts[0] != "cdi" and len(parts) == 1:
            request = _combine(parts, where)
        else:
            raise RequestError(
                f"{where}: expected {root}<device> or {root}cdi/<vendor>/<class>/<name>"
            )
        sources.append(Source(SourceKind.MOUNT, path, "", request))
    return sources, ignored, warnings


def _merge(sources: list[Source], where: str) -> DeviceRequest:
    """One request from several sources of the same kind."""
    specials = [s for s in sources if not isinstance(s.devices, Devices)]
    if specials:
        if len(sources) > 1:
            names = ", ".join(s.name for s in sources)
            raise RequestError(
                f"{where}: {specials[0].devices} cannot be combined with other devices: {names}"
            )
        return specials[0].devices
    ids: dict[DeviceId, None] = {}
    for s in sources:
        assert isinstance(s.devices, Devices)
        ids.update(dict.fromkeys(s.devices.ids))
    return Devices(tuple(ids))


# --- the entry point -----------------------------------------------------------------------


def parse_requests(spec: Mapping[str, Any], policy: Policy) -> Requests:
    """What the container described by ``spec`` asks for, under ``policy``.

    A container that asks for nothing gets ``Requests(devices=Void())`` with only its
    provenance filled in: its capabilities, requirements and features are not parsed, so
    that a mistake there can never fail a container that does not use GPUs.
    """
    if not isinstance(spec, dict):
        raise RequestError("the runtime spec must be a JSON object")
    process = spec.get("process")
    if process is None:
        process = {}
    elif not isinstance(process, dict):
        raise RequestError("process must be an object")
    env, env_warnings = parse_env(process.get("env"))
    warnings = list(env_warnings)
    privileged = _is_privileged(process)
    env_allowed = privileged or policy.accept_env_unprivileged
    not_allowed = "the container is not privileged and policy accept_env_unprivileged is false"
    legacy = bool(env.get(ENV_CUDA_VERSION)) and not env.get(ENV_REQUIRE_CUDA)

    # --- devices: annotations, then mounts, then env, then policy ---
    sources = _from_annotations(spec, policy.annotation_prefixes)
    ignored: list[Ignored] = []
    devices: DeviceRequest = Void()
    overridden = ""
    if sources:
        devices = _merge(sources, "annotations")
        overridden = "annotations request devices"
    if policy.accept_volume_mounts:
        mount_sources, mount_ignored, mount_warnings = _from_mounts(spec)
        ignored += mount_ignored
        warnings += mount_warnings
        if sources:
            ignored += [Ignored(SourceKind.MOUNT, s.name, "", overridden) for s in mount_sources]
        elif mount_sources:
            sources = mount_sources
            devices = _merge(sources, "device-list mounts")
            overridden = "device-list mounts request devices"

    visible = env.get(ENV_VISIBLE_DEVICES)
    if visible is not None:
        shown = _cut(visible)
        if sources:
            ignored.append(Ignored(SourceKind.ENV, ENV_VISIBLE_DEVICES, shown, overridden))
        elif not env_allowed:
            ignored.append(Ignored(SourceKind.ENV, ENV_VISIBLE_DEVICES, shown, not_allowed))
            if visible.strip(_BLANKS) not in ("", DEVICE_VOID):
                warnings.append(f"ignored {ENV_VISIBLE_DEVICES}={_show(visible)}: {not_allowed}")
        else:
            devices = parse_device_list(visible)
            sources.append(Source(SourceKind.ENV, ENV_VISIBLE_DEVICES, shown, devices))
    elif legacy:
        shown = _cut(env[ENV_CUDA_VERSION])
        if sources:
            ignored.append(Ignored(SourceKind.LEGACY_IMAGE, ENV_CUDA_VERSION, shown, overridden))
        elif not env_allowed:
            ignored.append(Ignored(SourceKind.LEGACY_IMAGE, ENV_CUDA_VERSION, shown, not_allowed))
            warnings.append(
                f"ignored the implicit {ENV_VISIBLE_DEVICES}=all of a legacy CUDA image "
                f"({ENV_CUDA_VERSION} without {ENV_REQUIRE_CUDA}): {not_allowed}"
            )
        else:
            devices = All()
            sources.append(Source(SourceKind.LEGACY_IMAGE, ENV_CUDA_VERSION, shown, devices))

    if not sources and visible is None and privileged and policy.privileged_gets_all:
        devices = All()
        sources.append(Source(SourceKind.POLICY, "privileged_gets_all", "true", devices))

    # --- IMEX channels (an env request: the privilege rule applies) ---
    imex: All | tuple[int, ...] = ()
    imex_value = env.get(ENV_IMEX_CHANNELS)
    if imex_value is not None:
        if env_allowed:
            imex = _parse_imex(imex_value)
        elif imex_value.strip(_BLANKS) not in ("", DEVICE_VOID, DEVICE_NONE):
            ignored.append(
                Ignored(SourceKind.ENV, ENV_IMEX_CHANNELS, _cut(imex_value), not_allowed)
            )
            warnings.append(f"ignored {ENV_IMEX_CHANNELS}={_show(imex_value)}: {not_allowed}")

    if isinstance(devices, Void) and not imex:
        return Requests(
            devices=devices,
            sources=tuple(sources),
            ignored=tuple(ignored),
            warnings=tuple(warnings),
            is_privileged=privileged,
        )

    # --- capabilities ---
    caps_value = env.get(ENV_DRIVER_CAPABILITIES)
    if caps_value is None and legacy:
        capabilities = ALL_CAPABILITIES
    else:
        capabilities = parse_capabilities(caps_value, default=policy.default_capabilities)

    # --- requirements ---
    disable_require = False
    disable_value = env.get(ENV_DISABLE_REQUIRE)
    if disable_value is not None:
        flag = disable_value.strip(_BLANKS)
        if flag in _TRUE:
            disable_require = True
        elif flag not in _FALSE:
            warnings.append(
                f"{ENV_DISABLE_REQUIRE}={_show(disable_value)} is not a boolean "
                "(true/false/1/0, as Go's strconv.ParseBool reads it); requirements are checked"
            )
    requirements: list[Requirement] = []
    for name, value in env.items():
        if not name.startswith(ENV_REQUIRE_PREFIX) or name in ENV_REQUIRE_IGNORED:
            continue
        try:
            _check_value(value, name)
            requirement = parse_requirement(name, value)
        except RequestError as e:
            if not disable_require:
                raise
            warnings.append(f"{e.message} (not checked: {ENV_DISABLE_REQUIRE} is set)")
            continue
        if requirement is not None:
            requirements.append(requirement)
    if legacy:
        try:
            requirements.append(legacy_requirement(env[ENV_CUDA_VERSION]))
        except RequestError as e:
            if not disable_require:
                raise
            warnings.append(f"{e.message} (not checked: {ENV_DISABLE_REQUIRE} is set)")

    # --- features (env requests: the privilege rule applies) ---
    flags: dict[str, bool] = {}
    for field, name in ENV_FEATURES:
        raw = env.get(name)
        if raw is None:
            continue
        enabled = _parse_feature(name, raw)
        if enabled and not env_allowed:
            ignored.append(Ignored(SourceKind.ENV, name, _cut(raw), not_allowed))
            warnings.append(f"ignored {name}={_show(raw)}: {not_allowed}")
            continue
        flags[field] = enabled

    return Requests(
        devices=devices,
        sources=tuple(sources),
        ignored=tuple(ignored),
        capabilities=capabilities,
        requirements=tuple(requirements),
        disable_require=disable_require,
        imex_channels=imex,
        features=Features(**flags),
        warnings=tuple(warnings),
        is_privileged=privileged,
    )
