"""``nvhook config import FILE``: nvhook's settings for a file written for NVIDIA's toolkit.

NVIDIA Container Toolkit's ``nvidia-container-runtime`` reads
``/etc/nvidia-container-runtime/config.toml``. :data:`TOOLKIT_KEYS` lists every key of that
file and says, for each, either which nvhook setting (:data:`nvhook.settings.KEYS`) means
the same and how the value carries over, or why nvhook has no equivalent.
:func:`import_toolkit_config` applies that table to one file: every key in it ends up
either in :attr:`Imported.settings` or in :attr:`Imported.unsupported` with the reason;
:func:`render_toml` prints the result as an nvhook config file.

:func:`toolkit_note` is what the settings loader adds to its error when an unknown key
in nvhook's config is one of the toolkit's: it runs only on that error path. That is
why this module is not under ``nvhook/tools/``: the shim reaches it, and the start path
never reaches the tools (``tests/test_layers.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from nvhook.errors import ConfigError
from nvhook.settings import KEYS
from oci._frozen import Frozen

__all__ = [
    "TOOLKIT_KEYS",
    "TOOLKIT_SECTIONS",
    "Imported",
    "KeyMapping",
    "import_toolkit_config",
    "looks_like_toolkit",
    "render_toml",
    "toolkit_note",
]

#: The value converter of a mapped key: the toolkit's value to nvhook's (ValueError: none).
Convert = Callable[[Any], Any]


class KeyMapping(Frozen):
    """What becomes of one toolkit key: an nvhook key (and how the value converts), or why not."""

    target: str | None  # the nvhook key, e.g. "runtime.mode"; None: unsupported
    reason: str = ""  # why unsupported, or a note on the mapping
    convert: Convert | None = None  # None: the value as is


def _same(value: Any) -> Any:
    return value


def _comma_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    raise ValueError(f"expected a comma-separated string, found {value!r}")


def _debug_file(value: Any) -> str:
    """The toolkit logs to ``/dev/null`` by default, which is nvhook's empty log_file."""
    if not isinstance(value, str):
        raise ValueError(f"expected a path, found {value!r}")
    return "" if value in ("", "/dev/null") else value


_LEVELS = {
    "trace": "debug",
    "debug": "debug",
    "info": "info",
    "warn": "warning",
    "warning": "warning",
    "error": "error",
    "fatal": "error",
    "panic": "error",
}


def _log_level(value: Any) -> str:
    level = _LEVELS.get(str(value).lower())
    if level is None:
        raise ValueError(f"unknown log level {value!r}")
    return level


_MODES = {"auto": "auto", "cdi": "cdi", "legacy": "jit", "jit-cdi": "jit"}


def _mode(value: Any) -> str:
    mode = _MODES.get(str(value))
    if mode is None:
        raise ValueError(
            f"mode {value!r} has no nvhook equivalent (nvhook has auto, cdi and jit; "
            "csv is Tegra's mode, which nvhook does not support)"
        )
    return mode


def _host_ldconfig(value: Any) -> str:
    """``@/sbin/ldconfig`` names the host's ldconfig; without ``@``, the container's."""
    if not isinstance(value, str) or not value.startswith("@/"):
        raise ValueError(
            f"{value!r} names an ldconfig inside the container; nvhook's update-ldcache hook "
            "always runs the host's ldconfig (write it as @/sbin/ldconfig)"
        )
    return value[1:]


def _mapped(target: str, convert: Convert = _same, note: str = "") -> KeyMapping:
    return KeyMapping(target, note, convert)


def _unsupported(reason: str) -> KeyMapping:
    return KeyMapping(None, reason)


_NO_CLI = "nvhook has no nvidia-container-cli: the shim edits the container's spec itself"

#: Every key of nvidia-container-runtime's config.toml, dotted as in :data:`KEYS`.
TOOLKIT_KEYS: dict[str, KeyMapping] = {
    "accept-nvidia-visible-devices-envvar-when-unprivileged": _mapped(
        "policy.accept_env_unprivileged"
    ),
    "accept-nvidia-visible-devices-as-volume-mounts": _mapped("policy.accept_volume_mounts"),
    "disable-require": _unsupported(
        "nvhook always checks NVIDIA_REQUIRE_*; a container opts out with "
        "NVIDIA_DISABLE_REQUIRE=true"
    ),
    "supported-driver-capabilities": _unsupported(
        "nvhook does not restrict driver capabilities node-wide; "
        "policy.default_capabilities is only the default when a container names none"
    ),
    "swarm-resource": _unsupported(
        "Docker Swarm's generic-resource variable is not read; nvhook takes "
        "NVIDIA_VISIBLE_DEVICES, CDI annotations and device-list mounts"
    ),
    "nvidia-container-cli.root": _mapped(
        "host.driver_root", note="where the driver's files are (/run/nvidia/driver…)"
    ),
    "nvidia-container-cli.path": _unsupported(_NO_CLI),
    "nvidia-container-cli.environment": _unsupported(_NO_CLI),
    "nvidia-container-cli.debug": _unsupported(
        f"{_NO_CLI}; the shim's own log is runtime.log_file"
    ),
    "nvidia-container-cli.ldcache": _unsupported(
        "nvhook reads the ld.so.cache under host.driver_root; it cannot be named apart"
    ),
    "nvidia-container-cli.load-kmods": _unsupported(
        "nvhook never loads kernel modules; load them at boot (modprobe nvidia nvidia-uvm)"
    ),
    "nvidia-container-cli.no-pivot": _unsupported(_NO_CLI),
    "nvidia-container-cli.no-cgroups": _unsupported(
        "nvhook's device cgroup rules are part of the container's spec, applied by runc; "
        "rootless runtimes skip them themselves"
    ),
    "nvidia-container-cli.user": _unsupported(
        f"{_NO_CLI}; nvhook's hooks run as the runtime's user"
    ),
    "nvidia-container-cli.ldconfig": _mapped("hook.ldconfig", _host_ldconfig),
    "nvidia-container-runtime.debug": _mapped("runtime.log_file", _debug_file),
    "nvidia-container-runtime.log-level": _mapped("runtime.log_level", _log_level),
    "nvidia-container-runtime.mode": _mapped(
        "runtime.mode", _mode, note="legacy becomes jit: nvhook discovers the host itself"
    ),
    "nvidia-container-runtime.runtimes": _mapped("runtime.runtimes"),
    "nvidia-container-runtime.experimental": _unsupported(
        "an old toolkit switch with no meaning in nvhook"
    ),
    "nvidia-container-runtime.discover-mode": _unsupported(
        "an old toolkit switch; nvhook's runtime.mode chooses how devices are found"
    ),
    "nvidia-container-runtime.modes.cdi.default-kind": _mapped("cdi.default_kind"),
    "nvidia-container-runtime.modes.cdi.annotation-prefixes": _mapped("cdi.annotation_prefixes"),
    "nvidia-container-runtime.modes.cdi.spec-dirs": _mapped("cdi.spec_dirs"),
    "nvidia-container-runtime.modes.csv.mount-spec-path": _unsupported(
        "csv mode (Tegra) is not supported by nvhook"
    ),
    "nvidia-container-runtime.modes.legacy.cuda-compat-mode": _unsupported(
        "nvhook does not mount CUDA forward-compatibility libraries"
    ),
    "nvidia-container-runtime-hook.path": _unsupported(
        "nvhook injects its own hook program, set with hook.path (nvhook-hook), "
        "not NVIDIA's nvidia-container-runtime-hook"
    ),
    "nvidia-container-runtime-hook.skip-mode-detection": _unsupported(
        "nvhook's hooks are injected only by nvhook-runtime, so there is no mode to detect"
    ),
    "nvidia-ctk.path": _unsupported(
        "nvhook's hooks replace nvidia-ctk's; set nvhook-hook's path with hook.path"
    ),
}

#: Top-level tables of the toolkit's file (``features`` holds its feature flags).
TOOLKIT_SECTIONS = (
    "nvidia-container-cli",
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
    "nvidia-ctk",
    "features",
)
_TOP_LEVEL = frozenset(k for k in TOOLKIT_KEYS if "." not in k)


class Imported(Frozen):
    """What :func:`import_toolkit_config` made of one file."""

    path: str
    #: nvhook key -> (value, the toolkit key it came from), in :data:`KEYS` order
    settings: tuple[tuple[str, Any, str], ...]
    #: (toolkit key as written, its value, why it is not carried over)
    unsupported: tuple[tuple[str, Any, str], ...]


def _flatten(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted key, value)`` for every leaf; a toolkit key's own table is one leaf."""
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and dotted not in TOOLKIT_KEYS:
            out += _flatten(value, dotted + ".")
        else:
            out.append((dotted, value))
    return out


def _check_value(key: str, value: Any) -> str | None:
    """Why nvhook would refuse ``value`` for ``key`` (its type and allowed values), or None."""
    _default, kind, allowed, _doc = KEYS[key]
    if kind == "boolean":
        return None if isinstance(value, bool) else f"expected true or false, found {value!r}"
    if kind == "list of strings":
        ok = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
        return None if ok else f"expected a list of non-empty strings, found {value!r}"
    if not isinstance(value, str):
        return f"expected a string, found {value!r}"
    if allowed is not None and value not in allowed:
        return f"{value!r} is not one of {', '.join(allowed)}"
    if kind == "absolute path or empty" and value and not value.startswith("/"):
        return f"expected an absolute path, found {value!r}"
    return None


def import_toolkit_config(path: str) -> Imported:
    """Every key of the toolkit config ``path``: nvhook's setting for it, or why there is none.

    Raises :class:`ConfigError` when the file cannot be read or is not TOML.
    """
    import tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from e
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from e
    found: dict[str, tuple[Any, str]] = {}
    unsupported: list[tuple[str, Any, str]] = []
    for key, value in _flatten(data):
        mapping = TOOLKIT_KEYS.get(key)
        if mapping is None:
            if key.startswith("features."):
                reason = "a toolkit feature flag; nvhook has no feature flags"
            else:
                reason = "not a key of nvidia-container-runtime's config.toml nor of nvhook's"
            unsupported.append((key, value, reason))
            continue
        if mapping.target is None:
            unsupported.append((key, value, mapping.reason))
            continue
        convert = mapping.convert or _same
        try:
            converted = convert(value)
        except ValueError as e:
            unsupported.append((key, value, str(e)))
            continue
        problem = _check_value(mapping.target, converted)
        if problem is not None:
            unsupported.append((key, value, f"{mapping.target}: {problem}"))
            continue
        found[mapping.target] = (converted, key)
    settings = tuple((k, *found[k]) for k in KEYS if k in found)
    return Imported(path=path, settings=settings, unsupported=tuple(unsupported))


def _toml_value(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(json.dumps(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def render_toml(imported: Imported) -> str:
    """An nvhook config file holding ``imported``'s settings, the rest as comments."""
    lines = [
        f"# nvhook settings equivalent to {imported.path}",
        "# (made by `nvhook config import`; nvhook reads /etc/nvhook/config.toml)",
    ]
    section = None
    for key, value, source in imported.settings:
        table, _, name = key.partition(".")
        if table != section:
            lines += ["", f"[{table}]"]
            section = table
        lines.append(f"{name} = {_toml_value(value)}  # from {source}")
    if imported.unsupported:
        lines += ["", "# Not carried over:"]
        for key, value, reason in imported.unsupported:
            lines.append(f"# {key} = {_toml_value(value)}: {reason}")
    return "\n".join(lines) + "\n"


def looks_like_toolkit(data: Mapping[str, Any]) -> bool:
    """Whether parsed TOML ``data`` has a table or top-level key of the toolkit's file."""
    return any(k in TOOLKIT_SECTIONS or k in _TOP_LEVEL for k in data)


def toolkit_note(path: str, data: Mapping[str, Any]) -> str:
    """For the settings loader's error: "" unless ``data`` looks like the toolkit's file.

    Else a sentence saying so, naming nvhook's keys for the toolkit keys the file has and
    the command that prints the whole translation.
    """
    if not looks_like_toolkit(data):
        return ""
    pairs = []
    for key, _value in _flatten(data):
        mapping = TOOLKIT_KEYS.get(key)
        if mapping is not None and mapping.target is not None:
            pairs.append(f"{key} -> {mapping.target}")
    equivalents = f" (nvhook's keys: {', '.join(pairs)})" if pairs else ""
    return (
        f"; this looks like nvidia-container-runtime's config.toml{equivalents}: "
        f"`nvhook config import {os.path.abspath(path)}` prints the equivalent nvhook settings"
    )
