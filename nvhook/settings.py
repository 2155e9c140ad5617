"""nvhook's configuration file: ``/etc/nvhook/config.toml``, or the file ``$NVHOOK_CONFIG`` names.

The runtime shim reads it on every call, pass-through ones included, so this
module imports nothing beyond ``os``, ``sys``, :mod:`oci._frozen` and :mod:`oci._cache` at load time
(docs/architecture.md D5; what ``tomllib`` and ``dataclasses`` cost: ``bench/figures.py``).

:func:`load_settings` returns one typed :class:`Settings` record: a field per key of
:data:`KEYS`, named ``section_key`` (``runtime.mode`` is ``runtime_mode``), lists as
tuples. :data:`KEYS` is the reference: the defaults, the types and allowed values
the validator enforces, and the README's configuration table are all made from it.

A validated copy of each file is kept in the cache directory (``$NVHOOK_CACHE_DIR``,
default ``/run/nvhook``; :mod:`oci._cache` says whose files are believed) as the
plain tuple of values, keyed by the file's path, device, inode, size, mtime and ctime (an
edit that keeps the size and puts the mtime back still moves the ctime); what is read
back is validated again (a value the validator would reject discards the copy).
A stale, foreign or unreadable copy is simply re-made, and one that cannot be
written is not an error; a refused cache directory is reported in ``warnings``.

A missing ``/etc/nvhook/config.toml`` means the defaults; a file named by
``$NVHOOK_CONFIG`` must exist. The file is read as carefully as a bundle's config.json
(:func:`oci.bundle.read_regular_file`): opened without blocking, refused unless it is a
regular file, and at most :data:`MAX_CONFIG_BYTES`. A file that is not a regular file, too
big, unreadable, not UTF-8 (the error gives the byte offset), not TOML or nested deeper
than :data:`oci.nesting.TOML_MAX_DEPTH`, an unknown
section or key, a wrong type or an invalid value is a :class:`~nvhook.errors.ConfigError`
naming the file (and the key).

When that happens, the runtime shim still passes calls through (README, "When the
settings cannot be loaded"); :func:`fallback_settings` is what it does so with.
"""

from __future__ import annotations

import os
import sys
from stat import S_ISREG

from oci import _cache
from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

    #: ``load_settings``'s ``loaded``: (path, its stat or None, the settings, the cache dir).
    Loaded = Callable[[str, os.stat_result | None, "Settings", str], None]

__all__ = [
    "CACHE_ENV",
    "CONFIG_ENV",
    "DEFAULT_CACHE_DIR",
    "DEFAULT_CONFIG_PATH",
    "KEYS",
    "MAX_CONFIG_BYTES",
    "PASS_THROUGH_KEYS",
    "Settings",
    "cache_directory",
    "config_path",
    "defaults",
    "fallback_settings",
    "field_name",
    "load_settings",
    "render_reference",
]

DEFAULT_CONFIG_PATH = "/etc/nvhook/config.toml"
CONFIG_ENV = "NVHOOK_CONFIG"
CACHE_ENV = "NVHOOK_CACHE_DIR"
DEFAULT_CACHE_DIR = "/run/nvhook"
_CACHE_FORMAT = 4
#: The largest settings file read: a real one is a few hundred bytes.
MAX_CONFIG_BYTES = 256 * 1024
#: The settings a call passed through uses (the runtime to exec, the log), all in [runtime].
PASS_THROUGH_KEYS = ("runtime.runtimes", "runtime.log_file", "runtime.log_level")

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
    "cdi.untrusted_specs": (
        "refuse",
        _STR,
        ("refuse", "warn"),
        "A CDI spec file not owned by root, writable by group or others, a symbolic link, "
        "or in a spec dir that is (its hooks run as root): refuse ignores it with one line "
        "naming it and the fix; warn uses it with that line, for a deliberately shared dir.",
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
    "nri.socket": (
        "/var/run/nri/nri.sock",
        _PATH,
        None,
        "nvhook nri-plugin: the runtime's NRI socket (containerd's socket_path of "
        '[plugins."io.containerd.nri.v1.nri"]).',
    ),
    "nri.plugin_name": (
        "nvhook",
        _STR,
        None,
        "nvhook nri-plugin: the name it registers with (the runtime's logs show INDEX-NAME).",
    ),
    "nri.plugin_index": (
        "10",
        _STR,
        None,
        "nvhook nri-plugin: its index, two digits; plugins are called in ascending order.",
    ),
    "nri.refused": (
        "strip",
        _STR,
        ("strip", "refuse"),
        "nvhook nri-plugin: a request the policy does not honour (a pod's own "
        "NVIDIA_VISIBLE_DEVICES, a pod annotation from a namespace not listed): strip it "
        "(the container starts without those GPUs, NVIDIA_VISIBLE_DEVICES=void) or refuse "
        "the container; either way with one line naming it.",
    ),
    "nri.annotation_namespaces": (
        [],
        _LIST,
        None,
        "nvhook nri-plugin: namespaces whose pods' nvidia.cdi.k8s.io/container.NAME "
        "annotations (NVIDIA's NRI plugin's) are honoured; elsewhere they are refused.",
    ),
    "nri.management_namespaces": (
        [],
        _LIST,
        None,
        "nvhook nri-plugin: namespaces whose pods may ask for every GPU (all, "
        "management.nvidia.com/gpu=all) themselves, not through the device plugin.",
    ),
    "nri.cdi_devices": (
        "auto",
        _STR,
        ("auto", "never"),
        "nvhook nri-plugin: auto: a request resolved in CDI mode is passed as CDI device "
        "names to a runtime whose NRI applies them (containerd 2.1 and later); never: as "
        "devices, mounts, env and hooks always.",
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
    "hook.cuda_compat": (
        True,
        _BOOL,
        None,
        "CUDA forward compatibility: the hook puts an image's newer libcuda (in "
        "/usr/local/cuda/compat or NVIDIA_CUDA_COMPAT_DIR) first in its ld cache; false "
        "keeps the host's for every container (one opts out with NVIDIA_DISABLE_CUDA_COMPAT).",
    ),
}


#: The default of each key, in order (lists as tuples).
_DEFAULTS: tuple[Any, ...] = tuple(
    tuple(default) if isinstance(default, list) else default for default, *_ in KEYS.values()
)


class Settings(Frozen):
    """The configuration, validated: one field per key of :data:`KEYS`, in its order.

    Each field is its key with ``_`` for ``.`` (:func:`field_name`); list settings are
    tuples. Build one with :func:`load_settings` or :func:`defaults` (and ``_replace``).
    """

    runtime_runtimes: tuple[str, ...]
    runtime_mode: str
    runtime_log_file: str
    runtime_log_level: str
    host_root: str
    host_driver_root: str
    host_dev_root: str
    host_resolver: str
    cdi_spec_dirs: tuple[str, ...]
    cdi_default_kind: str
    cdi_annotation_prefixes: tuple[str, ...]
    cdi_untrusted_specs: str
    policy_accept_env_unprivileged: bool
    policy_accept_volume_mounts: bool
    policy_privileged_gets_all: bool
    policy_default_capabilities: tuple[str, ...]
    nri_socket: str
    nri_plugin_name: str
    nri_plugin_index: str
    nri_refused: str
    nri_annotation_namespaces: tuple[str, ...]
    nri_management_namespaces: tuple[str, ...]
    nri_cdi_devices: str
    hook_path: str
    hook_ldconfig: str
    hook_cuda_compat: bool


def field_name(key: str) -> str:
    """The :class:`Settings` field of a ``"section.key"`` of :data:`KEYS`."""
    return key.replace(".", "_")


def config_path() -> tuple[str, bool]:
    """The config file to read, and whether it was named explicitly (``$NVHOOK_CONFIG``)."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        return named, True
    return DEFAULT_CONFIG_PATH, False


def cache_directory() -> str:
    """Where nvhook keeps its caches: ``$NVHOOK_CACHE_DIR``, else ``/run/nvhook``."""
    return os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR


def load_settings(
    path: str | None = None,
    *,
    cache_dir: str | None = None,
    warnings: list[str] | None = None,
    loaded: Loaded | None = None,
) -> Settings:
    """The settings: defaults overlaid with the config file, validated (cached by file identity).

    The cache goes to ``cache_dir``, else :func:`cache_directory`; a refused cache
    directory is appended to ``warnings`` (the shim logs it). Loading writes nothing but
    that cache; ``loaded``, when given, is called once the settings are known, with the
    file's path, its ``stat`` (None: absent), the settings and the cache directory (the
    runtime call keeps the native front-end's data file this way: :mod:`nvhook.call`).
    """
    explicit = path is not None
    if path is None:
        path, explicit = config_path()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if explicit:
            _fail(f"{path}: configuration file not found (named by ${CONFIG_ENV})")
        if loaded is not None:
            loaded(path, None, defaults(), cache_dir or cache_directory())
        return defaults()
    except OSError as e:
        _fail(f"{path}: cannot read configuration file: {e.strerror}")
    if not S_ISREG(st.st_mode):  # a FIFO, /dev/zero, a directory: never opened
        _fail(f"{path}: not a regular file ({_kind(st.st_mode)}){_NOT_REGULAR_FIX}")
    abspath = os.path.abspath(path)
    key = (_CACHE_FORMAT, abspath, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    directory = cache_dir or cache_directory()
    name = _cache.cache_name("config", abspath)
    cached = _cache.load(directory, name, warnings)
    if type(cached) is tuple and len(cached) == 2 and cached[0] == key:
        settings = _checked(cached[1])
        if settings is not None:
            if loaded is not None:
                loaded(path, st, settings, directory)
            return settings
    values = _parse(path)
    _cache.store(directory, name, (key, values), warnings)
    settings = Settings(*values)
    if loaded is not None:
        loaded(path, st, settings, directory)
    return settings


def defaults() -> Settings:
    """The settings of an empty configuration file."""
    return Settings(*_DEFAULTS)


#: What to do about a settings file that is not a regular file.
_NOT_REGULAR_FIX = ": replace it with the TOML settings file"


def fallback_settings(path: str | None = None) -> Settings:
    """What the runtime shim passes calls through with when :func:`load_settings` failed.

    The defaults, except each key of :data:`PASS_THROUGH_KEYS` that the file at ``path``
    (default: :func:`config_path`) sets to a valid value, when the file can be read
    safely (a regular file, not too big, UTF-8) and parses as TOML: a typo elsewhere
    does not lose the configured runtime or log. Never raises; nothing is cached.
    """
    settings = defaults()
    try:
        data = _load_toml(path if path is not None else config_path()[0])
    except Exception:  # unreadable or not TOML: the defaults, as documented
        return settings
    table = data.get("runtime")
    if not isinstance(table, dict):
        return settings
    changes: dict[str, Any] = {}
    for key in PASS_THROUGH_KEYS:
        name = key.partition(".")[2]
        if name in table and _problem(key, table[name]) is None:
            value = table[name]
            changes[field_name(key)] = tuple(value) if isinstance(value, list) else value
    return settings._replace(**changes)


def _load_toml(path: str) -> dict[str, Any]:
    """The TOML document of the file at ``path``, read like a bundle's config.json."""
    import tomllib

    from oci.bundle import read_regular_file

    try:
        raw, _st = read_regular_file(path, limit=MAX_CONFIG_BYTES)
    except FileNotFoundError:
        _fail(f"{path}: configuration file not found")
    except OSError as e:
        import errno

        if e.errno == errno.EINVAL:
            _fail(f"{path}: not a regular file{_NOT_REGULAR_FIX}")
        if e.errno == errno.EFBIG:
            _fail(
                f"{path}: {e.strerror}, too big for a settings file (a real one is a few "
                "lines of TOML): check that this is the right file"
            )
        _fail(f"{path}: cannot read configuration file: {e.strerror}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        _fail(
            f"{path}: not UTF-8: invalid byte 0x{raw[e.start]:02x} at byte offset {e.start}: "
            "save the file as UTF-8"
        )
    from oci.nesting import NestingError, load_toml

    try:
        return load_toml(text)
    except tomllib.TOMLDecodeError as e:
        _fail(f"{path}: invalid TOML: {e}")
    except NestingError as e:
        _fail(f"{path}: {e}")


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, for an error."""
    import stat

    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return f"mode {mode:o}"


def _parse(path: str) -> tuple[Any, ...]:
    """The values of the file at ``path`` in :data:`KEYS` order (lists as tuples)."""
    data = _load_toml(path)
    settings = dict(zip(KEYS, _DEFAULTS, strict=True))
    for section, table in data.items():
        if not isinstance(table, dict):
            _fail(f"{path}: {section}: expected a [{section}] table{_foreign(path, data)}")
        for name, value in table.items():
            key = f"{section}.{name}"
            if key not in KEYS:
                known = ", ".join(k for k in KEYS if k.startswith(section + "."))
                hint = f" (known keys in [{section}]: {known})" if known else ""
                _fail(f"{path}: {key}: unknown setting{hint}{_foreign(path, data)}")
            problem = _problem(key, value)
            if problem is not None:
                _fail(f"{path}: {key}: {problem}")
            settings[key] = tuple(value) if isinstance(value, list) else value
    return tuple(settings.values())


def _foreign(path: str, data: dict[str, Any]) -> str:
    """Error path only: a note naming `nvhook config import` when the file is NVIDIA's toolkit's."""
    from nvhook.toolkit_config import toolkit_note

    return toolkit_note(path, data)


def _problem(key: str, value: object) -> str | None:
    """Why ``value`` is not valid for ``key`` (None: it is); a list may be a tuple."""
    _default, kind, allowed, _doc = KEYS[key]
    if kind == _BOOL:
        if type(value) is not bool:
            return f"expected true or false, found {value!r}"
    elif kind == _LIST:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
            return f"expected a list of non-empty strings, found {value!r}"
    else:
        if not isinstance(value, str):
            return f"expected a string, found {value!r}"
        if allowed is not None and value not in allowed:
            return f"{value!r} is not one of {', '.join(allowed)}"
        if kind == _PATH and value and not value.startswith("/"):
            return f"expected an absolute path, found {value!r}"
    return None


def _checked(values: object) -> Settings | None:
    """The settings a cache holds, if the validator accepts every value."""
    if type(values) is not tuple or len(values) != len(KEYS):
        return None
    for key, value in zip(KEYS, values, strict=True):
        if _problem(key, value) is not None:
            return None
    fixed: tuple[Any, ...] = tuple(tuple(v) if type(v) is list else v for v in values)
    return Settings(*fixed)


def _fail(message: str) -> NoReturn:
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
