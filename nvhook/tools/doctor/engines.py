"""Doctor checks per installed engine: runtime configured, daemon restarted, default kept."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from nvhook.tools.doctor.base import NOT_CONFIGURED, RESTART, Check, Options, shell_quote, under
from nvhook.tools.doctor.settings import launcher_problem


def engine_config_path(opts: Options, engine: str) -> str:
    from nvhook.engines import DEFAULT_CONFIGS

    return dict(opts.engine_configs).get(engine) or under(opts.root, DEFAULT_CONFIGS[engine])


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
