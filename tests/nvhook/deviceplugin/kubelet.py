"""A kubelet stand-in for the device-plugin tests, built from the real API definitions.

It serves ``v1beta1.Registration`` on ``<dir>/kubelet.sock`` (recording each
``RegisterRequest``) and talks ``v1beta1.DevicePlugin`` to a registered plugin as kubelet's
device manager does: it opens ``ListAndWatch`` and keeps the latest list, and calls
``GetPreferredAllocation`` and ``Allocate``. :meth:`Kubelet.restart` does what a kubelet
restart does to the directory: every socket in it is deleted and ``kubelet.sock`` is made
anew. :func:`create_container_config` builds the CRI ``ContainerConfig`` parts from an
``AllocateResponse`` as kubelet does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from nvhook.deviceplugin.v1beta1 import api_pb2 as pb

__all__ = ["Kubelet", "PluginClient"]


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
            assert ok, f"no device list satisfied the condition in {timeout}s: {self._devices}"
            assert self._devices is not None
            return list(self._devices)

    @property
    def lists(self) -> int:
        """How many lists the stream has delivered."""
        with self._cond:
            return self._lists

    def stream_ended(self, timeout: float = 5) -> bool:
        assert self._thread is not None
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
        assert server.add_insecure_port(f"unix://{self.socket}") != 0
        server.start()
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
            assert ok, f"{len(self.requests)} registrations after {timeout}s, expected {count}"
            return self.requests[:count]

    def client(self, request: Any) -> PluginClient:
        """A client of the plugin that sent ``request``, as kubelet opens one."""
        path = self.directory / request.endpoint
        deadline = time.monotonic() + 5
        while not path.is_socket():
            assert time.monotonic() < deadline, f"{path} is not a socket"
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
