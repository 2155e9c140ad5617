"""Doctor check of ``nvhook-shim-server`` (docs/architecture.md D12): whether the native
front-end's GPU creates find it, or start the Python shim."""

from __future__ import annotations

import os
import socket
import stat
import sys

from nvhook.tools.doctor.base import Check, Options, under

#: What to run when the server is absent or stale (the packages' unit).
RESTART = "systemctl enable --now nvhook-shim-server.service"
#: How long the probe waits for the server to close the connection it opened and ended.
PROBE_TIMEOUT_S = 5.0


def _native_front_end(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def check_shim_server(opts: Options) -> list[Check]:
    """Where ``nvhook-runtime`` is the native front-end: is the server's socket in the cache
    directory, root's, and does it answer? Without the front-end the server is never asked,
    so nothing is said. On the live host (``--root /``) the socket is connected to and our
    end shut for writing at once, which the server takes as a probe and does not log: its
    child closes the connection. A connect alone proves nothing (the kernel completes it
    into the listen backlog of a server that no longer accepts), so the server answers only
    when that close arrives within :data:`PROBE_TIMEOUT_S`."""
    from nvhook.settings import CACHE_ENV, DEFAULT_CACHE_DIR
    from nvhook.shim_protocol import SOCKET_NAME

    bin_dir = opts.bin_dir or os.path.dirname(os.path.abspath(sys.executable))
    if not _native_front_end(os.path.join(bin_dir, "nvhook-runtime")):
        return []
    host = opts.cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR
    sock = os.path.join(under(opts.root, host) if not opts.cache_dir else host, SOCKET_NAME)
    slow = "creates that ask for GPUs start the Python shim (~15 ms a call instead of ~7)"
    try:
        st = os.lstat(sock)
    except FileNotFoundError:
        return [Check("start path", "warn", f"nvhook-shim-server is not running (no {sock}): "
                      f"{slow}", RESTART)]  # fmt: skip
    except OSError as e:
        return [Check("start path", "warn", f"cannot inspect {sock}: {e.strerror}: {slow}")]
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != 0:
        what = "not a socket" if not stat.S_ISSOCK(st.st_mode) else f"owned by uid {st.st_uid}"
        return [
            Check(
                "start path",
                "fail",
                f"{sock} is {what}: the native front-end does not use it ({slow})",
                f"rm {sock} && systemctl restart nvhook-shim-server.service",
            )
        ]
    if opts.root != "/":
        return [Check("start path", "ok", f"nvhook-shim-server socket {sock} (not probed: --root)")]
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    probe.settimeout(PROBE_TIMEOUT_S)
    try:
        probe.connect(sock)
        probe.shutdown(socket.SHUT_WR)
        probe.recv(1)  # b"": the server's child closed it (any byte: it answered too)
    except TimeoutError:
        return [
            Check(
                "start path",
                "fail",
                f"nvhook-shim-server on {sock} accepts no connection within "
                f"{PROBE_TIMEOUT_S:g} s (hung): GPU creates wait for the front-end's deadline, "
                "then start the Python shim",
                "systemctl restart nvhook-shim-server.service",
            )
        ]
    except OSError as e:
        why = (
            "connection refused: left by a server that stopped"
            if isinstance(e, ConnectionRefusedError)
            else e.strerror or str(e)
        )
        return [Check("start path", "warn", f"{sock}: {why}; {slow}", RESTART)]
    finally:
        probe.close()
    return [Check("start path", "ok", f"nvhook-shim-server answers on {sock}")]
