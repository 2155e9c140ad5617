"""Doctor checks per installed engine: runtime configured, daemon restarted, default kept."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from nvhook.tools.doctor.base import NOT_CONFIGURED, RESTART, Check, Options, shell_quote, under
from nvhook.tools.doctor.settings import launcher_problem
from nvhook.tools.entrypoints import CDI_HOOK_ENTRYPOINT


def engine_config_path(opts: Options, engine: str) -> str:
    """The config ``engine`` reads: the one given, else the running daemon's (its command
    line's ``--config``/``--config-file``), else the default."""
    from nvhook.engines import DEFAULT_CONFIGS
    from nvhook.tools.doctor.engine_config import DAEMONS, daemon_config, daemon_processes

    given = dict(opts.engine_configs).get(engine)
    if given:
        return given
    comm = DAEMONS[engine]
    if engine == "docker" and comm is not None:  # one dockerd a host: its file is the one
        running = daemon_processes(opts.root, comm)
        if running:
            return under(opts.root, daemon_config(comm, running[0]))
    return under(opts.root, DEFAULT_CONFIGS[engine])


def installed(opts: Options, engine: str, config: str) -> bool:
    from nvhook.tools.doctor.engine_config import BINARIES

    if os.path.exists(config) or (engine == "crio" and os.path.isdir(os.path.dirname(config))):
        return True
    dirs = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
    return any(
        os.access(under(opts.root, os.path.join(d, BINARIES[engine])), os.X_OK) for d in dirs
    )


def check_engines(opts: Options) -> list[Check]:
    from nvhook.engines import ENGINES

    found = {
        engine: check_engine(opts, engine, config)
        for engine in ENGINES
        if installed(opts, engine, (config := engine_config_path(opts, engine)))
    }
    if "docker" in found:
        found["docker"] = [*found["docker"], *check_docker_gpus(opts)]
    # an engine without the runtime is broken only when no engine has it (docker may be
    # installed beside the containerd that runs the GPU pods)
    some = any(not any(c.message.startswith(NOT_CONFIGURED) for c in cs) for cs in found.values())
    return [
        c._replace(status="warn") if some and c.message.startswith(NOT_CONFIGURED) else c
        for checks in found.values()
        for c in checks
    ]


def configure_command(engine: str, config: str, opts: Options, *extra: str) -> str:
    from nvhook.engines import DEFAULT_CONFIGS, DEFAULT_NAME

    words = ["nvhook", "runtime", "configure", "--runtime", engine]
    if config != DEFAULT_CONFIGS[engine]:
        words += ["--config", config]
    if opts.runtime_name != DEFAULT_NAME:
        words += ["--name", opts.runtime_name]
    command = " ".join(shell_quote(w) for w in [*words, *extra])
    restart = RESTART[engine]
    return f"{command} && {restart}" if restart else command


def check_engine(opts: Options, engine: str, config: str) -> list[Check]:
    """nvhook's runtime in ``engine``'s ``config``: there, runnable, loaded, default if asked."""
    from nvhook.engines import plan_configure
    from nvhook.errors import EngineConfigError
    from nvhook.tools.doctor.engine_config import read_engine_config

    name = opts.runtime_name
    try:
        view = read_engine_config(engine, config, name)
    except EngineConfigError as e:
        return [Check(engine, "fail", e.message, f"${{EDITOR:-vi}} {shell_quote(config)}")]
    added = _command_line_runtime(opts, engine, name)
    if added is not None and (view is None or view.runtime(name) is None):
        return [Check(engine, "ok", f"runtime {name!r} runs {added} (dockerd --add-runtime)")]
    if view is None or view.runtime(name) is None:
        where = f"{config} does not exist" if view is None else f"{config} has no runtime {name!r}"
        return [
            Check(
                engine,
                "fail",
                f"{NOT_CONFIGURED}: {where}",
                configure_command(engine, config, opts),
            )
        ]
    binary = view.runtime(name) or ""
    out: list[Check] = []
    try:
        plan = plan_configure(engine, config=config, name=name, runtime_path=binary or "/")
        complete = not plan.changed
    except EngineConfigError as e:
        return [Check(engine, "fail", e.message, f"${{EDITOR:-vi}} {shell_quote(config)}")]
    if os.path.basename(binary) != "nvhook-runtime":
        out.append(
            Check(
                engine,
                "fail",
                f"runtime {name!r} in {config} runs {binary or 'nothing'}, not nvhook-runtime",
                configure_command(engine, config, opts),
            )
        )
        return out
    problem = launcher_problem(under(opts.root, binary), opts.root)
    if problem:
        out.append(
            Check(
                engine,
                "fail",
                f"runtime {name!r}: {problem}",
                f"nvhook install-entrypoints --bin-dir {shell_quote(os.path.dirname(binary))}",
            )
        )
    if not complete:
        out.append(
            Check(
                engine,
                "fail",
                f"runtime {name!r} in {config} is not as configure writes it",
                configure_command(engine, config, opts, "--runtime-path", binary),
            )
        )
    out += _check_restart(opts, engine, config, view.files)
    out += _check_default(opts, engine, config, binary, view.default_runtime)
    if not any(c.status == "fail" for c in out):
        out.insert(
            0,
            Check(
                engine,
                "ok",
                f"runtime {name!r} runs {binary} (default runtime: {view.default_runtime})",
            ),
        )
    return out


def host_path(root: str, path: str) -> str:
    """``path`` (as seen here, under ``root``) as the host's processes name it."""
    if root in ("", "/"):
        return os.path.normpath(path)
    prefix = os.path.normpath(root)
    relative = os.path.relpath(os.path.normpath(path), prefix)
    return path if relative.startswith("..") else os.path.normpath("/" + relative)


def _check_restart(opts: Options, engine: str, config: str, files: Iterable[str]) -> list[Check]:
    import time

    from nvhook.tools.doctor.engine_config import DAEMONS, daemon_config, daemon_processes

    comm = DAEMONS[engine]
    if comm is None:
        return []
    reads = host_path(opts.root, config)
    running = daemon_processes(opts.root, comm)
    process = next((p for p in running if daemon_config(comm, p) == reads), None)
    if process is None:
        others = "; ".join(f"pid {p.pid} reads {daemon_config(comm, p)}" for p in running)
        owned = " (dockerd's own containerd)" if "/docker/" in others else ""
        message = (
            f"{comm} is not running"
            if not running
            else (f"no {comm} reading {reads} is running ({others}{owned})")
        )
        return [Check(engine, "warn", message, f"systemctl start {engine}")]
    changed = [(os.stat(f).st_mtime, f) for f in files if os.path.exists(f)]
    if not changed:
        return []
    mtime, newest = max(changed)
    if mtime > process.started + 1:  # /proc/stat's btime is whole seconds
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(process.started))
        changed_at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime))
        return [
            Check(
                engine,
                "fail",
                f"{comm} (pid {process.pid}) started {when}, before {newest} changed "
                f"({changed_at}): it runs without the change (restart pending)",
                RESTART[engine],
            )
        ]
    return []


def _check_default(
    opts: Options, engine: str, config: str, binary: str, default: str
) -> list[Check]:
    from nvhook.tools.doctor.engine_config import default_was_set

    if default == opts.runtime_name:
        return []
    backups = opts.backup_dir or under(opts.root, "/var/lib/nvhook/backups")
    if default_was_set(engine, config, opts.runtime_name, binary, backups):
        return [
            Check(
                engine,
                "fail",
                f"runtime {opts.runtime_name!r} was made the default (--set-as-default) but "
                f"{config} now makes {default!r} the default",
                configure_command(engine, config, opts, "--set-as-default"),
            )
        ]
    return []


def _command_line_runtime(opts: Options, engine: str, name: str) -> str | None:
    """The binary of runtime ``name`` on the running dockerd's command line
    (``--add-runtime name=path``), None when it has none."""
    from nvhook.tools.doctor.engine_config import daemon_processes

    if engine != "docker":
        return None
    running = daemon_processes(opts.root, "dockerd")
    for value in running[0].flags("--add-runtime") if running else ():
        key, _, path = value.partition("=")
        if key == name and path:
            return path
    return None


#: What dockerd answers ``docker run --gpus`` with when it registered no GPU device driver.
NO_GPU_DRIVER = 'could not select device driver "" with capabilities: [[gpu]]'
#: The program whose presence on dockerd's PATH routes --gpus through CDI (Docker 29.2+).
NVIDIA_CDI_HOOK = CDI_HOOK_ENTRYPOINT.name
#: The first Docker whose --gpus takes the nvidia.cdi driver when NVIDIA_CDI_HOOK is on its PATH.
CDI_GPUS_FROM = (29, 2)


def _look_path(root: str, dirs: Iterable[str], name: str) -> str | None:
    """Go's ``exec.LookPath`` over ``dirs`` (a file, not a directory, with an execute bit),
    under ``root``; the host path found."""
    import stat as st

    for d in dirs:
        host = os.path.join(d or ".", name)
        try:
            mode = os.stat(under(root, host)).st_mode
        except OSError:
            continue
        if not st.S_ISDIR(mode) and mode & 0o111:
            return host
    return None


def docker_version(root: str, argv0: str, dirs: Iterable[str]) -> tuple[int, int] | None:
    """(major, minor) of ``dockerd --version`` (the running daemon's binary), None if unknown."""
    import subprocess

    binary = argv0 if "/" in argv0 else (_look_path(root, dirs, argv0 or "dockerd") or "")
    if not binary:
        return None
    try:
        done = subprocess.run(
            [under(root, binary), "--version"], capture_output=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    words = done.stdout.decode(errors="replace").split()  # Docker version 28.2.1, build …
    if len(words) < 3 or words[:2] != ["Docker", "version"]:
        return None
    parts = words[2].rstrip(",").split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1][:2].isdigit():
        return None
    minor = "".join(c for c in parts[1] if c.isdigit())
    return int(parts[0]), int(minor)


def check_docker_gpus(opts: Options) -> list[Check]:
    """Whether ``docker run --gpus`` works with the running dockerd: it registers its
    NVIDIA device driver once, at start, when ``nvidia-container-runtime-hook`` is on its
    own PATH (moby ``daemon/nvidia_linux.go``, then ``daemon/devices_nvidia_linux.go``,
    19.03-29.1); from 29.2 (moby PR #50228, merged 2026-01-20: first in tag docker-v29.2.0,
    not in v28.5.2) also when ``nvidia-cdi-hook`` is (the ``nvidia.cdi`` driver, preferred).
    Otherwise every ``--gpus`` fails with
    :data:`NO_GPU_DRIVER`. The PATH is the daemon's (``/proc/<pid>/environ``), not ours."""
    import time

    from nvhook.legacyhook import LEGACY_HOOK
    from nvhook.tools.doctor.engine_config import daemon_processes, process_path

    running = daemon_processes(opts.root, "dockerd")
    if not running:
        return []  # "dockerd is not running" is said already
    daemon = running[0]
    path = process_path(opts.root, daemon.pid)
    if path is None:
        return [
            Check(
                "docker",
                "warn",
                f"cannot read the environment of dockerd (pid {daemon.pid}): whether "
                "`docker run --gpus` works is not known (run nvhook doctor as root)",
            )
        ]
    dirs = path.split(":") if path else []
    version = docker_version(opts.root, daemon.argv[0] if daemon.argv else "", dirs)
    cdi = version is not None and version >= CDI_GPUS_FROM
    names = (NVIDIA_CDI_HOOK, LEGACY_HOOK) if cdi else (LEGACY_HOOK,)
    shown = ".".join(map(str, version)) if version else "version unknown"
    found = {n: p for n in names if (p := _look_path(opts.root, dirs, n)) is not None}
    bin_dir = "/usr/bin" if "/usr/bin" in dirs or not dirs else dirs[0]
    if not found:
        wanted = " or ".join(names)
        return [
            Check(
                "docker",
                "fail",
                f"dockerd (pid {daemon.pid}, {shown}) finds no {wanted} on its PATH "
                f"({path or 'empty'}): `docker run --gpus` fails with: {NO_GPU_DRIVER}",
                f"nvhook install-entrypoints --bin-dir {bin_dir} && {RESTART['docker']}",
            )
        ]
    late = [
        (n, p)
        for n, p in found.items()
        if os.stat(under(opts.root, p)).st_mtime > daemon.started + 1
    ]
    if len(late) == len(found):
        name, hook = late[0]
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(daemon.started))
        return [
            Check(
                "docker",
                "fail",
                f"dockerd (pid {daemon.pid}) started {when}, before {hook} was installed: it "
                f"looks for {name} only at start, so `docker run --gpus` fails with: "
                f"{NO_GPU_DRIVER} (restart pending)",
                RESTART["docker"],
            )
        ]
    name, hook = next(iter(found.items()))
    driver = "nvidia.cdi" if name == NVIDIA_CDI_HOOK else "nvidia"
    return [
        Check(
            "docker",
            "ok",
            f"docker run --gpus: dockerd (pid {daemon.pid}, {shown}) finds {hook} on its PATH "
            f"(device driver {driver})",
        )
    ]
