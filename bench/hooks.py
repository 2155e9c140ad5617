"""What each nvhook hook costs a container start: the launcher run as runc runs it.

    .venv/bin/python bench/hooks.py [-n RUNS] [--python]

Each row is the median (and min) wall time of RUNS runs of ``nvhook-hook <command>`` (the
installed one: the native hook where it was built, docs/architecture.md D13; ``--python``
times its Python launcher ``nvhook-hook.py`` instead, which every call the native hook
hands over runs)
with the OCI state on stdin and exactly the hook's fixed env, against a prepared
rootfs (a library folder holding one small ``.so``). ``python -I -c pass`` is the
floor every Python hook pays; ``ldconfig -r`` alone shows what update-ldcache spends
outside Python. ``create-container`` (what nvhook injects) does the links and the cache
in one process: compare it with the two older commands run one after the other; its
next rows add the DRI ``--device-link``s of a generated 4-GPU spec (graphics), the
application profile of graphics (``--application-profile``, two ``/dev/nvidiaN`` nodes
there as root), and ``--cuda-compat`` (the config.json read for the container's env, the
compat folder looked up, and with a newer ``libcuda`` there one more folder for ldconfig).
As root,
the last update-ldcache row has a procfs mounted in the rootfs, as at createContainer,
so ldconfig runs in a private mount namespace with it detached: the difference to the
first row is that set-up. ``netdev`` (root only) moves a fresh ifb device into a fresh network
namespace each run; only the hook's run is timed. As root, the last two rows run in a private
mount namespace with a params file in the rootfs's procfs: create-container with and without
``--params`` (the private copy mounted over it). The machine is shared and noisy:
compare rows of the same run, not runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nvhook.discover.hooks import HOOK_ENV
from nvhook.hook.update_ldcache import default_ldconfig
from nvhook.tools.entrypoints import ENTRYPOINTS, install_entrypoints

LIBDIR = "/usr/lib/x86_64-linux-gnu"
ENV = dict(e.split("=", 1) for e in HOOK_ENV)


def _launcher(work: Path, python: bool) -> str:
    """The installed ``nvhook-hook`` (or, with ``python``, the Python launcher behind the
    native hook); one written into ``work`` where none is installed."""
    installed = Path(sys.executable).parent / "nvhook-hook"
    behind = installed.with_name(installed.name + ".py")
    if python and behind.is_file():
        return str(behind)
    if installed.is_file() and (not python or installed.read_bytes()[:2] == b"#!"):
        return str(installed)
    install_entrypoints(str(work / "bin"), sys.executable, frontend="off" if python else "auto")
    return str(work / "bin" / next(e.name for e in ENTRYPOINTS if e.name == "nvhook-hook"))


def _prepare(work: Path) -> tuple[Path, str]:
    """A bundle with a rootfs holding one library; the state JSON for it."""
    bundle = work / "bundle"
    lib = bundle / "rootfs" / LIBDIR.lstrip("/")
    lib.mkdir(parents=True)
    source = work / "lib.c"
    source.write_text("int nvhook_bench(void) { return 1; }\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libnvhookbench.so.1", "-o",
         str(lib / "libnvhookbench.so.1.0"), str(source)],
        check=True,
    )  # fmt: skip
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    state = {"ociVersion": "1.0.2", "id": "bench", "status": "creating", "pid": 1,
             "bundle": str(bundle)}  # fmt: skip
    return bundle, json.dumps(state)


def _dri_links(rootfs: str) -> list[str]:
    """``--device-link``s of a 4-GPU generated spec; the rootfs has the nodes of one GPU
    (char nodes as root, else plain files, which the hook skips the same way)."""
    dri = Path(rootfs, "dev", "dri")
    dri.mkdir(parents=True, exist_ok=True)
    for name, minor in (("card1", 1), ("renderD128", 128)):
        if os.geteuid() == 0:
            os.mknod(dri / name, 0o600 | 0o020000, os.makedev(226, minor))
        else:
            (dri / name).write_text("")
    args = []
    for n in range(4):
        for kind, node in (("card", f"card{n + 1}"), ("render", f"renderD{128 + n}")):
            args += ["--device-link", f"../{node}::/dev/dri/by-path/pci-0000:0{n}:00.0-{kind}"]
    return args


def _gpu_nodes(rootfs: str) -> list[str]:
    """``--application-profile``; the rootfs has two GPU nodes (as root; else plain files,
    which the hook skips: nothing is written)."""
    from nvhook.hook.app_profile import PROFILE_PATH

    dev = Path(rootfs, "dev")
    dev.mkdir(parents=True, exist_ok=True)
    for minor in (0, 1):
        if os.geteuid() == 0 and not (dev / f"nvidia{minor}").exists():
            os.mknod(dev / f"nvidia{minor}", 0o666 | 0o020000, os.makedev(195, minor))
        elif not (dev / f"nvidia{minor}").exists():
            (dev / f"nvidia{minor}").write_text("")
    return ["--application-profile", PROFILE_PATH]


def _compat(rootfs: str) -> None:
    """A CUDA compat folder with a libcuda of a newer branch (the bench library, renamed)."""
    compat = Path(rootfs, "usr/local/cuda/compat")
    if not compat.is_dir():
        compat.mkdir(parents=True)
        shutil.copy(Path(rootfs, LIBDIR.lstrip("/"), "libnvhookbench.so.1.0"),
                    compat / "libcuda.so.575.57.08")  # fmt: skip


def _time(argv: list[str], stdin: str, runs: int, before: Callable[[], object] | None = None,
          after: Callable[[], object] | None = None) -> list[float]:  # fmt: skip
    times = []
    for _ in range(runs):
        if before is not None:
            before()
        start = time.perf_counter()
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=ENV)
        times.append(time.perf_counter() - start)
        if after is not None:
            after()
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr}")
    return times


def _time_both(argvs: list[list[str]], stdin: str, runs: int) -> list[float]:
    """Each run: every argv in turn (one container's hooks), timed together."""
    times = []
    for _ in range(runs):
        times.append(sum(_time(argv, stdin, 1)[0] for argv in argvs))
    return times


def _procfs_row(hook: str, rootfs: str, state: str, runs: int) -> list[tuple[str, list[float]]]:
    proc = os.path.join(rootfs, "proc")
    if os.geteuid() != 0:
        return []
    os.makedirs(proc, exist_ok=True)
    subprocess.run(["mount", "-t", "proc", "proc", proc], check=True)
    try:
        times = _time([hook, "update-ldcache", "--folder", LIBDIR], state, runs)
    finally:
        subprocess.run(["umount", proc], check=True)
    return [("update-ldcache, procfs in the rootfs", times)]


def _params_rows(
    hook: str, rootfs: str, state: str, runs: int, options: list[str]
) -> list[tuple[str, list[float]]]:
    """create-container with and without ``--params``, over a params file in the rootfs's
    procfs as on a GPU node (a tmpfs on the container's ``proc/driver``: this machine may
    have no driver). Runs last: the bench process moves to a private mount namespace, where
    each run's mount is taken off after it."""
    if os.geteuid() != 0:
        return []
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x00020000) != 0:  # CLONE_NEWNS
        raise SystemExit(f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}")
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    proc = os.path.join(rootfs, "proc")
    os.makedirs(proc, exist_ok=True)
    subprocess.run(["mount", "-t", "proc", "proc", proc], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", os.path.join(proc, "driver")], check=True)
    host = os.path.join(os.path.dirname(rootfs), "params")
    with open(host, "w") as f:
        f.write("ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n")
    os.mkdir(os.path.join(proc, "driver", "nvidia"))
    target = os.path.join(proc, "driver", "nvidia", "params")
    shutil.copy(host, target)
    base = [hook, "create-container", *options]

    def unmount() -> None:  # the next run's target is the file again, not an unlinked copy
        subprocess.run(["umount", target], check=True)

    try:
        return [
            ("create-container, procfs in the rootfs", _time(base, state, runs)),
            ("create-container --params (the same +)",
             _time([*base, "--params", host], state, runs, after=unmount)),
        ]  # fmt: skip
    finally:
        subprocess.run(["umount", "-R", proc], check=True)


def _netdev_rows(hook: str, runs: int) -> list[tuple[str, list[float]]]:
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        return []
    name = f"nvhb{os.getpid() % 100000}"
    holder: list[subprocess.Popen[bytes]] = []
    state: list[str] = []

    def before() -> None:
        subprocess.run(["ip", "link", "add", name, "type", "ifb"], check=True)
        proc = subprocess.Popen(["unshare", "--net", "sleep", "60"])
        own = os.stat("/proc/self/ns/net").st_ino
        while os.stat(f"/proc/{proc.pid}/ns/net").st_ino == own:
            time.sleep(0.001)
        holder.append(proc)
        state[:] = [json.dumps({"ociVersion": "1.0.2", "id": "bench", "status": "creating",
                                "pid": proc.pid, "bundle": "/nonexistent"})]  # fmt: skip

    def after() -> None:
        proc = holder.pop()
        proc.kill()
        proc.wait()
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)

    times = []
    for _ in range(runs):
        before()
        try:
            times += _time([hook, "netdev", "--device", f"{name}=eth1"], state[0], 1)
        finally:
            after()
    return [("netdev (1 ifb device)", times)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=20, help="runs per row (default 20)")
    parser.add_argument("--python", action="store_true",
                        help="time the Python launcher behind the native hook")  # fmt: skip
    args = parser.parse_args()
    runs = args.runs
    with tempfile.TemporaryDirectory(prefix="nvhook-bench-") as tmp:
        work = Path(tmp)
        hook = _launcher(work, args.python)
        with open(hook, "rb") as f:
            kind = "native" if f.read(4) == b"\x7fELF" else "Python"
        print(f"nvhook-hook: {hook} ({kind})")
        bundle, state = _prepare(work)
        rootfs = str(bundle / "rootfs")
        links = ["--link", f"libnvhookbench.so.1::{LIBDIR}/a.so",
                 "--link", f"libnvhookbench.so.1::{LIBDIR}/b.so"]  # fmt: skip
        folders = ["--folder", LIBDIR]
        rows: list[tuple[str, list[float]]] = [
            ("python -I -c pass", _time([sys.executable, "-I", "-c", "pass"], "", runs)),
            ("update-ldcache (1 folder)", _time([hook, "update-ldcache", *folders], state, runs)),
            ("ldconfig -r ROOTFS (no Python)",
             _time([default_ldconfig(), "-r", rootfs], "", runs)),
            ("create-symlinks (2 links, in place)",
             _time([hook, "create-symlinks", *links], state, runs)),
            ("create-symlinks, then update-ldcache",
             _time_both([[hook, "create-symlinks", *links], [hook, "update-ldcache", *folders]],
                        state, runs)),
            ("create-container (the same, 1 process)",
             _time([hook, "create-container", *links, *folders], state, runs)),
            ("  + 8 DRI device links (2 nodes there)",
             _time([hook, "create-container", *links, *_dri_links(rootfs), *folders],
                   state, runs)),
            ("  + --application-profile (2 GPU nodes)",
             _time([hook, "create-container", *links, *folders, *_gpu_nodes(rootfs)],
                   state, runs)),
            ("  + --cuda-compat, no compat folder",
             _time([hook, "create-container", *links, *folders, "--cuda-compat", "550.54.15"],
                   state, runs)),
            ("  + --cuda-compat, a newer libcuda",
             _time([hook, "create-container", *links, *folders, "--cuda-compat", "550.54.15"],
                   state, runs, before=lambda: _compat(rootfs))),
        ]  # fmt: skip
        rows += _procfs_row(hook, rootfs, state, runs)
        rows += _netdev_rows(hook, runs)
        rows += _params_rows(hook, rootfs, state, runs, [*links, *folders])
    floor = statistics.median(rows[0][1])
    print(f"{'hook':<38} {'median ms':>10} {'min ms':>8} {'- python':>9}")
    for name, times in rows:
        med = statistics.median(times)
        delta = "" if name.startswith("ldconfig") else f"{(med - floor) * 1e3:+.1f}"
        print(f"{name:<38} {med * 1e3:>10.1f} {min(times) * 1e3:>8.1f} {delta:>9}")
    print(f"({runs} runs each; {os.cpu_count()} CPUs; Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
