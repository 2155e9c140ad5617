"""The native front-end of ``nvhook-runtime`` (``nvhook-runtime.c`` here) and the data it reads.

CPython's start alone exceeds the budget of a call that asks for nothing (issue 16), so
when a C compiler exists ``nvhook install-entrypoints`` builds ``nvhook-runtime.c`` as
``nvhook-runtime`` (:func:`build`) and writes the Python launcher as ``nvhook-runtime.py``
beside it. The front-end execs the low-level runtime itself only when it is certain the
Python shim would do nothing else; any doubt hands the call, argv unchanged, to
``nvhook-shim-server`` when it listens on ``shim.sock`` in the cache directory (the shim
pre-forked: :mod:`nvhook.server`, docs/architecture.md D12), else to the launcher. What
it needs from the Python side, it reads from a data file that :func:`ensure_data` keeps
in the cache directory (``$NVHOOK_CACHE_DIR``, with the hardening of :mod:`oci._cache`:
the directory only root can write, the file root's, mode 0600),
named after the settings file's path and identity::

    runtime-frontend-2-<fnv1a64 of the config path>-<dev>-<ino>-<size>-<mtime_ns>-<ctime_ns>
    runtime-frontend-2-<fnv1a64 of the config path>-absent

A new identity is a new name, so a data file is never stale: the Python shim writes the
one for the settings it loads whenever it is missing (one ``stat`` per call otherwise).
The ctime is in it because an edit that keeps the size and puts the mtime back
(``touch -r``, ``os.utime``) changes nothing else, and no call sets a ctime back.
Its text, every line ``key value`` (``end`` last)::

    nvhook-runtime-frontend 2
    config /etc/nvhook/config.toml        the settings file (absolute, normalised)
    settings 2049-1234-567-1700000000000-1700000000000  or "absent": the defaults
    log /var/log/nvhook-runtime.log       only when runtime.log_level is info: the front-end
                                          writes the shim's line for a create it execs
    runtime runc                          each candidate, in order (runtime.runtimes, then
    runtime /usr/sbin/runc                nvhook.constants.FALLBACK_RUNTIMES), found on PATH as
                                          nvhook.call.find_runtime finds them
    trigger NVIDIA_VISIBLE_DEVICES        strings whose presence in config.json hands a create
    ...                                   to the shim (:func:`triggers`)
    end

or ``handover REASON`` instead of the runtime and trigger lines, when the shim must see
every call (:func:`handover_reason`): the front-end then hands every call over.

The words of this format, like every other value the two C programs share with Python,
reach them through ``nvhook-contract.h``, generated from the Python values by
:mod:`nvhook.native.contract`.
"""

from __future__ import annotations

import os

from oci import _cache

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from nvhook.settings import Settings

__all__ = [
    "ABSENT",
    "FORMAT",
    "HOOK_SOURCE",
    "KEY_CONFIG",
    "KEY_END",
    "KEY_HANDOVER",
    "KEY_LOG",
    "KEY_RUNTIME",
    "KEY_SETTINGS",
    "KEY_TRIGGER",
    "MAGIC",
    "PACKAGE_SETUP",
    "PREFIX",
    "REINSTALL",
    "SOURCE",
    "build",
    "data_name",
    "data_text",
    "ensure_data",
    "handover_reason",
    "triggers",
]

#: The data format; the front-end reads only its own (it is compiled in: FORMAT).
FORMAT = 2
#: The data file's first word (its value: :data:`FORMAT`).
MAGIC = "nvhook-runtime-frontend"
#: The keys of its lines, in their order; ``handover`` stands for the runtime, log and
#: trigger lines; ``end`` is the last line, alone.
KEY_CONFIG, KEY_SETTINGS, KEY_LOG, KEY_RUNTIME, KEY_TRIGGER, KEY_HANDOVER, KEY_END = (
    "config",
    "settings",
    "log",
    "runtime",
    "trigger",
    "handover",
    "end",
)
#: The settings identity of a settings file that is not there (the defaults apply).
ABSENT = "absent"
#: The C source, shipped as package data.
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nvhook-runtime.c")
#: The native ``nvhook-hook`` (``create-container`` without Python; every other call is
#: handed to the Python hook, ``nvhook-hook.py``): built the same way, from this source.
HOOK_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nvhook-hook.c")
#: The packages' step that makes the venv again with the node's Python (packaging/setup, put
#: there by packaging/nfpm.yaml): what the front-end tells to run when the launcher's
#: interpreter is gone (a distribution upgrade took the Python the venv was made with).
PACKAGE_SETUP = "/usr/lib/nvhook/setup"
#: The same advice where :data:`PACKAGE_SETUP` is not installed: install.sh remakes a venv of
#: a Python that no longer runs (packaging/install.sh, step venv).
REINSTALL = (
    "run install.sh install again (or, for a venv of your own, make it again, "
    "pip install nvhook into it and run nvhook install-entrypoints)"
)
#: The start of every data file's name.
PREFIX = f"runtime-frontend-{FORMAT}-"
#: What a trigger may hold: a byte search finds it in JSON unless an escape spells it
#: (the front-end refuses ``\\u`` and ``\\/`` anywhere in config.json).
_SEARCHABLE = frozenset(chr(c) for c in range(0x20, 0x7F)) - {'"', "\\"}


def data_name(config: str, st: os.stat_result | None) -> str:
    """The data file's name for the settings file ``config`` (``st``: its stat, None: absent)."""
    return f"{PREFIX}{_cache.fnv1a64(config):016x}-{_identity(st)}"


def _identity(st: os.stat_result | None) -> str:
    if st is None:
        return ABSENT
    return f"{st.st_dev}-{st.st_ino}-{st.st_size}-{st.st_mtime_ns}-{st.st_ctime_ns}"


def ensure_data(
    config: str,
    st: os.stat_result | None,
    settings: Settings,
    directory: str,
    warnings: list[str] | None = None,
) -> None:
    """Write the front-end's data for ``settings`` (read from ``config``) unless it exists.

    Called by the runtime call (:func:`nvhook.call.handle`) on every load of the settings:
    one ``stat`` when the file is there. Never raises; a path the front-end would not
    look up is skipped.
    """
    try:
        if config != os.path.abspath(config) or not os.path.isabs(directory):
            return  # the front-end hands such calls over without looking
        name = data_name(config, st)
    except (ValueError, UnicodeError):  # a path that is no text: the front-end hands over
        return
    try:
        os.stat(os.path.join(directory, name))
        return
    except OSError:
        pass
    try:
        text = data_text(config, st, settings)
    except Exception:  # never fail a load for the front-end's sake
        return
    if _cache.store_bytes(directory, name, text, warnings):
        _remove_older(directory, name)


def data_text(config: str, st: os.stat_result | None, settings: Settings) -> bytes:
    """The data file for ``settings``, read from ``config`` (``st``: its stat, None: absent)."""
    from nvhook.constants import FALLBACK_RUNTIMES

    lines = [f"{MAGIC} {FORMAT}", f"{KEY_CONFIG} {config}", f"{KEY_SETTINGS} {_identity(st)}"]
    runtimes = (*settings.runtime_runtimes, *FALLBACK_RUNTIMES)
    found = triggers(settings)
    reason = handover_reason(settings)
    if reason is None and not all(_line_safe(r) for r in runtimes):
        reason = "a runtime.runtimes entry cannot be written on one line"
    if reason is None and not all(set(t) <= _SEARCHABLE for t in found):
        reason = "a trigger (an annotation prefix) has a character a byte search cannot find"
    log = settings.runtime_log_file if settings.runtime_log_level == "info" else ""
    if reason is None and log and not _line_safe(log):
        reason = "runtime.log_file cannot be written on one line"
    if reason is None:
        lines += [f"{KEY_LOG} {log}"] if log else []
        lines += [f"{KEY_RUNTIME} {r}" for r in runtimes]
        lines += [f"{KEY_TRIGGER} {t}" for t in found]
    else:
        lines.append(f"{KEY_HANDOVER} {reason}")
    if not _line_safe(config) or any("\0" in line for line in lines):
        lines[3:] = [f"{KEY_HANDOVER} a path cannot be written"]
    text = "\n".join([*lines, KEY_END]) + "\n"
    return text.encode("utf-8", "surrogateescape")


def triggers(settings: Settings) -> tuple[str, ...]:
    """Strings at least one of which is in every config.json the shim would edit.

    :func:`nvhook.requests.parse.parse_requests` asks for something only through
    ``NVIDIA_VISIBLE_DEVICES``, the implicit ``all`` of a legacy image (``CUDA_VERSION``),
    ``NVIDIA_IMEX_CHANNELS``, other vendors' variables (``AMD_VISIBLE_DEVICES``,
    ``ASCEND_VISIBLE_DEVICES``), an annotation under a configured prefix, a device-list mount
    (its destination holds the root's last component whatever ``normpath`` removes; only
    when ``policy.accept_volume_mounts``) or a privileged container (``CAP_SYS_ADMIN``; only
    when ``policy.privileged_gets_all``). Dockerd's ``--gpus`` hook
    (:data:`nvhook.legacyhook.LEGACY_HOOK`, which the shim drops when it serves a request)
    is added for caution.
    """
    from nvhook.constants import (
        CAP_SYS_ADMIN,
        DEVICE_LIST_MOUNT_ROOT,
        ENV_CUDA_VERSION,
        ENV_IMEX_CHANNELS,
        ENV_VENDOR_DEVICES,
        ENV_VISIBLE_DEVICES,
    )
    from nvhook.legacyhook import LEGACY_HOOK

    found = [ENV_VISIBLE_DEVICES, ENV_IMEX_CHANNELS, ENV_CUDA_VERSION, LEGACY_HOOK]
    found += ENV_VENDOR_DEVICES
    found += settings.cdi_annotation_prefixes
    if settings.policy_accept_volume_mounts:
        found.append(DEVICE_LIST_MOUNT_ROOT.rsplit("/", 1)[1])
    if settings.policy_privileged_gets_all:
        found.append(CAP_SYS_ADMIN)
    return tuple(dict.fromkeys(found))


def handover_reason(settings: Settings) -> str | None:
    """Why the shim must see every call under ``settings`` (None: the front-end may act)."""
    if settings.runtime_log_file and settings.runtime_log_level == "debug":
        return "runtime.log_level is debug: the shim logs every call"
    from nvhook.errors import ConfigError
    from nvhook.requests.policy import Policy

    try:
        Policy.from_settings(settings)
    except ConfigError:
        return "the policy is invalid: the shim fails every create"
    return None


def _line_safe(text: str) -> bool:
    return bool(text) and "\n" not in text and "\0" not in text


def _remove_older(directory: str, keep: str) -> None:
    """Remove the data files of earlier identities of the same settings file."""
    stem = keep[: len(PREFIX) + 16 + 1]  # runtime-frontend-N-<hash>-
    import contextlib

    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.startswith(stem) and name != keep:
            with contextlib.suppress(OSError):  # not on the start path: written once per edit
                os.unlink(os.path.join(directory, name))


def build(
    launcher: str,
    output: str | Path,
    *,
    cc: str | None = None,
    source: str = SOURCE,
    strip: bool = True,
) -> str | None:
    """Compile the front-end (or, with ``source=HOOK_SOURCE``, the native hook) to ``output``,
    handing over to ``launcher``; why not, or None.

    ``cc`` defaults to ``musl-gcc`` (Debian's ``musl-tools``) where it is on PATH, static
    against musl: a static glibc program's start costs ~0.5 ms here, a static musl one's
    ~0.06 ms (an exec'ing trampoline in front of a no-op, spawned 1,000 times interleaved),
    and every runtime call and hook of a container start pays it. Else ``cc`` or ``gcc``,
    static when the C library allows (no dynamic loader at each call), else dynamic. The
    launcher path is compiled in; it must be absolute and plain (no quote, backslash or
    control character). ``strip=False``
    keeps the symbols (bench/instructions.py: callgrind finds ``execve`` and ``fork`` by
    name); the code is the same.
    """
    import shutil
    import subprocess

    if not os.path.isabs(launcher) or not set(launcher) <= _SEARCHABLE:
        return f"cannot compile in the launcher path {launcher!r}"
    tries: list[tuple[str, list[str]]] = []
    if cc is None and (musl := shutil.which("musl-gcc")) is not None:
        tries.append((musl, ["-static"]))
    compiler = cc or shutil.which("cc") or shutil.which("gcc")
    if compiler is not None:
        tries += [(compiler, ["-static"]), (compiler, [])]
    if not tries:
        return "no C compiler (cc or gcc) on PATH"
    flags = ["-std=c11", "-O2", *(["-s"] if strip else []), "-Wall", "-Wextra", "-Werror"]
    define = f'-DNVHOOK_LAUNCHER="{launcher}"'
    error = ""
    for chosen, static in tries:
        proc = subprocess.run(
            [chosen, *flags, *static, define, "-o", os.fspath(output), source],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode == 0:
            return None
        error = f"{chosen} failed: " + (proc.stderr or proc.stdout).strip()[-500:]
    return error
