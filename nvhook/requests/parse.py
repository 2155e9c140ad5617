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
   (``CUDA_VERSION`` set, ``NVIDIA_REQUIRE_CUDA`` not) it means ``all``; other vendors'
   variables (``AMD_VISIBLE_DEVICES``, ``ASCEND_VISIBLE_DEVICES``, their grammars in
   :mod:`nvhook.requests.vendors`) add their devices after NVIDIA's, under the same rules
   (ignored when annotations or mounts request devices, or by the privilege rule); with
   NVIDIA's ``all`` or ``none`` they are an error;
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
    ENV_VENDOR_DEVICES,
    ENV_VISIBLE_DEVICES,
)
from nvhook.errors import RequestError
from nvhook.requests.ids import (
    All,
    DeviceId,
    DeviceRequest,
    Devices,
    Features,
    Ignored,
    NoGpus,
    Requests,
    Source,
    SourceKind,
    Void,
)
from nvhook.requests.policy import Policy
from nvhook.requests.values import (
    BLANKS,
    FALSE_WORDS,
    TRUE_WORDS,
    check_value,
    combine_ids,
    cut,
    parse_capabilities,
    parse_cdi_name,
    parse_device_list,
    parse_env,
    parse_feature,
    parse_imex,
    show,
    split_items,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from nvhook.requests.requirements import Requirement

__all__ = ["parse_requests"]


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
        where = f"annotation {show(key)}"
        if not isinstance(value, str):
            raise RequestError(f"{where} must be a string, not {type(value).__name__}")
        items = split_items(value, where)
        if not items:
            continue
        names = dict.fromkeys(parse_cdi_name(item, where) for item in items)
        sources.append(Source(SourceKind.ANNOTATION, key, cut(value), Devices(tuple(names))))
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
        where = f"mount {show(path)}"
        check_value(path, where)
        source = mount.get("source")
        if not isinstance(source, str) or posixpath.normpath(source) != DEVICE_LIST_MOUNT_SOURCE:
            reason = f"its source is {show(str(source))}, not {DEVICE_LIST_MOUNT_SOURCE}"
            ignored.append(Ignored(SourceKind.MOUNT, path, "", reason))
            warnings.append(f"ignored device-list {where}: {reason}")
            continue
        parts = path[len(root) :].split("/")
        request: DeviceRequest
        if parts[0] == "cdi" and len(parts) == 4:
            request = Devices((parse_cdi_name(f"{parts[1]}/{parts[2]}={parts[3]}", where),))
        elif parts[0] != "cdi" and len(parts) == 1:
            request = combine_ids(parts, where)
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
    privileged = _is_privileged(process)
    found = _Found(
        env=env,
        env_allowed=privileged or policy.accept_env_unprivileged,
        legacy=bool(env.get(ENV_CUDA_VERSION)) and not env.get(ENV_REQUIRE_CUDA),
        warnings=list(env_warnings),
    )
    devices, sources = _devices(spec, policy, privileged, found)
    imex = _imex(found)
    if isinstance(devices, Void) and not imex:
        return Requests(
            devices=devices,
            sources=tuple(sources),
            ignored=tuple(found.ignored),
            warnings=tuple(found.warnings),
            is_privileged=privileged,
        )
    caps_value = env.get(ENV_DRIVER_CAPABILITIES)
    if caps_value is None and found.legacy:
        capabilities = ALL_CAPABILITIES
    else:
        capabilities = parse_capabilities(caps_value, default=policy.default_capabilities)
    disable_require, requirements = _requirements(found)
    flags = _features(found)
    return Requests(
        devices=devices,
        sources=tuple(sources),
        ignored=tuple(found.ignored),
        capabilities=capabilities,
        requirements=tuple(requirements),
        disable_require=disable_require,
        imex_channels=imex,
        features=Features(**flags),
        warnings=tuple(found.warnings),
        is_privileged=privileged,
    )


#: Why an env request of an unprivileged container does not count.
_NOT_ALLOWED = "the container is not privileged and policy accept_env_unprivileged is false"


class _Found:
    """What :func:`parse_requests` has read so far: the env and the rules it is read by,
    and what each step ignored or warned about (appended in the steps' order)."""

    __slots__ = ("env", "env_allowed", "ignored", "legacy", "warnings")

    def __init__(
        self, *, env: dict[str, str], env_allowed: bool, legacy: bool, warnings: list[str]
    ) -> None:
        self.env = env
        self.env_allowed = env_allowed  # privileged, or policy accept_env_unprivileged
        self.legacy = legacy  # CUDA_VERSION without NVIDIA_REQUIRE_CUDA: a legacy image
        self.ignored: list[Ignored] = []
        self.warnings = warnings


def _devices(
    spec: Mapping[str, Any], policy: Policy, privileged: bool, found: _Found
) -> tuple[DeviceRequest, list[Source]]:
    """The devices asked for: annotations, then device-list mounts, then the env (or a
    legacy image's implicit ``all``), then the privileged default; first match wins."""
    env = found.env
    sources = _from_annotations(spec, policy.annotation_prefixes)
    devices: DeviceRequest = Void()
    overridden = ""
    if sources:
        devices = _merge(sources, "annotations")
        overridden = "annotations request devices"
    if policy.accept_volume_mounts:
        mount_sources, mount_ignored, mount_warnings = _from_mounts(spec)
        found.ignored += mount_ignored
        found.warnings += mount_warnings
        if sources:
            found.ignored += [
                Ignored(SourceKind.MOUNT, s.name, "", overridden) for s in mount_sources
            ]
        elif mount_sources:
            sources = mount_sources
            devices = _merge(sources, "device-list mounts")
            overridden = "device-list mounts request devices"

    visible = env.get(ENV_VISIBLE_DEVICES)
    if visible is not None:
        shown = cut(visible)
        if sources:
            found.ignored.append(Ignored(SourceKind.ENV, ENV_VISIBLE_DEVICES, shown, overridden))
        elif not found.env_allowed:
            found.ignored.append(Ignored(SourceKind.ENV, ENV_VISIBLE_DEVICES, shown, _NOT_ALLOWED))
            if visible.strip(BLANKS) not in ("", DEVICE_VOID):
                found.warnings.append(
                    f"ignored {ENV_VISIBLE_DEVICES}={show(visible)}: {_NOT_ALLOWED}"
                )
        else:
            devices = parse_device_list(visible)
            sources.append(Source(SourceKind.ENV, ENV_VISIBLE_DEVICES, shown, devices))
    elif found.legacy:
        shown = cut(env[ENV_CUDA_VERSION])
        kind = SourceKind.LEGACY_IMAGE
        if sources:
            found.ignored.append(Ignored(kind, ENV_CUDA_VERSION, shown, overridden))
        elif not found.env_allowed:
            found.ignored.append(Ignored(kind, ENV_CUDA_VERSION, shown, _NOT_ALLOWED))
            found.warnings.append(
                f"ignored the implicit {ENV_VISIBLE_DEVICES}=all of a legacy CUDA image "
                f"({ENV_CUDA_VERSION} without {ENV_REQUIRE_CUDA}): {_NOT_ALLOWED}"
            )
        else:
            devices = All()
            sources.append(Source(kind, ENV_CUDA_VERSION, shown, devices))

    vendor_sources = _from_vendor_env(found, overridden)
    if vendor_sources:
        devices = _with_vendors(devices, vendor_sources)
        sources += vendor_sources
    if not sources and visible is None and privileged and policy.privileged_gets_all:
        devices = All()
        sources.append(Source(SourceKind.POLICY, "privileged_gets_all", "true", devices))
    return devices, sources


def _from_vendor_env(found: _Found, overridden: str) -> list[Source]:
    """Other vendors' variables (:mod:`nvhook.requests.vendors`), under the same rules as
    ``NVIDIA_VISIBLE_DEVICES``: ignored when annotations or mounts request devices, and for
    an unprivileged container unless ``policy.accept_env_unprivileged``."""
    sources: list[Source] = []
    for name in ENV_VENDOR_DEVICES:
        value = found.env.get(name)
        if value is None:
            continue
        from nvhook.requests.vendors import parse_vendor_list  # only where one is set

        shown = cut(value)
        if overridden:
            found.ignored.append(Ignored(SourceKind.ENV, name, shown, overridden))
        elif not found.env_allowed:
            found.ignored.append(Ignored(SourceKind.ENV, name, shown, _NOT_ALLOWED))
            if value.strip(BLANKS) not in ("", DEVICE_VOID):
                found.warnings.append(f"ignored {name}={show(value)}: {_NOT_ALLOWED}")
        else:
            names = parse_vendor_list(name, value)
            if names:
                sources.append(Source(SourceKind.ENV, name, shown, Devices(names)))
    return sources


def _with_vendors(devices: DeviceRequest, vendor_sources: list[Source]) -> DeviceRequest:
    """NVIDIA's request and the other vendors' devices, one list (NVIDIA's first)."""
    if isinstance(devices, (All, NoGpus)):
        names = ", ".join(s.name for s in vendor_sources)
        raise RequestError(
            f"{ENV_VISIBLE_DEVICES}={devices} cannot be combined with {names}: list the "
            f"NVIDIA GPUs by index or UUID, or drop {ENV_VISIBLE_DEVICES}"
        )
    ids: dict[DeviceId, None] = dict.fromkeys(devices.ids) if isinstance(devices, Devices) else {}
    for s in vendor_sources:
        assert isinstance(s.devices, Devices)
        ids.update(dict.fromkeys(s.devices.ids))
    return Devices(tuple(ids))


def _imex(found: _Found) -> All | tuple[int, ...]:
    """The IMEX channels asked for (an env request: the privilege rule applies)."""
    value = found.env.get(ENV_IMEX_CHANNELS)
    if value is None:
        return ()
    if found.env_allowed:
        return parse_imex(value)
    if value.strip(BLANKS) not in ("", DEVICE_VOID, DEVICE_NONE):
        found.ignored.append(Ignored(SourceKind.ENV, ENV_IMEX_CHANNELS, cut(value), _NOT_ALLOWED))
        found.warnings.append(f"ignored {ENV_IMEX_CHANNELS}={show(value)}: {_NOT_ALLOWED}")
    return ()


def _requirements(found: _Found) -> tuple[bool, list[Requirement]]:
    """``NVIDIA_DISABLE_REQUIRE`` and the ``NVIDIA_REQUIRE_*`` constraints (a legacy image's
    ``cuda>=`` of its ``CUDA_VERSION`` too); a bad one fails unless requirements are off."""
    env = found.env
    disable_require = False
    disable_value = env.get(ENV_DISABLE_REQUIRE)
    if disable_value is not None:
        flag = disable_value.strip(BLANKS)
        if flag in TRUE_WORDS:
            disable_require = True
        elif flag not in FALSE_WORDS:
            found.warnings.append(
                f"{ENV_DISABLE_REQUIRE}={show(disable_value)} is not a boolean "
                "(true/false/1/0, as Go's strconv.ParseBool reads it); requirements are checked"
            )
    requirements: list[Requirement] = []
    for name, value in env.items():
        if not name.startswith(ENV_REQUIRE_PREFIX) or name in ENV_REQUIRE_IGNORED:
            continue
        from nvhook.requests.requirements import parse_requirement  # only where one is asked

        try:
            check_value(value, name)
            requirement = parse_requirement(name, value)
        except RequestError as e:
            if not disable_require:
                raise
            found.warnings.append(f"{e.message} (not checked: {ENV_DISABLE_REQUIRE} is set)")
            continue
        if requirement is not None:
            requirements.append(requirement)
    if found.legacy:
        from nvhook.requests.requirements import legacy_requirement

        try:
            requirements.append(legacy_requirement(env[ENV_CUDA_VERSION]))
        except RequestError as e:
            if not disable_require:
                raise
            found.warnings.append(f"{e.message} (not checked: {ENV_DISABLE_REQUIRE} is set)")
    return disable_require, requirements


def _features(found: _Found) -> dict[str, bool]:
    """The feature flags set (env requests: the privilege rule applies to enabling one)."""
    flags: dict[str, bool] = {}
    for field, name in ENV_FEATURES:
        raw = found.env.get(name)
        if raw is None:
            continue
        enabled = parse_feature(name, raw)
        if enabled and not found.env_allowed:
            found.ignored.append(Ignored(SourceKind.ENV, name, cut(raw), _NOT_ALLOWED))
            found.warnings.append(f"ignored {name}={show(raw)}: {_NOT_ALLOWED}")
            continue
        flags[field] = enabled
    return flags
