"""``nvhook device-plugin``: discover, serve, register, watch health and kubelet, stop cleanly.

:class:`DevicePlugin` runs until its stop event is set (the CLI sets it on SIGTERM and
SIGINT):

1. the GPUs from NVML (loaded from the driver root of nvhook's settings, so it runs on a
   mock machine), their topology (:func:`~nvhook.deviceplugin.topology.read_topology`:
   NVLinks, PCIe paths, NUMA nodes; sysfs's NUMA nodes only, with a warning, if NVML
   fails there), the resources of the configuration
   (:func:`~nvhook.deviceplugin.resources.build_resources`);
2. one :class:`~nvhook.deviceplugin.server.ResourceServer` per resource on a socket in the
   device-plugin directory, each registered on ``kubelet.sock`` there;
3. every ``health_interval`` seconds, :func:`~nvhook.deviceplugin.health.probe`, merged
   with the XID health of :class:`~nvhook.deviceplugin.health.HealthMonitor` (NVML events
   and the kernel log, at once when a fatal XID arrives; its recovery rule on each tick): a
   change wakes every ``ListAndWatch`` stream with the new list, is logged, and is written
   to the health state file (``health.stateFile``, atomically: temp, fsync, rename) that
   ``nvhook labels`` and ``nvhook doctor`` read; the other vendors' devices are checked on the
   same tick as their own plugins check them (:mod:`nvhook.vendors.health`);
4. several times a second, whether ``kubelet.sock`` was recreated (kubelet restarted, and
   deleted the plugins' sockets) or a socket of ours vanished: then each server is
   restarted and registered again (retried until kubelet answers);
5. under ``sharing.mps``, one MPS control daemon per shared GPU
   (:class:`~nvhook.deviceplugin.mps.MpsDaemons`), started before the servers, checked on
   every health tick (one that does not answer makes its GPU's replicas unhealthy and is
   started again), stopped with the plugin; a configuration change or a re-discovery keeps
   each daemon whose identity is unchanged running (its containers keep their MPS server)
   and stops only those no longer wanted (:meth:`MpsDaemons.start`);
6. with ``follow_interval`` (``--follow-gpus``, the default), the node's GPUs followed by
   the one :class:`~nvhook.watch.Watcher` (on its own thread): an update whose changes are
   of a :data:`FOLLOWED` kind (a MIG re-layout, MIG mode, a GPU lost or added) is handed to
   the plugin's loop, which discovers the resources again and re-registers them as a
   configuration change does (a failure keeps the old servers; allocations already made
   stay as they are); under ``mixed`` a new MIG profile's resource registers and a vanished
   one is withdrawn (its server stops, its socket is removed). The watcher's NVML check runs
   with the XID monitor's NVML released (:meth:`HealthMonitor.nvml_released`): NVML counts
   its initialisations, and while the monitor holds it a new ``nvmlInit`` sees the GPUs and
   MIG devices of the monitor's; so a layout re-made with the same instance ids (new MIG
   UUIDs only) and a GPU that NVML stops listing are seen too;
7. on stop, the servers stop and their sockets are removed.

With ``failOnInitError: false`` (NVIDIA's legacy mode, for a DaemonSet on every node), a
node whose driver or GPUs cannot be read at start (no driver, NVML failing, a MIG layout
the strategy refuses) logs the error once and serves nothing, instead of exiting (and
crash-looping): with ``--follow-gpus`` until the watcher sees the driver or the GPUs change
(the driver loaded late, a GPU added, a re-layout), then it discovers again and serves what
it finds (a discovery that still fails logs why and keeps waiting); without, until SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from nvhook.deviceplugin.allocate import IMEX_CHANNEL_DIR
from nvhook.deviceplugin.errors import RegistrationError, StrategyError
from nvhook.deviceplugin.health import HealthMonitor, probe
from nvhook.deviceplugin.healthstate import health_state, write_health_state
from nvhook.deviceplugin.model import PluginConfig, Resource
from nvhook.deviceplugin.mps import MpsDaemons
from nvhook.deviceplugin.preferred import Topology
from nvhook.deviceplugin.resources import build_resources
from nvhook.deviceplugin.server import PluginState, ResourceServer, register
from nvhook.deviceplugin.topology import read_numa_node, read_topology
from nvhook.errors import DriverError, NvhookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.devices.nvml import GpuInfo
    from nvhook.planner import Host
    from nvhook.vendors.model import Accelerator
    from nvhook.watch import Change, Watcher

__all__ = [
    "DEFAULT_DIRECTORY",
    "FOLLOWED",
    "KUBELET_SOCKET",
    "DevicePlugin",
    "device_nodes",
    "imex_channels",
    "read_gpus",
]

DEFAULT_DIRECTORY = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCKET = "kubelet.sock"
_TICK = 0.2  # seconds between checks of kubelet's socket
#: the watcher's change kinds (:class:`nvhook.watch.Change`) that change what is advertised
FOLLOWED = frozenset(
    {"mig-layout", "mig-mode", "mig-uuids", "gpu-removed", "gpu-added", "nvml-gpus"}
)


def read_gpus(host: Host) -> tuple[GpuInfo, ...]:
    """The host's GPUs as NVML (from the driver root) lists them."""
    from nvhook.devices.nvml import open_nvml
    from nvhook.planner import nvml_library_dir

    with open_nvml(nvml_library_dir(host.driver_root)) as nvml:
        return nvml.gpus()


def device_nodes(host: Host, gpus: Sequence[GpuInfo]) -> dict[str, tuple[str, ...]]:
    """Each GPU's and MIG device's device nodes (container paths), by UUID: ``/dev/nvidia<minor>``,
    and for a MIG device also its GPU and compute instance's ``/dev/nvidia-caps/nvidia-cap<N>``
    (N from ``/proc/driver/nvidia-caps/mig-minors``), as NVIDIA's plugin passes them."""
    from nvhook.devices.procfs import read_mig_minors

    out: dict[str, tuple[str, ...]] = {}
    minors: dict[str, int] | None = None
    for g in gpus:
        parent = f"/dev/nvidia{g.minor}"
        out[g.uuid] = (parent,)
        for m in g.migs:
            if minors is None:
                try:
                    minors = read_mig_minors(host.root)
                except (OSError, DriverError):
                    minors = {}
            caps = [
                minors.get(f"gpu{g.minor}/gi{m.gi}/access"),
                minors.get(f"gpu{g.minor}/gi{m.gi}/ci{m.ci}/access"),
            ]
            out[m.uuid] = (
                parent,
                *(f"/dev/nvidia-caps/nvidia-cap{c}" for c in caps if c is not None),
            )
    return out


def imex_channels(host: Host, config: PluginConfig, warnings: list[str]) -> tuple[int, ...]:
    """The configured IMEX channels the host has; a missing one is an error when
    ``imex.required``, else a warning (NVIDIA's ``internal/imex``)."""
    found = []
    for c in config.imex_channel_ids:
        path = os.path.join(host.dev_root, IMEX_CHANNEL_DIR.lstrip("/"), f"channel{c}")
        if os.path.exists(path):
            found.append(c)
        elif config.imex_required:
            raise DriverError(
                f"imex.channelIDs: IMEX channel {c} is required but {path} does not exist; "
                "create the channel (nvidia-imex), or set imex.required: false"
            )
        else:
            warnings.append(f"imex.channelIDs: IMEX channel {c} ({path}) does not exist: not given")
    return tuple(found)


def _ids(resources: Sequence[Resource], name: str) -> list[str]:
    return [d.id for r in resources if r.name == name for d in r.devices]


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns


class DevicePlugin:
    """The device plugin for ``host`` with ``config``, serving in ``directory``."""

    def __init__(
        self,
        host: Host,
        config: PluginConfig,
        directory: str = DEFAULT_DIRECTORY,
        *,
        health_interval: float = 5.0,
        log: Callable[[str], None] = lambda line: None,
        kubelet_socket: str | None = None,
        config_source: Callable[[], PluginConfig | None] | None = None,
        config_interval: float = 5.0,
        follow_interval: float | None = None,
        follow_nvml_interval: float = 30.0,
    ) -> None:
        self.host = host
        self.config = config
        self.directory = directory
        self.kubelet_socket = kubelet_socket or os.path.join(directory, KUBELET_SOCKET)
        self.health_interval = health_interval
        self.log = log
        self.state = PluginState()
        self.servers: list[ResourceServer] = []
        self._others: tuple[tuple[Resource, Topology], ...] = ()  # other vendors' resources
        self._accelerators: tuple[Accelerator, ...] = ()  # … and their devices, as discovered
        self.ready = threading.Event()  # set once every server is registered
        self.nodes: dict[str, tuple[str, ...]] = {}
        self.imex: tuple[int, ...] = ()
        self.monitor: HealthMonitor | None = None
        self.mps: MpsDaemons | None = None
        self.config_source = config_source
        self.config_interval = config_interval
        self._gpus_of: list[tuple[str, str]] = []
        self._health_lock = threading.Lock()
        self._probed: dict[str, str] = {}
        self._gpus: tuple[GpuInfo, ...] = ()
        self._state_warned = False
        self.follow_interval = follow_interval  # None: the GPUs are not followed
        self.follow_nvml_interval = follow_nvml_interval  # the watcher's NVML checks
        self._nvml_lock = threading.Lock()  # the monitor is not replaced during an NVML check
        from nvhook.watch import Followed

        self._followed = Followed(FOLLOWED)  # changes the watcher handed over, for the loop
        self._resources: tuple[Resource, ...] = ()  # the NVIDIA resources served

    def discover(self) -> tuple[tuple[Resource, ...], tuple[GpuInfo, ...], Topology]:
        """The resources to advertise, the GPUs and their topology."""
        gpus = read_gpus(self.host)
        warnings: list[str] = []
        self.nodes = device_nodes(self.host, gpus)
        self.imex = imex_channels(self.host, self.config, warnings)
        try:
            topology = read_topology(self.host, gpus)
        except DriverError as e:  # a preferred allocation is a hint: serve without links
            warnings.append(f"GPU topology unknown, preferred allocations by NUMA node: {e}")
            topology = Topology(numa=tuple(read_numa_node(self.host.root, g.bus_id) for g in gpus))
        numa = {g.uuid: topology.numa[i] for i, g in enumerate(gpus)}
        resources = build_resources(gpus, self.config, numa=numa, warnings=warnings)
        for w in warnings:
            self.log(f"warning: {w}")
        return resources, gpus, topology

    def discover_vendors(self) -> tuple[tuple[Resource, Topology], ...]:
        """AMD's, Intel's and Ascend's devices under their plugins' resource names
        (:mod:`nvhook.deviceplugin.vendors`)."""
        from nvhook.deviceplugin.vendors import vendor_devices, vendor_resources
        from nvhook.vendors.model import Host as VendorHost

        host = VendorHost(root=self.host.root, dev_root=self.host.dev_root)
        self._accelerators = vendor_devices(host)
        return vendor_resources(host, self.config.amd_resource_naming, self._accelerators)

    def _vendor_health(self) -> dict[str, str]:
        """The other vendors' unhealthy devices by qualified name (:mod:`nvhook.vendors.health`)."""
        from nvhook.vendors.health import unhealthy
        from nvhook.vendors.model import Host as VendorHost

        host = VendorHost(root=self.host.root, dev_root=self.host.dev_root)
        return unhealthy(host, self._accelerators)

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set; raises :class:`RegistrationError` when kubelet
        refuses the first registration."""
        for note in self.config.notes:
            self.log(f"warning: {note}")
        watcher = self._watcher()  # before discovery: a change from here on is seen
        self._others = self.discover_vendors()
        try:
            resources, gpus, topology = self.discover()
        except NvhookError as e:
            if self._others:  # no NVIDIA driver: serve the other vendors' devices alone
                self.log(f"no NVIDIA GPU advertised: {e}")
                resources, gpus, topology = (), (), Topology(numa=())
            elif not isinstance(e, (DriverError, StrategyError)) or self.config.fail_on_init_error:
                raise
            elif watcher is not None:  # serve nothing until the driver or the GPUs change
                self.log(
                    f"error: {e.message}; failOnInitError is false: serving nothing on this "
                    "node until its driver or GPUs change (followed) or SIGTERM"
                )
                resources, gpus, topology = (), (), Topology(numa=())
            else:
                self.log(
                    f"error: {e.message}; failOnInitError is false: serving nothing on this "
                    "node, waiting for SIGTERM"
                )
                self.ready.set()
                stop.wait()
                self.log("stopped")
                return
        follower = None
        try:
            self._serve(resources, gpus, topology)
            self.ready.set()
            if watcher is not None:
                follower = threading.Thread(
                    target=watcher.run, args=(stop,), name="nvhook-dp-watch", daemon=True
                )
                follower.start()
            self._loop(stop)
        finally:
            if follower is not None:
                stop.set()
                follower.join(5)
            self.state.close()
            self._teardown()
            self.log("stopped; sockets removed")

    def _watcher(self) -> Watcher | None:
        """The node's GPU watcher, :data:`FOLLOWED` changes kept for the loop, not yet running."""
        if self.follow_interval is None:
            return None
        from nvhook.watch import follow

        return follow(
            self.host,
            self.follow_interval,
            self._followed,
            self.log,
            nvml_interval=self.follow_nvml_interval,
            nvml_gate=self._nvml_released,
        )

    @contextlib.contextmanager
    def _nvml_released(self) -> Iterator[None]:
        """On the watcher's thread, around its NVML check: the XID monitor's NVML closed."""
        with self._nvml_lock:
            monitor = self.monitor
            with monitor.nvml_released() if monitor is not None else contextlib.nullcontext():
                yield

    def _rediscover(self, changes: Sequence[Change]) -> None:
        """The node's GPUs changed: discover the resources again and, where they differ,
        re-register them as :meth:`_reconfigure` does (a failure keeps the old servers)."""
        what = "; ".join(map(str, changes))
        self.log(f"the node's GPUs changed: {what}")
        # NVML's initialisation is reference counted in the process: while the XID monitor
        # holds it, a new nvmlInit reads no new GPU list (the mock's NVML loads its data at
        # the first init), so the monitor pauses while the GPUs are read again
        self._stop_monitor()
        try:
            resources, gpus, topology = self.discover()
        except (DriverError, StrategyError) as e:
            self.log(f"error: cannot discover the GPUs again: {e.message}; kept the old resources")
            self._start_monitor()
            return
        if resources == self._resources:
            self.log("the advertised resources are unchanged")
            self._start_monitor()
            return
        old = {r.name: len(r.devices) for r in self._resources}
        new = {r.name: len(r.devices) for r in resources}
        steps = [f"registering {n} ({new[n]} devices)" for n in new if n not in old]
        steps += [f"withdrawing {n} (no device left)" for n in old if n not in new]
        steps += [
            f"{n}: {old[n]} -> {new[n]} devices"
            for n in new
            if n in old and (old[n] != new[n] or _ids(self._resources, n) != _ids(resources, n))
        ]
        self.log("resources changed: " + "; ".join(steps))
        self._teardown(mps=False)  # the MPS daemons still wanted run on
        self._serve(resources, gpus, topology)

    def _serve(
        self, resources: tuple[Resource, ...], gpus: tuple[GpuInfo, ...], topology: Topology
    ) -> None:
        """Start the MPS daemons, the XID monitor and one registered server per resource."""
        self._resources = resources
        self._gpus_of = [(g.uuid, g.bus_id) for g in gpus]
        self._gpus = gpus
        if self.config.sharing_strategy == "mps":  # the running daemons are taken over
            daemons = MpsDaemons(self.host, self.config.mps_root, resources, log=self.log)
            running, self.mps = self.mps, daemons
            daemons.start(running)
        elif self.mps is not None:  # MPS sharing no longer configured
            self.mps.stop()
            self.mps = None
        self._start_monitor()
        self._check_health(self._gpus_of)
        self.servers = [
            ResourceServer(
                r,
                self.config,
                topology,
                self.state,
                self.directory,
                nodes=self.nodes,
                imex=self.imex,
            )
            for r in resources
        ]
        self.servers += [
            ResourceServer(r, self.config, t, self.state, self.directory) for r, t in self._others
        ]
        if not self.servers:
            until = "a change of its GPUs" if self.follow_interval is not None else "SIGTERM"
            self.log(f"no GPU to advertise on this node; waiting for {until}")
        for s in self.servers:
            s.start()
            register(self.kubelet_socket, s)
            self.log(
                f"serving {s.resource.name} ({len(s.resource.devices)} devices) on {s.path}, "
                f"registered with {self.kubelet_socket}"
            )

    def _start_monitor(self) -> None:
        if not self._gpus_of:  # no NVIDIA GPU: no XID to watch (and NVML may be absent)
            return
        monitor = HealthMonitor(
            self.host, self._gpus_of, self.config.health, on_change=self._refresh, log=self.log
        )
        with self._nvml_lock:
            self.monitor = monitor
            monitor.start()

    def _stop_monitor(self) -> None:
        with self._nvml_lock:
            if self.monitor is not None:
                self.monitor.stop()
                self.monitor = None

    def _teardown(self, mps: bool = True) -> None:
        """Stop the XID monitor, the servers and (``mps``) the MPS daemons; without ``mps``
        (a configuration change, a re-discovery) the daemons run on for :meth:`_serve`."""
        self._stop_monitor()
        if mps and self.mps is not None:
            self.mps.stop()
            self.mps = None
        for s in self.servers:
            s.stop()
        self.servers = []

    def _reconfigure(self, config: PluginConfig) -> None:
        """Serve ``config`` instead, without a restart: its resources are discovered first
        (a failure keeps the old ones serving), then the old servers stop and the new ones
        register; allocations already made are the containers' and stay as they are (the
        MPS daemons they use too, where the new configuration still wants them)."""
        before = self.config
        self.config = config
        try:
            resources, gpus, topology = self.discover()
        except (DriverError, StrategyError) as e:
            self.config = before
            self.log(f"error: the new configuration cannot be served: {e.message}; kept the old")
            return
        for note in config.notes:
            self.log(f"warning: {note}")
        self.log("configuration changed: registering its resources again")
        self._teardown(mps=False)  # the MPS daemons still wanted run on
        self._serve(resources, gpus, topology)

    def _check_health(self, gpus: list[tuple[str, str]]) -> None:
        probed = probe(self.host, gpus)
        if self.mps is not None:
            for uuid, why in self.mps.check().items():
                probed.setdefault(uuid, why)
        if self._others:  # other vendors' devices: what their own plugins check
            probed |= self._vendor_health()
        with self._health_lock:
            self._probed = probed
        self._refresh()

    def _refresh(self) -> None:
        """Merge the last probe and the XID health into the state; log and save a change."""
        with self._health_lock:
            unhealthy = dict(self._probed)
            if self.monitor is not None:
                answering = [g.uuid for g in self._gpus if g.uuid not in unhealthy]
                for uuid, why in self.monitor.unhealthy(answering).items():
                    unhealthy.setdefault(uuid, why)
            _, before = self.state.snapshot()
            if unhealthy.keys() != before.keys() or not self._saved:
                self._save(unhealthy)  # before the streams hear of it: readers agree with them
            if self.state.update(unhealthy):
                for uuid in sorted(unhealthy.keys() - before.keys()):
                    self.log(f"GPU {uuid} is unhealthy: {unhealthy[uuid]}")
                for uuid in sorted(before.keys() - unhealthy.keys()):
                    self.log(f"GPU {uuid} is healthy again (was: {before[uuid]})")

    _saved = False

    def _save(self, unhealthy: dict[str, str]) -> None:
        path = self.config.health.state_file
        if not path:
            return
        xids = self.monitor.tracker.xids() if self.monitor is not None else {}
        others = [d.gpu_uuid for r, _ in self._others for d in r.devices]
        state = health_state(self._gpus, unhealthy, xids, others)
        try:
            write_health_state(path, state)
            self._saved = True
        except OSError as e:
            if not self._state_warned:
                self.log(f"warning: cannot write the health state file {path}: {e.strerror}")
                self._state_warned = True

    def _loop(self, stop: threading.Event) -> None:
        kubelet = _identity(self.kubelet_socket)
        next_health = time.monotonic() + self.health_interval
        next_config = time.monotonic() + self.config_interval
        pending = False  # a re-registration still to do
        while not stop.wait(min(_TICK, self.health_interval)):
            followed = self._followed.take()
            if followed:
                try:
                    self._rediscover(followed)
                except RegistrationError as e:
                    self.log(f"{e.message} (retrying)")
                    pending = True
            if self.config_source is not None and time.monotonic() >= next_config:
                config = self.config_source()
                if config is not None and config != self.config:
                    try:
                        self._reconfigure(config)
                    except RegistrationError as e:
                        self.log(f"{e.message} (retrying)")
                        pending = True
                next_config = time.monotonic() + self.config_interval
            if time.monotonic() >= next_health:
                self._check_health(self._gpus_of)
                next_health = time.monotonic() + self.health_interval
            now = _identity(self.kubelet_socket)
            if now != kubelet or any(not s.serving for s in self.servers):
                if now is not None:
                    self.log(
                        f"{self.kubelet_socket} was recreated (kubelet restarted): "
                        "registering again"
                    )
                kubelet, pending = now, True
                for s in self.servers:
                    s.stop()
                    s.start()
            if pending and kubelet is not None:
                try:
                    for s in self.servers:
                        register(self.kubelet_socket, s, timeout=2.0)
                    pending = False
                    self.log("registered again")
                except RegistrationError as e:
                    self.log(f"{e.message} (retrying)")
