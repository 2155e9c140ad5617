"""nvhook's configuration file: ``/etc/nvhook/config.toml``, or the file ``$NVHOOK_CONFIG`` names.

The runtime shim reads it on every call, pass-through ones included, so this
module imports nothing beyond ``os``, ``sys`` and ``marshal`` at load time
(DESIGN.md D5: ``tomllib`` costs ~15 ms, ``dataclasses`` more). Settings are a
plain dict keyed ``"section.key"``. A validated copy of each file is kept in
a cache (``$NVHOOK_CACHE_DIR``, default ``/run/nvhook``) keyed by the file's
path, inode, size and mtime; a stale or unreadable cache is simply re-made,
and a cache that cannot be written is not an error.

A missing ``/etc/nvhook/config.toml`` means the defaults; a file named by
``$NVHOOK_CONFIG`` must exist. An unknown section or key, a wrong type or an
invalid value is a :class:`~nvhook.errors.ConfigError` naming the file and the key.

:data:`KEYS` is the reference (the README's configuration table is made from it).
"""

from __future__ import annotations

import marshal
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG_PATH",
    "KEYS",
    "config_path",
    "load_settings",
    "render_reference",
]

DEFAULT_CONFIG_PATH = "/etc/nvhook/config.toml"
CONFIG_ENV = "NVHOOK_CONFIG"
CACHE_ENV = "NVHOOK_CACHE_DIR"
DEFAULT_CACHE_DIR = "/run/nvhook"
_CACHE_FORMAT = 1

_LIST = "list of strings"
_STR = "string"
_BOOL = "boolean"
_PATH = "absolute path or empty"

#: ``"section.key": (default, type, allowed values or None, description)``.
KEYS: dict[str, tuple[Any, str, tuple[str, ...] | None, str]] = {
    "runtime.runtimes": (
        ["runc", "crun"],
        _LIST,
        None,
        "Low-level runtimes to exec, first found wins: absolute paths, or names looked up "
        "on PATH; nvhook-runtime itself is skipped; /usr/sbin/runc and /usr/bin/runc are "
        "tried last.",
    ),
    "runtime.mode": (
        "auto",
        _STR,
        ("auto", "cdi", "jit"),
        "cdi: resolve qualified CDI names through the spec dirs; jit: discover the host "
        "directly; auto: cdi when every request is a qualified CDI name, else jit.",
    ),
    "runtime.log_file": (
        "/var/log/nvhook-runtime.log",
        _PATH,
        None,
        "The shim's own log (JSON lines); empty disables it. Failing to write it never "
        "fails a container.",
    ),
    "runtime.log_level": (
        "info",
        _STR,
        ("debug", "info", "warning", "error"),
        "Lowest level written to log_file.",
    ),
    "host.root": (
        "/",
        _STR,
        None,
        "The host's root: /proc/driver/nvidia, /proc/devices and IPC sockets are read "
        "under it (a mock machine's directory in tests).",
    ),
    "host.driver_root": (
        "",
        _STR,
        None,
        "Where the driver's libraries and binaries are (/run/nvidia/driver under the GPU "
        "Operator); empty means host.root.",
    ),
    "host.dev_root": (
        "",
        _STR,
        None,
        "Where the /dev/nvidia* nodes are; empty means host.root.",
    ),
    "host.resolver": (
        "procfs",
        _STR,
        ("procfs", "nvml"),
        "How GPUs are resolved at container start: procfs (fast, no NVML; falls back to "
        "NVML for MIG UUIDs) or nvml.",
    ),
    "cdi.spec_dirs": (
        ["/etc/cdi", "/var/run/cdi"],
        _LIST,
        None,
        "CDI spec directories, lowest priority first.",
    ),
    "cdi.default_kind": (
        "nvidia.com/gpu",
        _STR,
        None,
        "In mode cdi, plain NVIDIA_VISIBLE_DEVICES ids name devices of this kind (0 becomes "
        "nvidia.com/gpu=0, all nvidia.com/gpu=all), as nvhook cdi generate names them.",
    ),
    "cdi.annotation_prefixes": (
        ["cdi.k8s.io/"],
        _LIST,
        None,
        "Annotation keys under these prefixes request CDI devices (comma lists of "
        "vendor/class=name); they take precedence over env.",
    ),
    "policy.accept_env_unprivileged": (
        True,
        _BOOL,
        None,
        "Honour NVIDIA_VISIBLE_DEVICES from unprivileged containers (set false on "
        "Kubernetes, where images carry NVIDIA_VISIBLE_DEVICES=all).",
    ),
    "policy.accept_volume_mounts": (
        False,
        _BOOL,
        None,
        "Honour device lists given as mounts under /var/run/nvidia-container-devices/.",
    ),
    "policy.privileged_gets_all": (
        False,
        _BOOL,
        None,
        "A privileged container that asks for nothing gets every GPU.",
    ),
    "policy.default_capabilities": (
        ["compute", "utility"],
        _LIST,
        None,
        "Driver capabilities when NVIDIA_DRIVER_CAPABILITIES is unset or empty.",
    ),
    "hook.path": (
        "",
        _PATH,
        None,
        "Absolute path of nvhook-hook, injected as the createContainer hook; empty means "
        "the launcher next to the shim's interpreter.",
    ),
    "hook.ldconfig": (
        "",
        _PATH,
        None,
        "The host's ldconfig for the ld cache hook; empty means /sbin/ldconfig.real where "
        "it exists, else /sbin/ldconfig.",
    ),
}


def config_path() -> tuple[str, bool]:
    """The config file to read, and whether it was named explicitly (``$NVHOOK_CONFIG``)."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        return named, True
    return DEFAULT_CONFIG_PATH, False


def load_settings(path: str | None = None, *, cache_dir: str | None = None) -> dict[str, Any]:
    """The settings: defaults overlaid with the config file, validated (cached by file identity).

    The cache goes to ``cache_dir``, else ``$NVHOOK_CACHE_DIR``, else ``/run/nvhook``.
    """
    explicit = path is not None
    if path is None:
        path, explicit = config_path()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if explicit:
            _fail(f"{path}: configuration file not found (named by ${CONFIG_ENV})")
        return defaults()
    except OSError as e:
        _fail(f"{path}: cannot read configuration file: {e.strerror}")
    key = (_CACHE_FORMAT, os.path.abspath(path), st.st_ino, st.st_size, st.st_mtime_ns)
    cache_file = _cache_file(key[1], cache_dir)
    cached = _read_cache(cache_file, key)
    if cached is not None:
        return cached
    settings = _parse(path)
    _write_cache(cache_file, key, settings)
    return settings


def defaults() -> dict[str, Any]:
    return {name: (list(d) if isinstance(d, list) else d) for name, (d, *_rest) in KEYS.items()}


def _parse(path: str) -> dict[str, Any]:
    import tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        _fail(f"{path}: invalid TOML: {e}")
    except OSError as e:
        _fail(f"{path}: cannot read configuration file: {e.strerror}")
    settings = defaults()
    for section, table in data.items():
        if not isinstance(table, dict):
            _fail(f"{path}: {section}: expected a [{section}] table{_foreign(path, data)}")
        for name, value in table.items():
            key = f"{section}.{name}"
            if key not in KEYS:
                known = ", ".join(k for k in KEYS if k.startswith(section + "."))
                hint = f" (known keys in [{section}]: {known})" if known else ""
                _fail(f"{path}: {key}: unknown setting{hint}{_foreign(path, data)}")
            settings[key] = _check(path, key, value)
    return settings


def _foreign(path: str, data: dict[str, Any]) -> str:
    """Error path only: a note naming `nvhook config import` when the file is NVIDIA's toolkit's."""
    from nvhook.toolkit_config import toolkit_note

    return toolkit_note(path, data)


def _check(path: str, key: str, value: object) -> object:
    _default, kind, allowed, _doc = KEYS[key]
    if kind == _BOOL:
        if not isinstance(value, bool):
            _fail(f"{path}: {key}: expected true or false, found {value!r}")
    elif kind == _LIST:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            _fail(f"{path}: {key}: expected a list of non-empty strings, found {value!r}")
    else:
        if not isinstance(value, str):
            _fail(f"{path}: {key}: expected a string, found {value!r}")
        if allowed is not None and value not in allowed:
            _fail(f"{path}: {key}: {value!r} is not one of {', '.join(allowed)}")
        if kind == _PATH and value and not str(value).startswith("/"):
            _fail(f"{path}: {key}: expected an absolute path, found {value!r}")
    return value


def _cache_file(config_abspath: str, cache_dir: str | None = None) -> str:
    directory = cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR
    tag = format(abs(hash_path(config_abspath)), "x")
    return os.path.join(directory, f"config-{tag}.marshal")


def hash_path(text: str) -> int:
    """A stable (not per-process randomised) 64-bit FNV-1a hash of a path."""
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _read_cache(cache_file: str, key: tuple[object, ...]) -> dict[str, Any] | None:
    try:
        with open(cache_file, "rb") as f:
            cached_key, settings = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if cached_key != key or not isinstance(settings, dict):
        return None
    return settings


def _write_cache(cache_file: str, key: tuple[object, ...], settings: dict[str, Any]) -> None:
    tmp = f"{cache_file}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(cache_file), mode=0o700, exist_ok=True)
        with open(tmp, "wb") as f:
            marshal.dump((key, settings), f)  # type: ignore[arg-type]
        os.replace(tmp, cache_file)
    except OSError:
        try:  # noqa: SIM105 - contextlib is an import the shim's path does without
            os.unlink(tmp)
        except OSError:
            pass


def _fail(message: str) -> Any:
    from nvhook.errors import ConfigError

    raise ConfigError(message)


def render_reference() -> str:
    """The configuration reference as a Markdown table (the README embeds it)."""
    lines = ["| key | default | values | meaning |", "|---|---|---|---|"]
    for name, (default, kind, allowed, doc) in KEYS.items():
        shown = _toml(default)
        values = " \\| ".join(allowed) if allowed else kind
        lines.append(f"| `{name}` | `{shown}` | {values} | {doc} |")
    return "\n".join(lines) + "\n"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    return f'"{value}"'


if __name__ == "__main__":  # pragma: no cover - a debugging aid
    sys.stdout.write(render_reference())
