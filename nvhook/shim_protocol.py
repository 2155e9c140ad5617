"""The shim server's wire protocol: what ``nvhook-shim-server`` and the native front-end say.

A frame is :data:`MAGIC`, the body's length (little-endian 32 bits) and the body. A request's
body is NUL-separated fields ending in a NUL: :data:`PROTOCOL`, the caller's umask (octal),
its program's path, the argv count and argv, the environment count and environment; it comes
with :data:`FDS` descriptors (cwd, stdin, stdout, stderr). A reply is :data:`ACK` once the
peer and the request are checked, then :data:`EXEC` with the runtime's path or :data:`EXIT`
with a code. The server (:mod:`nvhook.server`) and ``nvhook doctor`` import these values;
the front-end has them compiled in through the generated contract header
(:mod:`nvhook.native.contract`). docs/start-path.md (D12) describes the exchange.
"""

from __future__ import annotations

import os
import struct

__all__ = [
    "ACK",
    "EXEC",
    "EXIT",
    "FDS",
    "HEADER",
    "MAGIC",
    "MAX_REQUEST",
    "PROTOCOL",
    "SOCKET_NAME",
    "Request",
    "RequestError",
    "frame",
    "parse_request",
]

#: The protocol version, first field of every request; the front-end has it compiled in.
PROTOCOL = b"1"
#: The first bytes of every frame.
MAGIC = b"nvhz"
#: The socket's name in the cache directory (``$NVHOOK_CACHE_DIR``, default ``/run/nvhook``).
SOCKET_NAME = "shim.sock"
#: The largest request body read (argv and environment; Linux's own limit is ~2 MiB).
MAX_REQUEST = 4 * 1024 * 1024
#: The descriptors a request carries: cwd, stdin, stdout, stderr.
FDS = 4
#: The replies' words: the request is taken; exec the runtime at PATH; exit with CODE.
ACK = b"ack"
EXEC = b"exec"
EXIT = b"exit"
#: A frame's header: :data:`MAGIC`, then the body's length.
HEADER = struct.Struct("<4sI")


class RequestError(Exception):
    """A request that is not one (the child closes the connection: the front-end falls back)."""


class Request:
    """One call, as the front-end sent it."""

    __slots__ = ("argv", "env", "program", "umask")

    def __init__(self, umask: int, program: str, argv: list[str], env: list[str]) -> None:
        self.umask = umask
        self.program = program
        self.argv = argv
        self.env = env


def frame(body: bytes) -> bytes:
    """``body`` as one message: :data:`MAGIC`, its length, itself."""
    return HEADER.pack(MAGIC, len(body)) + body


def parse_request(body: bytes) -> Request:
    """The request in ``body`` (a frame's body); :class:`RequestError` if malformed."""
    if not body.endswith(b"\0"):
        raise RequestError("the request does not end with a NUL")
    fields = body[:-1].split(b"\0")
    if fields[0] != PROTOCOL:
        raise RequestError(f"protocol {fields[0][:16]!r}, expected {PROTOCOL!r}")
    try:
        umask = int(fields[1], 8)
        argc = int(fields[3])
        envc = int(fields[4 + argc]) if argc >= 0 else -1
    except (IndexError, ValueError):
        raise RequestError("a count or the umask is not a number") from None
    if not 0 <= umask <= 0o777 or argc < 0 or envc < 0 or len(fields) != 5 + argc + envc:
        raise RequestError("the umask or a count does not match the request")
    program = os.fsdecode(fields[2])
    if not program.startswith("/"):
        raise RequestError("the program path is not absolute")
    argv = [os.fsdecode(a) for a in fields[4 : 4 + argc]]
    env = [os.fsdecode(e) for e in fields[5 + argc :]]
    return Request(umask, program, argv, env)
