"""Instructions, not milliseconds: what each start-path program executes, counted by callgrind.

    .venv/bin/python bench/instructions.py [--runs N] [--rows LIST] [--check | --record]

Wall time on a shared machine moves by a third between runs; the number of instructions a
program executes does not depend on the load. Each row runs one program of a container
start under ``valgrind --tool=callgrind`` and reports its ``Ir`` (instructions executed,
user space), beside the wall-clock median of the same call run natively (interleaved):

- the native front-end (``nvhook-runtime``): pass-through ``state``, a create that asks for
  nothing, and a 1-GPU create handed to ``nvhook-shim-server`` (jit, cdi), each up to its
  ``execve`` of the runtime;
- a server child: what the forked child of ``nvhook-shim-server`` executes for one 1-GPU
  create (jit, cdi), from the fork to its exit (the server runs under callgrind with
  ``--dump-before=fork``, so each child's count starts at zero; the front-end runs natively);
- the Python shim (``nvhook-runtime.py``, interpreter start included): pass-through,
  create without a request, 1-GPU create (jit, cdi), up to its exec of the runtime;
- the native hook (``nvhook-hook create-container``) with the arguments of the spec
  ``nvhook cdi generate`` writes for the ``dgx-a100`` mock, on a rootfs holding the mock's
  libraries, without the ldconfig it execs (its row beside: the same run with
  ``--trace-children=yes``, ldconfig included); and the same hook with the SONAME links
  that ldconfig makes itself left out (the evidence for docs/architecture.md's SONAME
  decision).

The bench's work is on the mock machine of bench/runtime.py (``dgx-a100``, the static C no-op
as the runtime). ``perf stat -e instructions:u`` is not used even where the machine has
the counters: it would count the runtime the programs exec and every fork alike, and
callgrind's counts are the same on every x86-64 machine for the same binaries, so
:data:`BASELINE` recorded on one machine can be checked on another.

``--check`` compares each row's median with :data:`BASELINE` (``bench/instructions.json``)
and prints OVER for a row that executes more than the row's share (:data:`SHARE`: 2% for
native rows, 3% for Python rows; runs of one row differ by less than 0.5%) beyond its
recorded count; the exit status is 1 then. ``--record`` writes the medians as the new
baseline (after a change that is meant to cost or save instructions: commit it with the
change, saying why). Needs root (the server rows, the hook's ldconfig), valgrind and a C
compiler. About two minutes with the default 3 runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

BASELINE = REPO / "bench" / "instructions.json"
#: A row executing more than this share beyond its baseline count is OVER.
SHARE = {"native": 0.02, "python": 0.03}
VALGRIND = (
    "valgrind", "-q", "--tool=callgrind", "--dump-before=execve", "--dump-before=fork",
    "--dump-instr=no", "--compress-strings=no", "--compress-pos=no",
)  # fmt: skip
_TOTALS = re.compile(rb"^totals:\s+(\d+)", re.MULTILINE)
_OUT = re.compile(r"^cg\.(\d+)(?:\.\d+)?$")


# --------------------------------------------------------------------------- counting


def parse_outputs(directory: Path) -> dict[int, int]:
    """Instructions per process from callgrind's files in ``directory`` (``cg.PID`` and its
    dump parts ``cg.PID.N``: each part counts from the last dump, so a process's count is
    their sum)."""
    counts: dict[int, int] = {}
    for path in directory.iterdir():
        match = _OUT.match(path.name)
        if match is None:
            continue
        found = _TOTALS.search(path.read_bytes())
        if found is not None:
            pid = int(match.group(1))
            counts[pid] = counts.get(pid, 0) + int(found.group(1))
    return counts


def callgrind(
    argv: list[str],
    env: dict[str, str],
    *,
    cwd: Path | None = None,
    stdin: str = "",
    children: bool = False,
) -> tuple[int, dict[int, int]]:
    """Run ``argv`` under callgrind: (the process's own count, every process's count).

    Each process is counted up to its ``execve`` (with ``children``, exec'd programs are
    counted too); a forked child from its fork (``--dump-before=fork`` zeroes the parent's
    counters first). A nonzero exit raises SystemExit with the program's stderr."""
    with tempfile.TemporaryDirectory(prefix="nvhook-cg-") as out:
        cmd = [*VALGRIND, f"--callgrind-out-file={out}/cg.%p"]
        if children:
            cmd.append("--trace-children=yes")
        proc = subprocess.Popen([*cmd, *argv], env=env, cwd=cwd, stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        _, err = proc.communicate(stdin.encode())
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} under callgrind failed ({proc.returncode}):\n"
                             f"{err.decode(errors='replace')}")  # fmt: skip
        counts = parse_outputs(Path(out))
    if proc.pid not in counts:
        raise SystemExit(f"callgrind wrote no count for {argv[0]}")
    return counts[proc.pid], counts


def interpreter(script: str) -> list[str]:
    """``script``'s ``#!`` line as an argv (valgrind is given the interpreter itself)."""
    with open(script, "rb") as f:
        first = f.readline().decode()
    if not first.startswith("#!"):
        return [script]
    return [*first[2:].split(), script]


# --------------------------------------------------------------------------- the rows


@dataclass
class Row:
    name: str
    kind: str  # "native" or "python": its share in SHARE
    count: Callable[[], int]  # one run under callgrind
    wall: Callable[[], float] | None = None  # one native run, seconds
    warm: bool = True  # one uncounted run first
    syscalls: Callable[[], tuple[int, int]] | None = None  # (all, symlink*) of one run
    calls: tuple[int, int] | None = None
    counts: list[int] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)


def soname_links(args: list[str], libdir: Path) -> set[str]:
    """The ``--link TARGET::PATH`` values that ``ldconfig`` makes itself: PATH's directory is
    a ``--folder`` and its name is the SONAME of TARGET, a file in that directory."""
    from nvhook.discover.elf import read_elf

    folders = {args[i + 1] for i, a in enumerate(args[:-1]) if a == "--folder"}
    made = set()
    for i, a in enumerate(args[:-1]):
        if a != "--link":
            continue
        target, _, path = args[i + 1].partition("::")
        directory, name = os.path.split(path)
        if directory not in folders or "/" in target:
            continue
        info = read_elf(str(libdir / target))
        if info is not None and info.soname == name:
            made.add(args[i + 1])
    return made


def without_links(args: list[str], drop: set[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "--link" and i + 1 < len(args) and args[i + 1] in drop:
            skip = True
            continue
        out.append(a)
    return out


class HookBench:
    """``nvhook-hook create-container`` with the generated spec's arguments, on a rootfs
    holding the mock's libraries (what the spec's mounts would bind there), fresh each run."""

    def __init__(self, work: Path, machine: Path, hook: str, counted: str) -> None:
        self.work, self.hook, self.counted = work, hook, counted
        spec = work / "hook-spec.json"
        subprocess.run([str(Path(sys.executable).parent / "nvhook"), "cdi", "generate",
                        "--root", str(machine), "--output", str(spec)],
                       check=True, capture_output=True)  # fmt: skip
        hooks = json.loads(spec.read_text())["containerEdits"]["hooks"]
        create = next(h for h in hooks if h["args"][1:2] == ["create-container"])
        self.args: list[str] = create["args"][1:]
        self.env = dict(e.split("=", 1) for e in create.get("env", []))
        self.libdir = "usr/lib/x86_64-linux-gnu"
        self.template = work / "hook-rootfs"
        lib = self.template / self.libdir
        lib.mkdir(parents=True)
        for source in (machine / self.libdir).iterdir():
            if source.is_file() and not source.is_symlink():
                shutil.copy2(source, lib / source.name)
        (self.template / "etc").mkdir()
        self.sonames = soname_links(self.args, lib)
        self.bundle = work / "hook-bundle"
        self.mounted = False

    def fresh(self) -> str:
        """A new bundle whose rootfs is an overlay over the template (as a snapshotter
        gives it: the links land in a fresh upper directory); the state JSON for it."""
        self.unmount()
        shutil.rmtree(self.bundle, ignore_errors=True)
        (self.bundle / "rootfs").mkdir(parents=True)
        (self.bundle / "upper").mkdir()
        (self.bundle / "work").mkdir()
        options = (f"lowerdir={self.template},upperdir={self.bundle}/upper,"
                   f"workdir={self.bundle}/work")  # fmt: skip
        done = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options,
                               str(self.bundle / "rootfs")], capture_output=True)  # fmt: skip
        if done.returncode == 0:
            self.mounted = True
        else:  # no overlayfs here: a copy
            os.rmdir(self.bundle / "rootfs")
            shutil.copytree(self.template, self.bundle / "rootfs", symlinks=True)
        (self.bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
        return json.dumps({"ociVersion": "1.0.2", "id": "bench", "status": "creating",
                           "pid": os.getpid(), "bundle": str(self.bundle)})  # fmt: skip

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", str(self.bundle / "rootfs")], check=True)
            self.mounted = False

    def argv(self, lean: bool, program: str | None = None) -> list[str]:
        args = without_links(self.args, self.sonames) if lean else self.args
        return [program or self.hook, *args]

    def count(self, lean: bool = False, children: bool = False) -> int:
        """The hook's instructions and its forked children's up to their exec (with
        ``children``: the ldconfig it runs too, :meth:`ldconfig_count`)."""
        state = self.fresh()
        _, every = callgrind(self.argv(lean, self.counted), self.env, stdin=state)
        return sum(every.values()) + (self.ldconfig_count() if children else 0)

    def ldconfig_count(self) -> int:
        """The ldconfig the hook runs, counted on its own with the hook's command line on the
        rootfs the hook (run natively by its child) just left, its ld cache and ldconfig's
        aux cache removed first: the run of a fresh container. Not through the hook under
        ``--trace-children``: an ldconfig under valgrind cannot write its counts once it has
        chrooted into the rootfs (``-r``) and exits 1, so the hook handed over to the
        Python hook, whose count (~50 M) this row once showed."""
        from nvhook.hook.update_ldcache import LD_SO_CACHE, LD_SO_CONF, default_ldconfig

        rootfs = self.bundle / "rootfs"
        for stale in (LD_SO_CACHE, "/var/cache/ldconfig/aux-cache"):
            (rootfs / stale.lstrip("/")).unlink(missing_ok=True)
        argv = [default_ldconfig(), "-r", str(rootfs), "-C", LD_SO_CACHE, "-f", LD_SO_CONF]
        # valgrind opens its output file by absolute path as it starts and writes it as the
        # program ends, chrooted: that path must be there on both sides
        outputs = self.work / "ldconfig-cg"
        seen = rootfs / str(outputs).lstrip("/")  # the same path, inside the root
        made = [d for d in (seen, *seen.parents) if rootfs in d.parents and not d.exists()]
        outputs.mkdir()
        seen.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run([*VALGRIND, f"--callgrind-out-file={outputs}/cg.%p", *argv],
                                  env={}, capture_output=True)  # fmt: skip
            counts = parse_outputs(seen)
        finally:
            shutil.rmtree(outputs)
            if made:  # only what was made here
                shutil.rmtree(made[-1])
        if done.returncode != 0 or len(counts) != 1:
            raise SystemExit(f"{' '.join(argv)} under callgrind failed ({done.returncode}): "
                             f"{done.stderr.decode(errors='replace')}")  # fmt: skip
        return sum(counts.values())

    def syscalls(self, lean: bool = False) -> tuple[int, int]:
        """System calls of one run, its children (ldconfig) included: (all, symlink*).
        The hook's cost is mostly in the kernel, which Ir does not count."""
        state = self.fresh()
        out = self.work / "strace.out"
        subprocess.run(["strace", "-f", "-qq", "-c", "-o", str(out), *self.argv(lean)],
                       input=state.encode(), env=self.env, check=True,
                       capture_output=True)  # fmt: skip
        total = links = 0
        for line in out.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 5 and fields[3].isdigit() and fields[-1] != "total":
                total += int(fields[3])
                if fields[-1] in ("symlink", "symlinkat"):
                    links += int(fields[3])
        return total, links

    def wall(self, lean: bool = False) -> float:
        state = self.fresh()
        start = time.perf_counter()
        subprocess.run(self.argv(lean), input=state.encode(), env=self.env, check=True,
                       capture_output=True)  # fmt: skip
        return time.perf_counter() - start


def server_child_counts(
    server: str, frontend: str, argv: list[str], env: dict[str, str], cache: Path,
    runs: int, reset: Callable[[], None],
) -> list[int]:  # fmt: skip
    """``server`` under callgrind; ``runs`` creates through ``frontend`` (natively); the
    count of each forked child."""
    cache.mkdir(mode=0o700, exist_ok=True)
    sock = cache / "shim.sock"
    out = Path(tempfile.mkdtemp(prefix="nvhook-cg-server-"))
    proc = subprocess.Popen(
        [*VALGRIND, f"--callgrind-out-file={out}/cg.%p", *interpreter(server), "--socket",
         str(sock)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{server} did not start under callgrind")
            time.sleep(0.2)
        for _ in range(runs + 1):  # the first child is not counted (caches)
            reset()
            done = subprocess.run([frontend, *argv], env={**env, "NVHOOK_CACHE_DIR": str(cache)},
                                  capture_output=True, check=False)  # fmt: skip
            if done.returncode != 0:
                raise SystemExit(f"front-end + server failed: {done.stderr.decode()}")
    finally:
        proc.terminate()
        proc.wait()
    counts = parse_outputs(out)
    # A child that served a call took on its caller's working directory (nvhook.server
    # _become: fchdir); a spare child still warming or waiting when the server stopped did
    # not, and is not a call's.
    served = {int(m.group(1)) for p in out.iterdir() if (m := _OUT.match(p.name))
              and b"fchdir" in p.read_bytes()}  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    children = [n for pid, n in sorted(counts.items()) if pid != proc.pid and pid in served][1:]
    if len(children) != runs:
        raise SystemExit(f"expected {runs} server children, callgrind counted {len(children)}"
                         " (did the front-end fall back to the Python shim?)")  # fmt: skip
    return children


def unstripped(work: Path, launcher: str, source: str, name: str) -> str:
    """The native program handing over to ``launcher``, built as installed but with its
    symbols (the same code: callgrind needs the names ``execve`` and ``fork``)."""
    from nvhook.native import build

    output = work / "unstripped" / name
    output.parent.mkdir(exist_ok=True)
    problem = build(launcher, output, source=source, strip=False)
    if problem is not None:
        raise SystemExit(f"cannot build {name} for callgrind: {problem}")
    return str(output)


def make_rows(work: Path, runs: int) -> tuple[list[Row], Callable[[], None]]:
    """The rows, and what to call at the end (stopping what they started)."""
    from bench import runtime
    from nvhook.native import HOOK_SOURCE, SOURCE

    runtime.compile_bytecode()
    shim, frontend = runtime.shim_launcher(None)
    counted_frontend = unstripped(work, shim, SOURCE, "nvhook-runtime") if frontend else None
    setup = runtime.prepare(work, shim, frontend)
    cases = {c.name: c for c in runtime.make_cases(setup, server=True)}
    server_proc = runtime.start_server(setup)
    rows: list[Row] = []

    def native_wall(case: runtime.Case) -> Callable[[], float]:
        return lambda: runtime.run_shim(setup, case)[0]

    def counted(case: runtime.Case, program: list[str]) -> Callable[[], int]:
        def run() -> int:
            runtime.reset(case)
            env = {**setup.env(case.mode), **case.env_extra}
            return callgrind([*program, *case.argv], env)[0]

        return run

    if frontend is not None:
        for name in ("pass-through state", "create, no request"):
            case = cases[f"front-end: {name}"]
            rows.append(Row(f"front-end: {name}", "native", counted(case, [counted_frontend]),
                            native_wall(case)))  # fmt: skip
        if server_proc is not None:
            for mode in ("jit", "cdi"):
                case = cases[f"front-end + server: create 1 GPU, {mode}"]
                rows.append(Row(f"front-end (to the server): create 1 GPU, {mode}", "native",
                                counted(case, [counted_frontend]), native_wall(case)))  # fmt: skip
    python = interpreter(shim)
    for name in ("pass-through state", "create, no request", "create 1 GPU, jit",
                 "create 1 GPU, cdi"):  # fmt: skip
        case = cases[name]
        rows.append(Row(f"Python shim: {name}", "python", counted(case, python),
                        native_wall(case)))  # fmt: skip
    if frontend is not None and setup.server is not None and os.geteuid() == 0:
        for mode in ("jit", "cdi"):
            case = cases[f"front-end + server: create 1 GPU, {mode}"]
            pending: list[int] = []

            def child(case: runtime.Case = case, pending: list[int] = pending) -> int:
                if not pending:  # one server under callgrind serves all runs of the row
                    assert setup.server is not None and setup.frontend is not None
                    pending += server_child_counts(
                        setup.server,
                        setup.frontend,
                        case.argv,
                        setup.env(case.mode),
                        work / f"cg-cache-{case.mode}",
                        runs,
                        lambda: runtime.reset(case),
                    )
                return pending.pop(0)

            rows.append(Row(f"server child: create 1 GPU, {mode}", "python", child, warm=False))
    hook = Path(shim).with_name("nvhook-hook")
    hb: HookBench | None = None
    if hook.is_file() and hook.read_bytes()[:4] == b"\x7fELF" and os.geteuid() == 0:
        behind = str(hook.with_name("nvhook-hook.py"))
        hb = HookBench(
            work, setup.machine, str(hook), unstripped(work, behind, HOOK_SOURCE, "nvhook-hook")
        )
        n = len(hb.sonames)
        rows += [
            Row("native hook: create-container (dgx-a100 spec)", "native", hb.count, hb.wall),
            Row("  the same, with the ldconfig it runs", "native",
                lambda: hb.count(children=True), syscalls=hb.syscalls),
            Row(f"  without the {n} SONAME links ldconfig makes", "native",
                lambda: hb.count(lean=True), lambda: hb.wall(lean=True)),
            Row("  the same without them, with the ldconfig it runs", "native",
                lambda: hb.count(lean=True, children=True),
                syscalls=lambda: hb.syscalls(lean=True)),
        ]  # fmt: skip

    def stop() -> None:
        if hb is not None:
            hb.unmount()
        if server_proc is not None:
            server_proc.terminate()
            server_proc.wait()

    names = [row.name for row in rows]
    if len(set(names)) != len(names):  # the counts and the baselines are kept by name
        raise ValueError(f"two rows of one name: {sorted(n for n in names if names.count(n) > 1)}")
    return rows, stop


# --------------------------------------------------------------------------- the baseline


def compare(rows: dict[str, int], baseline: dict[str, Any]) -> list[tuple[str, int, int | None,
                                                                          str]]:  # fmt: skip
    """Per row: (name, count, baseline count or None, verdict): OVER beyond the row's share,
    ok within it, new without a baseline entry."""
    out = []
    recorded = baseline.get("rows", {})
    for name, count in rows.items():
        entry = recorded.get(name)
        if entry is None:
            out.append((name, count, None, "new"))
            continue
        share = SHARE[entry["kind"]]
        verdict = "OVER" if count > entry["ir"] * (1 + share) else "ok"
        out.append((name, count, int(entry["ir"]), verdict))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per row (default 3)")
    parser.add_argument("--rows", help="only rows whose name contains one of these (comma list)")
    parser.add_argument("--check", action="store_true", help=f"compare with {BASELINE.name}")
    parser.add_argument("--record", action="store_true", help=f"write {BASELINE.name}")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind not found: apt-get install valgrind")
    work = Path(tempfile.mkdtemp(prefix="nvhook-bench-instructions-"))
    stop: Callable[[], None] = lambda: None  # noqa: E731
    try:
        rows, stop = make_rows(work, args.runs)
        if args.rows:
            wanted = [w.strip() for w in args.rows.split(",")]
            rows = [r for r in rows if any(w in r.name for w in wanted)]
        load = os.getloadavg()
        for row in rows:
            if row.warm:
                row.count()  # the first call may write caches (the front-end's data file)
            for _ in range(args.runs):
                row.counts.append(row.count())
            if row.syscalls is not None and shutil.which("strace"):
                row.calls = row.syscalls()
        for _ in range(max(args.runs, 10)):  # wall medians, interleaved, natively
            for row in rows:
                if row.wall is not None:
                    row.wall_ms.append(row.wall() * 1000)
        medians = {r.name: int(statistics.median(r.counts)) for r in rows}
        if os.environ.get("NVHOOK_BENCH_DEBUG"):
            print({r.name: r.counts for r in rows})
        baseline = json.loads(BASELINE.read_text()) if BASELINE.is_file() else {}
        verdicts = {name: (ref, v) for name, _, ref, v in compare(medians, baseline)}
        print(
            f"instructions (callgrind Ir, user space) per call, {args.runs} runs per row; "
            f"wall medians natively; load {load[0]:.2f} -> {os.getloadavg()[0]:.2f}"
        )
        header = (f"{'row':<50} {'instructions':>12} {'spread':>7} {'ms':>6}  {'baseline':>12} "
                  f"{'diff':>7}  check")  # fmt: skip
        print(header)
        print("-" * len(header))
        over = False
        for row in rows:
            med = medians[row.name]
            spread = (max(row.counts) - min(row.counts)) / med if med else 0.0
            wall = f"{statistics.median(row.wall_ms):>6.1f}" if row.wall_ms else f"{'-':>6}"
            ref, verdict = verdicts[row.name]
            diff = f"{(med - ref) / ref:>+7.1%}" if ref else f"{'':>7}"
            base = f"{ref:>12,}" if ref else f"{'-':>12}"
            over |= verdict == "OVER"
            calls = f"  syscalls {row.calls[0]} (symlink {row.calls[1]})" if row.calls else ""
            print(f"{row.name:<50} {med:>12,} {spread:>7.2%} {wall}  {base} {diff}  "
                  f"{verdict if args.check else ''}{calls}")  # fmt: skip
        print(
            f"instructions: the median of the runs (spread: max - min over it); ms: the median"
            f" wall time natively; budget: the baseline +{SHARE['native']:.0%} (native rows),"
            f" +{SHARE['python']:.0%} (Python rows)"
        )
        if args.record:
            recorded = baseline.get("rows", {})  # --rows: the other rows stay as they were
            recorded.update({r.name: {"ir": medians[r.name], "kind": r.kind} for r in rows})
            BASELINE.write_text(json.dumps({
                "note": "bench/instructions.py --record: callgrind Ir per row (median)",
                "python": sys.version.split()[0],
                "rows": recorded,
            }, indent=2) + "\n")  # fmt: skip
            print(f"recorded {BASELINE}")
        if args.check and over:
            raise SystemExit(1)
    finally:
        stop()
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
