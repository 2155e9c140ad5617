"""ttRPC over NRI's connection multiplexer: the wire an NRI plugin speaks to its runtime.

No Python ttRPC library exists; the protocol is small. Checked against the Go sources
(containerd/ttrpc 1.1.1 as Debian ships it, ``channel.go``, and 1.2.7, which Debian's
containerd 2.1 is built with: ``channel.go``, ``client.go``, ``server.go``; containerd/nri
0.6.1-0.12.2 ``pkg/net/multiplex/mux.go`` and ``ttrpc.go``), and proven against a real
containerd (``tests/e2e/engines/test_nri.py``).

**NRI's multiplexer** (``mux.go``) carries several byte streams over the one unix socket
to the runtime: each frame is an 8-byte big-endian header, the connection id then the
payload's length, and the payload (at most :data:`MUX_PAYLOAD_MAX`, a whole ttRPC message; a
longer write is split). Frames are written here in pieces of at most :data:`MUX_WRITE_CHUNK`
bytes: what the Go reader's buffer always takes. Connection 1 (:data:`PLUGIN_SERVICE_CONN`)
carries the plugin's ttRPC *server* (the runtime calls ``Configure``, ``CreateContainer``…);
connection 2 (:data:`RUNTIME_SERVICE_CONN`) the plugin's ttRPC *client* (it calls
``RegisterPlugin``). Frames are not aligned to ttRPC messages (Go's ``bufio.Writer`` may
split one), so each connection is a byte stream reassembled here.

**ttRPC's framing** (``channel.go``): a 10-byte big-endian header, the payload's length
(``uint32``), the stream id (``uint32``), the message type (1 request, 2 response, 3 data)
and flags (``uint8``; a unary request carries ``FLAG_REMOTE_CLOSED``, a response 0), then
the payload: a protobuf ``ttrpc.Request`` (service, method, payload, timeout, metadata) or
``ttrpc.Response`` (a ``google.rpc.Status`` and the payload). A message longer than
:data:`MESSAGE_LENGTH_MAX` (4 MiB) is discarded and answered ``RESOURCE_EXHAUSTED``, as the Go
server does; a client's stream ids are odd and increase by 2. An unknown service or method is
answered ``UNIMPLEMENTED`` ("service X" / "method X", the Go server's words).

:class:`Session` is one connection to the runtime, served from one thread: :meth:`Session.call`
sends a request on connection 2 and serves the runtime's requests on connection 1 until the
answer comes; :meth:`Session.serve` serves until the peer closes or ``stop`` is set. A peer
closing, mid-message included, raises :class:`PeerClosed`; a protocol violation
:class:`ProtocolError`; both end the session (the caller reconnects).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from nvhook.errors import NvhookError

try:
    from nvhook.nri.pb import ttrpc_pb2
except ImportError as e:  # protobuf: the kubernetes extra
    from nvhook.errors import MissingExtraError

    raise MissingExtraError("nvhook's NRI plugin", e, "kubernetes") from e
from oci._frozen import Frozen

#: protoc's module, untyped (no .pyi: nvhook/nri/pb/SOURCES.md)
pb: Any = ttrpc_pb2

__all__ = [
    "FLAG_REMOTE_CLOSED",
    "HEADER",
    "MESSAGE_LENGTH_MAX",
    "MUX_HEADER",
    "MUX_PAYLOAD_MAX",
    "MUX_WRITE_CHUNK",
    "PLUGIN_SERVICE_CONN",
    "RUNTIME_SERVICE_CONN",
    "TYPE_DATA",
    "TYPE_REQUEST",
    "TYPE_RESPONSE",
    "Code",
    "Handler",
    "Message",
    "MessageReader",
    "PeerClosed",
    "ProtocolError",
    "RpcError",
    "Session",
    "encode_message",
    "mux_frames",
]

#: ttRPC's message header: length, stream id, type, flags (``channel.go``).
HEADER = struct.Struct(">IIBB")
#: The largest ttRPC payload either side accepts (``messageLengthMax``, 4 MiB).
MESSAGE_LENGTH_MAX = 4 << 20
TYPE_REQUEST = 0x1
TYPE_RESPONSE = 0x2
TYPE_DATA = 0x3
FLAG_REMOTE_CLOSED = 0x1

#: NRI's multiplexer frame header: connection id, payload length (``mux.go``).
MUX_HEADER = struct.Struct(">II")
#: The largest frame payload: one whole ttRPC message (``maxPayloadSize``).
MUX_PAYLOAD_MAX = HEADER.size + MESSAGE_LENGTH_MAX
#: The largest frame written. The Go side reads each connection through a ``bufio.Reader`` of
#: 4096 bytes, and the mux's ``conn.Read`` fails with ENOMEM (containerd then closes the plugin:
#: "ttrpc: closed", seen with containerd 2.1) when a frame is longer than the buffer it is given;
#: frames of at most 4096 bytes always fit.
MUX_WRITE_CHUNK = 4096
PLUGIN_SERVICE_CONN = 1
RUNTIME_SERVICE_CONN = 2

#: What :meth:`Session.serve` reads at most per ``recv``.
_READ = 64 * 1024
#: How often a blocked read looks at ``stop`` (seconds).
_POLL = 0.2


class Code:
    """The gRPC status codes ttRPC uses (``google.golang.org/grpc/codes``)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


class PeerClosed(NvhookError):
    """The runtime closed the connection (mid-message: the message is lost)."""


class ProtocolError(NvhookError):
    """The peer broke the wire format (an oversized frame, a bad envelope)."""


class RpcError(NvhookError):
    """A call failed with a status: raised by a handler to answer so, or by
    :meth:`Session.call`."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


#: A method's handler: the request's protobuf payload in, the response's out (or RpcError).
Handler = Callable[[bytes], bytes]


class Message(Frozen):
    """One ttRPC message: its header's fields and its payload (``oversized``: the payload
    was longer than :data:`MESSAGE_LENGTH_MAX` and was dropped, ``length`` says how long)."""

    stream_id: int
    type: int
    flags: int
    payload: bytes
    length: int
    oversized: bool = False


def encode_message(stream_id: int, type_: int, flags: int, payload: bytes) -> bytes:
    """A ttRPC message: its 10-byte header and ``payload``."""
    if len(payload) > MESSAGE_LENGTH_MAX:
        raise RpcError(
            Code.RESOURCE_EXHAUSTED,
            f"message length {len(payload)} exceeds maximum message size of {MESSAGE_LENGTH_MAX}",
        )
    return HEADER.pack(len(payload), stream_id, type_, flags) + payload


def mux_frames(conn_id: int, data: bytes, *, size: int = MUX_WRITE_CHUNK) -> bytes:
    """``data`` written on multiplexed connection ``conn_id``: frames of at most ``size``
    bytes each (:data:`MUX_WRITE_CHUNK`; ``mux.write`` splits at :data:`MUX_PAYLOAD_MAX`)."""
    out = bytearray()
    for start in range(0, max(len(data), 1), size):
        chunk = data[start : start + size]
        out += MUX_HEADER.pack(conn_id, len(chunk)) + chunk
    return bytes(out)


class MessageReader:
    """ttRPC messages from one byte stream fed in pieces (one multiplexed connection).

    An oversized message's payload is skipped as it arrives (never buffered) and reported
    as a :class:`Message` with ``oversized`` set, so that the server can answer it.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._skip = 0

    @property
    def pending(self) -> int:
        """Bytes of an incomplete message held (or still to skip)."""
        return len(self._buffer) + self._skip

    def feed(self, data: bytes) -> list[Message]:
        """The messages that ``data`` completes."""
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buffer += data
        out: list[Message] = []
        while len(self._buffer) >= HEADER.size:
            length, stream_id, type_, flags = HEADER.unpack_from(self._buffer)
            if length > MESSAGE_LENGTH_MAX:
                out.append(Message(stream_id, type_, flags, b"", length, True))
                available = len(self._buffer) - HEADER.size
                del self._buffer[: HEADER.size + min(length, available)]
                self._skip = length - min(length, available)
                continue
            end = HEADER.size + length
            if len(self._buffer) < end:
                break
            out.append(
                Message(stream_id, type_, flags, bytes(self._buffer[HEADER.size : end]), length)
            )
            del self._buffer[:end]
        return out


class Session:
    """One connection to an NRI runtime: the multiplexer, the plugin's ttRPC server on
    connection 1 (``handlers``: ``"service/method"`` -> :data:`Handler`) and its client on
    connection 2. Served from the calling thread; :meth:`close` may come from another."""

    def __init__(self, sock: socket.socket, handlers: Mapping[str, Handler]) -> None:
        self.sock = sock
        self.handlers = handlers
        self._readers = {
            PLUGIN_SERVICE_CONN: MessageReader(),
            RUNTIME_SERVICE_CONN: MessageReader(),
        }
        self._frame = bytearray()
        self._next_stream = 1
        self._answers: dict[int, pb.Response] = {}
        self._last_request = 0
        self._write_lock = threading.Lock()
        self._closed = False
        sock.settimeout(_POLL)

    def close(self) -> None:
        """Shut the connection down (a blocked :meth:`serve` returns)."""
        self._closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _send(self, conn_id: int, message: bytes) -> None:
        with self._write_lock:
            try:
                self.sock.sendall(mux_frames(conn_id, message))
            except OSError as e:
                raise PeerClosed(f"the runtime closed the NRI connection: {e.strerror}") from None

    def call(self, service: str, method: str, payload: bytes, *, timeout: float = 10.0) -> bytes:
        """Call ``service/method`` on the runtime; the response's payload, or RpcError."""
        stream = self._next_stream
        self._next_stream += 2
        request = pb.Request(
            service=service, method=method, payload=payload, timeout_nano=int(timeout * 1e9)
        )
        body = request.SerializeToString()
        self._send(
            RUNTIME_SERVICE_CONN, encode_message(stream, TYPE_REQUEST, FLAG_REMOTE_CLOSED, body)
        )
        deadline = time.monotonic() + timeout
        while stream not in self._answers:
            if time.monotonic() > deadline:
                raise RpcError(
                    Code.DEADLINE_EXCEEDED, f"{service}/{method}: no answer in {timeout:g}s"
                )
            self._pump(None)
        response = self._answers.pop(stream)
        if response.status.code != Code.OK:
            raise RpcError(response.status.code, f"{service}/{method}: {response.status.message}")
        return bytes(response.payload)

    def serve(self, stop: threading.Event) -> None:
        """Serve the runtime's calls until ``stop`` is set (returns) or the peer closes
        (raises :class:`PeerClosed`)."""
        while not stop.is_set():
            self._pump(stop)

    def _pump(self, stop: threading.Event | None) -> None:
        """Read what the socket has (waiting at most :data:`_POLL`) and act on it."""
        try:
            data = self.sock.recv(_READ)
        except TimeoutError:
            return
        except OSError as e:
            if self._closed:
                raise PeerClosed("the NRI connection was closed") from None
            raise PeerClosed(f"the runtime closed the NRI connection: {e.strerror}") from None
        if not data:
            held = len(self._frame) + sum(r.pending for r in self._readers.values())
            where = f" mid-message ({held} bytes of it received)" if held else ""
            raise PeerClosed(f"the runtime closed the NRI connection{where}")
        self._frame += data
        while len(self._frame) >= MUX_HEADER.size:
            conn_id, length = MUX_HEADER.unpack_from(self._frame)
            if length > MUX_PAYLOAD_MAX:
                raise ProtocolError(
                    f"NRI multiplexer frame of {length} bytes on connection {conn_id}: "
                    f"more than the {MUX_PAYLOAD_MAX} a frame may hold"
                )
            end = MUX_HEADER.size + length
            if len(self._frame) < end:
                break
            chunk = bytes(self._frame[MUX_HEADER.size : end])
            del self._frame[:end]
            reader = self._readers.get(conn_id)
            if reader is None:
                continue  # a connection nobody opened: mux.go drops it too
            for message in reader.feed(chunk):
                if conn_id == PLUGIN_SERVICE_CONN:
                    self._serve_one(message)
                else:
                    self._answer(message)

    def _answer(self, message: Message) -> None:
        """A message on the client's connection: the response to one of our calls."""
        if message.type != TYPE_RESPONSE or message.oversized:
            raise ProtocolError(
                f"ttRPC message of type {message.type} ({message.length} bytes) where a "
                "response was expected"
            )
        response = pb.Response()
        try:
            response.ParseFromString(message.payload)
        except Exception:  # protobuf's DecodeError; never a traceback for a peer's bytes
            raise ProtocolError("ttRPC response that is not a ttrpc.Response") from None
        self._answers[message.stream_id] = response

    def _serve_one(self, message: Message) -> None:
        """A message on the server's connection: a request to answer."""
        if message.type != TYPE_REQUEST:
            return  # no streams here: data or stray responses are dropped, as ttrpc's server does
        if message.oversized:
            self._reply(
                message.stream_id,
                Code.RESOURCE_EXHAUSTED,
                f"message length {message.length} exceed maximum message size of "
                f"{MESSAGE_LENGTH_MAX}",
            )
            return
        if message.stream_id % 2 != 1:
            self._reply(
                message.stream_id,
                Code.INVALID_ARGUMENT,
                "StreamID must be odd for client initiated streams",
            )
            return
        if message.stream_id <= self._last_request:
            self._reply(
                message.stream_id,
                Code.INVALID_ARGUMENT,
                "StreamID cannot be re-used and must increment",
            )
            return
        self._last_request = message.stream_id
        request = pb.Request()
        try:
            request.ParseFromString(message.payload)
        except Exception:  # protobuf's DecodeError
            self._reply(message.stream_id, Code.INVALID_ARGUMENT, "unmarshal request error")
            return
        handler = self.handlers.get(f"{request.service}/{request.method}")
        if handler is None:
            known = {key.split("/")[0] for key in self.handlers}
            what = (
                f"method {request.method}"
                if request.service in known
                else f"service {request.service}"
            )
            self._reply(message.stream_id, Code.UNIMPLEMENTED, what)
            return
        try:
            payload = handler(bytes(request.payload))
        except RpcError as e:
            self._reply(message.stream_id, e.code, e.message)
            return
        self._reply(message.stream_id, Code.OK, "", payload)

    def _reply(self, stream_id: int, code: int, text: str, payload: bytes = b"") -> None:
        response = pb.Response(status=pb.Status(code=code, message=text), payload=payload)
        self._send(
            PLUGIN_SERVICE_CONN,
            encode_message(stream_id, TYPE_RESPONSE, 0, response.SerializeToString()),
        )
