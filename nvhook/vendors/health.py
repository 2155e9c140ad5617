"""Other vendors' device health: what each vendor's own plugin checks cheaply, per device.

No vendor library is loaded, so health is what sysfs and ``/dev`` show, as the vendors'
plugins do without their optional services:

- AMD (ROCm/k8s-device-plugin ``internal/pkg/plugin/plugin.go`` ``simpleHealthCheck`` at
  ed76468): the node is healthy while the KFD topology lists a GPU node
  (``cpu_cores_count`` 0, ``gfx_target_version`` > 0); the per-GPU states come from AMD's
  metrics exporter, which nvhook does not run. nvhook checks the same per device: its render
  minor is still a GPU node of the topology (discovery's rule), its ``card``/``renderD`` nodes
  are in ``/dev/dri``, and ``/dev/kfd`` is there.
- Intel (intel/intel-device-plugins-for-kubernetes ``cmd/gpu_plugin/gpu_plugin.go``
  ``healthStatusForCard`` at 94a91bc): ``Healthy`` unless its Level Zero or xpumd sidecar
  says otherwise, and a card gone from ``/sys/class/drm`` is no longer listed; nvhook: the
  card is still discovered and its nodes are there.
- Ascend (its plugin asks DCMI, which nvhook does not load): the ``davinci`` node is still
  there, and ``/dev/davinci_manager``.

A device no longer discovered, or whose node is gone, is unhealthy with a reason naming what
is missing; the device plugin lists it ``Unhealthy`` on ListAndWatch and ``nvhook doctor``
names it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from nvhook.vendors.model import Accelerator, Host
from nvhook.vendors.registry import VENDORS

__all__ = ["REQUIRED", "unhealthy"]

#: vendor → the shared node without which none of its devices works
REQUIRED = {"amd": "/dev/kfd", "ascend": "/dev/davinci_manager"}

_WHERE = {
    "amd": "amdgpu's sysfs or the KFD topology no longer lists it",
    "intel": "its card is no longer under /sys/class/drm",
    "ascend": "its /dev/davinci node or PCI function is gone",
}


def unhealthy(host: Host, devices: Sequence[Accelerator]) -> dict[str, str]:
    """Of ``devices`` (as discovered when they were advertised), those not healthy on
    ``host`` now, by qualified name (``amd.com/gpu=9``), each with why (module docstring).

    A device is matched to today's discovery by its nodes (its own: a card and render node,
    a davinci node), not its name: an index is a position (``amd-ctk``'s), and one device
    gone shifts the others'."""
    kinds = {d.kind for d in devices}
    present: set[tuple[str, tuple[str, ...]]] = set()
    missing_shared: dict[str, str] = {}
    for vendor in VENDORS:
        if vendor.kind not in kinds:
            continue
        present |= {(d.kind, d.nodes) for d in vendor.discover(host)}
        shared = REQUIRED.get(vendor.name)
        if shared and not os.path.exists(host.dev(shared)):
            missing_shared[vendor.kind] = shared
    out: dict[str, str] = {}
    for device in devices:
        gone = [n for n in device.nodes if not os.path.exists(host.dev(n))]
        if gone:
            out[device.qualified_name] = f"its device node {gone[0]} is gone"
        elif (device.kind, device.nodes) not in present:
            where = _WHERE.get(device.vendor, "discovery no longer lists it")
            out[device.qualified_name] = f"no longer found: {where}"
        elif device.kind in missing_shared:
            out[device.qualified_name] = f"{missing_shared[device.kind]} is gone"
    return out
