"""The DRA driver's gRPC layer: registration, ``DRAPlugin`` (v1 and v1beta1), ``dra-health``.

The only module of :mod:`nvhook.dra` that imports ``grpc`` (and, through the generated
``api_pb2`` of :mod:`nvhook.dra.kubelet`, protobuf). Method handlers are declared here from
the message classes (no ``_pb2_grpc``); the method paths are the protos' packages:

- :class:`RegistrationServer` on ``<plugins_registry>/gpu.nvidia.com-reg.sock``:
  ``pluginregistration.Registration`` (``GetInfo``: type ``DRAPlugin``, the driver name, the
  endpoint, the services served, :data:`SUPPORTED_VERSIONS`; ``NotifyRegistrationStatus``);
- :class:`DraServer` on the endpoint ``<plugins>/gpu.nvidia.com/dra.sock``: both
  ``DRAPlugin`` versions (the same messages, field for field: a v1beta1 request is read as
  v1's by its bytes) and ``v1.DRAResourceHealth.NodeWatchResources``, which sends the complete
  device list at once and again at every health change.

Every socket has mode 0600 whatever the umask, bound as the device plugin's are
(:func:`nvhook.sockets.serve_unix`: a private 0700 directory, chmod, start, rename into
place), so the two daemons cannot differ there.

kubelet's side lives here too, being gRPC: :class:`Kubelet` is the stand-in the tests and
``nvhook demo`` use: it finds a plugin's registration socket, calls ``GetInfo`` and
``NotifyRegistrationStatus`` as kubelet's plugin watcher does, then calls
``NodePrepareResources``/``NodeUnprepareResources`` and reads ``NodeWatchResources``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from nvhook.errors import MissingExtraError
from nvhook.sockets import SOCKET_MODE, serve_unix

try:
    import grpc

    from nvhook.dra.kubelet.dra.v1 import api_pb2 as v1
    from nvhook.dra.kubelet.dra.v1beta1 import api_pb2 as v1beta1
    from nvhook.dra.kubelet.dra_health.v1 import api_pb2 as health
    from nvhook.dra.kubelet.pluginregistration.v1 import api_pb2 as reg
except ImportError as e:  # the kubernetes extra
    raise MissingExtraError("nvhook's DRA driver", e, "kubernetes") from e

from nvhook.dra.errors import RegistrationError
from nvhook.dra.inventory import DRIVER
from nvhook.dra.prepare import ClaimRef, Preparer, Result

__all__ = [
    "DRA_PLUGIN_TYPE",
    "HEALTHY",
    "HEALTH_SERVICE",
    "SOCKET_MODE",
    "SUPPORTED_VERSIONS",
    "UNHEALTHY",
    "UNKNOWN",
    "DraServer",
    "HealthState",
    "Kubelet",
    "RegistrationServer",
    "registration_socket",
]

#: pluginregistration/v1/constants.go ``DRAPlugin``.
DRA_PLUGIN_TYPE = "DRAPlugin"
#: What ``GetInfo`` lists: the gRPC service names kubelet may call (v1 first).
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
_V1 = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
_V1BETA1 = "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
HEALTH_SERVICE = "v1.DRAResourceHealth"
#: Claims in one request: kubelet sends a pod's claims of this driver, a handful.
MAX_CLAIMS = 256


def registration_socket(registry_dir: str, driver: str = DRIVER) -> str:
    """``<registry_dir>/<driver>-reg.sock``: one per driver name, as kubelet's plugin
    watcher registers a DRA plugin per name."""
    return os.path.join(registry_dir, f"{driver}-reg.sock")


def _serve_unix(server: Any, path: str) -> None:
    """Start ``server`` on ``path``, mode 0600 from the first moment it is there: the device
    plugin's binding (one implementation), with this driver's errors."""
    # the socket is bound as <dir>/.nvhook-XXXXXXXX/s first; sun_path holds 107 bytes
    if len(os.fsencode(os.path.dirname(path))) + 19 > 107:
        raise RegistrationError(
            f"{path}: the directory's path is too long for a unix socket (at most 88 bytes "
            "for this driver's sockets); choose a shorter --plugins-dir or --registry-dir"
        )
    serve_unix(server, path, RegistrationError)


def _unary(f: Any, request: Any, response: Any) -> Any:
    return grpc.unary_unary_rpc_method_handler(
        f, request_deserializer=request.FromString, response_serializer=response.SerializeToString
    )


class _Socket:
    """One gRPC server on one unix socket."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._server: Any = None

    def _handlers(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def start(self) -> None:
        server = grpc.server(ThreadPoolExecutor(max_workers=8, thread_name_prefix="nvhook-dra"))
        server.add_generic_rpc_handlers(self._handlers())
        try:
            _serve_unix(server, self.path)
        except BaseException:
            server.stop(grace=None)
            raise
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0.5).wait()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    @property
    def serving(self) -> bool:
        return self._server is not None and os.path.exists(self.path)


class RegistrationServer(_Socket):
    """``pluginregistration.Registration`` for the driver at ``endpoint``."""

    def __init__(
        self, path: str, endpoint: str, log: Callable[[str], None], driver: str = DRIVER
    ) -> None:
        super().__init__(path)
        self.endpoint = endpoint
        self.driver = driver
        self.log = log
        self.statuses: list[tuple[bool, str]] = []

    def _handlers(self) -> tuple[Any, ...]:
        return (
            grpc.method_handlers_generic_handler(
                "pluginregistration.Registration",
                {
                    "GetInfo": _unary(self.get_info, reg.InfoRequest, reg.PluginInfo),
                    "NotifyRegistrationStatus": _unary(
                        self.notify, reg.RegistrationStatus, reg.RegistrationStatusResponse
                    ),
                },
            ),
        )

    def get_info(self, request: Any, context: Any) -> Any:
        return reg.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=self.driver,
            endpoint=self.endpoint,
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    def notify(self, request: Any, context: Any) -> Any:
        self.statuses.append((request.plugin_registered, request.error))
        if request.plugin_registered:
            self.log(f"kubelet registered {self.driver} (endpoint {self.endpoint})")
        else:
            self.log(f"kubelet refused the registration: {request.error[:512]}")
        return reg.RegistrationStatusResponse()


class HealthState:
    """The devices' health (device name → (status, message)) and a version that changes
    with it, which wakes every ``NodeWatchResources`` stream."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._health: dict[str, tuple[Any, str]] = {}
        self._version = 0
        self._closed = False

    def set(self, health: Mapping[str, tuple[Any, str]]) -> bool:
        with self._cond:
            if dict(health) == self._health:
                return False
            self._health = dict(health)
            self._version += 1
            self._cond.notify_all()
            return True

    def snapshot(self) -> tuple[int, dict[str, tuple[Any, str]]]:
        with self._cond:
            return self._version, dict(self._health)

    def wait(self, version: int, timeout: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._version != version, timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


#: The health values of dra-health/v1 (``HealthStatus``).
UNKNOWN: Any = health.UNKNOWN
HEALTHY: Any = health.HEALTHY
UNHEALTHY: Any = health.UNHEALTHY


class DraServer(_Socket):
    """Both ``DRAPlugin`` versions and ``DRAResourceHealth`` for ``preparer``'s node."""

    def __init__(self, path: str, preparer: Preparer, health_state: HealthState) -> None:
        super().__init__(path)
        self.preparer = preparer
        self.health = health_state

    def _handlers(self) -> tuple[Any, ...]:
        out = []
        for service, pb in ((_V1, v1), (_V1BETA1, v1beta1)):
            out.append(
                grpc.method_handlers_generic_handler(
                    service,
                    {
                        "NodePrepareResources": _unary(
                            self._prepare(pb),
                            pb.NodePrepareResourcesRequest,
                            pb.NodePrepareResourcesResponse,
                        ),
                        "NodeUnprepareResources": _unary(
                            self._unprepare(pb),
                            pb.NodeUnprepareResourcesRequest,
                            pb.NodeUnprepareResourcesResponse,
                        ),
                    },
                )
            )
        out.append(
            grpc.method_handlers_generic_handler(
                HEALTH_SERVICE,
                {
                    "NodeWatchResources": grpc.unary_stream_rpc_method_handler(
                        self.watch,
                        request_deserializer=health.NodeWatchResourcesRequest.FromString,
                        response_serializer=health.NodeWatchResourcesResponse.SerializeToString,
                    )
                },
            )
        )
        return tuple(out)

    @staticmethod
    def _claims(request: Any, context: Any) -> list[ClaimRef]:
        if len(request.claims) > MAX_CLAIMS:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{len(request.claims)} claims in one request, at most {MAX_CLAIMS}",
            )
        return [ClaimRef(c.namespace, c.name, c.uid) for c in request.claims]

    def _prepare(self, pb: Any) -> Callable[[Any, Any], Any]:
        def call(request: Any, context: Any) -> Any:
            results = self.preparer.prepare(self._claims(request, context))
            return pb.NodePrepareResourcesResponse(
                claims={uid: _prepared(pb, r) for uid, r in results.items()}
            )

        return call

    def _unprepare(self, pb: Any) -> Callable[[Any, Any], Any]:
        def call(request: Any, context: Any) -> Any:
            results = self.preparer.unprepare(self._claims(request, context))
            return pb.NodeUnprepareResourcesResponse(
                claims={
                    uid: pb.NodeUnprepareResourceResponse(error=r.error)
                    for uid, r in results.items()
                }
            )

        return call

    def watch(self, request: Any, context: Any) -> Iterator[Any]:
        sent = -1
        pool = self.preparer.node
        while context.is_active() and not self.health.closed:
            version, states = self.health.snapshot()
            if version != sent:
                now = int(time.time())
                yield health.NodeWatchResourcesResponse(
                    devices=[
                        health.DeviceHealth(
                            device=health.DeviceIdentifier(pool_name=pool, device_name=name),
                            health=status,
                            last_updated_time=now,
                            message=message[:1024],
                        )
                        for name, (status, message) in sorted(states.items())
                    ]
                )
                sent = version
            self.health.wait(sent, timeout=0.5)


def _prepared(pb: Any, r: Result) -> Any:
    if r.error:
        return pb.NodePrepareResourceResponse(error=r.error)
    return pb.NodePrepareResourceResponse(
        devices=[
            pb.Device(
                request_names=[d.request] if d.request else [],
                pool_name=d.pool,
                device_name=d.device,
                cdi_device_ids=list(d.cdi_ids),
                **({"share_id": d.share_id} if d.share_id is not None else {}),
            )
            for d in r.devices
        ]
    )


# --------------------------------------------------------------------------- kubelet's side


class Kubelet:
    """A stand-in for kubelet's plugin watcher and DRA manager (the tests', the demo's)."""

    def __init__(self, registry_dir: str, driver: str = DRIVER) -> None:
        self.registry_dir = registry_dir
        self.driver = driver
        self.info: Any = None
        self._channel: Any = None

    def register(self, timeout: float = 10.0) -> Any:
        """Wait for the driver's registration socket, ``GetInfo``, check it, notify it."""
        path = registration_socket(self.registry_dir, self.driver)
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if time.monotonic() >= deadline:
                raise RegistrationError(f"{path} did not appear in {timeout}s")
            time.sleep(0.05)
        with grpc.insecure_channel(f"unix://{path}") as channel:
            info = channel.unary_unary(
                "/pluginregistration.Registration/GetInfo",
                request_serializer=reg.InfoRequest.SerializeToString,
                response_deserializer=reg.PluginInfo.FromString,
            )(reg.InfoRequest(), timeout=timeout, wait_for_ready=True)
            ok = info.type == DRA_PLUGIN_TYPE and "v1.DRAPlugin" in info.supported_versions
            channel.unary_unary(
                "/pluginregistration.Registration/NotifyRegistrationStatus",
                request_serializer=reg.RegistrationStatus.SerializeToString,
                response_deserializer=reg.RegistrationStatusResponse.FromString,
            )(
                reg.RegistrationStatus(
                    plugin_registered=ok, error="" if ok else f"unsupported plugin {info}"
                ),
                timeout=timeout,
            )
        self.info = info
        if self._channel is not None:
            self._channel.close()
        self._channel = grpc.insecure_channel(f"unix://{info.endpoint}")
        return info

    def _call(self, version: str, method: str, claims: Sequence[tuple[str, str, str]]) -> Any:
        pb = v1 if version == "v1" else v1beta1
        service = _V1 if version == "v1" else _V1BETA1
        request_type = getattr(pb, f"{method}Request")
        response_type = getattr(pb, f"{method}Response")
        return self._channel.unary_unary(
            f"/{service}/{method}",
            request_serializer=request_type.SerializeToString,
            response_deserializer=response_type.FromString,
        )(
            request_type(
                claims=[pb.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]
            ),
            timeout=30,
        )

    def prepare(self, *claims: tuple[str, str, str], version: str = "v1") -> Any:
        """``NodePrepareResources`` for (namespace, name, uid) claims."""
        return self._call(version, "NodePrepareResources", claims)

    def unprepare(self, *claims: tuple[str, str, str], version: str = "v1") -> Any:
        return self._call(version, "NodeUnprepareResources", claims)

    def watch_health(self) -> Iterator[Any]:
        """``NodeWatchResources``: the stream of complete device lists (cancel to end)."""
        stream: Iterator[Any] = self._channel.unary_stream(
            f"/{HEALTH_SERVICE}/NodeWatchResources",
            request_serializer=health.NodeWatchResourcesRequest.SerializeToString,
            response_deserializer=health.NodeWatchResourcesResponse.FromString,
        )(health.NodeWatchResourcesRequest())
        return stream

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
