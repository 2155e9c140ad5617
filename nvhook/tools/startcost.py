"""``nvhook bench``: what nvhook adds to a container start on this node, in a few seconds.

Everything happens in a private temporary directory, removed at the end: a mock GPU machine
(``nvhook mock``, the ``h100-pcie`` profile by default), the CDI spec ``nvhook cdi
generate`` writes for it, a shim config naming both, a cache directory of its own (so the
node's ``/run/nvhook``, its settings and its server are neither read nor written) and a
bundle whose ``config.json`` is restored before each run. The rows start once the spec has
settled (about 2 s: a spec changed more recently is parsed in every call, which a node pays
only right after a rewrite), and the run fails if the GPU creates did not find it kept
parsed. No container starts: the shim
execs ``true`` as its runtime, so each create row is nvhook's own work, measured against
``true`` run directly with the same argv. Rows, interleaved, medians of ``runs``:

- ``runc state`` (the node's runc, on a state directory of its own: "container does not
  exist") as the scale, and the same call through ``nvhook-runtime`` (what containerd's
  every non-create call pays: its ``start``, ``state`` and ``delete``);
- a create that asks for nothing, and a 1-GPU create in cdi mode (the spec's first GPU),
  through ``nvhook-runtime`` as installed (the native front-end hands the GPU create to the
  Python shim);
- as root, with ``nvhook-shim-server`` beside it: the same GPU create through a server of
  its own on a cache directory of its own (started for the run with ``--trace``, whose lines,
  ~0.1 ms a call, prove that it served every call of the row; stopped after);
- as root: the createContainer hook the spec injects (``nvhook-hook create-container``, its
  links and the ldconfig it runs) on a rootfs holding the mock's libraries.

The GPU container's start then costs about: the GPU create, the hook, and two or three
pass-through calls (containerd's ``start``, ``state``, ``delete``). The README's
performance table has the same rows from ``bench/``; this is how to see them on one node.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

__all__ = ["BenchError", "Row", "measure", "render", "wait_until_settled"]

PROFILE = "h100-pcie"
ANNOTATION = "cdi.k8s.io/nvhook-bench"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Row:
    """One row: its name, its runs (ms) and the reference's (None: a row of its own)."""

    def __init__(self, name: str, reference: str | None) -> None:
        self.name = name
        self.reference = reference
        self.ms: list[float] = []
        self.reference_ms: list[float] = []

    @property
    def median(self) -> float:
        return statistics.median(self.ms)

    @property
    def added(self) -> float | None:
        return None if not self.reference_ms else self.median - statistics.median(self.reference_ms)


class BenchError(Exception):
    """Why the bench cannot run here (one line naming what is missing and the fix)."""


def _program(bindir: str, name: str) -> str:
    path = os.path.join(bindir, name)
    if not os.access(path, os.X_OK):
        raise BenchError(f"{path} not found: run `nvhook install-entrypoints` first")
    return path


def _timed(
    argv: Sequence[str], env: dict[str, str], cwd: str, stdin: bytes = b"", *, check: bool = True
) -> float:
    """Milliseconds of one run of ``argv``; a failure raises :class:`BenchError` (``check``;
    runc's ``state`` of no container exits 1 on purpose)."""
    start = time.perf_counter()
    done = subprocess.run(
        list(argv), env=env, cwd=cwd, input=stdin, capture_output=True, check=False
    )
    elapsed = (time.perf_counter() - start) * 1000
    if check and done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        raise BenchError(f"{argv[0]} failed ({done.returncode}): {detail[-1] if detail else ''}")
    return elapsed


def measure(
    bindir: str, runs: int = 10, profile: str = PROFILE, runc: str | None = None
) -> list[Row]:
    """The rows, measured in a temporary directory that is removed before returning."""
    runc = runc or shutil.which("runc")
    true = shutil.which("true")
    if runc is None or true is None:
        raise BenchError("runc not found on PATH: install runc (or give --runc PATH)")
    runtime = _program(bindir, "nvhook-runtime")
    work = tempfile.mkdtemp(prefix="nvhook-bench-")
    server: subprocess.Popen[bytes] | None = None
    extra: str | None = None  # the server's directory when the work directory's path is long
    try:
        from nvhook.mock import create

        machine = os.path.join(work, "machine")
        create(profile, machine, nodes="auto")
        cdi = os.path.join(work, "cdi")
        os.mkdir(cdi)
        subprocess.run([_program(bindir, "nvhook"), "cdi", "generate", "--root", machine,
                        "--output", os.path.join(cdi, "nvidia.json")], check=True,
                       capture_output=True)  # fmt: skip
        with open(os.path.join(cdi, "nvidia.json"), "rb") as f:
            spec = json.load(f)
        cache = os.path.join(work, "cache")
        os.mkdir(cache, 0o700)

        def config(name: str, behind: str) -> str:
            path = os.path.join(work, f"{name}.toml")
            with open(path, "w") as f:
                f.write(f'[runtime]\nruntimes = [{json.dumps(behind)}]\nmode = "cdi"\n'
                        f"log_file = {json.dumps(os.path.join(work, 'shim.log'))}\n"
                        f"[host]\nroot = {json.dumps(machine)}\n"
                        f"[cdi]\nspec_dirs = [{json.dumps(cdi)}]\n")  # fmt: skip
            return path

        env = {"PATH": PATH_ENV, "NVHOOK_CACHE_DIR": cache}
        pass_env = {**env, "NVHOOK_CONFIG": config("pass", runc)}
        create_env = {**env, "NVHOOK_CONFIG": config("create", true)}
        state = os.path.join(work, "state")
        device = f"{spec['kind']}={spec['devices'][0]['name']}"
        bundles = {}
        for name, annotations in (("none", {}), ("gpu", {ANNOTATION: device})):
            bundle = os.path.join(work, f"bundle-{name}")
            os.mkdir(bundle)
            pristine = json.dumps({
                "ociVersion": "1.0.2", "annotations": annotations,
                "process": {"args": ["true"], "cwd": "/", "env": [f"PATH={PATH_ENV}"]},
                "root": {"path": "rootfs"}, "linux": {},
            }).encode()  # fmt: skip
            bundles[name] = (bundle, pristine)

        def create_argv(name: str) -> list[str]:
            bundle = bundles[name][0]
            return ["--root", state, "--log", os.path.join(bundle, "log.json"), "--log-format",
                    "json", "create", "--bundle", bundle, "--pid-file",
                    os.path.join(bundle, "init.pid"), "nvhook-bench"]  # fmt: skip

        def restore(name: str) -> None:
            bundle, pristine = bundles[name]
            with open(os.path.join(bundle, "config.json"), "wb") as f:
                f.write(pristine)

        rows: list[tuple[Row, Callable[[], float], Callable[[], float] | None]] = []
        state_argv = ["--root", state, "state", "nvhook-bench-none"]
        rows.append((Row("pass-through (state)", "runc state"),
                     lambda: _timed([runtime, *state_argv], pass_env, work, check=False),
                     lambda: _timed([runc, *state_argv], pass_env, work, check=False)))  # fmt: skip
        for name, label in (
            ("none", "create, no GPU request"),
            ("gpu", f"create 1 GPU ({device})"),
        ):

            def shim(name: str = name, e: dict[str, str] = create_env) -> float:
                restore(name)
                return _timed([runtime, *create_argv(name)], e, bundles[name][0])

            def direct(name: str = name) -> float:
                restore(name)
                return _timed([true, *create_argv(name)], create_env, bundles[name][0])

            rows.append((Row(label, "true"), shim, direct))
        wait_until_settled([os.path.join(cdi, "nvidia.json")])
        server_path = os.path.join(bindir, "nvhook-shim-server")
        if os.geteuid() == 0 and os.access(server_path, os.X_OK):
            served_cache = os.path.join(work, "cache-server")  # its socket: only this row's
            if len(os.fsencode(served_cache)) > 90:  # a unix socket's path: 107 bytes at most
                served_cache = extra = tempfile.mkdtemp(prefix="nvhook-bench-", dir="/tmp")
            else:
                os.mkdir(served_cache, 0o700)
            # its settings are the run's, not the node's: it parses the run's spec ahead
            server = _start_server(server_path, served_cache, create_env, work)
            served_env = {**create_env, "NVHOOK_CACHE_DIR": served_cache}

            def served() -> float:
                restore("gpu")
                return _timed([runtime, *create_argv("gpu")], served_env, bundles["gpu"][0])

            gpu_direct = rows[-1][2]
            rows.append((Row(f"create 1 GPU ({device}), server", "true"), served, gpu_direct))
        if os.geteuid() == 0:
            rows.append((Row("createContainer hook (ldconfig included)", None),
                         _hook(bindir, work, machine, spec), None))  # fmt: skip
        for _, warm, _ in rows:  # caches, the front-end's data file
            warm()
        for _ in range(runs):
            for row, run, reference in rows:
                row.ms.append(run())
                if reference is not None:
                    row.reference_ms.append(reference())
        if server is not None:
            _check_served(os.path.join(work, "server.trace"), runs + 1)
        _check_kept(cache)
        return [row for row, _, _ in rows]
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)
        if extra is not None:
            shutil.rmtree(extra, ignore_errors=True)


def _start_server(path: str, cache: str, env: dict[str, str], work: str) -> subprocess.Popen[bytes]:
    sock = os.path.join(cache, "shim.sock")
    log = os.path.join(work, "server.log")
    with open(log, "wb") as err:
        trace = ["--trace", os.path.join(work, "server.trace")]  # proof that it served
        proc = subprocess.Popen([path, "--socket", sock, *trace], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip
    deadline = time.monotonic() + 30
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            with open(log, "rb") as f:
                said = f.read().decode(errors="replace").strip().splitlines()
            raise BenchError(f"{path} did not start on {sock}: {said[-1] if said else 'no word'}")
        time.sleep(0.02)
    return proc


def wait_until_settled(paths: Iterable[str]) -> None:
    """Wait until the spec files ``paths`` have settled: a spec file changed in the last
    :data:`oci.cdi.index.RACY_NS` is parsed in every call (and a server does not parse it
    ahead), which a node pays only right after its spec is rewritten; so benches measure a
    spec as a node holds it (this one's rows and ``bench/start.py``'s; about 2 s)."""
    from oci.cdi.index import RACY_NS

    changed = 0
    for path in paths:
        st = os.stat(path)
        changed = max(changed, st.st_mtime_ns, st.st_ctime_ns)
    time.sleep(max(0.0, (changed + RACY_NS - time.time_ns()) / 1e9 + 0.05))


def _check_kept(cache: str) -> None:
    """The Python shim's GPU creates found the spec kept parsed in their cache directory, as
    on a node (:mod:`oci.cdi.index`); else they timed a parse in every call."""
    if not any(name.startswith("cdi-parsed-") for name in os.listdir(cache)):
        raise BenchError(f"{cache}: the GPU create rows parsed the spec in every call (a bug)")


def _check_served(trace: str, calls: int) -> None:
    """Every call of the server row was the server's (a fallback would time the Python shim):
    its ``--trace`` has one child per call."""
    try:
        with open(trace, "rb") as f:
            served = sum(1 for line in f if line.split()[1:2] == [b"reply_sent"])
    except FileNotFoundError:
        served = 0
    if served != calls:
        raise BenchError(
            f"nvhook-shim-server served {served} of the {calls} calls sent to it "
            "(the front-end fell back to the Python shim): run `nvhook doctor`"
        )


def _hook(bindir: str, work: str, machine: str, spec: dict[str, object]) -> Callable[[], float]:
    """One run of the spec's createContainer hook on a fresh copy of a rootfs that holds the
    mock's libraries (what the spec's mounts would bind there)."""
    edits = spec["containerEdits"]
    assert isinstance(edits, dict)
    hook = next(h for h in edits.get("hooks", []) if h["args"][1:2] == ["create-container"])
    argv = [_program(bindir, "nvhook-hook"), *hook["args"][1:]]
    hook_env = dict(e.split("=", 1) for e in hook.get("env", []))
    template = os.path.join(work, "rootfs-template")
    libdir = os.path.join("usr", "lib", "x86_64-linux-gnu")
    for folder in [a for i, a in enumerate(argv) if i and argv[i - 1] == "--folder"] or [
        "/" + libdir
    ]:
        source = os.path.join(machine, folder.lstrip("/"))
        target = os.path.join(template, folder.lstrip("/"))
        os.makedirs(target, exist_ok=True)
        if os.path.isdir(source):
            for name in os.listdir(source):
                path = os.path.join(source, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    shutil.copy2(path, target)
    os.makedirs(os.path.join(template, "etc"), exist_ok=True)
    bundle = os.path.join(work, "hook-bundle")

    def run() -> float:
        shutil.rmtree(bundle, ignore_errors=True)
        os.mkdir(bundle)
        shutil.copytree(template, os.path.join(bundle, "rootfs"), symlinks=True)
        with open(os.path.join(bundle, "config.json"), "w") as f:
            f.write('{"ociVersion": "1.0.2", "root": {"path": "rootfs"}}')
        state = json.dumps({"ociVersion": "1.0.2", "id": "nvhook-bench", "status": "creating",
                            "pid": os.getpid(), "bundle": bundle}).encode()  # fmt: skip
        return _timed(argv, hook_env, work, state)

    return run


def render(rows: Sequence[Row], runs: int, profile: str) -> str:
    """The table ``nvhook bench`` prints."""
    load = os.getloadavg()[0]
    lines = [f"what nvhook adds to a container start on this node ({profile} mock, {runs} runs,"
             f" medians; load {load:.2f}):",
             f"  {'':<48} {'median':>8} {'added':>9}  against"]  # fmt: skip
    for row in rows:
        added = f"{row.added:>+7.1f}ms" if row.added is not None else f"{'':>9}"
        against = (
            f"{row.reference} ({statistics.median(row.reference_ms):.1f} ms)"
            if row.reference_ms
            else ""
        )
        lines.append(f"  {row.name:<48} {row.median:>6.1f}ms {added}  {against}")
    by = {row.name.split(" (")[0]: row for row in rows}
    gpu = [r for r in rows if r.name.startswith("create 1 GPU")]
    best = min(gpu, key=lambda r: r.added or 0.0) if gpu else None
    hook = by.get("createContainer hook")
    passing = by.get("pass-through")
    if (
        best is not None
        and best.added is not None
        and passing is not None
        and passing.added is not None
    ):
        total = best.added + 3 * passing.added + (hook.median if hook is not None else 0.0)
        lines.append(f"a GPU container's start: about {total:.0f} ms more than with plain runc "
                     f"({best.name}{', the hook' if hook else ''}, 3 pass-through"
                     " calls)")  # fmt: skip
    if hook is None:
        lines.append("(the server's row and the hook's need root: run it with sudo)")
    lines.append("nothing on this node was changed (a temporary directory, removed)")
    return "\n".join(lines) + "\n"
