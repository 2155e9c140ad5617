"""gRPC servers on unix sockets of mode 0600, for nvhook's daemons (the device plugin, the
DRA driver) and the kubelet stand-ins beside them: one implementation, so they cannot differ.

Every socket served has mode :data:`SOCKET_MODE` (0600: kubelet and the plugins run as root)
whatever the umask. gRPC binds and listens in one call, with the mode the umask leaves, so
the chmod cannot come between them; and the umask is the whole process's, which other
threads (a running server's, a health loop) share, so it is not narrowed around the call
either. Instead :func:`bind_0600` binds the socket in a private 0700 directory beside its
path, which only root can enter, chmods it there, and renames it into place once the server
is started: at its path it is never wider than 0600, and never there before it serves.
:func:`serve_unix` adds the daemons' one-line errors. Not on the start path; takes the
``grpc.Server`` as it is (this module imports no grpc).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

from nvhook.errors import NvhookError

__all__ = ["SOCKET_MODE", "bind_0600", "serve_unix"]

#: The mode of every socket served, whatever the umask.
SOCKET_MODE = 0o600


def bind_0600(server: Any, path: str) -> bool:
    """Start ``server`` on the unix socket ``path``, mode :data:`SOCKET_MODE` (False: gRPC
    could not listen). Bound in a private directory beside ``path``, chmod'ed, the server
    started, then renamed to ``path`` (over a stale socket there): see the module's text."""
    private = tempfile.mkdtemp(prefix=".nvhook-", dir=os.path.dirname(path) or ".")
    staged = os.path.join(private, "s")
    try:
        if server.add_insecure_port(f"unix://{staged}") == 0:
            return False
        os.chmod(staged, SOCKET_MODE)
        server.start()
        os.rename(staged, path)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged)
        os.rmdir(private)


def serve_unix(server: Any, path: str, error: type[NvhookError]) -> None:
    """:func:`bind_0600` after removing a stale socket at ``path``; a failure stops
    ``server`` and is one ``error`` naming the socket."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    try:
        serving = bind_0600(server, path)
    except OSError as e:
        server.stop(grace=None)
        raise error(f"{path}: cannot serve there ({e.strerror}); check the directory") from None
    if not serving:
        server.stop(grace=None)
        raise error(f"{path}: cannot listen on this socket; check the directory")
