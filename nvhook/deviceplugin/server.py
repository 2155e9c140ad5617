"""The gRPC layer: one ``v1beta1.DevicePlugin`` server per resource, registered with kubelet.

The only module that imports ``grpc`` (and, through :mod:`.v1beta1.api_pb2`, protobuf).
It turns requests into calls of the value-level logic (:mod:`.allocate`, :mod:`.preferred`)
and their answers into messages. Method handlers are declared here from the message classes
(``grpc.method_handlers_generic_handler``), so no ``_pb2_grpc`` module is needed; the
method paths are those of ``v1beta1/api.proto``.

:class:`PluginState` is what the servers share with the health loop of
:mod:`nvhook.deviceplugin.plugin`: the unhealthy GPUs and a version that changes with them,
which wakes every ``ListAndWatch`` stream to send the new list.

kubelet's side of the API lives here too, being gRPC: :class:`Kubelet` serves
``v1beta1.Registration`` on ``<dir>/kubelet.sock`` and opens a :class:`PluginClient` on a
registered plugin as kubelet's device manager does (``ListAndWatch``, kept in a thread;
``GetPreferredAllocation``; ``Allocate``); :func:`create_container_config` is what kubelet puts
into the CRI ``ContainerConfig`` from an ``AllocateResponse``. ``nvhook demo --kubernetes``
and the tests stand in for kubelet with them; the plugin itself never uses them.

Every socket served here, the plugin's and the stand-in kubelet's, has mode 0600 whatever
the umask, bound by :func:`nvhook.sockets.bind_0600` (the DRA driver's too).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from nvhook.errors import MissingExtraError
from nvhook.sockets import SOCKET_MODE, bind_0600, serve_unix

try:
    import grpc

    from nvhook.deviceplugin.v1beta1 import api_pb2 as pb
except ImportError as e:  # the kubernetes extra
    raise MissingExtraError("nvhook's device plugin", e, "kubernetes") from e

from nvhook.deviceplugin.allocate import allocate
from nvhook.deviceplugin.errors import AllocationError, RegistrationError
from nvhook.deviceplugin.model import PluginConfig, Resource
from nvhook.deviceplugin.preferred import Topology, preferred

__all__ = [
    "API_VERSION",
    "HEALTHY",
    "SOCKET_MODE",
    "UNHEALTHY",
    "Kubelet",
    "PluginClient",
    "PluginState",
    "ResourceServer",
    "create_container_config",
    "register",
]

API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


class PluginState:
    """The unhealthy GPUs (UUID → why) and a version that changes with them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._unhealthy: dict[str, str] = {}
        self._version = 0
        self._closed = False

    def snapshot(self) -> tuple[int, dict[str, str]]:
        with self._cond:
            return self._version, dict(self._unhealthy)

    def update(self, unhealthy: Mapping[str, str]) -> bool:
        """Set the unhealthy GPUs; True (and every stream woken) when health changed."""
        with self._cond:
            if set(unhealthy) == set(self._unhealthy):
                self._unhealthy = dict(unhealthy)  # new reasons, same health: no new list
                return False
            self._unhealthy = dict(unhealthy)
            self._version += 1
            self._cond.notify_all()
            return True

    def wait(self, version: int, timeout: float) -> None:
        """Until the version differs from ``version``, the state closes, or ``timeout``."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._version != version, timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def _device_list(resource: Resource, unhealthy: Mapping[str, str]) -> Any:
    return pb.ListAndWatchResponse(
        devices=[
            pb.Device(
                ID=d.id,
                health=UNHEALTHY if d.gpu_uuid in unhealthy else HEALTHY,
                topology=(
                    pb.TopologyInfo(nodes=[pb.NUMANode(ID=d.numa_node)])
                    if d.numa_node is not None
                    else None
                ),
            )
            for d in resource.devices
        ]
    )


class ResourceServer:
    """``v1beta1.DevicePlugin`` for one resource, on ``<directory>/<resource.socket_name>``."""

    def __init__(
        self,
        resource: Resource,
        config: PluginConfig,
        topology: Topology,
        state: PluginState,
        directory: str,
        *,
        nodes: Mapping[str, tuple[str, ...]] | None = None,
        imex: tuple[int, ...] = (),
    ) -> None:
        self.resource = resource
        self.config = config
        self.topology = topology
        self.state = state
        self.nodes = dict(nodes or {})
        self.imex = imex
        self.path = os.path.join(directory, resource.socket_name)
        self._server: Any = None
        self._stopped = threading.Event()

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Serve on the socket (a stale socket file of the same name is replaced)."""
        self._stopped.clear()
        server = grpc.server(ThreadPoolExecutor(max_workers=8, thread_name_prefix="nvhook-dp"))
        server.add_generic_rpc_handlers((self._handler(),))
        serve_unix(server, self.path, RegistrationError)
        self._server = server

    def stop(self) -> None:
        """Stop serving (streams end) and remove the socket."""
        self._stopped.set()
        if self._server is not None:
            self._server.stop(grace=0.5).wait()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    @property
    def serving(self) -> bool:
        return self._server is not None and os.path.exists(self.path)

    # ------------------------------------------------------------------ the API

    def _handler(self) -> Any:
        def unary(f: Any, request: Any, response: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                f,
                request_deserializer=request.FromString,
                response_serializer=response.SerializeToString,
            )

        return grpc.method_handlers_generic_handler(
            f"{API_VERSION}.DevicePlugin",
            {
                "GetDevicePluginOptions": unary(self.options, pb.Empty, pb.DevicePluginOptions),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self.list_and_watch,
                    request_deserializer=pb.Empty.FromString,
                    response_serializer=pb.ListAndWatchResponse.SerializeToString,
                ),
                "GetPreferredAllocation": unary(
                    self.preferred_allocation,
                    pb.PreferredAllocationRequest,
                    pb.PreferredAllocationResponse,
                ),
                "Allocate": unary(self.allocate, pb.AllocateRequest, pb.AllocateResponse),
                "PreStartContainer": unary(
                    self.pre_start, pb.PreStartContainerRequest, pb.PreStartContainerResponse
                ),
            },
        )

    def options(self, request: Any, context: Any) -> Any:
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    def list_and_watch(self, request: Any, context: Any) -> Iterator[Any]:
        sent = -1
        while context.is_active() and not self._stopped.is_set() and not self.state.closed:
            version, unhealthy = self.state.snapshot()
            if version != sent:
                yield _device_list(self.resource, unhealthy)
                sent = version
            self.state.wait(sent, timeout=0.5)

    def preferred_allocation(self, request: Any, context: Any) -> Any:
        responses = []
        for c in request.container_requests:
            ids = preferred(
                self.resource,
                list(c.available_deviceIDs),
                list(c.must_include_deviceIDs),
                c.allocation_size,
                self.topology,
            )
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return pb.PreferredAllocationResponse(container_responses=responses)

    def allocate(self, request: Any, context: Any) -> Any:
        _, unhealthy = self.state.snapshot()
        responses = []
        for c in request.container_requests:
            try:
                a = allocate(
                    self.resource,
                    list(c.devices_ids),
                    self.config,
                    unhealthy=unhealthy,
                    nodes=self.nodes,
                    imex=self.imex,
                )
            except AllocationError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, e.message)  # raises
                raise
            responses.append(
                pb.ContainerAllocateResponse(
                    envs=dict(a.envs),
                    mounts=[
                        pb.Mount(
                            container_path=m.container_path,
                            host_path=m.host_path,
                            read_only=m.read_only,
                        )
                        for m in a.mounts
                    ],
                    annotations=dict(a.annotations),
                    cdi_devices=[pb.CDIDevice(name=n) for n in a.cdi_devices],
                    devices=[
                        pb.DeviceSpec(
                            container_path=d.container_path,
                            host_path=d.host_path,
                            permissions=d.permissions,
                        )
                        for d in a.devices
                    ],
                )
            )
        return pb.AllocateResponse(container_responses=responses)

    def pre_start(self, request: Any, context: Any) -> Any:
        return pb.PreStartContainerResponse()


def register(kubelet_socket: str, server: ResourceServer, *, timeout: float = 5.0) -> None:
    """``Registration.Register`` on kubelet's socket for ``server``'s resource."""
    channel = grpc.insecure_channel(f"unix://{kubelet_socket}")
    try:
        call = channel.unary_unary(
            f"/{API_VERSION}.Registration/Register",
            request_serializer=pb.RegisterRequest.SerializeToString,
            response_deserializer=pb.Empty.FromString,
        )
        call(
            pb.RegisterRequest(
                version=API_VERSION,
                endpoint=os.path.basename(server.path),
                resource_name=server.resource.name,
                options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
            ),
            timeout=timeout,
            wait_for_ready=True,
        )
    except grpc.RpcError as e:
        raise RegistrationError(
            f"kubelet at {kubelet_socket} did not register {server.resource.name}: "
            f"{e.code().name}: {e.details()}; is kubelet running, with its device-plugin "
            "directory there?"
        ) from None
    finally:
        channel.close()


# --------------------------------------------------------------------------- kubelet's side


class PluginClient:
    """kubelet's side of one registered plugin: the ``DevicePlugin`` methods and the list."""

    def __init__(self, socket: str) -> None:
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self._devices: list[Any] | None = None
        self._lists = 0
        self._cond = threading.Condition()
        self._stream: Any = None
        self._thread: threading.Thread | None = None

    def _unary(self, name: str, request: Any, response: Any) -> Any:
        call = self.channel.unary_unary(
            f"/v1beta1.DevicePlugin/{name}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=response.FromString,
        )
        return call(request, timeout=10)

    def options(self) -> Any:
        return self._unary("GetDevicePluginOptions", pb.Empty(), pb.DevicePluginOptions)

    def allocate(self, *containers: list[str]) -> Any:
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=ids) for ids in containers]
        )
        return self._unary("Allocate", request, pb.AllocateResponse)

    def preferred(self, available: list[str], must: list[str], size: int) -> list[str]:
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
                )
            ]
        )
        response = self._unary("GetPreferredAllocation", request, pb.PreferredAllocationResponse)
        return list(response.container_responses[0].deviceIDs)

    def watch(self) -> None:
        """Open ``ListAndWatch`` and keep reading it in a thread."""
        call = self.channel.unary_stream(
            "/v1beta1.DevicePlugin/ListAndWatch",
            request_serializer=pb.Empty.SerializeToString,
            response_deserializer=pb.ListAndWatchResponse.FromString,
        )
        self._stream = call(pb.Empty())

        def read() -> None:
            try:
                for response in self._stream:
                    with self._cond:
                        self._devices = list(response.devices)
                        self._lists += 1
                        self._cond.notify_all()
            except grpc.RpcError:
                pass  # the plugin went away or we cancelled

        self._thread = threading.Thread(target=read, daemon=True)
        self._thread.start()

    def wait_for(self, predicate: Callable[[list[Any]], bool], timeout: float = 10) -> list[Any]:
        """The latest device list once ``predicate`` holds for it (fails after ``timeout``)."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._devices is not None and predicate(self._devices), timeout
            )
            if not ok or self._devices is None:
                raise TimeoutError(
                    f"no device list satisfied the condition in {timeout}s: {self._devices}"
                )
            return list(self._devices)

    @property
    def lists(self) -> int:
        """How many lists the stream has delivered."""
        with self._cond:
            return self._lists

    def stream_ended(self, timeout: float = 5) -> bool:
        if self._thread is None:
            raise RuntimeError("watch() was not called")
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
        self.channel.close()


class Kubelet:
    """``Registration`` on ``<directory>/kubelet.sock``; the requests it received."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.socket = directory / "kubelet.sock"
        self.requests: list[Any] = []
        self._cond = threading.Condition()
        self._server: Any = None
        self.clients: list[PluginClient] = []

    def _register(self, request: Any, context: Any) -> Any:
        with self._cond:
            self.requests.append(request)
            self._cond.notify_all()
        return pb.Empty()

    def start(self) -> None:
        server = grpc.server(ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler(
            "v1beta1.Registration",
            {
                "Register": grpc.unary_unary_rpc_method_handler(
                    self._register,
                    request_deserializer=pb.RegisterRequest.FromString,
                    response_serializer=pb.Empty.SerializeToString,
                )
            },
        )
        server.add_generic_rpc_handlers((handler,))
        try:
            serving = bind_0600(server, str(self.socket))
        except OSError as e:
            server.stop(grace=None)
            raise RegistrationError(
                f"cannot serve kubelet's Registration on {self.socket}: {e.strerror}"
            ) from None
        if not serving:
            raise RegistrationError(f"cannot serve kubelet's Registration on {self.socket}")
        self._server = server

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        self.clients = []
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        self.socket.unlink(missing_ok=True)

    def restart(self) -> None:
        """Stop, delete every socket in the directory (as kubelet does), start anew."""
        self.stop()
        for entry in self.directory.iterdir():
            if entry.is_socket():
                entry.unlink()
        self.start()

    def wait_registered(self, count: int, timeout: float = 15) -> list[Any]:
        """The first ``count`` requests, once that many arrived."""
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.requests) >= count, timeout)
            if not ok:
                raise RegistrationError(
                    f"{len(self.requests)} registrations after {timeout}s, expected {count}"
                )
            return self.requests[:count]

    def client(self, request: Any) -> PluginClient:
        """A client of the plugin that sent ``request``, as kubelet opens one."""
        path = self.directory / request.endpoint
        deadline = time.monotonic() + 5
        while not path.is_socket():
            if time.monotonic() >= deadline:
                raise RegistrationError(f"{path} is not a socket: the plugin does not serve")
            time.sleep(0.05)
        client = PluginClient(str(path))
        self.clients.append(client)
        return client


def create_container_config(response: Any) -> dict[str, Any]:
    """What kubelet puts into the CRI ``ContainerConfig`` for one ``ContainerAllocateResponse``
    (pkg/kubelet/cm/devicemanager: envs, mounts, devices, annotations, CDI devices)."""
    return {
        "envs": dict(response.envs),
        "mounts": [(m.container_path, m.host_path, m.read_only) for m in response.mounts],
        "devices": [(d.container_path, d.host_path, d.permissions) for d in response.devices],
        "annotations": dict(response.annotations),
        "cdi_devices": [c.name for c in response.cdi_devices],
    }
