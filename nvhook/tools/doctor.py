"""``nvhook doctor``: is this node ready to give containers GPUs, and if not, what fixes it.

:func:`diagnose` runs small checks, each returning :class:`Check` findings (an area, ok /
warn / fail, one line saying what is wrong, and the exact command that fixes it):

- ``driver``: the kernel module (``/proc/modules``, ``/proc/driver/nvidia``), the device
  nodes (present, character devices with the driver's numbers, the mode the driver
  gives them), the persistence daemon's socket;
- ``settings``: nvhook's config file loads; the ``nvhook-runtime`` and ``nvhook-hook``
  launchers and ``hook.path`` are executable with a working interpreter; the settings
  cache directory is not writable by anyone but root;
- ``cdi``: an NVIDIA spec is in the spec directories, every spec is valid, and every
  spec still matches the host (:func:`nvhook.tools.cdicheck.check_specs`);
- one area per installed engine: nvhook's runtime is in its config as ``nvhook runtime
  configure`` would write it, the binary it names is there, the daemon started after the
  config last changed, and the runtime is still the default where ``--set-as-default``
  made it so;
- ``cgroups``: v1, v2 or hybrid, which engines use the systemd cgroup driver, and whether
  this node is exposed to GPU access lost on ``systemctl daemon-reload``.

Host paths are read under ``root`` (a mock machine's directory in tests); paths given
explicitly (nvhook's config, the launchers' directory, engine configs) are taken as they are.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from oci._frozen import Frozen

if TYPE_CHECKING:
    from nvhook.settings import Settings

__all__ = [
    "Check",
    "Options",
    "cgroup_layout",
    "diagnose",
    "exit_code",
    "render_text",
    "to_json",
]

Status = Literal["ok", "warn", "fail"]

_NVIDIA_MAJOR = 195
_CTL_MINOR = 255
_PERSISTENCED_SOCKET = "/run/nvidia-persistenced/socket"
_HOOKS_DIRS = ("/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d")
#: NVIDIA's programs that give a container devices outside its spec (devices.allow, eBPF)
_LEGACY = ("nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-container-toolkit")
_MISSING = "nvhook's runtime is not configured"
_RESTART = {
    "containerd": "systemctl restart containerd",
    "docker": "systemctl restart docker",
    "crio": "systemctl restart crio",
    "podman": "",
}


class Check(Frozen):
    """One finding: ``fix`` is the command that mends it ("" when ok)."""

    area: str
    status: Status
    message: str
    fix: str = ""


class Options(Frozen):
    """Where to look. Empty strings and None mean the defaults given per field."""

    root: str = "/"
    driver_root: str = ""  # default: root
    dev_root: str = ""  # default: root
    config: str | None = None  # default: $NVHOOK_CONFIG, else <root>/etc/nvhook/config.toml
    bin_dir: str = ""  # the launchers' directory; default: beside this interpreter
    #: (engine, config file) overrides; default: each engine's file under root
    engine_configs: tuple[tuple[str, str], ...] = ()
    runtime_name: str = "nvidia"
    backup_dir: str = ""  # default: <root>/var/lib/nvhook/backups
    cache_dir: str = ""  # default: $NVHOOK_CACHE_DIR, else /run/nvhook, under root


def under(root: str, path: str) -> str:
    """The host path ``path`` as seen here, under ``root``."""
    return path if root in ("", "/") else os.path.join(root, path.lstrip("/"))


def _shell(word: str) -> str:
    import shlex

    return shlex.quote(word)


def _root_flag(opts: Options) -> str:
    return "" if opts.root in ("", "/") else f" --root {_shell(opts.root)}"


# --------------------------------------------------------------------------- driver


def check_driver(opts: Options) -> list[Check]:
    from nvhook.devices.procfs import read_driver
    from nvhook.errors import DriverError

    root = opts.root
    out: list[Check] = []
    modules = under(root, "/proc/modules")
    loaded_modules: set[str] | None = None
    try:
        with open(modules) as f:
            loaded_modules = {line.split(" ", 1)[0] for line in f}
    except OSError:
        pass  # no /proc/modules (a mock root): /proc/driver/nvidia says it
    if loaded_modules is not None and "nvidia" not in loaded_modules:
        out.append(
            Check("driver", "fail", "the nvidia kernel module is not loaded", "modprobe nvidia")
        )
        return out
    try:
        driver = read_driver(root)
    except DriverError as e:
        out.append(Check("driver", "fail", e.message, "modprobe nvidia"))
        return out
    kind = "open" if driver.open_module else "proprietary"
    gpus = len(driver.gpus)
    if gpus:
        out.append(
            Check(
                "driver",
                "ok",
                f"driver {driver.version} ({kind} kernel module), {gpus} GPU{'s' * (gpus != 1)}",
            )
        )
    else:
        out.append(
            Check(
                "driver",
                "warn",
                f"driver {driver.version} is loaded but sees no GPU (the kernel log says why)",
                "dmesg | grep -i nvrm",
            )
        )
    if loaded_modules is not None and "nvidia_uvm" not in loaded_modules:
        out.append(
            Check(
                "driver",
                "warn",
                "the nvidia_uvm module is not loaded: CUDA cannot run",
                "nvidia-modprobe -u -c 0",
            )
        )
    out += _check_nodes(opts, driver)
    socket_path = under(root, _PERSISTENCED_SOCKET)
    try:
        is_socket = stat.S_ISSOCK(os.stat(socket_path).st_mode)
    except OSError:
        is_socket = False
    if not is_socket:
        out.append(
            Check(
                "driver",
                "warn",
                f"{socket_path} is missing: nvidia-persistenced is not running, so GPUs are "
                "re-initialised for every container (slow starts, lost state)",
                "systemctl enable --now nvidia-persistenced",
            )
        )
    return out


def _check_nodes(opts: Options, driver: Any) -> list[Check]:
    dev_root = opts.dev_root or opts.root
    mode_param = driver.params.get("DeviceFileMode", "")
    want_mode = int(mode_param) & 0o777 if mode_param.isdigit() else 0o666
    uvm = driver.majors.get("nvidia-uvm")
    nodes: list[tuple[str, int | None, int, str]] = [
        ("/dev/nvidiactl", _NVIDIA_MAJOR, _CTL_MINOR, "nvidia-modprobe"),
    ]
    nodes += [
        (f"/dev/nvidia{g.minor}", _NVIDIA_MAJOR, g.minor, f"nvidia-modprobe -c {g.minor}")
        for g in driver.gpus
    ]
    nodes += [
        ("/dev/nvidia-uvm", uvm, 0, "nvidia-modprobe -u -c 0"),
        ("/dev/nvidia-uvm-tools", uvm, 1, "nvidia-modprobe -u -c 0"),
    ]
    out: list[Check] = []
    good = 0
    for node, major, minor, create in nodes:
        path = under(dev_root, node)
        try:
            st = os.stat(path)
        except OSError:
            out.append(Check("driver", "fail", f"{path} is missing", create))
            continue
        if not stat.S_ISCHR(st.st_mode):
            out.append(
                Check(
                    "driver",
                    "fail",
                    f"{path} is not a character device",
                    f"rm -f {_shell(path)} && {create}",
                )
            )
            continue
        found = (os.major(st.st_rdev), os.minor(st.st_rdev))
        if major is not None and found != (major, minor):
            out.append(
                Check(
                    "driver",
                    "fail",
                    f"{path} is device {found[0]}:{found[1]}, the driver's is {major}:{minor}",
                    f"rm -f {_shell(path)} && {create}",
                )
            )
            continue
        mode = stat.S_IMODE(st.st_mode)
        if mode & want_mode != want_mode:
            out.append(
                Check(
                    "driver",
                    "warn",
                    f"{path} has mode {mode:04o}, the driver gives {want_mode:04o} "
                    "(DeviceFileMode): containers running as other users cannot open it",
                    f"chmod {want_mode:04o} {_shell(path)}",
                )
            )
            continue
        good += 1
    if good:
        out.insert(0, Check("driver", "ok", f"{good} device nodes present, mode {want_mode:04o}"))
    return out


# --------------------------------------------------------------------------- settings


def settings_path(opts: Options) -> tuple[str, bool]:
    """nvhook's config file as the shim would find it, and whether it must exist."""
    from nvhook.settings import CONFIG_ENV, DEFAULT_CONFIG_PATH

    if opts.config:
        return opts.config, True
    named = os.environ.get(CONFIG_ENV)
    if named:
        return named, True
    return under(opts.root, DEFAULT_CONFIG_PATH), False


def load_checked_settings(opts: Options) -> tuple[Settings | None, list[Check]]:
    """The settings (None when invalid) and what was found about the file."""
    import tempfile

    from nvhook.errors import ConfigError
    from nvhook.settings import CONFIG_ENV, defaults, load_settings

    path, explicit = settings_path(opts)
    if not explicit and not os.path.exists(path):
        return defaults(), [Check("settings", "ok", f"no {path}: nvhook runs on its defaults")]
    if not os.path.exists(path):
        fix = f"unset {CONFIG_ENV}" if not opts.config else f"touch {_shell(path)}"
        return None, [Check("settings", "fail", f"{path} does not exist", fix)]
    with tempfile.TemporaryDirectory(prefix="nvhook-doctor-") as cache:  # parse it afresh
        try:
            settings = load_settings(path, cache_dir=cache)
        except ConfigError as e:
            return None, [
                Check("settings", "fail", e.message, _settings_fix(opts, path, e.message))
            ]
    return settings, [Check("settings", "ok", f"{path} is valid")]


def _settings_fix(opts: Options, path: str, message: str) -> str:
    from nvhook.settings import CONFIG_ENV, DEFAULT_CONFIG_PATH

    if "nvhook config import" in message:  # NVIDIA's toolkit's file: translate it
        target = under(opts.root, DEFAULT_CONFIG_PATH)
        if os.path.abspath(path) == target:
            new = _shell(path + ".nvhook")
            return f"nvhook config import {_shell(path)} > {new} && mv {new} {_shell(path)}"
        fix = f"nvhook config import {_shell(path)} > {_shell(target)}"
        return fix + (f" && unset {CONFIG_ENV}" if os.environ.get(CONFIG_ENV) else "")
    key = message[len(path) + 2 :].partition(": ")[0] if message.startswith(f"{path}: ") else ""
    line = _key_line(path, key)
    return f"${{EDITOR:-vi}} +{line} {_shell(path)}" if line else f"${{EDITOR:-vi}} {_shell(path)}"


def _key_line(path: str, key: str) -> int | None:
    """The line of ``[section]`` ``name = …`` (the key a ConfigError names) in ``path``."""
    section, _, name = key.partition(".")
    if not name:
        return None
    current = ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                text = line.strip()
                if text.startswith("[") and text.endswith("]"):
                    current = text.strip("[] ")
                elif current == section and text.partition("=")[0].strip() == name:
                    return number
    except OSError:
        return None
    return None


def _launcher_problem(path: str, root: str) -> str | None:
    """What is wrong with the launcher at ``path`` (its interpreter looked up under ``root``)."""
    try:
        st = os.stat(path)
    except OSError:
        return f"{path} is missing"
    if not stat.S_ISREG(st.st_mode) or not os.access(path, os.X_OK):
        return f"{path} is not an executable file"
    try:
        with open(path, "rb") as f:
            first = f.readline(4096).decode("utf-8", "replace").strip()
    except OSError as e:
        return f"{path}: cannot read: {e.strerror}"
    if not first.startswith("#!"):
        return f"{path} is not a script written by `nvhook install-entrypoints`"
    interpreter = first[2:].split()[0] if first[2:].split() else ""
    seen = under(root, interpreter)
    if not interpreter or not os.path.isfile(seen) or not os.access(seen, os.X_OK):
        return f"{path} runs {interpreter or 'nothing'}, which is not an executable file"
    return None


def _refs_root(opts: Options, path: str) -> str:
    """Where the host paths a file refers to are: under root when the file lies there."""
    root = os.path.join(os.path.abspath(opts.root), "")
    return opts.root if root != "/" and os.path.abspath(path).startswith(root) else "/"


def _interpreter(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            first = f.readline(4096).decode("utf-8", "replace")
    except OSError:
        return None
    words = first[2:].split() if first.startswith("#!") else []
    return words[0] if words else None


def check_launchers(opts: Options, settings: Settings | None) -> list[Check]:
    from nvhook.tools.entrypoints import ENTRYPOINTS

    default_dir = os.path.dirname(os.path.abspath(sys.executable))
    bin_dir = opts.bin_dir or default_dir
    install = "nvhook install-entrypoints" + (
        "" if bin_dir == default_dir else f" --bin-dir {_shell(bin_dir)}"
    )
    out: list[Check] = []
    ok: list[str] = []
    for entry in ENTRYPOINTS:
        path = os.path.join(bin_dir, entry.name)
        problem = _launcher_problem(path, _refs_root(opts, path))
        if problem:
            out.append(Check("settings", "fail", problem, install))
        else:
            ok.append(path)
    hook = settings.hook_path if settings is not None else ""
    refs, what = opts.root, f"hook.path {hook}"  # a host path, like every setting
    if not hook:  # the shim injects the nvhook-hook beside its own interpreter
        interpreter = _interpreter(os.path.join(bin_dir, "nvhook-runtime"))
        hook = os.path.join(os.path.dirname(interpreter), "nvhook-hook") if interpreter else ""
        refs, what = (
            _refs_root(opts, bin_dir),
            f"hook.path is empty, so the shim injects {hook}, which",
        )
    seen = under(refs, hook) if hook else ""
    if hook and seen not in ok:
        if not os.path.isfile(seen) or not os.access(seen, os.X_OK):
            out.append(
                Check(
                    "settings",
                    "fail",
                    f"{what} is not an executable file: containers given GPUs fail at their "
                    "createContainer hook",
                    f"nvhook install-entrypoints --bin-dir {_shell(os.path.dirname(hook))}",
                )
            )
        else:
            ok.append(seen)
    if ok:
        out.insert(0, Check("settings", "ok", "launchers: " + ", ".join(ok)))
    return out


def check_cache_dir(opts: Options) -> list[Check]:
    """The settings and CDI index caches: whoever can write there chooses nvhook's settings."""
    from nvhook.settings import CACHE_ENV, DEFAULT_CACHE_DIR

    host = opts.cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR
    path = under(opts.root, host) if not opts.cache_dir else host
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return [Check("settings", "ok", f"cache {path} is made at first use")]
    except OSError as e:
        return [
            Check(
                "settings",
                "fail",
                f"cache {path}: cannot read: {e.strerror}",
                f"rm -rf {_shell(path)}",
            )
        ]
    reset = f"rm -rf {_shell(path)}"
    if not stat.S_ISDIR(st.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        return [Check("settings", "fail", f"cache {path} is {what}", reset)]
    owners = {0, os.geteuid()}
    if st.st_uid not in owners or st.st_mode & 0o022:
        return [
            Check(
                "settings",
                "fail",
                f"cache {path} (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}) can "
                "be written by others, who could choose nvhook's settings",
                reset,
            )
        ]
    for name in sorted(os.listdir(path)):
        try:
            fst = os.lstat(os.path.join(path, name))
        except OSError:
            continue
        if fst.st_uid not in owners or fst.st_mode & 0o022:
            return [
                Check(
                    "settings",
                    "fail",
                    f"cache file {os.path.join(path, name)} can be written by others",
                    reset,
                )
            ]
    return [Check("settings", "ok", f"cache {path} is private")]


# --------------------------------------------------------------------------- CDI


def check_cdi(opts: Options, settings: Settings | None) -> list[Check]:
    from nvhook.settings import defaults
    from oci.cdi.registry import Registry
    from oci.cdi.validate import validate_file

    values = settings if settings is not None else defaults()
    host_dirs = list(values.cdi_spec_dirs)
    kind = values.cdi_default_kind
    mode = values.runtime_mode
    dirs = [under(opts.root, d) for d in host_dirs]
    target = os.path.join(dirs[-1] if dirs else under(opts.root, "/var/run/cdi"), "nvidia.json")
    generate = "nvhook cdi generate" + _root_flag(opts)
    if target != "/var/run/cdi/nvidia.json":
        generate += f" --output {_shell(target)}"
    out: list[Check] = []
    registry = Registry(dirs)
    problems = {path: list(messages) for path, messages in registry.errors.items()}
    for spec in registry.specs:  # the schema too, as `nvhook cdi validate` checks
        errors = [str(p) for p in validate_file(spec.source) if p.is_error]
        problems.setdefault(spec.source, []).extend(errors)
    for path, messages in problems.items():
        if not messages:
            continue
        if os.path.basename(path).startswith("nvidia") and os.path.isfile(path):
            fix = f"nvhook cdi generate{_root_flag(opts)} --output {_shell(path)}"
        else:
            fix = f"mv {_shell(path)} {_shell(path + '.invalid')}"
        out.append(Check("cdi", "fail", f"invalid CDI spec: {messages[0]}", fix))
    devices = [n for n in registry.devices if n.startswith(kind + "=")]
    if not devices:
        # without the driver there is nothing to generate from (the driver check says so)
        loaded = os.path.exists(under(opts.root, "/proc/driver/nvidia/version"))
        status: Status = "fail" if loaded or mode == "cdi" else "warn"
        out.append(
            Check(
                "cdi",
                status,
                f"no CDI spec in {', '.join(dirs)} defines {kind} devices: CDI requests "
                "(podman --device, cdi.k8s.io/ annotations, runtime.mode cdi) find no GPU",
                generate,
            )
        )
    out += cdi_freshness(opts, dirs, invalid=[p for p, m in problems.items() if m])
    if devices and not out:
        files = sorted({registry.devices[n].path for n in devices})
        out.append(
            Check("cdi", "ok", f"{len(devices)} {kind} devices in {', '.join(files)}, up to date")
        )
    return out


def cdi_freshness(opts: Options, spec_dirs: list[str], invalid: Iterable[str] = ()) -> list[Check]:
    """Specs that no longer match the host (``nvhook cdi check``): one finding per file and
    fix, the first entry named; ``invalid`` files are reported by :func:`check_cdi` already."""
    from nvhook.tools.cdicheck import check_specs

    by_fix: dict[tuple[str, str], list[str]] = {}
    for finding in check_specs(spec_dirs, root=opts.root):
        if finding.file not in invalid:
            by_fix.setdefault((finding.file, finding.fix), []).append(finding.line)
    out = []
    for (_file, fix), lines in by_fix.items():
        more = f" (and {len(lines) - 1} more: `nvhook cdi check`)" if len(lines) > 1 else ""
        out.append(
            Check("cdi", "fail", f"stale CDI spec: {lines[0]}{more}", fix.removeprefix("run: "))
        )
    return out


# --------------------------------------------------------------------------- engines


def _engine_config_path(opts: Options, engine: str) -> str:
    from nvhook.engines import DEFAULT_CONFIGS

    return dict(opts.engine_configs).get(engine) or under(opts.root, DEFAULT_CONFIGS[engine])


def _installed(opts: Options, engine: str, config: str) -> bool:
    from nvhook.tools.doctor_engines import BINARIES

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
        if _installed(opts, engine, (config := _engine_config_path(opts, engine)))
    }
    # an engine without the runtime is broken only when no engine has it (docker may be
    # installed beside the containerd that runs the GPU pods)
    some = any(not any(c.message.startswith(_MISSING) for c in cs) for cs in found.values())
    return [
        c._replace(status="warn") if some and c.message.startswith(_MISSING) else c
        for checks in found.values()
        for c in checks
    ]


def _configure(engine: str, config: str, opts: Options, *extra: str) -> str:
    from nvhook.engines import DEFAULT_CONFIGS, DEFAULT_NAME

    words = ["nvhook", "runtime", "configure", "--runtime", engine]
    if config != DEFAULT_CONFIGS[engine]:
        words += ["--config", config]
    if opts.runtime_name != DEFAULT_NAME:
        words += ["--name", opts.runtime_name]
    command = " ".join(_shell(w) for w in [*words, *extra])
    restart = _RESTART[engine]
    return f"{command} && {restart}" if restart else command


def check_engine(opts: Options, engine: str, config: str) -> list[Check]:
    """nvhook's runtime in ``engine``'s ``config``: there, runnable, loaded, default if asked."""
    from nvhook.engines import plan_configure
    from nvhook.errors import EngineConfigError
    from nvhook.tools.doctor_engines import read_engine_config

    name = opts.runtime_name
    try:
        view = read_engine_config(engine, config, name)
    except EngineConfigError as e:
        return [Check(engine, "fail", e.message, f"${{EDITOR:-vi}} {_shell(config)}")]
    if view is None or view.runtime(name) is None:
        where = f"{config} does not exist" if view is None else f"{config} has no runtime {name!r}"
        return [
            Check(
                engine,
                "fail",
                f"{_MISSING}: {where}",
                _configure(engine, config, opts),
            )
        ]
    binary = view.runtime(name) or ""
    out: list[Check] = []
    try:
        plan = plan_configure(engine, config=config, name=name, runtime_path=binary or "/")
        complete = not plan.changed
    except EngineConfigError as e:
        return [Check(engine, "fail", e.message, f"${{EDITOR:-vi}} {_shell(config)}")]
    if os.path.basename(binary) != "nvhook-runtime":
        out.append(
            Check(
                engine,
                "fail",
                f"runtime {name!r} in {config} runs {binary or 'nothing'}, not nvhook-runtime",
                _configure(engine, config, opts),
            )
        )
        return out
    problem = _launcher_problem(under(opts.root, binary), opts.root)
    if problem:
        out.append(
            Check(
                engine,
                "fail",
                f"runtime {name!r}: {problem}",
                f"nvhook install-entrypoints --bin-dir {_shell(os.path.dirname(binary))}",
            )
        )
    if not complete:
        out.append(
            Check(
                engine,
                "fail",
                f"runtime {name!r} in {config} is not as configure writes it",
                _configure(engine, config, opts, "--runtime-path", binary),
            )
        )
    out += _check_restart(opts, engine, view.files)
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


def _check_restart(opts: Options, engine: str, files: Iterable[str]) -> list[Check]:
    import time

    from nvhook.tools.doctor_engines import DAEMONS, daemon_start

    comm = DAEMONS[engine]
    if comm is None:
        return []
    process = daemon_start(opts.root, comm)
    if process is None:
        return [
            Check(
                engine,
                "warn",
                f"{comm} is not running",
                f"systemctl start {engine}",
            )
        ]
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
                _RESTART[engine],
            )
        ]
    return []


def _check_default(
    opts: Options, engine: str, config: str, binary: str, default: str
) -> list[Check]:
    from nvhook.tools.doctor_engines import default_was_set

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
                _configure(engine, config, opts, "--set-as-default"),
            )
        ]
    return []


# --------------------------------------------------------------------------- cgroups


def cgroup_layout(root: str) -> str:
    """``v1``, ``v2``, ``hybrid`` or ``unknown``: what is mounted at ``/sys/fs/cgroup``."""
    kinds: dict[str, str] = {}
    try:
        with open(under(root, "/proc/self/mountinfo")) as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) >= 5 and right.split()[:1] in (["cgroup"], ["cgroup2"]):
                    kinds[fields[4]] = right.split()[0]
    except OSError:
        return _cgroup_layout_from_sys(root)
    if kinds.get("/sys/fs/cgroup") == "cgroup2":
        return "v2"
    v1 = "cgroup" in kinds.values()
    if v1 and "cgroup2" in kinds.values():
        return "hybrid"
    return "v1" if v1 else _cgroup_layout_from_sys(root)


def _cgroup_layout_from_sys(root: str) -> str:
    base = under(root, "/sys/fs/cgroup")
    if os.path.exists(os.path.join(base, "cgroup.controllers")):
        return "v2"
    if os.path.isdir(os.path.join(base, "devices")):
        return "hybrid" if os.path.isdir(os.path.join(base, "unified")) else "v1"
    return "unknown"


def _systemd_is_init(root: str) -> bool:
    return os.path.isdir(under(root, "/run/systemd/system"))


def _legacy_hooks(root: str) -> list[str]:
    """OCI hook files (podman, CRI-O) that run NVIDIA's legacy prestart hook."""
    import json

    found = []
    for directory in _HOOKS_DIRS:
        seen = under(root, directory)
        try:
            names = sorted(os.listdir(seen))
        except OSError:
            continue
        for name in names:
            path = os.path.join(seen, name)
            try:
                with open(path) as f:
                    hook = json.load(f).get("hook", {})
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(hook, dict) and os.path.basename(str(hook.get("path", ""))) in _LEGACY:
                found.append(path)
    return found


def check_cgroups(opts: Options) -> list[Check]:
    """The systemd-managed device cgroup trap: ``daemon-reload`` re-applies a container's
    device rules from its unit, which holds only the devices in the container's spec.

    nvhook's shim and CDI put GPU nodes and their rules in the spec, so they survive;
    NVIDIA's legacy hook (nvidia-container-cli) writes them straight into the cgroup
    (devices.allow, or an eBPF program on v2), and a reload takes them away.
    """
    from nvhook.engines import ENGINES
    from nvhook.errors import EngineConfigError
    from nvhook.tools.doctor_engines import read_engine_config

    layout = cgroup_layout(opts.root)
    systemd_init = _systemd_is_init(opts.root)
    hooks = _legacy_hooks(opts.root)
    systemd_engines: list[str] = []
    out: list[Check] = []
    for engine in ENGINES:
        config = _engine_config_path(opts, engine)
        if not _installed(opts, engine, config):
            continue
        try:
            view = read_engine_config(engine, config, opts.runtime_name)
        except EngineConfigError:
            continue  # reported by the engine's own check
        explicit = view.systemd_cgroup if view is not None else None
        default = {
            "containerd": False,
            "docker": layout == "v2" and systemd_init,
            "crio": True,
            "podman": systemd_init,
        }[engine]
        if not (explicit if explicit is not None else default):
            continue
        systemd_engines.append(engine)
        legacy = [
            f"runtime {n!r} runs {b}"
            for n, b in (view.runtimes if view is not None else ())
            if os.path.basename(b) in _LEGACY
        ]
        for n_b in legacy:
            out.append(
                Check(
                    "cgroups",
                    "fail",
                    f"{engine} uses the systemd cgroup driver and its {n_b} (NVIDIA's legacy "
                    "hook): GPU devices outside the spec are lost on `systemctl daemon-reload`",
                    _configure(engine, config, opts),
                )
            )
        if engine in ("crio", "podman"):
            for path in hooks:
                out.append(
                    Check(
                        "cgroups",
                        "fail",
                        f"{engine} uses the systemd cgroup driver and runs NVIDIA's legacy hook "
                        f"({path}): GPU devices outside the spec are lost on "
                        "`systemctl daemon-reload`",
                        f"rm {_shell(path)}",
                    )
                )
    if not out:
        if systemd_engines:
            detail = (
                f"{', '.join(systemd_engines)} use{'s' * (len(systemd_engines) == 1)} the "
                "systemd cgroup driver; nvhook puts GPU devices in the container's spec, so "
                "`systemctl daemon-reload` keeps them: not exposed"
            )
        else:
            detail = (
                "no engine uses the systemd cgroup driver: not exposed to the daemon-reload trap"
            )
        out.append(Check("cgroups", "ok", f"cgroup {layout}; {detail}"))
    return out


# --------------------------------------------------------------------------- all of it


def diagnose(opts: Options) -> list[Check]:
    """Every check, in the order shown: driver, settings, CDI, engines, cgroups."""
    checks: list[Check] = []
    checks += check_driver(opts)
    settings, found = load_checked_settings(opts)
    checks += found
    checks += check_launchers(opts, settings)
    checks += check_cache_dir(opts)
    checks += check_cdi(opts, settings)
    checks += check_engines(opts)
    checks += check_cgroups(opts)
    return checks


def exit_code(checks: Iterable[Check]) -> int:
    """0 unless some check failed (``ExitCode.VALIDATION``); warnings do not fail."""
    from oci.errors import ExitCode

    return ExitCode.VALIDATION if any(c.status == "fail" for c in checks) else ExitCode.OK


def to_json(checks: Iterable[Check]) -> dict[str, Any]:
    listed = list(checks)
    return {
        "healthy": not any(c.status == "fail" for c in listed),
        "checks": [
            {"area": c.area, "status": c.status, "message": c.message, "fix": c.fix} for c in listed
        ],
    }


def render_text(checks: Iterable[Check]) -> str:
    """The findings grouped by area, each problem followed by its fix; then a summary."""
    lines: list[str] = []
    area = None
    listed = list(checks)
    for c in listed:
        if c.area != area:
            lines.append(c.area)
            area = c.area
        label = c.status if c.status == "ok" else c.status.upper()
        lines.append(f"  {label:<5} {c.message}")
        if c.fix:
            lines.append(f"        fix: {c.fix}")
    fails = sum(c.status == "fail" for c in listed)
    warns = sum(c.status == "warn" for c in listed)
    if fails:
        lines.append(
            f"{fails} problem{'s' * (fails != 1)}, {warns} warning{'s' * (warns != 1)}: not healthy"
        )
    else:
        lines.append(f"healthy ({warns} warning{'s' * (warns != 1)})")
    return "\n".join(lines) + "\n"
