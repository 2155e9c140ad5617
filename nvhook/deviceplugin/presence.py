"""``nvhook labels --presence``: the one label a fresh GPU node needs, from the PCI bus alone.

The installer, the labeller and the device plugin select GPU nodes by
``nvidia.com/gpu.present=true`` (or Node Feature Discovery's ``pci-10de.present``); on a new
node with nothing installed nothing else can write it, since the labeller reads NVML and the
driver is what the installer's node brings. This mode needs none of it: it reads the kernel's
PCI functions (:func:`nvhook.vendors.pci.nvidia_gpus`, through the host root: no driver, NVML
or ``/dev/nvidia*``) and keeps exactly one label of its own Node:

- an NVIDIA display-class function on the bus: ``nvidia.com/gpu.present=true`` is set;
- the bus read and no such function: the label is removed, as Node Feature Discovery removes
  its ``pci-10de.present`` when the device is gone (a GPU taken out of a node takes the
  node's GPU DaemonSets with it, which is what the label means);
- the bus cannot be read (no sysfs): nothing is sent, the label stays as it is.

No other label is read for a decision or written (:func:`presence_patch`); the full labeller
(``nvhook labels --node``) owns ``nvidia.com/gpu.present`` too and gives it the same value
on a node whose driver answers. The admission policy of
``packaging/kubernetes/presence-labeller.yaml`` holds the pod to this one key on its own Node.
"""

from __future__ import annotations

from collections.abc import Mapping

from nvhook.deviceplugin.nodeapi import node_labels
from nvhook.kubeapi import Client
from nvhook.vendors.model import Host
from nvhook.vendors.pci import nvidia_gpus

__all__ = ["PRESENT", "label_presence", "presence", "presence_patch"]

#: GPU feature discovery's label, the one this mode owns
PRESENT = "nvidia.com/gpu.present"


def presence(host: Host) -> bool | None:
    """Whether ``host`` has an NVIDIA GPU on its PCI bus (None: the bus cannot be read)."""
    found = nvidia_gpus(host)
    return None if found is None else bool(found)


def presence_patch(current: Mapping[str, str], present: bool | None) -> dict[str, str | None]:
    """The merge patch of ``metadata.labels`` for ``present`` (the module docstring): at most
    the one key :data:`PRESENT`, and nothing when it already says so."""
    if present is None:
        return {}
    if present:
        return {} if current.get(PRESENT) == "true" else {PRESENT: "true"}
    return {PRESENT: None} if PRESENT in current else {}


def label_presence(client: Client, node: str, present: bool | None) -> dict[str, str | None]:
    """Make Node ``node``'s :data:`PRESENT` say ``present``; the patch sent (empty: none)."""
    patch = presence_patch(node_labels(client, node), present)
    if patch:
        client.request(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"metadata": {"labels": patch}},
            content_type="application/merge-patch+json",
        )
    return patch
