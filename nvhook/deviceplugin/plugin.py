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
3. every ``health_interval`` seconds, :func:`~nvhook.deviceplugin.health.probe`: a change
   wakes every ``ListAndWatch`` stream with the new list;
4. several times a second, whether ``kubelet.sock`` was recreated (kubelet restarted, and
   deleted the plugins' sockets) or a socket of ours vanished: then each server is
   restarted and registered again (retried until kubelet answers);
5. on stop, the servers stop and their sockets are removed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from nvhook.deviceplugin.errors import RegistrationError
from nvhook.deviceplugin.health import probe
from nvhook.deviceplugin.model import PluginConfig, Resource
from nvhook.deviceplugin.preferred import Topology
from nvhook.deviceplugin.resources import build_resources
from nvhook.deviceplugin.server import PluginState, ResourceServer, register
from nvhook.deviceplugin.topology import read_numa_node, read_topology
from nvhook.errors import DriverError, NvhookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.devices.nvml import GpuInfo
    from nvhook.planner import Host

__all__ = ["DEFAULT_DIRECTORY", "KUBELET_SOCKET", "DevicePlugin", "read_gpus"]

DEFAULT_DIRECTORY = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCKET = "kubelet.sock"
_TICK = 0.2  # seconds between checks of kubelet's socket


def read_gpus(host: Host) -> tuple[GpuInfo, ...]:
    """The host's GPUs as NVML (from the driver root) lists them."""
    from nvhook.devices.nvml import open_nvml
    from nvhook.planner import nvml_library_dir

    with open_nvml(nvml_library_dir(host.driver_root)) as nvml:
        return nvml.gpus()


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
    ) -> None:
        self.host = host
        self.config = config
        self.directory = directory
        self.kubelet_socket = os.path.join(directory, KUBELET_SOCKET)
        self.health_interval = health_interval
        self.log = log
        self.state = PluginState()
        self.servers: list[ResourceServer] = []
        self.ready = threading.Event()  # set once every server is registered

    def discover(self) -> tuple[tuple[Resource, ...], tuple[GpuInfo, ...], Topology]:
        """The resources to advertise, the GPUs and their topology."""
        gpus = read_gpus(self.host)
        warnings: list[str] = []
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
        from nvhook.deviceplugin.vendors import vendor_resources
        from nvhook.vendors.model import Host as VendorHost

        return vendor_resources(VendorHost(root=self.host.root, dev_root=self.host.dev_root))

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set; raises :class:`RegistrationError` when kubelet
        refuses the first registration."""
        others = self.discover_vendors()
        try:
            resources, gpus, topology = self.discover()
        except NvhookError as e:  # no NVIDIA driver: serve the other vendors' devices alone
            if not others:
                raise
            self.log(f"no NVIDIA GPU advertised: {e}")
            resources, gpus, topology = (), (), Topology(numa=())
        gpus_of = [(g.uuid, g.bus_id) for g in gpus]
        self._check_health(gpus_of)
        self.servers = [
            ResourceServer(r, self.config, topology, self.state, self.directory) for r in resources
        ]
        self.servers += [
            ResourceServer(r, self.config, t, self.state, self.directory) for r, t in others
        ]
        if not self.servers:
            self.log("no GPU to advertise on this node; waiting for SIGTERM")
        try:
            for s in self.servers:
                s.start()
                register(self.kubelet_socket, s)
                self.log(
                    f"serving {s.resource.name} ({len(s.resource.devices)} devices) on {s.path}, "
                    f"registered with {self.kubelet_socket}"
                )
            self.ready.set()
            self._loop(stop, gpus_of)
        finally:
            self.state.close()
            for s in self.servers:
                s.stop()
            self.log("stopped; sockets removed")

    def _check_health(self, gpus: list[tuple[str, str]]) -> None:
        unhealthy = probe(self.host, gpus)
        _, before = self.state.snapshot()
        if self.state.update(unhealthy):
            for uuid in sorted(unhealthy.keys() - before.keys()):
                self.log(f"GPU {uuid} is unhealthy: {unhealthy[uuid]}")
            for uuid in sorted(before.keys() - unhealthy.keys()):
                self.log(f"GPU {uuid} is healthy again")

    def _loop(self, stop: threading.Event, gpus: list[tuple[str, str]]) -> None:
        kubelet = _identity(self.kubelet_socket)
        next_health = time.monotonic() + self.health_interval
        pending = False  # a re-registration still to do
        while not stop.wait(min(_TICK, self.health_interval)):
            if time.monotonic() >= next_health:
                self._check_health(gpus)
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
