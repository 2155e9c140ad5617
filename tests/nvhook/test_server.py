"""nvhook-shim-server (nvhook/server.py) and the native front-end as its client (D12).

The front-end is built here with the sanitizers, a recording stand-in for the Python
launcher (so a call handed to Python shows as ``launcher``) and a short server deadline
(:data:`DEADLINE_MS`). The server is the real one (``python -m nvhook.server``), as root.

- equality: for a table of calls (jit and cdi, errors included), what a call through the
  front-end and the server does equals what the Python shim does with the same argv,
  environment and cwd, byte for byte: exit code, stdout, stderr, config.json, the
  ``--log`` file, the runtime's argv and cwd, the shim's log line;
- idempotency: the Python shim run again on a bundle the server edited changes nothing
  (what the front-end's fallback does when a reply is lost after the edit);
- the front-end's fallbacks: no socket, a foreign one, a regular file or symlink in its
  place, a directory others may write, a server that is not root, never acknowledges,
  dies mid-request or replies nonsense: each hands the call to the Python launcher,
  the unanswered one within the deadline;
- the server's side: malformed requests and a peer that is not root are refused
  unread, and the server goes on serving; a server whose code changed on disk stops;
  :data:`nvhook.server.PRELOAD` holds every module a create imports.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from nvhook.constants import VERSION
from nvhook.server import (
    MAGIC,
    MAX_REQUEST,
    PRELOAD,
    STALE_EXIT,
    RequestError,
    main,
    parse_request,
    peer_problem,
)
from tests.nvhook.test_frontend import build_sanitized
from tests.nvhook.test_shim_imports import Shim as ImportProbe
from tests.nvhook.test_shim_imports import loaded
from tests.support.basics import require_root, wait_for_line
from tests.support.unprivileged import NOBODY, call_unprivileged

REPO = Path(__file__).resolve().parents[2]
DEADLINE_MS = 400
#: The stand-in runtime and launcher: who ran, the cwd, the pid, then argv; a line on each stream.
RECORDER = (
    '#!/bin/sh\nprintf "%s\\n" "{who}" "$PWD" "$$" "$@" > "$FRONTEND_RECORD"\n'
    'echo "{who} stdout"\necho "{who} stderr" >&2\n'
)
PRISTINE: dict[str, Any] = {
    "ociVersion": "1.0.2",
    "process": {"args": ["sh"], "cwd": "/", "env": ["PATH=/usr/bin:/bin"]},
    "root": {"path": "rootfs"},
}

pytestmark = pytest.mark.root


def start_server(
    sock: Path,
    *,
    python_path: Path = REPO,
    log: BinaryIO | None = None,
    umask: int = -1,
    more: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``nvhook-shim-server --socket SOCK [MORE…]`` from the packages under ``python_path``,
    once it says it listens; its stderr goes to ``log`` (a file), else to an unnamed one;
    ``umask``: its umask (-1: this process's)."""
    code = (
        f"import sys; sys.path.insert(0, {str(python_path)!r}); "
        "from nvhook.server import main; raise SystemExit(main())"
    )
    with contextlib.ExitStack() as stack:
        if log is None:
            log = stack.enter_context(tempfile.TemporaryFile())
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", code, "--socket", str(sock), *more],
            env={"PATH": "/usr/bin:/bin", **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            umask=umask,
        )
        wait_for_line(proc, log, b"listening on ", what="the server")
    return proc


def stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(timeout=10)
    finally:
        if proc.stderr:
            proc.stderr.close()


class Node:
    """A work directory: the mock, a CDI spec, configs, the stand-ins, a cache with a server."""

    def __init__(self, work: Path, machine: Path, client: Path, launcher: Path) -> None:
        self.work = work
        self.machine = machine
        self.client = client  # the front-end, handing over to the recording launcher
        self.record = work / "record"
        self.runtime = work / "runc"
        self.runtime.write_text(RECORDER.format(who="runtime"))
        self.runtime.chmod(0o755)
        self.cache = work / "cache"
        self.cache.mkdir(mode=0o700)
        self.sock = self.cache / "shim.sock"
        self.cdi = work / "cdi"
        subprocess.run(
            [sys.executable, "-m", "nvhook", "cdi", "generate", "--root", str(machine),
             "--output", str(self.cdi / "nvidia.json")],
            check=True, capture_output=True, cwd=REPO,
        )  # fmt: skip
        # the Python shim as the launcher runs it, in front of the same front-end
        self.shim = work / "nvhook-runtime.py"
        self.shim.write_text(
            f"#!{sys.executable} -I\nimport sys\nsys.path.insert(0, {str(REPO)!r})\n"
            f"sys.argv[0] = {str(client)!r}\nfrom nvhook.shim import main\n"
            "raise SystemExit(main())\n"
        )
        self.shim.chmod(0o755)
        self.launcher = launcher

    def config(self, name: str, extra: str = "", *, runtime: str = "") -> Path:
        path = self.work / f"{name}.toml"
        path.write_text(
            f'[runtime]\nruntimes = ["{self.runtime}"]\nlog_file = "{self.work / name}.log"\n'
            f'{runtime}[host]\nroot = "{self.machine}"\n[cdi]\nspec_dirs = ["{self.cdi}"]\n'
            f"{extra}"
        )
        return path

    def env(self, config: Path) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "NVHOOK_CONFIG": str(config),
            "NVHOOK_CACHE_DIR": str(self.cache),
            "FRONTEND_RECORD": str(self.record),
            "ASAN_OPTIONS": "detect_leaks=0",
        }

    def bundle(self, name: str, spec: dict[str, Any]) -> Path:
        b = self.work / name
        b.mkdir(exist_ok=True)
        (b / "pristine.json").write_text(json.dumps(spec, indent=1))
        self.reset(b)
        return b

    def reset(self, b: Path) -> None:
        shutil.copyfile(b / "pristine.json", b / "config.json")
        (b / "log.json").unlink(missing_ok=True)

    def call(self, program: Path, argv: list[str], env: dict[str, str], cwd: Path) -> Outcome:
        self.record.unlink(missing_ok=True)
        proc = subprocess.run([str(program), *argv], env=env, cwd=cwd, capture_output=True,
                              timeout=60, check=False)  # fmt: skip
        record = self.record.read_text().split("\n")[:-1] if self.record.exists() else None
        return Outcome(proc.returncode, proc.stdout, proc.stderr, record)


class Outcome:
    def __init__(self, code: int, out: bytes, err: bytes, record: list[str] | None) -> None:
        self.code, self.out, self.err, self.record = code, out, err, record

    def who(self) -> str | None:
        return self.record[0] if self.record else None


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The front-end with the sanitizers and a short deadline, and its recording launcher."""
    deadline = f"-DNVHOOK_SERVER_DEADLINE_MS={DEADLINE_MS}"
    return build_sanitized(tmp_path_factory.mktemp("client"), RECORDER, deadline)


@pytest.fixture(scope="module")
def node(
    client: tuple[Path, Path],
    mock_machine: Callable[..., Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Node]:
    """A node whose cache directory has a server listening."""
    require_root()
    work = tmp_path_factory.mktemp("node")
    n = Node(work, mock_machine("dgx-a100"), *client)
    server = start_server(n.sock)
    try:
        yield n
    finally:
        stop(server)


# -- equality: through the server, what the Python shim does --------------------------------


def _spec(env: list[str] = [], **more: Any) -> dict[str, Any]:  # noqa: B006
    spec = json.loads(json.dumps(PRISTINE))
    spec["process"]["env"] += env
    spec.update(more)
    return spec


CONTAINERD = ["--root", "/r", "--log", "{b}/log.json", "--log-format", "json", "create",
              "--bundle", "{b}", "--pid-file", "{b}/init.pid", "c1"]  # fmt: skip
MOUNTS_ON = "[policy]\naccept_volume_mounts = true\n"
DEVICE_LIST = {"destination": "/var/run/nvidia-container-devices/1", "source": "/dev/null"}

#: name: (config extra, spec, argv (``{b}``: the bundle; None: containerd's), cwd is bundle)
CASES: dict[str, tuple[str, dict[str, Any], list[str] | None, bool]] = {
    "jit 1 GPU": ("", _spec(["NVIDIA_VISIBLE_DEVICES=1"]), None, False),
    "jit all, capabilities": (
        "",
        _spec(["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility,video"]),
        None,
        False,
    ),
    "jit MIG device": ("", _spec(["NVIDIA_VISIBLE_DEVICES=0:0"]), None, False),
    "jit unknown GPU (error)": ("", _spec(["NVIDIA_VISIBLE_DEVICES=9"]), None, False),
    "jit requirement not met (error)": (
        "",
        _spec(["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_CUDA=cuda>=99.0"]),
        None,
        False,
    ),
    "void: nothing to add": ("", _spec(["NVIDIA_VISIBLE_DEVICES=void"]), None, False),
    "cdi annotation": ("", _spec(annotations={"cdi.k8s.io/x": "nvidia.com/gpu=1"}), None, False),
    "cdi plain id, mode cdi": ("MODE_CDI", _spec(["NVIDIA_VISIBLE_DEVICES=1"]), None, False),
    "cdi unknown device (error)": (
        "",
        _spec(annotations={"cdi.k8s.io/x": "nvidia.com/gpu=99"}),
        None,
        False,
    ),
    "device-list mount": (MOUNTS_ON, _spec(mounts=[DEVICE_LIST]), None, False),
    "relative bundle, cwd": (
        "",
        _spec(["NVIDIA_VISIBLE_DEVICES=1"]),
        ["create", "--bundle", ".", "c1"],
        True,
    ),
    "default bundle (cwd)": ("", _spec(["NVIDIA_VISIBLE_DEVICES=1"]), ["create", "c1"], True),
    "--version": ("", _spec(), ["--version"], False),
    "argv runc refuses": (
        "",
        _spec(["NVIDIA_VISIBLE_DEVICES=1"]),
        ["create", "--bundle", "{b}"],
        False,
    ),
    "settings broken, GPU create (error)": (
        "BROKEN",
        _spec(["NVIDIA_VISIBLE_DEVICES=1"]),
        None,
        False,
    ),
    "settings broken, plain create": ("BROKEN", _spec(), None, False),
}


def _config(node: Node, name: str, extra: str) -> Path:
    slug = "".join(c if c.isalnum() else "-" for c in name)
    if extra == "MODE_CDI":
        return node.config(slug, runtime='mode = "cdi"\n')
    if extra == "BROKEN":
        return node.config(slug, runtime="bogus = 1\n")  # an unknown key: a ConfigError
    return node.config(slug, extra)


def _observed(node: Node, b: Path, outcome: Outcome, config: Path) -> dict[str, Any]:
    """What a call did, without what must differ (times, the log line's pid and duration)."""
    log = b / "log.json"
    runc_log = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    for entry in runc_log:
        entry.pop("time")
    shim_log = config.with_suffix(".log")
    lines = (
        [json.loads(line) for line in shim_log.read_text().splitlines()]
        if shim_log.exists()
        else []
    )
    shim_log.unlink(missing_ok=True)
    for line in lines:
        line.pop("time"), line.pop("duration_ms")
        if outcome.record:  # the pid is the process that execs the runtime
            assert line.pop("pid") == int(outcome.record[2])
        else:
            line.pop("pid")
    record = outcome.record and [outcome.record[0], outcome.record[1], *outcome.record[3:]]
    return {
        "code": outcome.code,
        "stdout": outcome.out,
        "stderr": outcome.err,
        "config.json": (b / "config.json").read_bytes(),
        "--log": runc_log,
        "runtime": record,
        "shim log": lines,
    }


@pytest.mark.parametrize("name", list(CASES))
def test_through_the_server_as_through_the_python_shim(node: Node, name: str) -> None:
    extra, spec, argv, in_bundle = CASES[name]
    config = _config(node, name, extra)
    b = node.bundle("b-" + "".join(c if c.isalnum() else "-" for c in name), spec)
    args = [a.replace("{b}", str(b)) for a in (argv or CONTAINERD)]
    cwd = b if in_bundle else node.work
    env = node.env(config)

    served = node.call(node.client, args, env, cwd)
    assert served.who() in ("runtime", None), f"not served by the server: {served.err!r}"
    through_server = _observed(node, b, served, config)
    node.reset(b)
    direct = node.call(node.shim, args, env, cwd)
    assert through_server == _observed(node, b, direct, config)
    # and the case is what its name says
    error = "(error)" in name
    assert (served.code != 0) == error
    if name.startswith(("jit", "cdi", "device-list", "relative", "default")) and not error:
        assert through_server["config.json"] != (b / "pristine.json").read_bytes()
    if name == "--version":
        assert served.out.startswith(f"nvhook-runtime version {VERSION}\nruntime stdout".encode())
    if error:
        assert served.err.startswith(b"nvhook-runtime: ") and through_server["--log"]


@pytest.mark.parametrize(
    "name", ["jit 1 GPU", "cdi annotation", "cdi plain id, mode cdi", "device-list mount"]
)
def test_the_python_shim_after_the_server_adds_nothing(node: Node, name: str) -> None:
    """The front-end's fallback after a lost reply re-runs the call on the edited bundle."""
    extra, spec, _, _ = CASES[name]
    config = _config(node, name, extra)
    b = node.bundle("again-" + "".join(c if c.isalnum() else "-" for c in name), spec)
    args = [a.replace("{b}", str(b)) for a in CONTAINERD]
    served = node.call(node.client, args, node.env(config), node.work)
    assert (served.code, served.who()) == (0, "runtime")
    edited = (b / "config.json").read_bytes()
    assert edited != (b / "pristine.json").read_bytes()
    again = node.call(node.shim, args, node.env(config), node.work)
    assert again.code == 0 and (b / "config.json").read_bytes() == edited


def test_a_pass_through_never_reaches_the_server(node: Node) -> None:
    config = node.config("pass")
    node.call(node.shim, ["state", "x"], node.env(config), node.work)  # writes the data file
    outcome = node.call(node.client, ["state", "x"], node.env(config), node.work)
    assert outcome.who() == "runtime" and outcome.record and outcome.record[3:] == ["state", "x"]


# -- the front-end falls back -------------------------------------------------------------

FAKE_SERVER = r"""
import os, socket, struct, sys, time
path, mode = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
if mode == "nobody":
    os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
s.listen(8)
print("ready", flush=True)
def frame(body):
    return b"nvhz" + struct.pack("<I", len(body)) + body
while True:
    conn, _ = s.accept()
    if mode == "close":
        conn.close(); continue
    _, ancillary, _, _ = conn.recvmsg(1 << 20, socket.CMSG_SPACE(16))
    for _, _, data in ancillary:  # the caller's stdio: held, its reader would never see EOF
        for fd in struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4]):
            os.close(fd)
    if mode == "silent":
        time.sleep(3600)
    conn.sendall(frame(b"ack"))
    if mode == "ack-close":
        conn.close(); continue
    if mode == "nobody":
        conn.sendall(frame(b"exit\0" + b"7")); conn.close(); continue
    conn.sendall(bytes.fromhex(mode)); conn.close()
"""


def _fake(node: Node, directory: Path, mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", FAKE_SERVER, str(directory / "shim.sock"), mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout and proc.stdout.readline() == "ready\n"
    return proc


def _stop_fake(fake: subprocess.Popen[str]) -> None:
    fake.kill()
    fake.wait()
    if fake.stdout:
        fake.stdout.close()


@pytest.fixture
def bare(node: Node, tmp_path: Path) -> Iterator[tuple[Path, dict[str, str], list[str]]]:
    """A cache directory of its own (no server), and a create the front-end hands over."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    config = node.config("bare")
    env = {**node.env(config), "NVHOOK_CACHE_DIR": str(cache)}
    b = node.bundle(f"bare-{tmp_path.name}", _spec(["NVIDIA_VISIBLE_DEVICES=1"]))
    yield cache, env, ["create", "--bundle", str(b), "c1"]


def _frame(body: bytes) -> str:
    return (MAGIC + struct.pack("<I", len(body)) + body).hex()


@pytest.mark.parametrize(
    "mode",
    ["close", "ack-close", "nobody", _frame(b"exec\0"), _frame(b"exec\0/bin/true\0x"),
     _frame(b"exit\0300"), _frame(b"exit\0x"), _frame(b"exit\0-1"), _frame(b"what\0"),
     (b"nvhx" + struct.pack("<I", 6) + b"exit\x000").hex(),
     (MAGIC + struct.pack("<I", 1 << 30)).hex()],
    ids=["closes unread", "dies after ack", "not root", "exec nothing", "exec with a NUL",
         "exit 300", "exit x", "exit -1", "unknown reply", "bad magic", "huge frame"],
)  # fmt: skip
def test_a_bad_server_is_a_fallback(
    node: Node, bare: tuple[Path, dict[str, str], list[str]], mode: str
) -> None:
    cache, env, argv = bare
    fake = _fake(node, cache, mode)
    try:
        if mode == "nobody":
            assert (cache / "shim.sock").stat().st_uid == 0  # bound as root, listening as nobody
        outcome = node.call(node.client, argv, env, node.work)
        assert (outcome.code, outcome.who()) == (0, "launcher"), outcome.err
        assert outcome.record and outcome.record[3:] == argv
    finally:
        _stop_fake(fake)


def test_a_server_that_never_answers_is_a_fallback_within_the_deadline(
    node: Node, bare: tuple[Path, dict[str, str], list[str]]
) -> None:
    cache, env, argv = bare
    fake = _fake(node, cache, "silent")
    try:
        started = time.monotonic()
        outcome = node.call(node.client, argv, env, node.work)
        elapsed = time.monotonic() - started
        assert (outcome.code, outcome.who()) == (0, "launcher")
        assert DEADLINE_MS / 1000 <= elapsed < DEADLINE_MS / 1000 + 10
    finally:
        _stop_fake(fake)


@pytest.mark.parametrize(
    "change", ["missing", "regular file", "symlink", "foreign socket", "directory writable"]
)
def test_a_socket_in_doubt_is_not_used(
    node: Node, bare: tuple[Path, dict[str, str], list[str]], change: str
) -> None:
    """The real server listens elsewhere; what is at this cache's socket path is not it."""
    cache, env, argv = bare
    sock = cache / "shim.sock"
    server = None
    if change == "regular file":
        sock.write_bytes(b"")
    elif change == "symlink":
        sock.symlink_to(node.sock)
    elif change in ("foreign socket", "directory writable"):
        server = start_server(sock)
        if change == "foreign socket":
            os.chown(sock, NOBODY, NOBODY)
        else:
            cache.chmod(0o770)
    try:
        outcome = node.call(node.client, argv, env, node.work)
        assert (outcome.code, outcome.who()) == (0, "launcher")
    finally:
        if server is not None:
            cache.chmod(0o700)
            stop(server)


# -- the server's side ----------------------------------------------------------------------


def _request(argv: list[str], env: list[str], *, program: str = "/x/nvhook-runtime") -> bytes:
    fields = [b"1", b"22", program.encode(), str(len(argv)).encode(), *map(str.encode, argv),
              str(len(env)).encode(), *map(str.encode, env)]  # fmt: skip
    return b"".join(f + b"\0" for f in fields)


def _ask(sock: Path, data: bytes, fds: list[int]) -> bytes:
    """Send ``data`` with ``fds``; all that comes back until the server closes (or resets:
    a server that refuses closes without reading, and unread data makes that a reset)."""
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
    got = b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(sock))
        try:
            s.sendmsg([data], rights if fds else [])
            while chunk := s.recv(65536):
                got += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass
    return got


@pytest.fixture
def stdio() -> Iterator[list[int]]:
    fds = [os.open("/", os.O_RDONLY | os.O_DIRECTORY)] + [
        os.open(os.devnull, os.O_RDWR) for _ in range(3)
    ]
    yield fds
    for fd in fds:
        os.close(fd)


def test_parse_request_refuses_what_is_not_a_request() -> None:
    good = _request(["state", "x"], ["A=1"])
    request = parse_request(good)
    assert (request.umask, request.program, request.argv, request.env) == (
        0o22,
        "/x/nvhook-runtime",
        ["state", "x"],
        ["A=1"],
    )
    bad = [good[:-1], b"2" + good[1:], good.replace(b"\x0022\x00", b"\x009\x00", 1),
           good.replace(b"\x002\x00state", b"\x003\x00state", 1), good + b"extra\0",
           _request(["x"], [], program="relative"), b"\0", b"1\0"]  # fmt: skip
    for body in bad:
        with pytest.raises(RequestError):
            parse_request(body)


def test_malformed_requests_are_refused_and_the_server_goes_on(
    node: Node, stdio: list[int]
) -> None:
    config = node.config("proto")
    env = [f"{k}={v}" for k, v in node.env(config).items()]
    body = _request(["state", "x"], env)
    frame = MAGIC + struct.pack("<I", len(body)) + body
    for data, fds in [
        (b"GET / HTTP/1.0\r\n\r\n", stdio),
        (frame, stdio[:3]),  # three descriptors, not four
        (MAGIC + struct.pack("<I", MAX_REQUEST + 1) + body, stdio),
        (MAGIC + struct.pack("<I", len(body)) + b"2" + body[1:], stdio),
        (frame[:20], stdio),  # closed mid-request
    ]:
        assert _ask(node.sock, data, fds) == b"", data[:40]
    reply = _ask(node.sock, frame, stdio)
    ack = MAGIC + struct.pack("<I", 3) + b"ack"
    runtime = b"exec\0" + str(node.runtime).encode()
    assert reply == ack + MAGIC + struct.pack("<I", len(runtime)) + runtime


def test_a_peer_that_is_not_root_is_refused(node: Node, tmp_path: Path) -> None:
    directory = Path(f"/tmp/nvhook-server-{os.getpid()}")
    directory.mkdir(mode=0o755)
    server = start_server(directory / "shim.sock")
    try:
        (directory / "shim.sock").chmod(0o666)  # let nobody connect: the server must refuse
        body = _request(["state", "x"], ["PATH=/bin"])
        frame = MAGIC + struct.pack("<I", len(body)) + body

        def ask() -> bytes:
            fds = [os.open("/", os.O_RDONLY)] + [os.open(os.devnull, os.O_RDWR)] * 3
            return _ask(directory / "shim.sock", frame, fds)

        assert call_unprivileged(ask) == b""
        root_fds = [os.open("/", os.O_RDONLY)] + [os.open(os.devnull, os.O_RDWR) for _ in range(3)]
        assert _ask(directory / "shim.sock", frame, root_fds).startswith(MAGIC)  # root is served
        for fd in root_fds:
            os.close(fd)
    finally:
        assert stop(server) == 0
        shutil.rmtree(directory)


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_the_socket_is_0600_and_its_directory_0700_whatever_the_umask(
    tmp_path: Path, umask: int
) -> None:
    """From the moment it is there (a watcher lstat()s it while the server starts)."""
    import threading

    cache = tmp_path / "cache"  # missing: the server makes it
    sock = cache / "shim.sock"
    modes: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            with contextlib.suppress(FileNotFoundError):
                modes.add(stat.S_IMODE(sock.lstat().st_mode))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        server = start_server(sock, umask=umask)
        deadline = time.monotonic() + 5
        while not modes and time.monotonic() < deadline:  # the watcher's look at it now
            time.sleep(0.01)
    finally:
        done.set()
        watcher.join(5)
    try:
        assert modes == {0o600}
        assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    finally:
        assert stop(server) == 0


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_the_socket_is_bound_no_wider_than_0600(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int
) -> None:
    """The window a watcher cannot see: at the chmod right after bind, the socket is
    already no wider than 0600 (bound under umask 0177), and the caller's umask is back."""
    import nvhook.server

    sock = tmp_path / "cache" / "shim.sock"
    before_chmod: list[int] = []
    real_chmod = os.chmod

    def chmod(path: Any, mode: int, **kwargs: Any) -> None:
        before_chmod.append(stat.S_IMODE(os.lstat(path).st_mode))
        real_chmod(path, mode, **kwargs)

    monkeypatch.setattr(os, "chmod", chmod)
    old = os.umask(umask)
    try:
        listener, _ = nvhook.server._listen(str(sock))
        assert os.umask(umask) == umask
    finally:
        os.umask(old)
    with listener:
        assert before_chmod and all(mode & ~0o600 == 0 for mode in before_chmod)
        assert stat.S_IMODE(sock.lstat().st_mode) == 0o600


def test_a_server_whose_code_changed_stops(node: Node, tmp_path: Path, stdio: list[int]) -> None:
    """An upgrade: the server exits (for systemd to start the new code) once the call in
    hand is served by the code it loaded."""
    packages = tmp_path / "packages"
    for name in ("oci", "nvhook"):
        shutil.copytree(REPO / name, packages / name, ignore=shutil.ignore_patterns("__pycache__"))
    directory = tmp_path / "sock"
    directory.mkdir(mode=0o700)
    server = start_server(directory / "shim.sock", python_path=packages)
    try:
        body = _request(["state", "x"], ["PATH=/bin"])
        frame = MAGIC + struct.pack("<I", len(body)) + body
        assert _ask(directory / "shim.sock", frame, stdio).startswith(MAGIC)  # serving
        edited = packages / "nvhook" / "create.py"
        edited.write_text(edited.read_text() + "\n# upgraded\n")
        assert _ask(directory / "shim.sock", frame, stdio).startswith(MAGIC)  # the old code
        assert server.wait(timeout=30) == STALE_EXIT
        assert not (directory / "shim.sock").exists()
    finally:
        stop(server)


def test_trace_times_each_step_and_changes_nothing(node: Node, tmp_path: Path) -> None:
    """``--trace FILE``: the parent's and the child's steps and the start path's calls, on
    CLOCK_MONOTONIC; the call's outcome is the untraced server's."""
    extra, spec, argv, _ = CASES["jit 1 GPU"]
    config = _config(node, "trace", extra)
    b = node.bundle("b-trace", spec)
    args = [a.replace("{b}", str(b)) for a in (argv or CONTAINERD)]
    untraced = node.call(node.client, args, node.env(config), b)
    expected = _observed(node, b, untraced, config)
    directory = tmp_path / "sock"
    directory.mkdir(mode=0o700)
    trace = tmp_path / "trace"
    server = start_server(directory / "shim.sock", more=("--trace", str(trace)))
    try:
        deadline = time.monotonic() + 30  # the spare child, warmed, waits for the call
        while b" spare_ready " not in trace.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        node.reset(b)
        before = time.monotonic_ns()
        traced = node.call(node.client, args, {**node.env(config),
                           "NVHOOK_CACHE_DIR": str(directory)}, b)  # fmt: skip
        after = time.monotonic_ns()
        deadline = time.monotonic() + 10  # the parent's code check, once the call is served
        while b" specs_parsed_ahead " not in trace.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop(server)
    stopped = time.monotonic_ns()
    assert traced.who() == "runtime"
    assert _observed(node, b, traced, config) == expected
    lines = [line.split() for line in trace.read_text().splitlines()]
    assert all(len(fields) == 4 for fields in lines)
    spares = {pid for pid, name, _, _ in lines if name == "spare_ready"}
    assert (
        spares
    )  # the call went to one; the next, forked once it was served, exits with the server
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in spares) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(Path(f"/proc/{pid}").exists() for pid in spares)
    first = min(int(start) for _, name, start, _ in lines if name == "spare_forked")
    lines = [  # the first spare's, before the call
        f for f in lines if f[1] != "spare_ready" and (f[1], int(f[2])) != ("spare_forked", first)
    ]
    # the steps start once the call is made; the parent's code check runs once the call is
    # served, and the child logs its reply after sending it: the server's exit
    # bounds them all, and the call's first steps (up to the call handled) end before the
    # caller has its answer
    for pid, name, start, end in lines:
        assert before <= int(start) <= int(end) <= stopped, (pid, name)
    handled = [int(end) for pid, name, _, end in lines if name == "call_handled"]
    assert handled and max(handled) <= after
    parent = [name for pid, name, start, end in lines if pid == str(server.pid) and start == end]
    # the ready spare accepted the call itself (the parent was not woken by it), and the
    # next spare is forked once it is served, before the code check's quiet has passed
    assert parent == ["spare_forked", "code_unchanged", "specs_parsed_ahead"]
    # the code check waits for the child's reply: beside the child it took a core from it
    marks = {name: int(start) for pid, name, start, end in lines if start == end}
    assert marks["code_unchanged"] > marks["reply_sent"]
    child = [name for pid, name, start, end in lines if pid != str(server.pid) and start == end]
    assert child == ["accepted", "taken_by_the_spare", "child", "peer_checked",
                     "request_received", "request_parsed", "ack_sent",
                     "caller's_cwd,_streams,_env_taken_on", "call_handled",
                     "reply_sent"]  # fmt: skip
    calls = {name for pid, name, start, end in lines if start != end and pid != str(server.pid)}
    assert {"nvhook.call.handle", "nvhook.settings.load_settings", "oci.bundle.Bundle.load",
            "nvhook.planner.plan", "oci.cdi.apply.apply", "oci.bundle.Bundle.save",
            "os.fsync", "oci.argv.RuntimeArgs.parse"} <= calls  # fmt: skip


def test_specs_parsed_ahead_serve_a_call_and_a_rewrite_is_read(node: Node, tmp_path: Path) -> None:
    """The server's parent parses its settings' CDI specs ahead: a call then reads no spec
    file; after an in-place rewrite that keeps the inode, size and mtime (only the ctime
    moves), the call reads the file and injects what it says now."""
    from oci.cdi.index import RACY_NS

    cdi = tmp_path / "cdi"
    cdi.mkdir()
    spec = cdi / "nvidia.json"
    shutil.copyfile(node.cdi / "nvidia.json", spec)
    body = spec.read_text()
    assert '"NVIDIA_VISIBLE_DEVICES=void"' in body
    config = tmp_path / "config.toml"
    config.write_text(node.config("ahead").read_text().replace(str(node.cdi), str(cdi)))
    directory = tmp_path / "sock"
    directory.mkdir(mode=0o700)
    trace = tmp_path / "trace"
    time.sleep(RACY_NS / 1e9 + 0.05)  # settled: parsed ahead before the server listens
    server = start_server(directory / "shim.sock", more=("--trace", str(trace)),
                          env={"NVHOOK_CONFIG": str(config)})  # fmt: skip
    b = node.bundle("b-ahead", _spec(annotations={"cdi.k8s.io/x": "nvidia.com/gpu=1"}))
    args = [a.replace("{b}", str(b)) for a in CONTAINERD]
    env = {**node.env(config), "NVHOOK_CACHE_DIR": str(directory)}

    def call() -> tuple[bytes, set[str]]:
        node.reset(b)
        trace.write_bytes(b"")
        served = node.call(node.client, args, env, b)
        assert (served.code, served.who()) == (0, "runtime"), served.err
        calls = {line.split()[1] for line in trace.read_text().splitlines()}
        return (b / "config.json").read_bytes(), calls

    try:
        edited, calls = call()
        assert "oci.cdi.index.resolve" in calls
        assert "oci.cdi.registry.read_checked_stat" not in calls
        assert b"NVIDIA_VISIBLE_DEVICES=void" in edited
        before = spec.stat()
        time.sleep(0.05)  # another ctime
        spec.write_text(body.replace("NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=vOid"))
        os.utime(spec, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = spec.stat()
        assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
            before.st_ino, before.st_size, before.st_mtime_ns)  # fmt: skip
        edited, calls = call()
        assert "oci.cdi.registry.read_checked_stat" in calls
        assert b"NVIDIA_VISIBLE_DEVICES=vOid" in edited
    finally:
        stop(server)


@pytest.mark.parametrize(
    "argv",
    [
        ["--trace", "relative"],
        ["--socket", "/a", "--socket", "/b"],
        ["--trace"],
        ["--bogus", "/x"],
    ],
)
def test_server_options_are_checked(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("nvhook-shim-server: ")


def test_preload_holds_every_module_a_create_imports(
    mock_machine: Callable[..., Path], tmp_path: Path
) -> None:
    """A child imports nothing from disk: a jit and a cdi create load only PRELOAD's modules."""
    machine = mock_machine("dgx-a100")
    probe = ImportProbe(tmp_path, host_root=str(machine))
    cdi = tmp_path / "cdi"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nvhook",
            "cdi",
            "generate",
            "--root",
            str(machine),
            "--output",
            str(cdi / "nvidia.json"),
        ],
        check=True,
        capture_output=True,
    )
    probe.config.write_text(probe.config.read_text() + f'[cdi]\nspec_dirs = ["{cdi}"]\n')
    seen: set[str] = set()
    for n, annotation in enumerate([b"x/x", b"cdi.k8s.io/x"]):  # jit, then cdi
        config = (b'{"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": '
                  b'["NVIDIA_VISIBLE_DEVICES=1", "PATH=/bin"]}, "annotations": {"' + annotation +
                  b'": "nvidia.com/gpu=1"}}')  # fmt: skip
        for m in range(2):  # cold caches, then warm ones
            b = probe.bundle(f"b{n}{m}", config)
            seen |= set(probe.modules_at_exec("create", "--bundle", str(b), "c1"))
    # the probe runs the launcher's module, nvhook.shim; a child runs nvhook.call.handle
    ours = {m for m in seen if m.split(".")[0] in ("oci", "nvhook") and m != "nvhook.shim"}
    assert "nvhook.planner" in ours and "oci.cdi.registry" in ours
    missing = [
        m for m in ours if m not in PRELOAD and not any(p.startswith(m + ".") for p in PRELOAD)
    ]
    assert not missing, f"add to nvhook.server.PRELOAD: {missing}"
    assert not loaded("click", sorted(seen))


def test_peer_problem_compares_the_peer_with_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    import nvhook.peer

    a, b = socket.socketpair()
    with a, b:
        assert peer_problem(a) == (os.getpid(), None)  # this very process: served
        labels = {"self": b"system_u:system_r:unconfined_service_t:s0"}
        monkeypatch.setattr(nvhook.peer, "_label", lambda pid: labels.get(pid, b"runtime_t"))
        pid, problem = peer_problem(a)
        assert pid == os.getpid() and problem is not None and "security label" in problem


WARMED = r"""
import dis, json, os, sys, tempfile
import nvhook.server as server
import oci.cdi.index

def specialized(func):
    return sum(a.opname != b.opname for a, b in zip(dis.get_instructions(func, adaptive=True),
                                                    dis.get_instructions(func)))

class Listening(Exception):
    pass

def listen(path):
    raise Listening

server._listen = listen
server._say = lambda message: print("said:", message)
before = specialized(oci.cdi.index.resolve)
temps = set(os.listdir(tempfile.gettempdir()))
env = dict(os.environ)
try:
    server.serve(sys.argv[1])
except Listening:
    pass
left = {n for n in set(os.listdir(tempfile.gettempdir())) - temps if "warm" in n}
print(json.dumps([before, specialized(oci.cdi.index.resolve), sorted(left),
                  env == dict(os.environ)]))
"""


def test_the_server_runs_a_cdi_create_of_its_own_before_listening(tmp_path: Path) -> None:
    """So that a child finds the start path's bytecode specialized (bench/instructions.py:
    the server child's cdi create -7%): a create in a temporary directory it removes, the
    environment as it was, no failure said."""
    require_root()
    private = tmp_path / "tmp"  # its own: other tests' servers warm up in the shared one
    private.mkdir()
    proc = subprocess.run([sys.executable, "-c", WARMED, str(tmp_path / "shim.sock")],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ, "NVHOOK_CACHE_DIR": str(tmp_path / "c"),
                               "TMPDIR": str(private)},
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "said:" not in proc.stdout
    before, after, left, same_env = json.loads(proc.stdout.splitlines()[-1])
    assert before == 0 and after > 50
    assert (left, same_env) == ([], True)
    assert not (tmp_path / "c").exists()  # the node's cache directory untouched


def test_a_spare_waiting_when_the_server_stops_exits_without_a_word(tmp_path: Path) -> None:
    """The spare child said it was ready and waits: the server's SIGTERM closes its end (its
    "ready" byte unread: the spare reads ECONNRESET) and the spare exits, no traceback."""
    require_root()
    directory = tmp_path / "sock"
    directory.mkdir(mode=0o700)
    trace = tmp_path / "trace"
    with open(tmp_path / "stderr", "w+b") as log:
        server = start_server(directory / "shim.sock", log=log, more=("--trace", str(trace)))
        try:
            deadline = time.monotonic() + 30
            while b" spare_ready " not in trace.read_bytes() and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            assert stop(server) == 0
        spare = next(line.split()[0] for line in trace.read_text().splitlines()
                     if line.split()[1] == "spare_ready")  # fmt: skip
        while Path(f"/proc/{spare}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not Path(f"/proc/{spare}").exists()
        log.seek(0)
        said = log.read().decode()
    assert "Traceback" not in said and "Error" not in said, said


def test_a_spare_still_warming_when_the_server_stops_exits_without_a_word(
    tmp_path: Path,
) -> None:
    """The spare child is still warming when the server stops (held here with SIGSTOP before
    it said it was ready): its "ready" byte then meets a closed socket (EPIPE), and it exits
    without a traceback."""
    import signal

    require_root()
    directory = tmp_path / "sock"
    directory.mkdir(mode=0o700)
    for _ in range(20):  # until a spare is caught before its "ready"
        trace = tmp_path / "trace"
        trace.unlink(missing_ok=True)
        with open(tmp_path / "stderr", "w+b") as log:
            log.truncate()
            server = start_server(directory / "shim.sock", log=log, more=("--trace", str(trace)))
            held: list[int] = []
            try:
                deadline = time.monotonic() + 10
                while not held and time.monotonic() < deadline:
                    children = Path(f"/proc/{server.pid}/task/{server.pid}/children")
                    held = [int(p) for p in children.read_text().split()]
                for pid in held:
                    os.kill(pid, signal.SIGSTOP)
                ready = b" spare_ready " in trace.read_bytes()
            finally:
                assert stop(server) == 0
            for pid in held:
                os.kill(pid, signal.SIGCONT)
            deadline = time.monotonic() + 30
            while any(Path(f"/proc/{p}").exists() for p in held) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert held and not any(Path(f"/proc/{p}").exists() for p in held)
            log.seek(0)
            said = log.read().decode()
        if not ready:
            break
    assert not ready, "no spare was caught before it was ready"
    assert "Traceback" not in said and "Error" not in said, said


# -- the spare child's side of a call, and the parent's view of it, without a fork ---------


def _listening(tmp_path: Path) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "s.sock"))
    listener.listen(4)
    return listener


def test_the_parent_watches_the_listener_until_the_spare_is_ready_then_its_word(
    tmp_path: Path,
) -> None:
    """Before ``r`` a connection is the parent's to accept; after it, only the spare's word
    wakes the parent: ``t`` (it accepted one), EOF (it died), else a timeout."""
    from nvhook.server import _Spare

    with _listening(tmp_path) as listener:
        ours, theirs = socket.socketpair()
        spare = _Spare(0, ours)
        with pytest.raises(TimeoutError):
            spare.wait(listener, 0.01)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(tmp_path / "s.sock"))
        assert spare.wait(listener, 1) == "connection"
        theirs.sendall(b"r")
        assert spare.wait(listener, 1) is None and spare.ready  # its word: ready
        with pytest.raises(TimeoutError):  # the pending connection is the spare's now
            spare.wait(listener, 0.01)
        theirs.sendall(b"t")
        assert spare.wait(listener, 1) == "taken"
        theirs.close()
        assert spare.wait(listener, 1) == "died"
        client.close()
        ours.close()


def test_a_connection_the_parent_took_is_handed_to_a_ready_spare_unless_it_took_one(
    tmp_path: Path,
) -> None:
    from nvhook.server import _Spare

    with _listening(tmp_path) as listener:
        for words, handed in ((b"r", True), (b"rt", False), (b"", False)):
            ours, theirs = socket.socketpair()
            spare = _Spare(0, ours)
            if words:
                theirs.sendall(words)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(str(tmp_path / "s.sock"))
            conn, _ = listener.accept()
            assert spare.take(conn) is handed, words
            assert spare.taken is (words == b"rt")
            if handed:
                _, fds, _, _ = socket.recv_fds(theirs, 1, 1)
                assert len(fds) == 1
                os.close(fds[0])
            for s in (conn, client, theirs, ours):
                s.close()


def test_the_ready_spare_accepts_a_call_itself_or_takes_one_handed_over(tmp_path: Path) -> None:
    """It says ``t`` for one it accepted; one passed over its socket is its call too; EOF
    (the parent stopping) is no call."""
    from nvhook.server import _await_call

    with _listening(tmp_path) as listener:
        ours, theirs = socket.socketpair()
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(tmp_path / "s.sock"))
        conn = _await_call(listener, theirs, None)
        assert conn is not None and ours.recv(1) == b"t"
        client.sendall(b"x")
        assert conn.recv(1) == b"x"  # the caller's own connection
        conn.close()
        client.close()
        a, b = socket.socketpair()
        socket.send_fds(ours, [b"c"], [a.fileno()])
        handed = _await_call(listener, theirs, None)
        assert handed is not None
        b.sendall(b"y")
        assert handed.recv(1) == b"y"
        for s in (handed, a, b):
            s.close()
        ours.close()
        assert _await_call(listener, theirs, None) is None
        theirs.close()
