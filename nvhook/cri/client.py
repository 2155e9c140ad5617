"""A CRI v1 ``RuntimeService`` client, as kubelet talks to containerd (or CRI-O).

The only module besides :mod:`nvhook.deviceplugin.server` that imports ``grpc``; its messages
are the checked-in subset of :mod:`nvhook.cri.v1`. Calls are declared here with their method
paths (``/runtime.v1.RuntimeService/…``), so no ``_pb2_grpc`` module is needed.

:func:`pod_config` and :func:`container_config` build the requests kubelet sends; the latter
copies a device plugin's allocation (:func:`nvhook.deviceplugin.server.create_container_config`:
envs, mounts, devices, annotations, CDI devices) into the ``ContainerConfig`` as kubelet's
device manager does. :func:`read_log` reads what a container wrote from its CRI log file.
``nvhook demo --kubernetes`` and the end-to-end tests use them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nvhook.errors import ContainerEngineError, MissingExtraError

try:
    import grpc

    from nvhook.cri.v1 import api_pb2 as pb
except ImportError as e:  # the kubernetes extra
    raise MissingExtraError("nvhook's CRI client (demo --kubernetes)", e, "kubernetes") from e

__all__ = [
    "HOST_NETWORK",
    "CriClient",
    "container_config",
    "pb",
    "pod_config",
    "read_log",
]

SERVICE = "/runtime.v1.RuntimeService"
#: Pods use the host's network namespace: no CNI plugin is needed.
HOST_NETWORK = pb.NODE

_CALLS: dict[str, tuple[Any, Any]] = {
    "Version": (pb.VersionRequest, pb.VersionResponse),
    "RunPodSandbox": (pb.RunPodSandboxRequest, pb.RunPodSandboxResponse),
    "StopPodSandbox": (pb.StopPodSandboxRequest, pb.StopPodSandboxResponse),
    "RemovePodSandbox": (pb.RemovePodSandboxRequest, pb.RemovePodSandboxResponse),
    "CreateContainer": (pb.CreateContainerRequest, pb.CreateContainerResponse),
    "StartContainer": (pb.StartContainerRequest, pb.StartContainerResponse),
    "ContainerStatus": (pb.ContainerStatusRequest, pb.ContainerStatusResponse),
}


class CriClient:
    """``RuntimeService`` on the engine's socket ``address`` (a path)."""

    def __init__(self, address: str, *, timeout: float = 60) -> None:
        self.address = address
        self.timeout = timeout
        self.channel = grpc.insecure_channel(f"unix://{address}")

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> CriClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, request: Any) -> Any:
        """One unary call; a gRPC error becomes a :class:`ContainerEngineError` naming it."""
        request_type, response_type = _CALLS[method]
        assert isinstance(request, request_type), (method, type(request))
        stub = self.channel.unary_unary(
            f"{SERVICE}/{method}",
            request_serializer=request_type.SerializeToString,
            response_deserializer=response_type.FromString,
        )
        try:
            return stub(request, timeout=self.timeout)
        except grpc.RpcError as e:
            raise ContainerEngineError(
                f"CRI {method} on {self.address}: {e.code().name}: {e.details()}"
            ) from None

    def version(self) -> Any:
        return self.call("Version", pb.VersionRequest(version="v1"))

    def run_pod_sandbox(self, config: Any, handler: str = "") -> str:
        """``RunPodSandbox`` with runtime handler ``handler`` ("" the default); its id."""
        request = pb.RunPodSandboxRequest(config=config, runtime_handler=handler)
        return str(self.call("RunPodSandbox", request).pod_sandbox_id)

    def stop_pod_sandbox(self, sandbox: str) -> None:
        self.call("StopPodSandbox", pb.StopPodSandboxRequest(pod_sandbox_id=sandbox))

    def remove_pod_sandbox(self, sandbox: str) -> None:
        self.call("RemovePodSandbox", pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox))

    def create_container(self, sandbox: str, config: Any, sandbox_config: Any) -> str:
        request = pb.CreateContainerRequest(
            pod_sandbox_id=sandbox, config=config, sandbox_config=sandbox_config
        )
        return str(self.call("CreateContainer", request).container_id)

    def start_container(self, container: str) -> None:
        self.call("StartContainer", pb.StartContainerRequest(container_id=container))

    def container_status(self, container: str) -> Any:
        return self.call("ContainerStatus", pb.ContainerStatusRequest(container_id=container))

    def wait_exited(self, container: str, timeout: float = 30) -> Any:
        """The container's status once it exited; raises after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.container_status(container).status
            if status.state == pb.CONTAINER_EXITED:
                return status
            if time.monotonic() > deadline:
                raise ContainerEngineError(
                    f"container {container} still not exited after {timeout}s: {status}"
                )
            time.sleep(0.05)


def pod_config(name: str, *, namespace: str, log_directory: Path) -> Any:
    """A host-network pod's ``PodSandboxConfig`` (uid = name), logs under ``log_directory``."""
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=name, namespace=namespace),
        log_directory=str(log_directory),
        linux=pb.LinuxPodSandboxConfig(
            security_context=pb.LinuxSandboxSecurityContext(
                namespace_options=pb.NamespaceOption(network=HOST_NETWORK)
            )
        ),
    )


def container_config(
    name: str,
    image: str,
    command: Sequence[str],
    *,
    envs: Mapping[str, str] | None = None,
    allocation: Mapping[str, Any] | None = None,
    log_path: str = "",
) -> Any:
    """kubelet's ``ContainerConfig``: the pod spec's ``envs``, then what a device plugin
    allocated (``create_container_config``'s dict: its envs after the pod's, its mounts,
    devices, annotations and CDI devices), as kubelet's device manager adds them."""
    alloc: Mapping[str, Any] = allocation or {}
    merged = {**(envs or {}), **alloc.get("envs", {})}
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name),
        image=pb.ImageSpec(image=image),
        command=list(command),
        envs=[pb.KeyValue(key=k, value=v) for k, v in merged.items()],
        mounts=[
            pb.Mount(container_path=c, host_path=h, readonly=ro)
            for c, h, ro in alloc.get("mounts", [])
        ],
        devices=[
            pb.Device(container_path=c, host_path=h, permissions=p)
            for c, h, p in alloc.get("devices", [])
        ],
        annotations=dict(alloc.get("annotations", {})),
        CDI_devices=[pb.CDIDevice(name=n) for n in alloc.get("cdi_devices", [])],
        log_path=log_path,
    )


def read_log(path: Path) -> str:
    """What the container wrote to stdout, from its CRI log file (``<time> <stream> <P|F>
    <text>`` lines, P for a partial line)."""
    out = []
    for line in path.read_text().splitlines():
        _, stream, tag, text = [*line.split(" ", 3), "", ""][:4]
        if stream == "stdout":
            out.append(text + ("\n" if tag == "F" else ""))
    return "".join(out)
