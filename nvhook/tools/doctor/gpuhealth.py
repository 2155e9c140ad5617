"""Doctor check of the GPUs' health as ``nvhook device-plugin`` last saw it.

The plugin writes its health state file (:mod:`nvhook.deviceplugin.healthstate`,
``/run/nvhook/device-plugin/gpu-health.json`` by default, under ``root``); where there is none (no
plugin on this node) nothing is said. Otherwise one ``ok`` line, or one ``fail`` per
unhealthy GPU naming it and why (an XID with its meaning, NVML's error, a GPU gone from
``/proc``), with what brings it back.
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
    gpus = state["gpus"]
    sick = [g for g in gpus if not g.get("healthy")]
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
