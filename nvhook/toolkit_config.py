"""``nvhook config import FILE``: nvhook's settings for a file written for NVIDIA's toolkit.

NVIDIA Container Toolkit's ``nvidia-container-runtime`` reads
``/etc/nvidia-container-runtime/config.toml``. :data:`TOOLKIT_KEYS` lists every key of that
file and says, for each, either which nvhook setting (:data:`nvhook.settings.KEYS`) means
the same and how the value carries over, or why nvhook has no equivalent.
:func:`nvhook.tools.toolkit_import.import_toolkit_config` applies that table to one file.

:func:`toolkit_note` is what the settings loader adds to its error when an unknown key
in nvhook's config is one of the toolkit's: it runs only on that error path. That is
why this module holds only the table and that note, and imports nothing of nvhook: the
settings loader (rank 2 of the start path) reaches it on its error path, so it ranks
below it (``tests/test_layers.py``), and the importer that needs :data:`nvhook.settings.KEYS`
is a tool.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from oci._frozen import Frozen

__all__ = [
    "TOOLKIT_KEYS",
    "TOOLKIT_SECTIONS",
    "KeyMapping",
    "as_is",
    "flatten",
    "looks_like_toolkit",
    "toolkit_note",
]

#: The value converter of a mapped key: the toolkit's value to nvhook's (ValueError: none).
Convert = Callable[[Any], Any]


class KeyMapping(Frozen):
    """What becomes of one toolkit key: an nvhook key (and how the value converts), or why not."""

    target: str | None  # the nvhook key, e.g. "runtime.mode"; None: unsupported
    reason: str = ""  # why unsupported, or a note on the mapping
    convert: Convert | None = None  # None: the value as is


def as_is(value: Any) -> Any:
    """The converter of a key whose value carries over unchanged."""
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


def _mapped(target: str, convert: Convert = as_is, note: str = "") -> KeyMapping:
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


def flatten(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted key, value)`` for every leaf; a toolkit key's own table is one leaf."""
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and dotted not in TOOLKIT_KEYS:
            out += flatten(value, dotted + ".")
        else:
            out.append((dotted, value))
    return out


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
    for key, _value in flatten(data):
        mapping = TOOLKIT_KEYS.get(key)
        if mapping is not None and mapping.target is not None:
            pairs.append(f"{key} -> {mapping.target}")
    equivalents = f" (nvhook's keys: {', '.join(pairs)})" if pairs else ""
    return (
        f"; this looks like nvidia-container-runtime's config.toml{equivalents}: "
        f"`nvhook config import {os.path.abspath(path)}` prints the equivalent nvhook settings"
    )
