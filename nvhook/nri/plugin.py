"""``nvhook nri-plugin``: the NRI plugin daemon (the wire: :mod:`nvhook.nri.ttrpc`; the
decision: :mod:`nvhook.nri.inject`).

:class:`NriPlugin` connects to the runtime's NRI socket (``nri.socket``), registers as
``nri.plugin_index``-``nri.plugin_name``, answers ``Configure`` by subscribing to
``CreateContainer`` (and ``ValidateContainerAdjustment`` where the runtime's NRI has it, 0.10 and
later, containerd 2.2: containerd 1.7.24 speaks NRI 0.6.1 and 2.1.9 NRI 0.8.0 as Debian builds
them, neither has it, and an older runtime refuses a subscription it does not know),
``Synchronize`` with no updates, and every other ``Plugin`` call with its empty response. When
the runtime goes away (restart, ``Shutdown``) it reconnects, waiting up to
:data:`RECONNECT_MAX` seconds between tries; :meth:`NriPlugin.run` returns when ``stop`` is
set (SIGTERM).

What a runtime does when no plugin is connected: it creates containers without asking one, so a
GPU pod of the device plugin starts without GPUs (its allocation is annotations or mounts that
nothing turns into devices), never with other GPUs; the plugin cannot fail such a pod while it
is gone.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from nvhook.errors import ConfigError
from nvhook.nri import inject
from nvhook.nri.ttrpc import Code, Handler, PeerClosed, ProtocolError, RpcError, Session

#: protoc's module, untyped (no .pyi: nvhook/nri/pb/SOURCES.md); importing it, inject raises
#: MissingExtraError without protobuf
api: Any = inject.api

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.settings import Settings

__all__ = [
    "PLUGIN_SERVICE",
    "RECONNECT_MAX",
    "RUNTIME_SERVICE",
    "NriPlugin",
    "applies_cdi_names",
    "peer_problem",
    "runtime_nri",
]

RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
#: The longest wait between two connection attempts (seconds).
RECONNECT_MAX = 5.0
#: Our NRI version, told at registration: the api.proto we were generated from.
NRI_VERSION = "v0.12.2"


def _bit(event: int) -> int:
    return 1 << (event - 1)


#: containerd version (major, minor, patch) from which each NRI (major, minor) is vendored:
#: NRI's own table (``pkg/api/version.go`` ``runtimeVersionMap``, v0.12.2), lowest first.
_CONTAINERD_NRI = (
    ((1, 7, 0), (0, 3)),
    ((1, 7, 7), (0, 4)),
    ((1, 7, 14), (0, 6)),
    ((1, 7, 26), (0, 8)),
    ((2, 2, 0), (0, 10)),
    ((2, 2, 1), (0, 11)),
)
#: The first versions whose NRI applies an adjustment's CDI device names (containerd 2.1,
#: proven here with Debian's 2.1.9; CRI-O 1.34 by its release notes, not proven here).
_CDI_FROM = {"containerd": (2, 1), "cri-o": (1, 34)}


def runtime_nri(name: str, version: str, nri_version: str) -> tuple[int, int]:
    """The NRI (major, minor) of a runtime: what ``Configure`` says (NRI 0.10 and later say
    it), else inferred from containerd's version by NRI's own table, as NRI's stub does
    (containerd 1.7.24 → 0.6, 2.1.9 → 0.8); (0, 0) when unknown."""
    told = _numbers(nri_version)
    if len(told) >= 2:
        return told[0], told[1]
    have = (*_numbers(version), 0, 0, 0)[:3]
    found = (0, 0)
    if name == "containerd":
        for since, nri in _CONTAINERD_NRI:
            if have >= since:
                found = nri
    return found


def applies_cdi_names(name: str, version: str) -> bool:
    """Whether runtime ``name`` ``version`` applies the CDI device names of an adjustment."""
    since = _CDI_FROM.get(name)
    return since is not None and _numbers(version)[:2] >= since


def _numbers(version: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in version.lstrip("v").split("."):
        digits = ""
        for c in part:
            if not c.isdigit():
                break
            digits += c
        if not digits:
            break
        out.append(int(digits))
        if digits != part:
            break
    return tuple(out)


class NriPlugin:
    """The plugin under ``settings``; ``log`` gets one line per thing worth saying."""

    def __init__(
        self,
        settings: Settings,
        *,
        log: Callable[[str], None],
        connect: Callable[[str], socket.socket] | None = None,
    ) -> None:
        index = settings.nri_plugin_index
        if len(index) != 2 or not index.isdigit():
            raise ConfigError(f"nri.plugin_index must be two digits (00-99), not {index!r}")
        if not settings.nri_socket:
            raise ConfigError("nri.socket is empty: set it to the runtime's NRI socket")
        self.settings = settings
        self.log = log
        self._connect = connect or _unix_connect
        self.nri = (0, 0)
        #: whether the runtime applies an adjustment's CDI device names (:func:`applies_cdi_names`)
        self.cdi_capable = False
        self.session: Session | None = None
        self.served = 0
        self.registrations = 0

    def handlers(self) -> dict[str, Handler]:
        """Every ``Plugin`` method: ours, and the empty response for the rest."""
        ours: dict[str, Handler] = {
            "Configure": self._configure,
            "Synchronize": self._synchronize,
            "Shutdown": self._shutdown,
            "CreateContainer": self._create_container,
            "ValidateContainerAdjustment": self._validate,
        }
        out: dict[str, Handler] = {}
        for method in api.DESCRIPTOR.services_by_name["Plugin"].methods:
            handler = ours.get(method.name)
            if handler is None:
                empty = method.output_type._concrete_class().SerializeToString()
                handler = _constant(empty)
            out[f"{PLUGIN_SERVICE}/{method.name}"] = handler
        return out

    # -- the calls ---------------------------------------------------------------------

    def _configure(self, payload: bytes) -> bytes:
        request = _parse(api.ConfigureRequest, payload)
        self.nri = runtime_nri(request.runtime_name, request.runtime_version, request.NRI_version)
        self.cdi_capable = self.nri >= (0, 8) and applies_cdi_names(
            request.runtime_name, request.runtime_version
        )
        events = _bit(api.CREATE_CONTAINER)
        if self.nri >= (0, 10):
            events |= _bit(api.VALIDATE_CONTAINER_ADJUSTMENT)
        self.log(
            f"configured by {request.runtime_name} {request.runtime_version} (NRI "
            f"{'.'.join(map(str, self.nri))}): CDI device names "
            f"{'on' if self.cdi_capable else 'off'}, validation "
            f"{'on' if self.nri >= (0, 10) else 'off (the runtime has none)'}"
        )
        return bytes(api.ConfigureResponse(events=events).SerializeToString())

    def _synchronize(self, payload: bytes) -> bytes:
        request = _parse(api.SynchronizeRequest, payload)
        return bytes(api.SynchronizeResponse(more=request.more).SerializeToString())

    def _shutdown(self, payload: bytes) -> bytes:
        self.log("the runtime is shutting down")
        return bytes(api.Empty().SerializeToString())

    def _create_container(self, payload: bytes) -> bytes:
        request = _parse(api.CreateContainerRequest, payload)
        verdict = inject.decide_container(
            request.pod, request.container, self.settings, cdi_capable=self.cdi_capable
        )
        for line in verdict.stripped:
            self.log(("refused " if verdict.refused else "stripped ") + line)
        if verdict.refused:
            raise RpcError(Code.PERMISSION_DENIED, f"nvhook: {verdict.refused}")
        if verdict.devices:
            self.served += 1
            self.log(
                f"pod {request.pod.namespace}/{request.pod.name} container "
                f"{request.container.name}: devices {verdict.devices} "
                f"({'CDI names' if verdict.adjust.CDI_devices else 'edits'})"
            )
        return bytes(api.CreateContainerResponse(adjust=verdict.adjust).SerializeToString())

    def _validate(self, payload: bytes) -> bytes:
        """Refuse pending adjustments (of any plugin) that add NVIDIA device nodes or NVIDIA
        CDI devices beyond what this plugin's own decision grants the pristine container."""
        request = _parse(api.ValidateContainerAdjustmentRequest, payload)
        pod, container = request.pod, request.container
        edits = inject.decide_container(pod, container, self.settings, cdi_capable=False)
        names = inject.decide_container(pod, container, self.settings, cdi_capable=True)
        granted = inject.nvidia_device_paths(edits.adjust.linux.devices)
        added = sorted(inject.nvidia_device_paths(request.adjust.linux.devices) - granted)
        granted_names = {d.name for d in names.adjust.CDI_devices}
        added += sorted(
            d.name
            for d in request.adjust.CDI_devices
            if inject.is_nvidia_cdi_name(d.name) and d.name not in granted_names
        )
        if added:
            reason = (
                f"pod {pod.namespace}/{pod.name} container {container.name}: an adjustment "
                f"adds {', '.join(added)}, which the allocation did not grant"
            )
            self.log(f"refused {reason}")
            return bytes(
                api.ValidateContainerAdjustmentResponse(
                    reject=True, reason=reason
                ).SerializeToString()
            )
        return bytes(api.ValidateContainerAdjustmentResponse().SerializeToString())

    # -- the connection ----------------------------------------------------------------

    def run_once(self, stop: threading.Event) -> None:
        """Connect, register and serve until the runtime goes away (PeerClosed) or ``stop``."""
        sock = self._connect(self.settings.nri_socket)
        session = Session(sock, self.handlers())
        self.session = session
        try:
            request = api.RegisterPluginRequest(
                plugin_name=self.settings.nri_plugin_name,
                plugin_idx=self.settings.nri_plugin_index,
                NRI_version=NRI_VERSION,
            )
            session.call(RUNTIME_SERVICE, "RegisterPlugin", request.SerializeToString())
            self.registrations += 1
            self.log(
                f"registered as {self.settings.nri_plugin_index}-{self.settings.nri_plugin_name}"
                f" on {self.settings.nri_socket}"
            )
            session.serve(stop)
        finally:
            self.session = None
            session.close()

    def run(self, stop: threading.Event) -> None:
        """:meth:`run_once` again whenever the runtime goes away, until ``stop`` is set."""
        wait = 0.1
        said = ""
        while not stop.is_set():
            started = time.monotonic()
            registrations = self.registrations
            try:
                self.run_once(stop)
            except (OSError, PeerClosed, ProtocolError, RpcError) as e:
                if stop.is_set():
                    break
                line = f"{_reason(e)}; reconnecting to {self.settings.nri_socket}"
                if line != said or self.registrations != registrations:
                    self.log(line)  # once per cause, not once per try
                said = line
            if time.monotonic() - started > RECONNECT_MAX:
                wait = 0.1  # it was up for a while: a fresh restart
            stop.wait(wait)
            wait = min(wait * 2, RECONNECT_MAX)


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and not isinstance(e, TimeoutError):
        return f"cannot connect: {e.strerror or e}"
    return str(e)


def _constant(payload: bytes) -> Handler:
    return lambda _request: payload


def _parse(cls: Any, payload: bytes) -> Any:
    message = cls()
    try:
        message.ParseFromString(payload)
    except Exception:  # protobuf's DecodeError
        raise RpcError(Code.INVALID_ARGUMENT, f"not a {cls.__name__}") from None
    return message


def _unix_connect(path: str) -> socket.socket:
    """A connection to the NRI socket ``path``, whose server must be root (or us)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        problem = peer_problem(sock, path)
    except OSError:
        sock.close()
        raise
    if problem:
        sock.close()
        raise ProtocolError(problem)
    return sock


def peer_problem(sock: socket.socket, path: str) -> str | None:
    """Why the server at the other end of ``sock`` is not a runtime to serve (None: it is):
    a runtime's NRI socket is root's, and another user's socket there could feed the plugin
    pods and read what it injects (``SO_PEERCRED``'s uid, as the kernel recorded it at
    ``listen``)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    if uid in (0, os.geteuid()):
        return None
    return (
        f"{path} is served by uid {uid}, not root: not an NRI runtime to serve "
        "(check nri.socket and who listens there)"
    )
