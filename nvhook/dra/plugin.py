"""``nvhook dra-plugin``: publish, serve, register, watch, stop cleanly.

:class:`DraPlugin` runs until its stop event is set (the CLI sets it on SIGTERM and SIGINT):

One process serves one driver name (``vendor``: NVIDIA's ``gpu.nvidia.com``, or another
vendor's, :mod:`nvhook.dra.vendors`); below, ``gpu.nvidia.com`` is that name.

0. no device plugin of the same vendor on the node (:func:`check_one_inventory`);
1. the state directory's lock (one driver per node), the checkpoint, and a sweep of claim
   specs the checkpoint does not hold (a crash between a spec and its checkpoint);
2. the inventory (:func:`~nvhook.dra.inventory.discover`, or
   :func:`~nvhook.dra.vendors.discover_vendor`) and each device's CDI edits;
3. the node's ResourceSlices (:class:`Publisher`), retried until the API answers (0.5 s,
   then twice as long each time, at most 30 s);
4. :class:`~nvhook.dra.server.DraServer` on ``<plugins>/gpu.nvidia.com/dra.sock``, then
   :class:`~nvhook.dra.server.RegistrationServer` on
   ``<plugins_registry>/gpu.nvidia.com-reg.sock``: kubelet's plugin watcher finds the socket
   and registers the driver;
5. each tick: a socket of ours that vanished (kubelet restarted and cleaned its directories,
   or someone removed it) is served anew, so the watcher sees it again and re-registers;
   every ``health_interval`` the device plugin's health probe
   (:func:`nvhook.deviceplugin.health.probe`: ``/proc`` and NVML) feeds ``dra-health`` and
   taints unhealthy devices in the slices; every ``rescan_interval`` the inventory is read
   again, and a change (a MIG relayout, a GPU gone) republishes the slices with a new pool
   generation (prepared claims keep their specs);
6. on stop the sockets are removed; the slices stay (a restart should not make the scheduler
   forget the node); ``nvhook dra-plugin --withdraw`` deletes them on uninstall.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from nvhook.dra.errors import DraConfigError
from nvhook.dra.inventory import DRIVER, Inventory, build_slices, discover
from nvhook.dra.prepare import Preparer, host_edits
from nvhook.dra.server import (
    HEALTHY,
    UNHEALTHY,
    UNKNOWN,
    DraServer,
    HealthState,
    RegistrationServer,
    registration_socket,
)
from nvhook.dra.state import lock
from nvhook.dra.vendors import discover_vendor, driver_name
from nvhook.errors import DriverError
from nvhook.kubeapi import ApiError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.dra.kubeapi import Api
    from nvhook.planner import Host

__all__ = [
    "DEFAULT_CDI_ROOT",
    "DEFAULT_DEVICE_PLUGIN_DIR",
    "DEFAULT_PLUGINS_DIR",
    "DEFAULT_REGISTRY_DIR",
    "DraPlugin",
    "Publisher",
    "check_one_inventory",
    "device_plugin_sockets",
]

DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_CDI_ROOT = "/var/run/cdi"
DEFAULT_DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
_TICK = 0.2
#: Why a device's health is UNKNOWN: nothing probes it (no vendor library is loaded).
_UNCHECKED = {"channel": "no health check of IMEX channels"}
_RETRY_FIRST, _RETRY_MAX = 0.5, 30.0  # seconds between publishing retries (doubling)


#: The device-plugin sockets that offer a vendor's devices: nvhook's own
#: (:attr:`nvhook.deviceplugin.model.Resource.socket_name` of the resources of
#: :mod:`nvhook.deviceplugin.vendors`) and, for NVIDIA, NVIDIA's k8s-device-plugin's
#: (``nvidia-*.sock``); the other vendors' own plugins' socket names are not checked.
_DEVICE_PLUGIN_SOCKETS = {
    "nvidia": ("nvhook-nvidia.com_", "nvidia"),
    "amd": ("nvhook-amd.com_",),
    "intel": ("nvhook-gpu.intel.com_",),
    "ascend": ("nvhook-huawei.com_",),
}
_NAMES = {"amd": "AMD's devices", "intel": "Intel's devices", "ascend": "Ascend's devices"}


def device_plugin_sockets(directory: str, vendor: str = "nvidia") -> list[str]:
    """The device plugins' sockets in kubelet's device-plugin directory that offer
    ``vendor``'s devices: nvhook's (``nvhook-nvidia.com_*.sock``, ``nvhook-amd.com_gpu.sock``…)
    and NVIDIA's k8s-device-plugin's (``nvidia-*.sock``)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    prefixes = _DEVICE_PLUGIN_SOCKETS.get(vendor, ())
    return sorted(
        os.path.join(directory, n) for n in names if n.endswith(".sock") and n.startswith(prefixes)
    )


def check_one_inventory(directory: str, vendor: str = "nvidia") -> None:
    """Refuse to run beside a device plugin of the same vendor: a device offered by both
    would be given to two pods (docs/dra.md, "One node, one inventory")."""
    sockets = device_plugin_sockets(directory, vendor)
    if sockets:
        what = (
            "a GPU device plugin" if vendor == "nvidia" else f"a device plugin of {_NAMES[vendor]}"
        )
        raise DraConfigError(
            f"{sockets[0]}: {what} serves this node; the DRA driver and a "
            "device plugin must not offer the same devices: run one of them per node (label "
            "the node for one DaemonSet or the other, docs/dra.md), or pass "
            "--device-plugin-dir '' to skip this check"
        )


def _content(s: Mapping[str, Any]) -> Any:
    spec = dict(s.get("spec") or {})
    pool = dict(spec.get("pool") or {})
    pool.pop("generation", None)
    spec["pool"] = pool
    return (s.get("metadata") or {}).get("name"), spec


class Publisher:
    """The node's pool of ResourceSlices: written when its content changes, with a new
    generation each time (the scheduler uses the slices of a pool's highest generation)."""

    def __init__(self, api: Api, node: str, driver: str = DRIVER) -> None:
        self.api = api
        self.node = node
        self.driver = driver  # the pool's driver (withdraw); publish uses the inventory's
        self.generation = 0
        self.writes = 0  # slices created or replaced (tests and figures)

    def publish(self, inventory: Inventory, unhealthy: Mapping[str, str] | None = None) -> bool:
        """Make the API hold exactly this inventory's slices; True when something changed."""
        existing = {
            s["metadata"]["name"]: s for s in self.api.list_slices(inventory.driver, self.node)
        }
        generations = [
            int((s["spec"].get("pool") or {}).get("generation", 0)) for s in existing.values()
        ]
        top = max([self.generation, *generations])
        desired = build_slices(inventory, self.node, top, unhealthy)
        if (
            sorted(map(repr, map(_content, desired)))
            == sorted(map(repr, map(_content, existing.values())))
            and len(set(generations)) <= 1
        ):
            self.generation = top
            return False
        self.generation = top + 1
        for s in build_slices(inventory, self.node, self.generation, unhealthy):
            name = s["metadata"]["name"]
            old = existing.pop(name, None)
            if old is None:
                self.api.create_slice(s)
            else:
                s["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion", "")
                self.api.replace_slice(s)
            self.writes += 1
        for name in existing:  # slices of the old generation the pool no longer has
            self.api.delete_slice(name)
        return True

    def withdraw(self) -> int:
        """Delete every slice of this driver on this node; how many there were."""
        names = [s["metadata"]["name"] for s in self.api.list_slices(self.driver, self.node)]
        for name in names:
            self.api.delete_slice(name)
        return len(names)


class DraPlugin:
    """The DRA driver of ``host`` on ``node`` (module docstring)."""

    def __init__(
        self,
        host: Host,
        *,
        node: str,
        api: Api,
        plugins_dir: str = DEFAULT_PLUGINS_DIR,
        registry_dir: str = DEFAULT_REGISTRY_DIR,
        state_dir: str | None = None,
        cdi_root: str = DEFAULT_CDI_ROOT,
        health_interval: float = 5.0,
        rescan_interval: float = 30.0,
        device_plugin_dir: str = DEFAULT_DEVICE_PLUGIN_DIR,
        vendor: str = "nvidia",
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.host = host
        self.node = node
        self.api = api
        self.vendor = vendor
        self.driver = driver_name(vendor)
        self.endpoint_dir = os.path.join(plugins_dir, self.driver)
        self.endpoint = os.path.join(self.endpoint_dir, "dra.sock")
        self.registry_dir = registry_dir
        self.state_dir = state_dir or self.endpoint_dir
        self.cdi_root = cdi_root
        self.health_interval = health_interval
        self.rescan_interval = rescan_interval
        self.device_plugin_dir = device_plugin_dir
        self.log = log
        self.health = HealthState()
        self.publisher = Publisher(api, node, self.driver)
        self.ready = threading.Event()  # set once serving and registered's socket is there
        self.preparer: Preparer | None = None
        self._unhealthy: dict[str, str] = {}

    def run(self, stop: threading.Event) -> None:
        if self.device_plugin_dir:
            check_one_inventory(self.device_plugin_dir, self.vendor)
        os.makedirs(self.endpoint_dir, mode=0o750, exist_ok=True)
        lock_fd = lock(self.state_dir)
        dra: DraServer | None = None
        registration: RegistrationServer | None = None
        try:
            inventory = self._discover()
            self.preparer = Preparer(
                node=self.node,
                api=self.api,
                state_dir=self.state_dir,
                cdi_root=self.cdi_root,
                inventory=inventory,
                edits=host_edits(self.host, inventory),
                log=self.log,
            )
            for path in self.preparer.sweep():
                self.log(f"removed {path}: its claim is not in the checkpoint")
            self._check_health(inventory)
            pending = not self._publish(inventory)
            dra = DraServer(self.endpoint, self.preparer, self.health)
            dra.start()
            registration = RegistrationServer(
                registration_socket(self.registry_dir, self.driver),
                self.endpoint,
                self.log,
                self.driver,
            )
            registration.start()
            self.log(
                f"serving {self.driver} on {self.endpoint} ({len(inventory.devices)} devices), "
                f"registration socket {registration.path}"
            )
            self.ready.set()
            self._loop(stop, inventory, dra, registration, pending)
        finally:
            self.health.close()
            for server in (registration, dra):
                if server is not None:
                    server.stop()
            os.close(lock_fd)
            self.log("stopped; sockets removed")

    def _discover(self) -> Inventory:
        """The node's devices of this driver: NVIDIA's through NVML, another vendor's
        through :mod:`nvhook.vendors` (:func:`nvhook.dra.vendors.discover_vendor`)."""
        if self.vendor == "nvidia":
            return discover(self.host)
        return discover_vendor(self.host, self.vendor)

    def _publish(self, inventory: Inventory) -> bool:
        try:
            if self.publisher.publish(inventory, self._unhealthy):
                self.log(
                    f"published {len(inventory.devices)} devices of node {self.node}, "
                    f"pool generation {self.publisher.generation}"
                )
            return True
        except ApiError as e:
            self.log(f"cannot publish the ResourceSlices: {e.message} (retrying)")
            return False

    def _check_health(self, inventory: Inventory) -> bool:
        """Probe; True when a device's health changed."""
        from nvhook.deviceplugin.health import probe

        gpus = sorted({(d.gpu_uuid, d.bus_id) for d in inventory.devices if d.gpu_uuid})
        bad_gpus = probe(self.host, gpus)
        unhealthy = {
            d.name: bad_gpus[d.gpu_uuid] for d in inventory.devices if d.gpu_uuid in bad_gpus
        }
        self.health.set(
            {
                d.name: (
                    (UNKNOWN, _UNCHECKED.get(d.kind, f"no health check of {d.kind} devices"))
                    if not d.gpu_uuid
                    else (UNHEALTHY, unhealthy[d.name])
                    if d.name in unhealthy
                    else (HEALTHY, "")
                )
                for d in inventory.devices
            }
        )
        changed = unhealthy != self._unhealthy
        for name in sorted(unhealthy.keys() - self._unhealthy.keys()):
            self.log(f"device {name} is unhealthy: {unhealthy[name]}")
        self._unhealthy = unhealthy
        return changed

    def _loop(
        self,
        stop: threading.Event,
        inventory: Inventory,
        dra: DraServer,
        registration: RegistrationServer,
        pending: bool,
    ) -> None:
        assert self.preparer is not None
        now = time.monotonic()
        next_health, next_scan = now + self.health_interval, now + self.rescan_interval
        backoff = _RETRY_FIRST
        next_publish = now + backoff
        while not stop.wait(_TICK):
            if not dra.serving:
                self.log(f"{dra.path} vanished: serving it again")
                dra.stop()
                dra.start()
            if not registration.serving:
                self.log(f"{registration.path} vanished (kubelet restarted?): registering again")
                registration.stop()
                registration.start()
            now = time.monotonic()
            if now >= next_scan:
                next_scan = now + self.rescan_interval
                try:
                    fresh = self._discover()
                except DriverError as e:
                    self.log(f"cannot read the devices: {e.message} (keeping the last list)")
                    fresh = inventory
                if fresh.digest != inventory.digest:
                    self.log("the node's devices changed: republishing")
                    inventory = fresh
                    self.preparer.update(inventory, host_edits(self.host, inventory))
                    pending = True
            if now >= next_health:
                next_health = now + self.health_interval
                if self._check_health(inventory):
                    pending = True
            if pending and now >= next_publish:
                pending = not self._publish(inventory)
                # an API server that fails is retried 0.5 s later, then twice as late each
                # time up to 30 s (hundreds of nodes must not hammer a struggling server)
                backoff = _RETRY_FIRST if not pending else min(backoff * 2, _RETRY_MAX)
                next_publish = now + (backoff if pending else 0.0)
