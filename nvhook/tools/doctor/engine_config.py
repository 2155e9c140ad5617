"""What ``nvhook doctor`` reads about container engines: their configs and their daemons.

- :func:`read_engine_config` reads one engine's config with the same parsers that
  ``nvhook runtime configure`` uses (:mod:`nvhook.engines`): the files the engine loads,
  the binary each runtime runs, the default runtime, its cgroup driver setting.
- :func:`default_was_set` tells from configure's backup record whether
  ``--set-as-default`` was used: it replays configure on the recorded original, with and
  without the flag, and compares with the hash of what configure wrote.
- :func:`daemon_start` finds a daemon by name in ``<root>/proc`` and says when it started
  (``/proc/<pid>/stat`` start time in clock ticks after ``btime`` of ``/proc/stat``), its
  command line and the config file it reads (:data:`CONFIG_FLAGS`; a containerd that
  dockerd started for itself reads ``/var/run/docker/containerd/containerd.toml``, not
  the system containerd's config); :func:`process_path` reads the ``PATH`` of its
  environment (``/proc/<pid>/environ``, nothing else of it), the PATH its programs are
  looked up on.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from nvhook.engines import _toml
from nvhook.engines.changes import Plan, read_file, record_path
from nvhook.errors import EngineConfigError
from oci._frozen import Frozen

__all__ = [
    "BINARIES",
    "CONFIG_FLAGS",
    "DAEMONS",
    "EngineConfig",
    "Process",
    "daemon_start",
    "default_was_set",
    "process_path",
    "read_engine_config",
]

#: The program whose presence under the root says the engine is installed.
BINARIES = {"containerd": "containerd", "docker": "dockerd", "crio": "crio", "podman": "podman"}
#: The daemon process (its ``comm``) that reads the config at start; podman has none.
DAEMONS: dict[str, str | None] = {
    "containerd": "containerd",
    "docker": "dockerd",
    "crio": "crio",
    "podman": None,
}


class EngineConfig(Frozen):
    """What an engine's config says, as far as nvhook cares."""

    files: tuple[str, ...]  # every file the engine loads, that exists (for mtimes)
    runtimes: tuple[tuple[str, str], ...]  # runtime name -> the binary it runs ("" unknown)
    default_runtime: str
    #: True/False when the config chooses the systemd cgroup driver or not; None: unsaid
    systemd_cgroup: bool | None

    def runtime(self, name: str) -> str | None:
        return dict(self.runtimes).get(name)


def read_engine_config(engine: str, config: str, name: str) -> EngineConfig | None:
    """``engine``'s config ``config`` (None: no such file); ``name`` is nvhook's runtime.

    Raises :class:`EngineConfigError` for a config that configure would refuse too.
    """
    data = read_file(config)
    if data is None:
        return None
    if engine == "containerd":
        return _containerd(config, data, name)
    if engine == "docker":
        return _docker(config, data)
    if engine == "crio":
        return _crio(config)
    if engine == "podman":
        return _podman(config, data)
    raise EngineConfigError(f"unknown engine {engine!r}")


def _containerd(config: str, data: bytes, name: str) -> EngineConfig:
    from nvhook.engines import containerd as c

    main = _toml.parse(config, data)
    version = c._version(config, main)
    if main.get("imports"):
        files = c._load_order(config, main, version)
        effective = c._merge_replace(files) if version < 3 else c._merge_deep(files)
        paths = tuple(p for p, _ in files)
    else:
        effective, paths = main, (config,)
    section = _toml.plain_get(effective, c._containerd_path(version)) or {}
    runtimes = (section.get("runtimes") or {}) if isinstance(section, Mapping) else {}
    found: dict[str, str] = {}
    for rname, table in runtimes.items():
        if not isinstance(table, Mapping):
            continue
        options = table.get("options") or {}
        binary = options.get("BinaryName") if isinstance(options, Mapping) else None
        runc = table.get("runtime_type") == c.RUNC_RUNTIME_TYPE
        found[rname] = binary if isinstance(binary, str) else ("runc" if runc else "")
    systemd: bool | None = None
    for rname in (name, "runc"):  # nvhook's runtime copies runc's options
        options = _toml.plain_get(runtimes, (rname, "options"))
        if isinstance(options, Mapping) and isinstance(options.get("SystemdCgroup"), bool):
            systemd = options["SystemdCgroup"]
            break
    if systemd is None and isinstance(section, Mapping):  # version 1's runc.v1 shim
        cri = _toml.plain_get(effective, ("plugins", c.CRI_PLUGIN[version]))
        if isinstance(cri, Mapping) and isinstance(cri.get("systemd_cgroup"), bool):
            systemd = cri["systemd_cgroup"]
    default = section.get("default_runtime_name") if isinstance(section, Mapping) else None
    return EngineConfig(
        files=paths,
        runtimes=tuple(found.items()),
        default_runtime=default if isinstance(default, str) else "runc",
        systemd_cgroup=systemd,
    )


def _docker(config: str, data: bytes) -> EngineConfig:
    from nvhook.engines import docker

    settings, _indent = docker._load(config, data)
    runtimes = settings.get("runtimes") or {}
    found: dict[str, str] = {
        str(n): (e["path"] if isinstance(e.get("path"), str) else "")
        for n, e in (runtimes.items() if isinstance(runtimes, dict) else ())
        if isinstance(e, dict)
    }
    systemd: bool | None = None
    for opt in settings.get("exec-opts") or []:
        key, _, value = str(opt).replace(" ", "").partition("=")
        if key == "native.cgroupdriver":
            systemd = value == "systemd"
    default = settings.get("default-runtime")
    return EngineConfig(
        files=(config,),
        runtimes=tuple(found.items()),
        default_runtime=default if isinstance(default, str) else "runc",
        systemd_cgroup=systemd,
    )


def _crio(config: str) -> EngineConfig:
    """CRI-O loads ``crio.conf`` and then every file of ``crio.conf.d``, in name order."""
    directory = os.path.dirname(config)
    files: list[str] = []
    if os.path.basename(directory) == "crio.conf.d":
        main = os.path.join(os.path.dirname(directory), "crio.conf")
        files += [main] if os.path.isfile(main) else []
        files += [
            os.path.join(directory, n)
            for n in sorted(os.listdir(directory))
            if os.path.isfile(os.path.join(directory, n))
        ]
    else:
        files.append(config)
    merged: dict[str, Any] = {}
    for path in files:
        raw = read_file(path)
        if raw is not None:
            merged = _deep_merge(merged, _toml.parse(path, raw))
    runtime = _toml.plain_get(merged, ("crio", "runtime")) or {}
    found = {
        n: str(t.get("runtime_path") or "")
        for n, t in (runtime.get("runtimes") or {}).items()
        if isinstance(t, Mapping)
    }
    manager = runtime.get("cgroup_manager")
    default = runtime.get("default_runtime")
    return EngineConfig(
        files=tuple(files),
        runtimes=tuple(found.items()),
        default_runtime=default if isinstance(default, str) else "runc",
        systemd_cgroup=None if manager is None else manager == "systemd",
    )


def _podman(config: str, data: bytes) -> EngineConfig:
    parsed = _toml.parse(config, data)
    engine = parsed.get("engine") or {}
    found: dict[str, str] = {
        n: (str(paths[0]) if isinstance(paths, list) and paths else "")
        for n, paths in (engine.get("runtimes") or {}).items()
    }
    manager = engine.get("cgroup_manager")
    default = engine.get("runtime")
    return EngineConfig(
        files=(config,),
        runtimes=tuple(found.items()),
        default_runtime=default if isinstance(default, str) else "crun",
        systemd_cgroup=None if manager is None else manager == "systemd",
    )


def _deep_merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# --------------------------------------------------------------------------- --set-as-default


def _replay(engine: str, config: str, name: str, runtime_path: str, flag: bool) -> list[Plan]:
    """configure's plans for ``config`` (a copy of the original), with or without the flag."""
    if engine == "containerd":
        from nvhook.engines import containerd

        majors = (1, None) if not os.path.exists(config) else (None,)
        return [
            containerd.plan_configure(
                config,
                name=name,
                runtime_path=runtime_path,
                set_as_default=flag,
                containerd_major=major,
            )
            for major in majors
        ]
    from nvhook.engines import crio, docker, podman

    module = {"docker": docker, "crio": crio, "podman": podman}[engine]
    return [
        module.plan_configure(config, name=name, runtime_path=runtime_path, set_as_default=flag)
    ]


def default_was_set(
    engine: str, config: str, name: str, runtime_path: str, backup_dir: str
) -> bool | None:
    """Whether ``nvhook runtime configure`` last wrote ``config`` with ``--set-as-default``.

    None when it cannot be told: no backup record, or one for several files (a containerd
    drop-in), or configure's output matching neither replay (the path or name differ).
    """
    config = os.path.abspath(config)
    try:
        record_bytes = read_file(record_path(backup_dir, engine, config))
        record = json.loads(record_bytes) if record_bytes is not None else None
    except (EngineConfigError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("files"), list):
        return None
    entries = record["files"]
    if len(entries) != 1 or not isinstance(entries[0], dict) or entries[0].get("path") != config:
        return None
    entry = entries[0]
    original: bytes | None = None
    if entry.get("original"):
        try:
            original = read_file(os.path.join(backup_dir, str(entry["original"])))
        except EngineConfigError:
            return None
        if original is None:
            return None
    with tempfile.TemporaryDirectory(prefix="nvhook-doctor-") as tmp:
        copy = os.path.join(tmp, os.path.basename(config))
        if original is not None:
            with open(copy, "wb") as f:
                f.write(original)
        for flag in (True, False):
            try:
                plans = _replay(engine, copy, name, runtime_path, flag)
            except EngineConfigError:
                return None
            for plan in plans:
                new = plan.changes[0].new if plan.changes else None
                if new is not None and hashlib.sha256(new).hexdigest() == entry.get(
                    "written_sha256"
                ):
                    return flag
    return None


# --------------------------------------------------------------------------- processes


#: The daemon's flags that name its config file (its default: ``nvhook.engines.DEFAULT_CONFIGS``);
#: ``containerd --help`` (1.6, 1.7, 2.x) and ``dockerd --help`` (20.10 onwards) say so.
CONFIG_FLAGS: dict[str, tuple[str, ...]] = {
    "containerd": ("--config", "-c"),
    "dockerd": ("--config-file",),
    "crio": ("--config", "-c"),
}


class Process(Frozen):
    pid: int
    started: float  # seconds since the epoch
    argv: tuple[str, ...] = ()

    def flag(self, names: tuple[str, ...]) -> str | None:
        """The value of the first of ``names`` on the command line (``--x v``, ``--x=v``,
        ``-c v``; the last one given wins, as Go's flag parsers take it)."""
        value = None
        for i, word in enumerate(self.argv[1:], 1):
            for name in names:
                if word == name and i + 1 < len(self.argv):
                    value = self.argv[i + 1]
                elif word.startswith(name + "="):
                    value = word[len(name) + 1 :]
        return value

    def flags(self, name: str) -> list[str]:
        """Every value of a repeatable flag (``--add-runtime a=b --add-runtime=c=d``)."""
        out: list[str] = []
        for i, word in enumerate(self.argv[1:], 1):
            if word == name and i + 1 < len(self.argv):
                out.append(self.argv[i + 1])
            elif word.startswith(name + "="):
                out.append(word[len(name) + 1 :])
        return out


def _boot_time(root: str) -> float | None:
    try:
        with open(os.path.join(root, "proc", "stat")) as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _argv(proc: str, pid: int) -> tuple[str, ...]:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
            raw = f.read(1 << 16)
    except OSError:
        return ()
    return tuple(w.decode(errors="replace") for w in raw.split(b"\0")[:-1] if raw)


def process_path(root: str, pid: int) -> str | None:
    """The ``PATH`` in process ``pid``'s environment under ``<root>/proc`` ("" when it has
    none; None when the environment cannot be read). Nothing else of it is kept."""
    try:
        with open(os.path.join(root, "proc", str(pid), "environ"), "rb") as f:
            raw = f.read(1 << 20)
    except OSError:
        return None
    for entry in raw.split(b"\0"):
        if entry.startswith(b"PATH="):
            return entry[5:].decode(errors="replace")
    return ""


def daemon_start(root: str, comm: str, *, reads: str | None = None) -> Process | None:
    """The oldest process under ``<root>/proc`` named ``comm``, and when it started.

    ``reads``: only a process that reads that config file (a host path; its command line's
    :data:`CONFIG_FLAGS`, else the engine's default), so that the containerd dockerd runs
    for itself is not taken for the one reading ``/etc/containerd/config.toml``."""
    if reads is not None:
        return next(
            (p for p in daemon_processes(root, comm) if daemon_config(comm, p) == reads), None
        )
    found = daemon_processes(root, comm)
    return found[0] if found else None


def daemon_config(comm: str, process: Process) -> str:
    """The config file ``process`` (a ``comm`` daemon) reads, as a host path."""
    from nvhook.engines import DEFAULT_CONFIGS

    default = DEFAULT_CONFIGS.get("docker" if comm == "dockerd" else comm, "")
    return os.path.normpath(process.flag(CONFIG_FLAGS.get(comm, ())) or default)


def daemon_processes(root: str, comm: str) -> list[Process]:
    """Every process under ``<root>/proc`` named ``comm``, oldest first."""
    proc = os.path.join(root, "proc")
    boot = _boot_time(root)
    try:
        pids = [int(p) for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return []
    if boot is None:
        return []
    ticks = os.sysconf("SC_CLK_TCK")
    found: list[Process] = []
    for pid in pids:
        try:
            with open(os.path.join(proc, str(pid), "stat")) as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2 :].split()
        if name != comm[:15] or len(fields) < 20 or not fields[19].isdigit():
            continue
        started = boot + int(fields[19]) / ticks  # field 22: starttime
        found.append(Process(pid, started, _argv(proc, pid)))
    return sorted(found, key=lambda p: (p.started, p.pid))
