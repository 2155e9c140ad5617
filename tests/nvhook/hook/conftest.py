"""Shared pieces of the hook tests: launcher, bundles, host snapshots, small C libraries."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nvhook.discover.hooks import HOOK_ENV
from nvhook.rootfs.safepath import ENV_IMPL, openat2_available
from tests.support.containers import (  # noqa: F401  (fixtures and the root-marker hook)
    pytest_runtest_setup,
    require,
    require_root,
    runc,
)

if TYPE_CHECKING:
    from nvhook.rootfs.safepath import Impl

IMPLS = ("openat2", "walk")
LIBDIR = "/usr/lib/x86_64-linux-gnu"


@pytest.fixture(params=IMPLS)
def impl(request: pytest.FixtureRequest) -> Impl:
    """Each safepath implementation in turn (openat2 skipped where the kernel lacks it)."""
    if request.param == "openat2" and not openat2_available():
        pytest.skip("this kernel has no openat2 with RESOLVE_IN_ROOT")
    return "openat2" if request.param == "openat2" else "walk"


def state_json(bundle: Path | str, *, pid: int = 1, status: str = "creating") -> str:
    return json.dumps(
        {
            "ociVersion": "1.0.2",
            "id": "nvhook-test",
            "status": status,
            "pid": pid,
            "bundle": str(bundle),
        }
    )


def write_bundle(directory: Path, rootfs: Path | str) -> Path:
    """A bundle whose config.json points at ``rootfs`` (relative when it is inside)."""
    directory.mkdir(parents=True, exist_ok=True)
    root = Path(rootfs)
    path = str(root.relative_to(directory)) if root.is_relative_to(directory) else str(root)
    (directory / "config.json").write_text(
        json.dumps({"ociVersion": "1.0.2", "root": {"path": path}, "process": {"args": ["sh"]}})
    )
    return directory


@dataclass
class HookRunner:
    """Runs the launcher like runc does: the state on stdin, exactly the env given."""

    hook_bin: str

    def __call__(
        self,
        args: Sequence[str],
        *,
        bundle: Path | None = None,
        state: str | None = None,
        impl: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        hook_env = dict(e.split("=", 1) for e in HOOK_ENV) if env is None else dict(env)
        if impl is not None:
            hook_env[ENV_IMPL] = impl
        stdin = state if state is not None else state_json(bundle or Path("/nonexistent"))
        return subprocess.run(
            [self.hook_bin, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=hook_env,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )


@pytest.fixture
def run_hook(hook_bin: str) -> HookRunner:
    return HookRunner(hook_bin)


# --------------------------------------------------------------------------- host snapshots


def snapshot(*tops: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under ``tops`` (not following symlinks): kind, content hash or target,
    mode and mtime. Compare two snapshots to see that nothing changed."""
    out: dict[str, tuple[object, ...]] = {}
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            for name in [".", *dirnames, *filenames]:
                p = os.path.join(dirpath, name) if name != "." else dirpath
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode):
                    what: object = ("link", os.readlink(p))
                elif stat.S_ISREG(st.st_mode):
                    what = ("file", hashlib.sha256(Path(p).read_bytes()).hexdigest())
                else:
                    what = ("dir", tuple(sorted(os.listdir(p))))
                out[p] = (what, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return out


# --------------------------------------------------------------------------- attacks


def escape_forms(rootfs: Path, target: Path) -> list[str]:
    """Symlink targets that reach the host path ``target`` when a link anywhere in ``rootfs``
    (up to a few levels deep) is followed on the host: absolute, ``../..`` chain, and
    through ``/proc/self/root``."""
    up = "../" * (len(rootfs.parts) + 6)
    return [str(target), f"{up}{str(target).lstrip('/')}", f"/proc/self/root{target}"]


_FLIP_SCRIPT = r"""
import itertools, json, os, select, sys


targets = json.loads(sys.argv[1])
min_swaps = int(sys.argv[2])
progress = int(sys.argv[3])  # a file descriptor: the rounds made so far go there
independent = sys.argv[4] == "independent"
aside = itertools.count()
swaps = 0


def put(src, dest):
    # the code under test may recreate `dest` in the gap: move whatever is there aside
    while True:
        try:
            os.rename(src, dest)
            return
        except OSError:
            if os.path.isdir(dest) and not os.path.islink(dest):
                os.rename(dest, f"{dest}.aside{next(aside)}")
            else:
                os.unlink(dest)


def to_link(path, forms):
    link = path + ".l"
    os.symlink(forms[swaps % len(forms)], link)
    os.rename(path, f"{path}.old{next(aside)}")
    put(link, path)  # a symlink towards the host


def to_dir(path):
    fresh = path + ".d"
    os.mkdir(fresh)
    os.unlink(path)
    put(fresh, path)  # and a directory again


print("ready", flush=True)
while swaps < min_swaps or not select.select([sys.stdin], [], [], 0)[0]:
    if independent:  # a Gray code over the paths: each one flip a step, every mix of states
        paths = list(targets)
        for step in range(1, 2 ** len(paths) + 1):
            index = (step & -step).bit_length() - 1
            path = paths[index % len(paths)]
            if os.path.islink(path):
                to_dir(path)
            else:
                to_link(path, targets[path])
    else:
        for path, forms in targets.items():
            to_link(path, forms)
            to_dir(path)
    swaps += 1
    os.pwrite(progress, swaps.to_bytes(8, "little"), 0)
print(swaps, flush=True)
"""


class Flipper:
    """In another process (so really in parallel), flips each path between a directory and
    a symlink (cycling through its targets) until the block ends and at least ``min_swaps``
    rounds were made; ``swaps`` is the count made, :meth:`progress` the count so far.

    By default each path is a symlink only for a moment of each round (it is flipped back
    before the next path is); with ``independent``, a round flips one path a step through
    every mix of links and directories (a Gray code), so each path is a link about half the
    time whatever the others are."""

    def __init__(
        self,
        targets: Mapping[Path, Sequence[str]],
        *,
        min_swaps: int = 300,
        independent: bool = False,
    ) -> None:
        self._arg = json.dumps({str(p): list(forms) for p, forms in targets.items()})
        self._min_swaps = min_swaps
        self._mode = "independent" if independent else "each"
        self.swaps = 0

    def __enter__(self) -> Flipper:
        self._progress = os.memfd_create("nvhook-flipper-progress", 0)
        argv = [sys.executable, "-c", _FLIP_SCRIPT, self._arg, str(self._min_swaps)]
        self._proc = subprocess.Popen(
            [*argv, str(self._progress), self._mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            pass_fds=(self._progress,),
        )
        assert self._proc.stdout is not None
        assert self._proc.stdout.readline() == "ready\n"
        return self

    def progress(self) -> int:
        """Rounds made so far (fails the test if the flipping process is gone)."""
        if self._proc.poll() is not None:
            pytest.fail(f"the flipping process ended early ({self._proc.returncode})")
        return int.from_bytes(os.pread(self._progress, 8, 0) or b"\0", "little")

    def __exit__(self, *exc: object) -> None:
        try:
            out, _ = self._proc.communicate(timeout=120)
        finally:
            os.close(self._progress)
        if self._proc.returncode != 0:
            pytest.fail(f"the flipping process failed ({self._proc.returncode})")
        self.swaps = int(out.strip())


# --------------------------------------------------------------------------- C helpers


@pytest.fixture(scope="session")
def cc() -> Callable[..., Path]:
    """Compile C: ``cc(source_text, output, *flags) -> output``."""
    gcc = require("gcc")

    def compile_(source: str, output: Path, *flags: str) -> Path:
        src = output.with_suffix(output.suffix + ".c")
        src.write_text(source)
        subprocess.run([gcc, *flags, "-o", str(output), str(src)], check=True, capture_output=True)
        return output

    return compile_


@pytest.fixture(scope="session")
def test_library(cc: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small shared library with SONAME ``libnvhooktest.so.1`` (file libnvhooktest.so.1.0)."""
    out = tmp_path_factory.mktemp("lib") / "libnvhooktest.so.1.0"
    return cc(
        "int nvhooktest(void) { return 42; }\n",
        out,
        "-shared",
        "-fPIC",
        "-Wl,-soname,libnvhooktest.so.1",
    )


def cache_entries(cache: Path) -> dict[str, str]:
    """SONAME -> path, read from an ld.so.cache by the host's ``ldconfig -p -C``."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    out = subprocess.run(
        [ldconfig, "-p", "-C", str(cache)], capture_output=True, text=True, check=True
    ).stdout
    entries = {}
    for line in out.splitlines()[1:]:
        name, _, path = line.strip().partition(" => ")
        entries[name.split(" (")[0]] = path
    return entries


# --------------------------------------------------------------------------- namespaces


@pytest.fixture
def netns_pid() -> Iterator[int]:
    """The pid of a process in a fresh network and mount namespace, as a container's init
    is (``unshare --mount --net sleep``), a child of this process (the hooks it runs are
    too, so it passes their check that the pid is their runtime's child)."""
    with _unshared("--net") as pid:
        yield pid


@pytest.fixture
def mountns_pid() -> Iterator[int]:
    """As :func:`netns_pid`, in the host's network namespace (``unshare --mount sleep``)."""
    with _unshared("--mount") as pid:
        yield pid


@contextlib.contextmanager
def _unshared(ns: str) -> Iterator[int]:
    require_root()
    unshare = require("unshare")
    argv = [unshare, "--mount", "--net"] if ns == "--net" else [unshare, "--mount"]
    proc = subprocess.Popen([*argv, "sleep", "60"])
    try:
        own = os.stat("/proc/self/ns/mnt").st_ino
        for _ in range(500):
            try:
                if os.stat(f"/proc/{proc.pid}/ns/mnt").st_ino != own:
                    break
            except FileNotFoundError:
                pass
            if proc.poll() is not None:
                pytest.fail(f"{' '.join(argv)} exited early")
            import time

            time.sleep(0.01)
        else:
            pytest.fail(f"{' '.join(argv)} never entered new namespaces")
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
