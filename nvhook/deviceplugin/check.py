"""``nvhook device-plugin --check-config FILE --node PROFILE``: what a node would advertise.

:func:`advertised_on_profile` lays the mock machine ``PROFILE`` out in a temporary
directory, reads it as the plugin does (NVML through the fake ``libnvidia-ml.so.1``, its
topology, its device nodes) and renders :func:`describe`: per resource its name, socket,
count and sharing, then one line per device ID kubelet would see, with the GPU (and MIG
device) behind it, its replica, NUMA node, and what a container given it is told (its UUID,
or its index under ``deviceIDStrategy: index``). The plugin's own warnings come first; with
``failOnInitError: false`` a node the plugin cannot read says it would serve nothing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from nvhook.deviceplugin.errors import StrategyError
from nvhook.deviceplugin.model import PluginConfig, Resource
from nvhook.errors import DriverError

__all__ = ["advertised_on_profile", "describe"]


def describe(resources: Sequence[Resource], config: PluginConfig, warnings: Sequence[str]) -> str:
    """The text of :func:`advertised_on_profile` for ``resources``."""
    lines = [f"warning: {w}" for w in warnings]
    if not resources:
        lines.append("advertises nothing (no GPU to advertise)")
    by_index = config.device_id_strategy == "index"
    for r in resources:
        shared = len({d.uuid for d in r.devices if d.replica is not None})
        whole = sum(1 for d in r.devices if d.replica is None)
        sharing = ""
        if shared:
            how = "time-sliced" if config.sharing_strategy == "time-slicing" else "MPS"
            sharing = f", {how}: {shared} devices x {r.replicas} replicas"
            sharing += f" and {whole} whole" if whole else ""
        lines.append(f"{r.name}: {len(r.devices)} device IDs{sharing} (socket {r.socket_name})")
        for d in r.devices:
            what = f"GPU {d.gpu_index}" + (f" MIG {d.mig}" if d.mig is not None else "")
            replica = f" replica {d.replica}" if d.replica is not None else ""
            numa = f" NUMA {d.numa_node}" if d.numa_node is not None else ""
            told = d.index if by_index else d.uuid
            lines.append(f"  {d.id}  {what}{replica}{numa}  container sees {told}")
    return "".join(f"{line}\n" for line in lines)


def advertised_on_profile(config: PluginConfig, profile: str) -> str:
    """What the plugin with ``config`` would advertise on the mock machine ``profile``."""
    from nvhook.deviceplugin.plugin import DevicePlugin
    from nvhook.mock import create
    from nvhook.planner import Host

    with tempfile.TemporaryDirectory(prefix="nvhook-check-") as tmp:
        root = Path(tmp) / "root"
        create(profile, root, nodes="file")
        plugin = DevicePlugin(Host(root=str(root)), config, tmp)
        logged: list[str] = []
        plugin.log = logged.append
        head = f"on mock {profile}, nvhook device-plugin would advertise:\n"
        try:
            resources, _, _ = plugin.discover()
        except (DriverError, StrategyError) as e:
            if config.fail_on_init_error:
                raise
            return (
                f"{head}nothing: {e.message}; failOnInitError is false: the plugin would "
                "serve nothing and stay up\n"
            )
        warnings = [line.removeprefix("warning: ") for line in logged]
        return head + describe(resources, config, warnings)
