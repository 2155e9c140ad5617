"""Hook mode refuses a state that names the wrong process before it changes anything.

``nvhook-hook prestart`` is run as runc runs it (the real launcher: the state on stdin,
the cwd the bundle, runc's environment with ``NVHOOK_CONFIG``), with a bundle asking for
GPU 0 of the dgx-a100 mock, but with a state whose pid is not the container's init. The
victim is a sleeping process with a device cgroup of its own: on cgroup v1 a child of the
``devices`` hierarchy (deny all, then allow ``c 1:3``), on cgroup v2 a cgroup under
``/sys/fs/cgroup/unified`` with a device program attached as runc attaches one. After
each refused hook, the victim's ``devices.list``, its attached programs (ids and
instructions), its mount table and the bundle's rootfs are what they were: a hook that
wrote the cgroup first and checked the pid afterwards would have allowed ``c 195:*`` to
the victim (with CAP_MKNOD, another container could then open the GPU).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvhook.errors import ExitCode, HookError
from nvhook.hook import cgroup_bpf, cgroups
from oci.state import State
from tests.e2e.conftest import Shim
from tests.support.basics import require, unique_id

pytestmark = [pytest.mark.root]

DEVICES_V1 = Path("/sys/fs/cgroup/devices")
UNIFIED = Path("/sys/fs/cgroup/unified")
USE = "run nvhook-hook prestart as a prestart or createRuntime hook"


def hook_bin() -> str:
    path = Path(sys.executable).parent / "nvhook-hook"
    if not path.is_file():
        pytest.fail(f"{path} missing: run `nvhook install-entrypoints`", pytrace=False)
    return str(path)


def state_of(bundle: Path, pid: int | None) -> str:
    state: dict[str, object] = {"ociVersion": "1.0.2", "id": unique_id("refused"),
                                "status": "creating", "bundle": str(bundle)}  # fmt: skip
    if pid is not None:
        state["pid"] = pid
    return json.dumps(state)


def run_hook(shim: Shim, bundle: Path, pid: int | None) -> subprocess.CompletedProcess[str]:
    """The launcher as runc runs a prestart hook (no env in the hook: runc's environment)."""
    return subprocess.run(
        [hook_bin(), "prestart"],
        input=state_of(bundle, pid),
        capture_output=True,
        text=True,
        cwd=bundle,
        env=shim.env,
        timeout=120,
        check=False,
    )


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


class Victim:
    """A sleeping process with a v1 devices cgroup and a v2 cgroup (with a device program)
    of its own; ``own_ns``: in a mount namespace of its own, as a container's init;
    ``grandchild``: started through ``unshare --fork``, so not this process's child."""

    def __init__(self, *, own_ns: bool, grandchild: bool, tmp: Path) -> None:
        self.tmp = str(tmp)
        argv = [require("sleep"), "600"]
        if own_ns or grandchild:
            fork = ["--fork", "--kill-child"] if grandchild else []
            argv = [require("unshare"), "--mount", *fork, *argv]
        self.proc = subprocess.Popen(argv)
        self.pid = self._sleeper(grandchild)
        name = unique_id("nvhook-victim")
        self.v1 = DEVICES_V1 / name
        self.v2 = UNIFIED / name
        self.v1.mkdir()
        self.v2.mkdir()
        (self.v1 / "cgroup.procs").write_text(str(self.pid))
        (self.v1 / "devices.deny").write_text("a")
        (self.v1 / "devices.allow").write_text("c 1:3 rwm")
        (self.v2 / "cgroup.procs").write_text(str(self.pid))
        rules = [(False, ("a", -1, -1, "rwm")), (True, ("c", 1, 3, "rwm"))]
        prog = cgroup_bpf.load(cgroup_bpf.filter_program(rules))
        fd = os.open(self.v2, os.O_RDONLY | os.O_DIRECTORY)
        try:
            cgroup_bpf.attach(fd, prog, cgroup_bpf.F_ALLOW_MULTI)
        finally:
            os.close(fd)
            os.close(prog)

    def _sleeper(self, grandchild: bool) -> int:
        for _ in range(1000):
            pids = _children(self.proc.pid) if grandchild else [self.proc.pid]
            found = [p for p in pids if _exe(p).endswith("/sleep")]
            if found:
                return found[0]
            time.sleep(0.01)
        self.proc.kill()
        pytest.fail("the victim did not start", pytrace=False)

    def programs(self) -> list[tuple[int, bytes]]:
        """The device programs attached to the v2 cgroup: (id, instructions) each."""
        fd = os.open(self.v2, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _, ids = cgroup_bpf.attached(fd)
        finally:
            os.close(fd)
        out = []
        for prog_id in ids:
            prog = cgroup_bpf._prog_fd(prog_id)
            try:
                out.append((prog_id, cgroup_bpf._xlated(prog)))
            finally:
                os.close(prog)
        return out

    def snapshot(self) -> dict[str, object]:
        return {
            "devices.list": (self.v1 / "devices.list").read_bytes(),
            "programs": self.programs(),
            "mountinfo": self.mounts(),
        }

    def mounts(self) -> list[str]:
        """The victim's mountinfo, less the mounts of other tests' temp dirs (engines that
        other pytest workers run mount and unmount there meanwhile): what the hook would
        mount is under this test's bundle, or anywhere else but another test's dir."""
        text = Path(f"/proc/{self.pid}/mountinfo").read_text()
        theirs = tempfile.gettempdir() + "/pytest-of-"
        return [
            line
            for line in text.splitlines()
            if not (point := line.split()[4]).startswith(theirs) or point.startswith(self.tmp)
        ]

    def close(self) -> None:
        for pid in {self.pid, self.proc.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        for _ in range(500):  # the grandchild is reaped by unshare, then it leaves the cgroups
            if not (self.v1 / "cgroup.procs").read_text() + (self.v2 / "cgroup.procs").read_text():
                break
            time.sleep(0.01)
        self.v1.rmdir()
        self.v2.rmdir()


@pytest.fixture
def victim_of(tmp_path: Path) -> Iterator[Callable[..., Victim]]:
    if not (DEVICES_V1 / "devices.allow").exists() or not (UNIFIED / "cgroup.procs").exists():
        pytest.skip("needs the hybrid layout: a v1 devices hierarchy and cgroup2 at unified")
    made: list[Victim] = []

    def make(*, own_ns: bool = True, grandchild: bool = True) -> Victim:
        made.append(Victim(own_ns=own_ns, grandchild=grandchild, tmp=tmp_path))
        return made[-1]

    try:
        yield make
    finally:
        for victim in made:
            victim.close()


def tree(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.lstat().st_mode) for p in [root, *root.rglob("*")])


@pytest.fixture
def bundle(gpu_bundle: Callable[..., Path]) -> Path:
    return gpu_bundle("b", ["NVIDIA_VISIBLE_DEVICES=0"], args=["true"])


def refused(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode == ExitCode.HOOK, result.stderr
    assert result.stderr == f"nvhook-hook prestart: {message}\n"


def test_a_process_not_the_containers_init_keeps_its_v1_device_cgroup(
    shim: Shim, bundle: Path, victim_of: Callable[..., Victim]
) -> None:
    """The issue's case: another process, in a mount namespace of its own, not runc's child."""
    victim = victim_of()
    before, rootfs = victim.snapshot(), tree(bundle / "rootfs")
    assert b"c 1:3 rwm" in before["devices.list"]  # type: ignore[operator]
    result = run_hook(shim, bundle, victim.pid)
    refused(
        result,
        f"pid {victim.pid} of the container state is not a child of the runtime that "
        f"started this hook: {USE}",
    )
    assert victim.snapshot() == before  # devices.list byte-identical, program, mounts
    assert tree(bundle / "rootfs") == rootfs


def test_a_process_not_the_containers_init_keeps_its_v2_device_program(
    shim: Shim,
    bundle: Path,
    victim_of: Callable[..., Victim],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same on a unified-only host, where the cgroup step rewrites the device program:
    this hybrid host's v1 ``devices`` line is hidden from :mod:`nvhook.hook.cgroups`, and
    the hook is called as a function (the launcher's ``main`` runs exactly it)."""
    from nvhook.hook.prestart import prestart

    parse = cgroups._cgroup_paths

    def unified_only(pid: int, cgroup: str) -> dict[str, str]:
        return {k: v for k, v in parse(pid, cgroup).items() if k != "devices"}

    monkeypatch.setattr(cgroups, "_cgroup_paths", unified_only)
    for name, value in shim.extra_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(bundle)
    victim = victim_of()
    before, rootfs = victim.snapshot(), tree(bundle / "rootfs")
    assert len(before["programs"]) == 1  # type: ignore[arg-type]
    state = State.parse(state_of(bundle, victim.pid))
    with pytest.raises(HookError, match=rf"^pid {victim.pid} .* is not a child of the runtime"):
        prestart(state, log=lambda message: None)
    assert victim.snapshot() == before  # the same program id, the same instructions
    assert tree(bundle / "rootfs") == rootfs


def test_a_process_in_the_hooks_mount_namespace_is_left_alone(
    shim: Shim, bundle: Path, victim_of: Callable[..., Victim]
) -> None:
    """A child of the hook's parent (as runc init is), but in the host's mount namespace."""
    victim = victim_of(own_ns=False, grandchild=False)
    before, rootfs = victim.snapshot(), tree(bundle / "rootfs")
    result = run_hook(shim, bundle, victim.pid)
    refused(result, f"pid {victim.pid} shares this hook's mount namespace: not a container's init")
    assert victim.snapshot() == before
    assert tree(bundle / "rootfs") == rootfs


def test_a_child_of_the_hooks_parent_in_its_own_namespace_is_served(
    shim: Shim, bundle: Path, victim_of: Callable[..., Victim]
) -> None:
    """The control: the victim as the check wants a container's init (the hook's parent's
    child, in a mount namespace of its own) gets the GPU's rule, so the snapshots of the
    other tests do see what the hook changes."""
    victim = victim_of(own_ns=True, grandchild=False)
    before = victim.snapshot()
    result = run_hook(shim, bundle, victim.pid)
    assert result.returncode == 0, result.stderr
    after = victim.snapshot()
    assert b"c 195:0 rwm" in after["devices.list"]  # type: ignore[operator]
    assert after["devices.list"] != before["devices.list"]
    assert after["mountinfo"] != before["mountinfo"]  # its mounts, under this test's bundle


def test_a_gone_process_and_no_pid_change_nothing(shim: Shim, bundle: Path) -> None:
    child = subprocess.Popen([require("sleep"), "600"])
    child.kill()
    child.wait()
    rootfs = tree(bundle / "rootfs")
    result = run_hook(shim, bundle, child.pid)
    refused(result, f"pid {child.pid} of the container state is gone (it exited): {USE}")
    result = run_hook(shim, bundle, None)
    refused(result, f"the container state has no pid: {USE}")
    assert tree(bundle / "rootfs") == rootfs
