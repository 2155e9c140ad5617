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
   taints unhealthy devices in the slices;
6. with ``follow_interval`` (``--follow-gpus``, the default), the node's GPUs followed by the
   one :class:`~nvhook.watch.Watcher` (on its own thread): its subscriber only hands the
   changes of a :data:`FOLLOWED` kind (a MIG re-layout, MIG mode, a GPU lost or added, the
   driver, IMEX channels) to this loop, which reads the inventory again (until NVML's view
   agrees with the watcher's, at most :data:`_SETTLE` seconds: the two are read at different
   moments of a change) and, where it changed, republishes the slices with the next pool
   generation (:class:`Publisher`); a read that fails keeps the published slices. Without
   it, every ``rescan_interval`` the inventory is read again. Prepared claims keep their
   specs; a prepared device that is gone (or re-made under its name) is reported
   ``UNHEALTHY`` in ``dra-health`` until its claim is unprepared, and a repeated prepare of
   its claim is refused (:meth:`~nvhook.dra.prepare.Preparer.gone`);
7. on stop the sockets are removed; the slices stay (a restart should not make the scheduler
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
from nvhook.errors import DriverError, NvhookError
from nvhook.kubeapi import ApiError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.dra.kubeapi import Api
    from nvhook.planner import Host
    from nvhook.watch import Snapshot, Watcher

__all__ = [
    "DEFAULT_CDI_ROOT",
    "DEFAULT_DEVICE_PLUGIN_DIR",
    "DEFAULT_PLUGINS_DIR",
    "DEFAULT_REGISTRY_DIR",
    "FOLLOWED",
    "DraPlugin",
    "Publisher",
    "check_one_inventory",
    "device_plugin_sockets",
    "disagreement",
]

DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_CDI_ROOT = "/var/run/cdi"
DEFAULT_DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
_TICK = 0.2
#: Why a device's health is UNKNOWN: nothing probes it (no vendor library is loaded).
_UNCHECKED = {"channel": "no health check of IMEX channels"}
_RETRY_FIRST, _RETRY_MAX = 0.5, 30.0  # seconds between publishing retries (doubling)
#: the watcher's change kinds (:class:`nvhook.watch.Change`) that change what the pool
#: publishes: the device plugin's (:data:`nvhook.deviceplugin.plugin.FOLLOWED`), the driver
#: (``driverVersion``) and the IMEX channels
FOLLOWED = frozenset(
    {
        "driver",
        "mig-layout",
        "mig-mode",
        "mig-uuids",
        "gpu-removed",
        "gpu-added",
        "nvml-gpus",
        "imex",
    }
)
#: seconds the inventory is read again while NVML's view disagrees with the watcher's
_SETTLE = 5.0


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


def disagreement(inventory: Inventory, seen: Snapshot) -> str:
    """Where the inventory (NVML's view) differs from the watcher's snapshot (``/proc``, and
    NVML's MIG UUIDs when it asked); "" when they agree. During a change the two are read at
    different moments (a MIG re-layout reaches ``/proc`` before NVML's list), so the loop
    reads the inventory again until they agree."""
    migs: dict[str, set[str]] = {}
    whole: set[str] = set()
    for d in inventory.devices:
        if d.kind == "mig":
            migs.setdefault(d.gpu_uuid, set()).add(d.uuid)
        elif d.kind == "gpu":
            whole.add(d.gpu_uuid)
    listed = set(seen.nvml_gpus) if seen.nvml_gpus is not None else None
    known = set()
    for g in seen.gpus:
        known.add(g.uuid)
        if listed is not None and g.uuid not in listed:
            continue  # NVML lost it (XID 79): not in the inventory either way
        if not g.mig:
            if g.uuid not in whole:
                return f"GPU {g.uuid}: not in NVML's devices"
            continue
        count = len(g.layout.split(",")) if g.layout else 0
        have = migs.get(g.uuid, set())
        if g.uuid in whole or len(have) != count:
            return f"GPU {g.uuid}: NVML has {len(have)} MIG devices, /proc {count}"
        # the watcher's NVML answer, where it was one of this layout (it may be older)
        if g.mig_uuids is not None and len(g.mig_uuids) == count and have != set(g.mig_uuids):
            return f"GPU {g.uuid}: NVML's MIG UUIDs are not the watcher's"
    extra = sorted((whole | set(migs)) - known)
    return f"GPU {extra[0]}: not in /proc" if extra else ""


def _what_changed(old: Inventory, new: Inventory) -> str:
    from nvhook.watch import names_text

    before = {d.name: d for d in old.devices}
    after = {d.name: d for d in new.devices}
    added = [n for n in after if n not in before]
    removed = [n for n in before if n not in after]
    changed = [n for n in after if n in before and after[n] != before[n]]
    parts = [
        f"{label} {names_text(names)}"
        for label, names in (("added", added), ("removed", removed), ("changed", changed))
        if names
    ]
    return "; ".join(parts) or "no device"


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
        follow_interval: float | None = None,
        device_plugin_dir: str = DEFAULT_DEVICE_PLUGIN_DIR,
        vendor: str = "nvidia",
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        """``follow_interval``: seconds between the watcher's looks (None: the GPUs are not
        followed, the inventory is read again every ``rescan_interval`` instead)."""
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
        self._gone: set[str] = set()
        self.follow_interval = follow_interval
        self.watcher: Watcher | None = None
        from nvhook.watch import Followed

        self._followed = Followed(FOLLOWED)  # changes the watcher handed over, for the loop

    def run(self, stop: threading.Event) -> None:
        if self.device_plugin_dir:
            check_one_inventory(self.device_plugin_dir, self.vendor)
        os.makedirs(self.endpoint_dir, mode=0o750, exist_ok=True)
        lock_fd = lock(self.state_dir)
        dra: DraServer | None = None
        registration: RegistrationServer | None = None
        follower: threading.Thread | None = None
        try:
            self.watcher = self._watcher()  # before discovery: a change from here on is seen
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
            if self.watcher is not None:
                follower = threading.Thread(
                    target=self.watcher.run, args=(stop,), name="nvhook-dra-watch", daemon=True
                )
                follower.start()
            self._loop(stop, inventory, dra, registration, pending)
        finally:
            if follower is not None:
                stop.set()
                follower.join(5)
            self.health.close()
            for server in (registration, dra):
                if server is not None:
                    server.stop()
            os.close(lock_fd)
            self.log("stopped; sockets removed")

    def _watcher(self) -> Watcher | None:
        """The node's GPU watcher, :data:`FOLLOWED` changes kept for the loop, not yet running."""
        if self.follow_interval is None:
            return None
        if self.vendor != "nvidia":  # the watcher reads NVIDIA's facts: /proc, NVML
            self.log(
                f"{_NAMES[self.vendor]} are read again every {self.rescan_interval:g} s "
                "(the GPU watcher follows NVIDIA's)"
            )
            return None
        from nvhook.watch import follow

        return follow(self.host, self.follow_interval, self._followed, self.log)

    def _rediscover(self, inventory: Inventory, final: bool) -> Inventory | None:
        """The inventory read again: the new one when it changed; None when it is unchanged
        or unreadable (the published slices stay); unless ``final``, ``inventory`` itself
        while it cannot be read or is not yet what the watcher saw (read again next tick)."""
        assert self.preparer is not None
        try:
            fresh = self._discover()
        except DriverError as e:
            if not final:  # NVML mid-change (an upgrade's libraries): look again
                return inventory
            self.log(f"cannot read the devices: {e.message} (keeping the published slices)")
            return None
        if self.watcher is not None:
            why = disagreement(fresh, self.watcher.current)
            if why and not final:
                return inventory  # not settled: look again
            if why:
                self.log(f"warning: NVML and /proc still disagree ({why}): publishing NVML's")
        if fresh.digest == inventory.digest:
            self.log("the published devices are unchanged")
            return None
        try:
            edits = host_edits(self.host, fresh)
        except NvhookError as e:
            self.log(f"cannot make the devices' CDI edits: {e} (keeping the published slices)")
            return None
        self.log(f"the node's devices changed: {_what_changed(inventory, fresh)}")
        self.preparer.update(fresh, edits)
        return fresh

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
        # a prepared device the node no longer has stays in the stream, UNHEALTHY, until its
        # claim is unprepared: kubelet shows a claim's devices' health in the pod's status,
        # and one left out of the list would only turn UNKNOWN, without a word, after
        # kubelet's timeout (pkg/kubelet/cm/dra/healthinfo.go, 30 s)
        gone = self.preparer.gone() if self.preparer is not None else {}
        states = {
            d.name: (
                (UNKNOWN, _UNCHECKED.get(d.kind, f"no health check of {d.kind} devices"))
                if not d.gpu_uuid
                else (UNHEALTHY, unhealthy[d.name])
                if d.name in unhealthy
                else (HEALTHY, "")
            )
            for d in inventory.devices
        }
        for name, (claim, why) in gone.items():
            states[name] = (UNHEALTHY, f"{name} {why}; it is prepared for claim {claim.ref}")
        self.health.set(states)
        changed = unhealthy != self._unhealthy
        for name in sorted(unhealthy.keys() - self._unhealthy.keys()):
            self.log(f"device {name} is unhealthy: {unhealthy[name]}")
        for name in sorted(gone.keys() - self._gone):
            self.log(f"prepared device {name} {gone[name][1]} (claim {gone[name][0].ref})")
        self._unhealthy = unhealthy
        self._gone = set(gone)
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
        settle: float | None = None  # while following a change: until when to read again
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
            followed = self._followed.take()
            if followed:
                self.log(f"the node's GPUs changed: {'; '.join(map(str, followed))}")
                settle = now + _SETTLE
            rescan = self.watcher is None and now >= next_scan
            if rescan:
                next_scan = now + self.rescan_interval
            if settle is not None or rescan:
                final = settle is None or now >= settle
                fresh = self._rediscover(inventory, final)
                if fresh is not inventory:  # settled: changed (published next), or not
                    settle = None
                if fresh is not None and fresh is not inventory:
                    inventory = fresh
                    self._check_health(inventory)
                    pending = True
                    next_publish = now
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
