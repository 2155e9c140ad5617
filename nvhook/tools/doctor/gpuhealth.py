"""Doctor check of the GPUs' health as ``nvhook device-plugin`` last saw it.

The plugin writes its health state file (:mod:`nvhook.deviceplugin.healthstate`,
``/run/nvhook/device-plugin/gpu-health.json`` by default, under ``root``); where there is none (no
plugin on this node) nothing is said. Otherwise one ``ok`` line, or one ``fail`` per
unhealthy GPU naming it and why (an XID with its meaning, NVML's error, a GPU gone from
``/proc``), with what brings it back; and the same for the other vendors' devices the plugin
serves (AMD, Intel, Ascend: :mod:`nvhook.vendors.health`), by their CDI names.
"""

from __future__ import annotations

from nvhook.deviceplugin.healthstate import DEFAULT_STATE_FILE, read_health_state
from nvhook.tools.doctor.base import Check, Options, under

__all__ = ["check_gpu_health"]


def check_gpu_health(opts: Options) -> list[Check]:
    path = under(opts.root, opts.health_state_file or DEFAULT_STATE_FILE)
    state = read_health_state(path)
    if state is None:
        return []
    return _gpus(state["gpus"]) + _devices(state["devices"])


def _devices(devices: list[dict[str, object]]) -> list[Check]:
    """Other vendors' devices (AMD, Intel, Ascend) as the plugin last saw them."""
    if not devices:
        return []
    sick = [d for d in devices if not d.get("healthy")]
    if not sick:
        return [
            Check(
                "gpu-health",
                "ok",
                f"the device plugin sees {len(devices)} other vendors' devices healthy",
            )
        ]
    return [
        Check(
            "gpu-health",
            "fail",
            f"{d['name']} is unhealthy for the device plugin: "
            f"{d.get('reason') or 'no reason given'}",
            "check the vendor's driver is loaded (lsmod; amdgpu, xe/i915, the Ascend driver) "
            "and its device nodes exist under /dev; the plugin lists it healthy again on "
            "its next health tick",
        )
        for d in sick
    ]


def _gpus(gpus: list[dict[str, object]]) -> list[Check]:
    sick = [g for g in gpus if not g.get("healthy")]
    if not gpus:
        return []
    if not sick:
        return [Check("gpu-health", "ok", f"the device plugin sees {len(gpus)} GPUs healthy")]
    return [
        Check(
            "gpu-health",
            "fail",
            f"GPU {g['index']} ({g.get('uuid', '?')}) is unhealthy for the device plugin: "
            f"{g.get('reason') or 'no reason given'}",
            f"nvidia-smi -q -i {g['index']}; after a reset (nvidia-smi -r -i {g['index']}) it "
            "is healthy again once the config's health.recoverAfter has passed",
        )
        for g in sick
    ]
