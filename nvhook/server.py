"""``nvhook-shim-server``: the runtime shim, imported once and forked per call (D12).

CPython's start and the shim's imports cost more than the front-end's 12 ms budget for a
``create`` with a GPU, whatever the shim does. This server imports the start path's
modules once (:data:`PRELOAD`), listens on a unix socket (:data:`SOCKET_NAME` in the
cache directory: ``/run/nvhook/shim.sock`` by default, a directory only root may write)
and, for each connection, **forks** a child that runs :func:`nvhook.call.handle`, the
very code the Python shim runs, with the caller's argv, environment, working directory,
umask and standard streams. The parent never reads a request: it accepts (or leaves
the accept to its spare child, below), checks that its own code is still the code on
disk, and forks. The native front-end
(``nvhook/native/nvhook-runtime.c``) is its only client: it sends the calls it would
hand to the Python shim, and execs the runtime the reply names itself (containerd waits
on its pid, runc inherits its stdio), or exits with the code. Anything that goes wrong
before the reply makes the front-end exec the Python shim with the call unchanged.

Protocol (version :data:`PROTOCOL`), over ``SOCK_STREAM``; every message is a frame,
``b"nvhz"``, the body's length (4 bytes, little-endian), the body:

- request (front-end → server), at most :data:`MAX_REQUEST` bytes, NUL-terminated fields:
  ``1``, the umask (octal), the front-end's own path (the program the shim must never
  pick as the runtime), the number of arguments, each argument (after the program
  name), the number of environment entries, each entry; sent with ``SCM_RIGHTS``
  carrying exactly four descriptors: the caller's working directory, stdin, stdout,
  stderr;
- ``ack`` (server → front-end): the child checked the peer and the request and starts
  running the call: until then the front-end waits at most its deadline (a server
  that does not answer is a fallback), after it as long as the call takes (the
  Python shim would take as long);
- the outcome: ``exec\\0PATH`` (exec the runtime at PATH with the original argv) or
  ``exit\\0CODE`` (exit with CODE, 0-255; the messages are already written).

A connection closed before its first byte is a liveness probe (``nvhook doctor``): the
child exits without a word.

Who may ask: only a peer whose ``SO_PEERCRED`` is uid 0 and gid 0, in the server's
mount, pid and user namespaces, with the server's effective capabilities, seccomp
mode, no_new_privs flag and LSM label (:func:`nvhook.peer.peer_problem`, the peer pinned
by a pidfd where the kernel allows): then the child can do nothing the Python shim would
not do for that caller. Anything else is refused before a byte of the
request is read, and the front-end falls back to the Python shim, which runs with the
caller's own privileges.

Upgrades: the identity (device, inode, size, mtime) of every file and directory of the
``oci`` and ``nvhook`` packages, of this server's launcher and of the interpreter is
recorded at start; once the calls in hand are served (their children gone, looked at every
:data:`CHECK_AFTER_S`), at least every second under calls that never pause or hang, and
every second while idle it is compared again, and a server whose code changed on disk
stops (exit :data:`STALE_EXIT`, so that systemd's ``Restart=on-failure`` starts the new
code): the front-end falls back
meanwhile; a call meanwhile is served with the code loaded, as a call a moment earlier
would have been. The check stats every file (~1-2 ms): before the fork it was on every
call's path, and right after it, beside the child, it took a core the child wanted
(bench/runtime.py ``--parts`` on 2 loaded cores: the fork until the child runs, 2.0-3.2 ms
then, 0.7-0.9 ms after).

Spare child: the next call's child is forked ahead, as soon as no call is in hand (the
spare that served the last one says so by exiting), and runs a create of its own at
``SCHED_IDLE`` before it accepts the next connection itself (:class:`_Spare`): a child
forked at the call paid a copy-on-write fault for each page the call writes (~650-700 of
them, ~2 ms of a 1-GPU create). A call that finds no spare ready is forked for as before.

Settings, the CDI index and specs are the shim's business: each child loads them as the
shim does (by file identity), so a changed file counts from the next call. One thing the
parent does ahead for them (:class:`_Ahead`): it parses the trusted CDI spec files of its
own settings' directories (the node's config) before it listens and then with its code
check, and a child's resolve uses such a value only for a file its own listing finds
trusted with the identity the value was read with (:func:`oci.cdi.index.parse_ahead`); any
other file it reads and parses as the shim does. The parent reads no request for this:
only the files its own settings name.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import sys
import time

from nvhook.peer import peer_problem, remember_self
from nvhook.shim_protocol import (
    ACK,
    EXEC,
    EXIT,
    FDS,
    HEADER,
    MAGIC,
    MAX_REQUEST,
    PROTOCOL,
    SOCKET_NAME,
    Request,
    RequestError,
    frame,
    parse_request,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = [
    "ACK",
    "EXEC",
    "EXIT",
    "FDS",
    "MAGIC",
    "MAX_REQUEST",
    "PRELOAD",
    "PROTOCOL",
    "SOCKET_NAME",
    "STALE_EXIT",
    "Request",
    "RequestError",
    "code_identity",
    "default_socket",
    "frame",
    "main",
    "parse_request",
    "peer_problem",
    "serve",
]

PROG = "nvhook-shim-server"
#: Calls served at once; a connection beyond is closed unread (the front-end falls back).
MAX_CHILDREN = 64
#: How long a child waits for the rest of a request.
RECEIVE_TIMEOUT_S = 5.0
#: How often an idle server checks that its code is the code on disk, and how often at
#: least under calls that never pause.
IDLE_CHECK_S = 1.0
#: How often the server looks, after a call, whether the calls in hand are served and
#: :data:`QUIET_S` has passed since the last one (then it checks its code and parses ahead,
#: off their cores and off the start of their containers).
CHECK_AFTER_S = 0.02
#: How long after the last call the server waits before that: the runtime it named starts
#: the container then (runc create: ~40-80 ms here), which the check would slow.
QUIET_S = 0.05
#: The exit status of a server whose code changed on disk (EX_TEMPFAIL: restart me).
STALE_EXIT = 75
#: The modules a create imports (jit and cdi, errors included), imported before forking:
#: a child then imports nothing (tests/nvhook/test_server.py checks the list).
PRELOAD = (
    "nvhook.call",
    "nvhook.cdihints",
    "nvhook.constants",
    "nvhook.create",
    "nvhook.devices.gpus",
    "nvhook.devices.miglayout",
    "nvhook.devices.procfs",
    "nvhook.discover.arch",
    "nvhook.discover.catalog",
    "nvhook.discover.driver",
    "nvhook.discover.elf",
    "nvhook.discover.files",
    "nvhook.discover.hooks",
    "nvhook.discover.ldsocache",
    "nvhook.discover.libraries",
    "nvhook.discover.nodes",
    "nvhook.discover.root",
    "nvhook.errors",
    "nvhook.gpurecords",
    "nvhook.hook.app_profile",
    "nvhook.hook.create_symlinks",
    "nvhook.hook.update_ldcache",
    "nvhook.legacyhook",
    "nvhook.native",
    "nvhook.planner",
    "nvhook.requests.ids",
    "nvhook.requests.parse",
    "nvhook.requests.policy",
    "nvhook.requests.requirements",
    "nvhook.requests.values",
    "nvhook.settings",
    "oci._cache",
    "oci._frozen",
    "oci.argv",
    "oci.bundle",
    "oci.cdi.apply",
    "oci.cdi.decode",
    "oci.cdi.edits",
    "oci.cdi.hostcheck",
    "oci.cdi.index",
    "oci.cdi.kept",
    "oci.cdi.names",
    "oci.cdi.parse",
    "oci.cdi.registry",
    "oci.cdi.spec",
    "oci.cdi.trust",
    "oci.cdi.version",
    "oci.errors",
    "oci.jsoncodec",
    "oci.nesting",
    "oci.runclog",
    "tomllib",
    "traceback",
)


class Probe(Exception):
    """A connection closed before its first byte: a liveness probe (``nvhook doctor``),
    answered by the accept itself and not logged."""


# --------------------------------------------------------------------------- the child


def _receive(conn: socket.socket) -> tuple[bytes, list[int]]:
    """One request frame's body and its descriptors; :class:`RequestError` if malformed."""
    fds: list[int] = []
    try:
        data, ancillary, flags, _ = conn.recvmsg(
            65536, socket.CMSG_SPACE(FDS * 4), socket.MSG_CMSG_CLOEXEC
        )
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                fds += struct.unpack(f"{usable // 4}i", payload[:usable])
        if not data and not fds:
            raise Probe
        if flags & socket.MSG_CTRUNC or len(fds) != FDS:
            raise RequestError(f"{len(fds)} descriptors, expected {FDS}")
        while len(data) < HEADER.size:
            more = conn.recv(HEADER.size - len(data))
            if not more:
                raise RequestError("the connection closed in the header")
            data += more
        magic, length = HEADER.unpack(data[: HEADER.size])
        if magic != MAGIC or length > MAX_REQUEST:
            raise RequestError("not a request frame, or too long")
        chunks = [data[HEADER.size :]]
        got = len(chunks[0])
        while got < length:
            more = conn.recv(min(length - got, 1 << 20))
            if not more:
                raise RequestError("the connection closed in the request")
            chunks.append(more)
            got += len(more)
        if got != length:
            raise RequestError("more bytes than the frame holds")
        return b"".join(chunks), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _streams() -> None:
    """Fresh ``sys.std*`` over descriptors 0-2, as CPython makes them (UTF-8 mode)."""
    sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)  # noqa: SIM115
    line = 1 if os.isatty(1) else -1
    sys.stdout = open(1, "w", line, "utf-8", "surrogateescape", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", 1, "utf-8", "backslashreplace", closefd=False)  # noqa: SIM115


def _become(request: Request, fds: list[int], pid: int) -> None:
    """Take on the caller's umask, working directory, streams, environment and argv."""
    import stat

    cwd, *streams = fds
    if any(fd <= 2 for fd in fds) or not stat.S_ISDIR(os.fstat(cwd).st_mode):
        raise RequestError("a descriptor is not what it should be")
    os.umask(request.umask)
    os.fchdir(cwd)
    for target, fd in enumerate(streams):
        os.dup2(fd, target)
    for fd in fds:
        os.close(fd)
    os.environ.clear()
    for entry in request.env:  # as CPython reads its environ: the first of a name wins
        name, eq, value = entry.partition("=")
        if eq and name and name not in os.environ:
            os.environ[name] = value
    sys.argv = [request.program, *request.argv]
    _streams()
    import nvhook.call

    nvhook.call._caller_pid = pid


def _run(argv: Sequence[str]) -> bytes:
    """:func:`nvhook.call.handle` as the Python shim runs it; the reply's body."""
    from nvhook.call import handle

    try:
        step = handle(argv)
        if isinstance(step, int):
            code = step
        else:
            step.announce()
            return EXEC + b"\0" + os.fsencode(step.runtime)
    except SystemExit as e:  # as the interpreter ends on one
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            sys.stderr.write(f"{e.code}\n")
            code = 1
    except BaseException:
        import traceback

        traceback.print_exc()  # as the interpreter ends on an uncaught exception
        code = 1
    return EXIT + b"\0" + str(code & 0xFF).encode()


def _child(conn: socket.socket, trace: _Trace | None = None) -> None:
    """Serve the call on ``conn`` (in the forked child; never returns)."""
    mark = _no_mark if trace is None else trace.mark
    mark("child")
    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        pid, problem = peer_problem(conn)
        mark("peer checked")
        if problem is not None:
            raise RequestError(problem)
        conn.settimeout(RECEIVE_TIMEOUT_S)
        body, fds = _receive(conn)
        mark("request received")
        try:
            request = parse_request(body)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        mark("request parsed")
        conn.sendall(frame(ACK))
        mark("ack sent")
        conn.settimeout(None)
        _become(request, fds, pid)
        mark("caller's cwd, streams, env taken on")
    except Probe:
        os._exit(0)
    except (RequestError, OSError) as e:
        _say(f"refused a request: {e}")
        os._exit(0)
    if trace is not None:
        trace.wrap_start_path()
    reply = _run(request.argv)
    mark("call handled")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):  # the caller's streams: its reader sees EOF when we are done
        os.dup2(null, target)
    with contextlib.suppress(OSError):
        conn.sendall(frame(reply))
    mark("reply sent")
    os._exit(0)


# --------------------------------------------------------------------------- the trace


def _no_mark(name: str) -> None:
    pass


#: What ``--trace`` times in a child's call, (module, attribute[, class attribute]):
#: each call's start and end (the names the start path looks them up by at call time).
TRACED: tuple[tuple[str, str, str], ...] = (
    ("nvhook.call", "handle", ""),
    ("oci.argv", "RuntimeArgs", "parse"),
    ("nvhook.settings", "load_settings", ""),
    ("nvhook.native", "ensure_data", ""),
    ("nvhook.call", "find_runtime", ""),
    ("oci.bundle", "Bundle", "load"),
    ("nvhook.create", "parse_requests", ""),
    ("nvhook.create", "_resolve_cdi", ""),
    ("oci.cdi.index", "resolve", ""),
    ("oci.cdi.registry", "read_checked_stat", ""),
    ("nvhook.planner", "plan", ""),
    ("oci.cdi.apply", "apply", ""),
    ("nvhook.legacyhook", "without_prestart_hooks", ""),
    ("oci.bundle", "Bundle", "save"),
    ("os", "fsync", ""),
    ("nvhook.call", "_log", ""),
)


class _Trace:
    """``nvhook-shim-server --trace FILE``: where a call's time goes (bench/runtime.py
    ``--parts``). Each line appended to FILE is ``PID NAME START_NS END_NS`` on
    ``CLOCK_MONOTONIC`` (a point has START = END): the parent's accept, code check and
    fork, the child's steps, and every call of :data:`TRACED`. Off (the default), the
    server runs no line of this; on, a child's functions are wrapped after the fork."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def write(self, name: str, start: int, end: int) -> None:
        os.write(self.fd, f"{os.getpid()} {name} {start} {end}\n".encode())

    def mark(self, name: str) -> None:
        now = time.monotonic_ns()
        self.write(name.replace(" ", "_"), now, now)

    def wrap_start_path(self) -> None:
        import functools
        import importlib

        for module_name, attribute, method in TRACED:
            module = importlib.import_module(module_name)
            owner: object = getattr(module, attribute) if method else module
            name = method or attribute
            original = getattr(owner, name)
            label = f"{module_name}.{attribute}{'.' + method if method else ''}"
            is_classmethod = isinstance(vars(owner).get(name), classmethod)
            func = original.__func__ if is_classmethod else original

            def timed(*args: object, _f: Any = func, _label: str = label, **kw: object) -> Any:
                start = time.monotonic_ns()
                try:
                    return _f(*args, **kw)
                finally:
                    self.write(_label, start, time.monotonic_ns())

            functools.update_wrapper(timed, func)
            setattr(owner, name, classmethod(timed) if is_classmethod else timed)


# --------------------------------------------------------------------------- the parent


#: One entry of :func:`code_identity`: ``("f", path, device, inode, size, mtime)`` for a
#: file, ``("d", path, names…)`` for a directory (``__pycache__`` left out, sorted),
#: ``("-", path)`` for a path that was not there.
_Identity = tuple[object, ...]


def code_identity() -> tuple[_Identity, ...]:
    """What identifies the code a child would run: every file of the ``oci`` and ``nvhook``
    packages (``__pycache__`` left out) and the names in each of their directories (a new
    or removed module), the launcher, the interpreter. Directories are compared by their
    names, not their mtime: the interpreter may add a ``__pycache__`` to one."""
    import nvhook
    import oci

    files = [sys.executable, os.path.abspath(sys.argv[0])] if sys.argv[0] else [sys.executable]
    found: list[_Identity] = []
    for package in (oci, nvhook):
        root = os.path.dirname(os.path.abspath(package.__file__ or ""))
        for directory, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            entries = sorted(n for n in (*dirs, *names) if n != "__pycache__")
            found.append(("d", directory, *entries))
            files += [os.path.join(directory, n) for n in sorted(names)]
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            found.append(("-", path))
            continue
        found.append(("f", path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(found)


def _unchanged(recorded: tuple[_Identity, ...]) -> bool:
    """Whether :func:`code_identity` would still return ``recorded``."""
    for kind, path, *rest in recorded:
        assert isinstance(path, str)
        try:
            if kind == "f":
                st = os.stat(path)
                now: list[object] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]
            elif kind == "d":
                now = [n for n in sorted(os.listdir(path)) if n != "__pycache__"]
            else:
                now = [] if not os.path.lexists(path) else ["there"]
        except OSError:
            return False
        if now != rest:
            return False
    return True


def default_socket() -> str:
    """``shim.sock`` in the cache directory (``$NVHOOK_CACHE_DIR``, else ``/run/nvhook``)."""
    from nvhook.settings import cache_directory

    return os.path.join(cache_directory(), SOCKET_NAME)


class ServerError(Exception):
    """Why the server cannot start (one line naming the fault and the fix)."""


def _listen(path: str) -> tuple[socket.socket, tuple[int, int]]:
    """A socket listening at ``path``, mode 0600, in a directory only root may write."""
    import stat

    directory = os.path.dirname(path) or "."
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    st = os.stat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise ServerError(
            f"{directory}: not a directory that only root may write: "
            f"chown root {directory} && chmod go-w {directory}, or choose another --socket"
        )
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise ServerError(f"{path} exists and is not a socket: remove it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # left by a server that is gone
        else:
            raise ServerError(f"{path}: another server listens there: stop it first")
        finally:
            probe.close()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    listener.listen(128)
    st = os.stat(path)
    return listener, (st.st_dev, st.st_ino)


def _say(message: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"{PROG}: {message}\n".encode(errors="backslashreplace"))


class _Stop(Exception):
    pass


def _stop(number: int, frame: object) -> None:
    raise _Stop


def serve(path: str, *, ready: int = -1, trace: str | None = None) -> int:
    """Serve calls at ``path`` until SIGTERM (0) or a code change on disk (:data:`STALE_EXIT`).

    ``ready``: a descriptor to write one byte to and close once listening (tests).
    ``trace``: a file to append each call's timings to (:class:`_Trace`).
    """
    import importlib

    if os.geteuid() != 0:
        raise ServerError("must run as root: the front-end talks only to a root server")
    recorded = code_identity()
    for name in PRELOAD:
        importlib.import_module(name)
    if not _unchanged(recorded):
        _say("the code changed on disk while starting: exiting to be started again")
        return STALE_EXIT
    remember_self()  # the server's side of every peer check, read once
    warm()
    ahead = _Ahead(os.path.dirname(path))
    ahead.parse()
    listener, identity = _listen(path)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    _say(f"listening on {path} (pid {os.getpid()})")
    if ready >= 0:
        os.write(ready, b"1")
        os.close(ready)
    tracer = None if trace is None else _Trace(trace)
    mark = _no_mark if tracer is None else tracer.mark
    children: set[int] = set()
    code = 0
    checked = time.monotonic()  # the code's last check; due: a call was forked since
    due = False
    last_call = 0.0
    spare: _Spare | None = None
    busy: _Spare | None = None  # the spare serving the call it accepted: EOF once served
    try:
        while True:
            _reap(children)
            if spare is not None and spare.pid not in children:
                spare.close()  # it died before a call was handed to it
                spare = None
            if busy is not None and busy.pid not in children:
                busy.close()
                busy = None
            if spare is None and not children:  # no call in hand: the next spare, now
                spare = _fork_spare(listener, tracer, children)
            timeout = CHECK_AFTER_S if due else IDLE_CHECK_S
            try:
                if spare is not None:
                    event = spare.wait(listener, timeout)  # TimeoutError: nothing came
                    if event == "taken":  # the spare accepted a call itself
                        busy, spare = spare, None
                        last_call = time.monotonic()
                        due = True
                        continue
                    if event == "died":
                        spare.close()
                        spare = None
                        continue
                    if event is None:
                        continue
                elif busy is not None and busy.served(listener, timeout):
                    children.discard(busy.pid)  # reaped: its call is served
                    busy.close()
                    busy = None
                    continue  # the next spare is forked at once
                listener.settimeout(timeout)
                conn, _ = listener.accept()
            except TimeoutError:
                _reap(children)
                serving = len(children) - (spare is not None)
                now = time.monotonic()
                if due and (serving or now - last_call < QUIET_S) and now - checked < IDLE_CHECK_S:
                    continue  # calls in hand, or their containers starting: not yet
                if not _unchanged(recorded):
                    _say("nvhook's code changed on disk: exiting to be started again")
                    code = STALE_EXIT
                    break
                if due:
                    mark("code unchanged")
                ahead.parse()
                if due:
                    mark("specs parsed ahead")
                checked, due = time.monotonic(), False
                continue
            except OSError as e:  # EMFILE, ENOBUFS…: that caller falls back; go on
                _say(f"accept failed: {e.strerror}")
                time.sleep(0.1)
                continue
            last_call = time.monotonic()
            with conn:
                mark("accepted")
                if spare is not None and spare.take(conn):
                    spare = None  # handed over; the next one once the calls are served
                    mark("handed to the spare")
                    due = True
                    continue
                if spare is not None and spare.taken:  # it accepted another meanwhile
                    busy, spare = spare, None
                if len(children) >= MAX_CHILDREN:
                    _reap(children)
                    if len(children) >= MAX_CHILDREN:
                        continue  # closed unread: that caller falls back
                try:
                    pid = os.fork()
                except OSError as e:  # EAGAIN, ENOMEM: closed unread, that caller falls back
                    _say(f"fork failed: {e.strerror}")
                    continue
                if pid == 0:
                    try:
                        listener.close()
                        _child(conn, tracer)
                    except BaseException:  # a bug here: said where the call's stderr is
                        import traceback

                        traceback.print_exc()
                    finally:
                        os._exit(1)
                children.add(pid)
                mark("forked")
            due = True
            # The check once the calls in hand are served (the timeout branch above):
            # beside a child it took ~1-2 ms of a core the child wanted (2 cores, loaded).
            # Under calls that never pause, once a second still. Meanwhile a call runs the
            # code loaded, as it would have a moment earlier.
            if time.monotonic() - checked >= IDLE_CHECK_S:
                if not _unchanged(recorded):
                    _say("nvhook's code changed on disk: exiting to be started again")
                    code = STALE_EXIT
                    break
                mark("code unchanged")
                checked, due = time.monotonic(), False
    except (_Stop, KeyboardInterrupt):
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if spare is not None:
            spare.close()  # it reads EOF and exits
        if busy is not None:
            busy.close()
        try:
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) == identity:
                os.unlink(path)
        except OSError:
            pass
        listener.close()
    return code


#: How many times :func:`warm` runs a create: CPython specializes a function's bytecode
#: after a few calls (PEP 659), so that a child finds it specialized.
WARM_ROUNDS = 20
#: The CDI kind of :func:`warm`'s own spec (``.invalid``: RFC 2606, no vendor's).
WARM_KIND = "warm.nvhook.invalid/gpu"


def warm(rounds: int = WARM_ROUNDS) -> None:
    """Run a cdi create of a container of its own ``rounds`` times, in a temporary
    directory that is removed (settings file, spec, bundle, cache: nothing of the node's
    is read or written, and the log is the caller's business, not this), before listening.

    Each child runs the code of the parent: code the parent never ran (CPython 3.11+
    specializes bytecode as it runs, PEP 659) is specialized again in every child, in pages
    it shares copy-on-write with the parent. ``bench/instructions.py``: a server child's
    1-GPU create, 13.31 M -> 12.33 M instructions (cdi, -7.3%), 12.66 M -> 12.30 M (jit,
    whose plan this does not run: -2.9%); ~60 ms more at the server's start. A failure is
    said and ignored: the calls are served as without it."""
    import tempfile

    from nvhook.create import prepare
    from nvhook.devices.miglayout import GPU_ENV
    from nvhook.settings import CACHE_ENV, load_settings
    from oci.argv import RuntimeArgs

    saved = os.environ.get(CACHE_ENV)
    try:
        with tempfile.TemporaryDirectory(prefix="nvhook-shim-server-warm-") as top:
            specs, bundle, cache = (os.path.join(top, n) for n in ("cdi", "bundle", "cache"))
            for directory in (specs, bundle, cache):
                os.mkdir(directory, 0o700)
            gpus = os.path.join(top, "proc/driver/nvidia/gpus")  # the records' shape
            for i in range(4):
                os.makedirs(os.path.join(gpus, f"0000:00:00.{i}"))
            lib = os.path.join(top, "libwarm.so.1")
            with open(lib, "w"):
                pass
            node = {"path": "/dev/nvhook-warm0", "hostPath": "/dev/null", "type": "c",
                    "major": 1, "minor": 3}  # fmt: skip
            mount = {"hostPath": lib, "containerPath": "/usr/lib/libwarm.so.1",
                     "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}  # fmt: skip
            hook = {"hookName": "createContainer", "path": "/bin/true", "args": ["true"]}
            spec = {"cdiVersion": "0.5.0", "kind": WARM_KIND,
                    "devices": [{"name": str(i), "containerEdits": {  # a generated spec's env
                                 "env": [f"{GPU_ENV}{i}=GPU-warm-{i}@{gpus}/0000:00:00.{i}"],
                                 "deviceNodes": [node]}} for i in range(4)],
                    "containerEdits": {"env": ["WARM=1"], "mounts": [mount] * 2,
                                       "hooks": [hook]}}  # fmt: skip
            with open(os.path.join(specs, "warm.json"), "w") as f:
                json.dump(spec, f)
            config = os.path.join(top, "config.toml")
            with open(config, "w") as f:
                f.write(f'[runtime]\nmode = "cdi"\n[cdi]\nspec_dirs = [{json.dumps(specs)}]\n')
            container = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
                         "process": {"args": ["true"], "cwd": "/", "env": ["PATH=/bin"]},
                         "annotations": {"cdi.k8s.io/warm": f"{WARM_KIND}=1"},
                         "mounts": [], "linux": {}}  # fmt: skip
            argv = ["--root", os.path.join(top, "state"), "create", "--bundle", bundle, "warm"]
            os.environ[CACHE_ENV] = cache
            for _ in range(rounds):
                with open(os.path.join(bundle, "config.json"), "w") as f:
                    json.dump(container, f)
                settings = load_settings(config, cache_dir=cache)
                prepare(RuntimeArgs.parse(argv, cwd=top), settings)
    except Exception as e:  # a bug here: the calls are served unwarmed
        _say(f"warm-up failed ({type(e).__name__}: {e}); serving unwarmed")
    finally:
        if saved is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = saved


class _Ahead:
    """The CDI spec files of the server's own settings parsed ahead, in the parent, before it
    listens and then with its code check (once the calls in hand are served, and every
    second while idle): :func:`oci.cdi.index.parse_ahead`, whose values the children
    inherit. A call uses one only for a file it lists as trusted, with the identity it was
    read with; anything else is read and parsed in the call as before. The settings are the
    node's (``$NVHOOK_CONFIG`` of the server, else the default file), their cache the
    server's directory; a failure is said once and ignored (the calls parse as before)."""

    def __init__(self, cache: str) -> None:
        self.cache = cache
        self.said = ""

    def parse(self) -> None:
        from nvhook.settings import load_settings
        from oci.cdi.index import parse_ahead

        try:
            parse_ahead(load_settings(cache_dir=self.cache).cdi_spec_dirs)
        except Exception as e:  # a bad config (said by every call too), or a bug: none kept
            parse_ahead(())
            line = f"CDI specs not parsed ahead ({type(e).__name__}: {e}); the calls parse them"
            if line != self.said:
                _say(line)
                self.said = line


class _Spare:
    """A child forked ahead of the next call (the parent's end of its control socket).

    It runs a create of its own first (:func:`warm`, one round) and a peer check against
    itself: the pages a call writes are then its own, where a child forked at the call pays
    a copy-on-write fault for each. Measured in forked children of a process holding
    :data:`PRELOAD` and warmed (2 cores, load 1.3): the peer check and a cdi create's
    ``handle`` took 4.81 ms and 653 minor faults in a fresh child, 2.63 ms and 97 in one
    that had done this (jit: 4.82 ms, 704 -> 3.79 ms, 202). It tells the parent it is ready
    with one byte (``r``), then accepts the next connection on the listening socket itself
    and says so (``t``): from its ``r`` on the parent waits on this socket alone, so that a
    call wakes only the child that serves it (``bench/runtime.py --parts``: accept to the
    child 0.15 ms handed over, ~0 accepted). A connection the parent accepted before it
    read the ``r`` is passed with ``SCM_RIGHTS``; EOF (the parent stopping) makes it exit.
    One at a time: a call finding none ready is forked for as before, and the next spare is
    forked once no call is in hand (not waiting for :data:`QUIET_S`, which the code check
    waits for: forked only after that, calls ~20-50 ms apart found none ready, 67 of 84 in
    ``bench/runtime.py``'s interleaved rows); it warms up at ``SCHED_IDLE`` (only on idle
    CPU: the containers of the calls start meanwhile) and serves at ``SCHED_OTHER``."""

    def __init__(self, pid: int, control: socket.socket) -> None:
        self.pid = pid
        self.control = control
        self.ready = False
        self.taken = False  # it accepted a call itself (its word "t")

    def wait(self, listener: socket.socket, timeout: float) -> str | None:
        """What comes first within ``timeout`` (else ``TimeoutError``): ``"taken"`` (it
        accepted a call), ``"died"`` (its end closed unsaid), before it is ready
        ``"connection"`` (the parent's to accept), or None: nothing for the parent to do
        (its word that it is ready, from which on it accepts the calls itself and the
        parent watches only its word)."""
        watched = [self.control] if self.ready else [self.control, listener]
        readable, _, _ = select.select(watched, [], [], timeout)
        if not readable:
            raise TimeoutError
        if self.control not in readable:
            return "connection"
        try:
            word = self.control.recv(1, socket.MSG_DONTWAIT)
        except BlockingIOError:  # nothing after all
            return "connection" if listener in readable else None
        except OSError:
            word = b""
        if word == b"r":
            self.ready = True
            return None
        return "taken" if word == b"t" else "died"

    def served(self, listener: socket.socket, timeout: float) -> bool:
        """Once it took a call: whether it is done (its end closed at its exit; then it is
        reaped here), or False for a connection on ``listener`` first (the parent's to
        accept); ``TimeoutError`` if neither comes within ``timeout``."""
        readable, _, _ = select.select([self.control, listener], [], [], timeout)
        if not readable:
            raise TimeoutError
        if self.control not in readable:
            return False
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)  # exiting: its descriptors are closed
        return True

    def take(self, conn: socket.socket) -> bool:
        """Hand ``conn`` (a connection the parent accepted) over if the spare is ready and
        has not accepted one itself; False if not (the call is forked for; :attr:`taken`
        then says whether it accepted one). A spare that accepts one between its word read
        here and the handover loses this one unread: its caller falls back."""
        try:
            words: bytes | None = self.control.recv(2, socket.MSG_DONTWAIT)
        except BlockingIOError:
            words = None
        except OSError:
            return False
        if words is not None:
            if b"t" in words:
                self.taken = True
                return False
            if not words:
                return False  # it died
            self.ready = True  # b"r"
        if not self.ready:
            return False
        try:
            socket.send_fds(self.control, [b"c"], [conn.fileno()])
        except OSError:  # it died meanwhile: the call is forked for
            self.ready = False
            return False
        self.close()
        return True

    def close(self) -> None:
        self.control.close()


def _fork_spare(listener: socket.socket, trace: _Trace | None, children: set[int]) -> _Spare | None:
    """A :class:`_Spare`, or None where it cannot be forked (the calls are forked for)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid = os.fork()
    except OSError as e:
        _say(f"fork of a spare failed: {e.strerror}")
        ours.close()
        theirs.close()
        return None
    if pid == 0:
        try:
            for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(number, signal.SIG_DFL)
            ours.close()
            # On idle CPU only: after a call its runtime starts the container (runc, its
            # hooks), which this must not slow (bench/start.py, 2 cores; bench/runtime.py's
            # no-op runtime cannot show it).
            idle = os.sched_param(0)
            os.sched_setscheduler(0, os.SCHED_IDLE, idle)
            warm(1)
            from oci.cdi.index import touch_ahead

            touch_ahead()  # the specs parsed ahead: their pages this child's before the call
            pair = socket.socketpair()
            with pair[0], pair[1]:
                peer_problem(pair[0])
            try:
                os.sched_setscheduler(0, os.SCHED_OTHER, idle)
            except OSError:  # no CAP_SYS_NICE: a call must not run at idle priority
                os._exit(0)
            try:
                theirs.sendall(b"r")
            except OSError:  # EPIPE: the parent stopped while this warmed
                os._exit(0)
            if trace is not None:
                trace.mark("spare ready")
            conn = _await_call(listener, theirs, trace)
            listener.close()
            if conn is None:
                os._exit(0)  # the parent is stopping
            _child(conn, trace)  # `theirs` open until it exits: the parent's word it is done
        except BaseException:  # a bug here: said where the server's stderr is
            import traceback

            traceback.print_exc()
        finally:
            os._exit(1)
    theirs.close()
    children.add(pid)
    if trace is not None:
        trace.mark("spare forked")
    return _Spare(pid, ours)


def _await_call(
    listener: socket.socket, control: socket.socket, trace: _Trace | None
) -> socket.socket | None:
    """The ready spare's wait: a connection it accepts itself (then it tells the parent,
    ``t``: the parent is not woken by the connection, nor hands it over), or one the parent
    accepted before it knew the spare ready and hands over (``SCM_RIGHTS``); None once the
    parent closed its end (stopping) or the spare cannot accept (the parent does then)."""
    listener.settimeout(0)  # the parent may take a connection first: then EAGAIN here
    while True:
        readable, _, _ = select.select([listener, control], [], [])
        if control in readable:
            try:
                _, fds, _, _ = socket.recv_fds(control, 1, 1)
            except OSError:  # ECONNRESET: the parent closed it with "ready" unread
                fds = []
            if len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                return None
            return socket.socket(fileno=fds[0])
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            continue  # the parent's, or a connection already gone
        except OSError:  # EMFILE, ENOBUFS: this spare gives up, the parent accepts
            return None
        if trace is not None:
            trace.mark("accepted")
            trace.mark("taken by the spare")
        with contextlib.suppress(OSError):  # the parent stopping: this call is still served
            control.sendall(b"t")
        return conn


def _reap(children: set[int]) -> None:
    while children:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)


USAGE = f"""usage: {PROG} [--socket PATH] [--trace FILE]

Serve nvhook-runtime's calls for its native front-end from a pre-forked server
(docs/architecture.md D12). PATH: default $NVHOOK_CACHE_DIR/{SOCKET_NAME}, else
/run/nvhook/{SOCKET_NAME}; its directory must be root's and not group/other-writable.
Runs as root, until SIGTERM; exits {STALE_EXIT} when nvhook's code changed on disk.
--trace FILE: append where each call's time goes to FILE (bench/runtime.py --parts).
"""


def main(argv: Sequence[str] | None = None) -> int:
    """``nvhook-shim-server [--socket PATH] [--trace FILE]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    given: dict[str, str] = {}
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        return 0
    while args:
        option, eq, value = args.pop(0).partition("=")
        if option not in ("--socket", "--trace") or option in given or not (eq or args):
            sys.stderr.write(f"{PROG}: unexpected arguments {argv or sys.argv[1:]}: see --help\n")
            return 2
        given[option] = value if eq else args.pop(0)
    for option, value in given.items():
        if not os.path.isabs(value):
            sys.stderr.write(f"{PROG}: {option} {value}: give an absolute path\n")
            return 2
    path = given.get("--socket")
    try:
        return serve(path or default_socket(), trace=given.get("--trace"))
    except (ServerError, OSError) as e:
        sys.stderr.write(f"{PROG}: {e}\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
