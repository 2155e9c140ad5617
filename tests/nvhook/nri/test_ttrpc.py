"""ttRPC over NRI's multiplexer (nvhook/nri/ttrpc.py): the framing, the 4 MiB limit, unknown
methods, a peer closing mid-message. The peer here is a socketpair speaking the Go sources'
format by hand (ttrpc channel.go, nri pkg/net/multiplex/mux.go); tests/e2e/engines/test_nri.py
has a real containerd as the peer."""

from __future__ import annotations

import hashlib
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nvhook.nri import pb as pb_package
from nvhook.nri.pb import ttrpc_pb2
from nvhook.nri.ttrpc import (
    FLAG_REMOTE_CLOSED,
    MESSAGE_LENGTH_MAX,
    MUX_PAYLOAD_MAX,
    MUX_WRITE_CHUNK,
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    Code,
    MessageReader,
    PeerClosed,
    ProtocolError,
    RpcError,
    Session,
    encode_message,
    mux_frames,
)

pb: Any = ttrpc_pb2
HERE = Path(pb_package.__file__).parent
#: sha256 of containerd/nri pkg/api/api.proto at tag v0.12.2 (SOURCES.md)
UPSTREAM_SHA256 = "b0dd9ea3b722e6e4a8d626a5164d4dfc1e72ffd176e7633cff3a70fd061cbc09"


def test_the_header_is_ttrpc_s_ten_bytes_big_endian() -> None:
    wire = encode_message(5, TYPE_REQUEST, FLAG_REMOTE_CLOSED, b"abc")
    assert wire == b"\x00\x00\x00\x03" + b"\x00\x00\x00\x05" + b"\x01" + b"\x01" + b"abc"


def test_the_mux_header_is_conn_id_then_length_and_splits_at_a_whole_message() -> None:
    assert mux_frames(2, b"xy") == b"\x00\x00\x00\x02\x00\x00\x00\x02xy"
    assert mux_frames(1, b"") == b"\x00\x00\x00\x01\x00\x00\x00\x00"
    big = bytes(MUX_PAYLOAD_MAX + 3)
    frames = mux_frames(1, big, size=MUX_PAYLOAD_MAX)
    first = struct.unpack(">II", frames[:8])
    assert first == (1, MUX_PAYLOAD_MAX)
    second = struct.unpack(">II", frames[8 + MUX_PAYLOAD_MAX : 16 + MUX_PAYLOAD_MAX])
    assert second == (1, 3)


def test_frames_written_fit_the_go_reader_s_4096_byte_buffer() -> None:
    """containerd closes a plugin whose frame is longer than its bufio.Reader's 4096 bytes."""
    frames = mux_frames(1, bytes(10000))
    sizes = []
    while frames:
        _, length = struct.unpack(">II", frames[:8])
        sizes.append(length)
        frames = frames[8 + length :]
    assert sizes == [MUX_WRITE_CHUNK, MUX_WRITE_CHUNK, 10000 - 2 * MUX_WRITE_CHUNK]
    assert MUX_WRITE_CHUNK == 4096


def test_the_reader_reassembles_messages_split_anywhere() -> None:
    wire = encode_message(1, TYPE_REQUEST, 1, b"one") + encode_message(3, TYPE_REQUEST, 1, b"two!")
    reader = MessageReader()
    got = []
    for i in range(len(wire)):
        got += reader.feed(wire[i : i + 1])
    assert [(m.stream_id, m.payload) for m in got] == [(1, b"one"), (3, b"two!")]
    assert reader.pending == 0


def test_a_message_over_4_mib_is_dropped_unbuffered_and_reported() -> None:
    reader = MessageReader()
    header = struct.pack(">IIBB", MESSAGE_LENGTH_MAX + 1, 7, TYPE_REQUEST, 1)
    [big] = reader.feed(header + bytes(1000))
    assert (big.oversized, big.stream_id, big.length) == (True, 7, MESSAGE_LENGTH_MAX + 1)
    assert reader.pending == MESSAGE_LENGTH_MAX + 1 - 1000  # still to skip, not held
    assert reader.feed(bytes(MESSAGE_LENGTH_MAX + 1 - 1000)) == []
    [after] = reader.feed(encode_message(9, TYPE_REQUEST, 1, b"ok"))
    assert (after.stream_id, after.payload) == (9, b"ok")
    with pytest.raises(RpcError, match="exceeds maximum message size"):
        encode_message(1, TYPE_REQUEST, 1, bytes(MESSAGE_LENGTH_MAX + 1))


class Peer:
    """The runtime's side, by hand: frames written and read raw."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def send(self, conn: int, message: bytes) -> None:
        self.sock.sendall(mux_frames(conn, message))

    def request(self, stream: int, service: str, method: str, payload: bytes = b"") -> None:
        body = pb.Request(service=service, method=method, payload=payload).SerializeToString()
        self.send(PLUGIN_SERVICE_CONN, encode_message(stream, TYPE_REQUEST, 1, body))

    def read_message(self) -> tuple[int, int, int, bytes]:
        """(conn, stream, type, payload) of the next whole message (one frame each here)."""
        while True:
            if len(self.buffer) >= 8:
                conn, length = struct.unpack(">II", self.buffer[:8])
                if len(self.buffer) >= 8 + length:
                    frame, self.buffer = self.buffer[8 : 8 + length], self.buffer[8 + length :]
                    size, stream, type_, _ = struct.unpack(">IIBB", frame[:10])
                    assert size == len(frame) - 10
                    return conn, stream, type_, frame[10:]
            data = self.sock.recv(65536)
            assert data, "the plugin closed"
            self.buffer += data

    def response(self) -> tuple[int, Any]:
        conn, stream, type_, payload = self.read_message()
        assert (conn, type_) == (PLUGIN_SERVICE_CONN, TYPE_RESPONSE)
        response = pb.Response()
        response.ParseFromString(payload)
        return stream, response


@pytest.fixture
def pair() -> Iterator[tuple[Session, Peer, threading.Event, list[BaseException]]]:
    ours, theirs = socket.socketpair()
    session = Session(ours, {"svc.Plugin/Echo": lambda p: b"echo:" + p, "svc.Plugin/Fail": _fail})
    stop = threading.Event()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            session.serve(stop)
        except (PeerClosed, ProtocolError) as e:
            errors.append(e)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    theirs.settimeout(5)
    yield session, Peer(theirs), stop, errors
    stop.set()
    thread.join(5)
    theirs.close()
    session.close()


def _fail(payload: bytes) -> bytes:
    raise RpcError(Code.PERMISSION_DENIED, "no GPUs for you")


def test_requests_are_answered_on_the_same_stream_and_connection(pair: Any) -> None:
    _, peer, _, _ = pair
    peer.request(1, "svc.Plugin", "Echo", b"hi")
    stream, response = peer.response()
    assert (stream, response.status.code, response.payload) == (1, Code.OK, b"echo:hi")
    peer.request(3, "svc.Plugin", "Fail")
    stream, response = peer.response()
    assert (stream, response.status.code) == (3, Code.PERMISSION_DENIED)
    assert response.status.message == "no GPUs for you"


def test_unknown_methods_and_services_are_unimplemented_as_ttrpc_says(pair: Any) -> None:
    _, peer, _, _ = pair
    peer.request(1, "svc.Plugin", "Nope")
    _, response = peer.response()
    assert (response.status.code, response.status.message) == (Code.UNIMPLEMENTED, "method Nope")
    peer.request(3, "other.Service", "Echo")
    _, response = peer.response()
    assert response.status.message == "service other.Service"


def test_stream_ids_must_be_odd_and_increase(pair: Any) -> None:
    _, peer, _, _ = pair
    peer.request(2, "svc.Plugin", "Echo")
    _, response = peer.response()
    assert response.status.code == Code.INVALID_ARGUMENT
    peer.request(5, "svc.Plugin", "Echo")
    assert peer.response()[1].status.code == Code.OK
    peer.request(3, "svc.Plugin", "Echo")
    assert "re-used" in peer.response()[1].status.message


def test_an_oversized_request_is_answered_resource_exhausted_and_the_next_served(
    pair: Any,
) -> None:
    _, peer, _, _ = pair
    body = pb.Request(service="svc.Plugin", method="Echo", payload=bytes(MESSAGE_LENGTH_MAX))
    raw = body.SerializeToString()
    message = struct.pack(">IIBB", len(raw), 1, TYPE_REQUEST, 1) + raw
    peer.sock.sendall(mux_frames(PLUGIN_SERVICE_CONN, message))
    stream, response = peer.response()
    assert (stream, response.status.code) == (1, Code.RESOURCE_EXHAUSTED)
    peer.request(3, "svc.Plugin", "Echo", b"after")
    assert peer.response()[1].payload == b"echo:after"


def test_a_peer_closing_mid_message_ends_the_session_saying_so(pair: Any) -> None:
    _, peer, stop, errors = pair
    whole = mux_frames(PLUGIN_SERVICE_CONN, encode_message(1, TYPE_REQUEST, 1, bytes(100)))
    peer.sock.sendall(whole[:50])
    peer.sock.close()
    for _ in range(50):
        if errors:
            break
        stop.wait(0.1)
    [error] = errors
    assert isinstance(error, PeerClosed)
    assert "mid-message (50 bytes of it received)" in str(error)


def test_an_oversized_mux_frame_is_a_protocol_error(pair: Any) -> None:
    _, peer, stop, errors = pair
    peer.sock.sendall(struct.pack(">II", 1, MUX_PAYLOAD_MAX + 1))
    for _ in range(50):
        if errors:
            break
        stop.wait(0.1)
    [error] = errors
    assert isinstance(error, ProtocolError)
    assert "more than the" in str(error)


def test_a_call_goes_out_on_the_client_connection_and_returns_its_answer() -> None:
    ours, theirs = socket.socketpair()
    session = Session(ours, {"svc.Plugin/Echo": lambda p: b"served:" + p})
    peer = Peer(theirs)
    theirs.settimeout(5)

    def runtime() -> None:
        conn, stream, type_, payload = peer.read_message()
        assert (conn, stream, type_) == (RUNTIME_SERVICE_CONN, 1, TYPE_REQUEST)
        request = pb.Request()
        request.ParseFromString(payload)
        assert (request.service, request.method, request.payload) == ("rt.Runtime", "Reg", b"me")
        # the runtime calls the plugin before it answers, as NRI's Configure may
        peer.request(1, "svc.Plugin", "Echo", b"x")
        _, response = peer.response()
        assert response.payload == b"served:x"
        answer = pb.Response(status=pb.Status(code=0), payload=b"welcome")
        peer.send(
            RUNTIME_SERVICE_CONN, encode_message(1, TYPE_RESPONSE, 0, answer.SerializeToString())
        )

    thread = threading.Thread(target=runtime, daemon=True)
    thread.start()
    assert session.call("rt.Runtime", "Reg", b"me") == b"welcome"
    thread.join(5)
    session.close()
    theirs.close()


def test_the_proto_is_upstream_s_and_the_modules_protoc_s_output(tmp_path: Path) -> None:
    assert hashlib.sha256((HERE / "api.proto").read_bytes()).hexdigest() == UPSTREAM_SHA256
    assert "Apache License" in (HERE / "LICENSE").read_text()
    pytest.importorskip("grpc_tools", reason="grpcio-tools is a test dependency")
    out = tmp_path / "out"
    (out / "nri/pb").mkdir(parents=True)
    for name in ("api.proto", "ttrpc.proto"):
        (out / "nri/pb" / name).write_bytes((HERE / name).read_bytes())
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{out}", f"--python_out={out}",
         "nri/pb/api.proto", "nri/pb/ttrpc.proto"],
        check=True, cwd=out,
    )  # fmt: skip
    for name in ("api_pb2.py", "ttrpc_pb2.py"):
        assert (out / "nri/pb" / name).read_text() == (HERE / name).read_text(), (
            f"{name}: regenerate it (nvhook/nri/pb/SOURCES.md)"
        )
