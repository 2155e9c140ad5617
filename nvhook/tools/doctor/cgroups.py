"""Doctor checks of the cgroup set-up and its known trap (devices lost on a systemd re-apply)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from nvhook.tools.doctor.base import HOOKS_DIRS, LEGACY, Check, Options, shell_quote, under
from nvhook.tools.doctor.engines import configure_command, engine_config_path, installed


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
    for directory in HOOKS_DIRS:
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
            if isinstance(hook, dict) and os.path.basename(str(hook.get("path", ""))) in LEGACY:
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
    from nvhook.tools.doctor.engine_config import read_engine_config

    layout = cgroup_layout(opts.root)
    systemd_init = _systemd_is_init(opts.root)
    hooks = _legacy_hooks(opts.root)
    systemd_engines: list[str] = []
    out: list[Check] = []
    for engine in ENGINES:
        config = engine_config_path(opts, engine)
        if not installed(opts, engine, config):
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
            if os.path.basename(b) in LEGACY
        ]
        for n_b in legacy:
            out.append(
                Check(
                    "cgroups",
                    "fail",
                    f"{engine} uses the systemd cgroup driver and its {n_b} (NVIDIA's legacy "
                    "hook): GPU devices outside the spec are lost on `systemctl daemon-reload`",
                    configure_command(engine, config, opts),
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
                        f"rm {shell_quote(path)}",
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
