"""``nvhook doctor``: is this node ready to give containers GPUs, and if not, what fixes it.

:func:`diagnose` runs small checks, each returning :class:`Check` findings (an area, ok /
warn / fail, one line saying what is wrong, and the exact command that fixes it):

- ``driver``: the kernel module (``/proc/modules``, ``/proc/driver/nvidia``), the device
  nodes (present, character devices with the driver's numbers, the mode the driver
  gives them; run as a user other than root, whether that user may open them: a driver
  restricting them to a group, ``root:video 0660``, needs the user in it, and rootless
  podman ``--group-add keep-groups``), the persistence daemon's socket;
- ``settings``: nvhook's config file loads; the ``nvhook-runtime`` and ``nvhook-hook``
  launchers and ``hook.path`` are executable with a working interpreter; the settings
  cache directory is not writable by anyone but root;
- ``cdi``: an NVIDIA spec is in the spec directories, every spec is valid, and every
  spec still matches the host (:func:`nvhook.tools.cdicheck.check_specs`);
- one area per installed engine: nvhook's runtime is in its config as ``nvhook runtime
  configure`` would write it, the binary it names is there, the daemon started after the
  config last changed, and the runtime is still the default where ``--set-as-default``
  made it so;
- ``gpu-health``: where ``nvhook device-plugin`` runs, each GPU it holds unhealthy (an
  XID and its meaning, NVML's error) from its health state file;
- ``cgroups``: v1, v2 or hybrid, which engines use the systemd cgroup driver, and whether
  this node is exposed to GPU access lost on ``systemctl daemon-reload``.

Host paths are read under ``root`` (a mock machine's directory in tests); paths given
explicitly (nvhook's config, the launchers' directory, engine configs) are taken as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nvhook.tools.doctor.base import Check, Options
from nvhook.tools.doctor.cdi import check_cdi
from nvhook.tools.doctor.cgroups import cgroup_layout, check_cgroups
from nvhook.tools.doctor.driver import check_driver
from nvhook.tools.doctor.engines import check_engines
from nvhook.tools.doctor.gpuhealth import check_gpu_health
from nvhook.tools.doctor.server import check_shim_server
from nvhook.tools.doctor.settings import check_cache_dir, check_launchers, load_checked_settings

__all__ = [
    "Check",
    "Options",
    "cgroup_layout",
    "diagnose",
    "exit_code",
    "render_text",
    "to_json",
]


def diagnose(opts: Options) -> list[Check]:
    """Every check, in the order shown: driver, settings, CDI, engines, cgroups."""
    checks: list[Check] = []
    checks += check_driver(opts)
    settings, found = load_checked_settings(opts)
    checks += found
    checks += check_launchers(opts, settings)
    checks += check_cache_dir(opts)
    checks += check_shim_server(opts)
    checks += check_cdi(opts, settings)
    checks += check_engines(opts)
    checks += check_gpu_health(opts)
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
