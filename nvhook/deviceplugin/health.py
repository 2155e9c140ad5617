"""Device health: which GPUs are gone or failing, checked the way a node would see it.

:func:`probe` looks at each GPU twice: its directory under ``/proc/driver/nvidia/gpus/``
(the driver still has it: a GPU that fell off the bus disappears there), and NVML (opened
anew from the driver root, every GPU listed by UUID; an NVML call that fails makes every GPU
not yet accounted for unhealthy, with NVML's message). The answer maps each unhealthy GPU's
UUID to one line saying why; an empty map means all is well.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from nvhook.errors import DriverError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.planner import Host

__all__ = ["probe"]


def probe(host: Host, gpus: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The unhealthy GPUs among ``gpus`` ((UUID, ``/proc`` bus id) pairs): UUID → why."""
    from nvhook.devices.nvml import open_nvml
    from nvhook.planner import nvml_library_dir

    problems: dict[str, str] = {}
    proc = os.path.join(host.root, "proc/driver/nvidia/gpus")
    for uuid, bus_id in gpus:
        if not os.path.isdir(os.path.join(proc, bus_id)):
            problems[uuid] = f"{proc}/{bus_id} is gone: the driver no longer has this GPU"
    try:
        with open_nvml(nvml_library_dir(host.driver_root)) as nvml:
            seen = {g.uuid for g in nvml.gpus()}
    except DriverError as e:
        for uuid, _ in gpus:
            problems.setdefault(uuid, e.message)
        return problems
    for uuid, _ in gpus:
        if uuid not in seen:
            problems.setdefault(uuid, "NVML no longer lists this GPU")
    return problems
