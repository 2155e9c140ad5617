"""Doctor checks of nvhook itself: the settings file, the launchers and hook path, the cache dir."""

from __future__ import annotations

import os
import stat
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvhook.settings import Settings
from nvhook.tools.doctor.base import Check, Options, shell_quote, under


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
        fix = f"unset {CONFIG_ENV}" if not opts.config else f"touch {shell_quote(path)}"
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
            new = shell_quote(path + ".nvhook")
            return (
                f"nvhook config import {shell_quote(path)} > {new} && mv {new} {shell_quote(path)}"
            )
        fix = f"nvhook config import {shell_quote(path)} > {shell_quote(target)}"
        return fix + (f" && unset {CONFIG_ENV}" if os.environ.get(CONFIG_ENV) else "")
    key = message[len(path) + 2 :].partition(": ")[0] if message.startswith(f"{path}: ") else ""
    line = _key_line(path, key)
    return (
        f"${{EDITOR:-vi}} +{line} {shell_quote(path)}"
        if line
        else f"${{EDITOR:-vi}} {shell_quote(path)}"
    )


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


def launcher_problem(path: str, root: str) -> str | None:
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
    if first.startswith("\x7fELF") and os.path.basename(path) in ("nvhook-runtime", "nvhook-hook"):
        # the native front-end or hook (nvhook.native): what counts is the launcher it
        # hands over to
        return launcher_problem(path + ".py", root)
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
        "" if bin_dir == default_dir else f" --bin-dir {shell_quote(bin_dir)}"
    )
    out: list[Check] = []
    ok: list[str] = []
    for entry in ENTRYPOINTS:
        path = os.path.join(bin_dir, entry.name)
        problem = launcher_problem(path, _refs_root(opts, path))
        if problem:
            out.append(Check("settings", "fail", problem, install))
        else:
            ok.append(path)
    hook = settings.hook_path if settings is not None else ""
    refs, what = opts.root, f"hook.path {hook}"  # a host path, like every setting
    if not hook:  # the shim injects the nvhook-hook beside its own interpreter
        runtime = os.path.join(bin_dir, "nvhook-runtime")
        native = os.path.join(bin_dir, "nvhook-runtime.py")  # beside the native front-end
        interpreter = _interpreter(native if os.path.isfile(native) else runtime)
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
                    f"nvhook install-entrypoints --bin-dir {shell_quote(os.path.dirname(hook))}",
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
                f"rm -rf {shell_quote(path)}",
            )
        ]
    reset = f"rm -rf {shell_quote(path)}"
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
