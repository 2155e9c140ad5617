"""The harness of today's engines (tests/support/engines.py) keeps to itself and leaves
nothing: what runs in a :class:`PrivateRoot` writes only its overlay, its mounts are not the
host's, and leaving it, even by an exception, ends every process it started and its mount
namespace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.engines import PrivateRoot, engine_root

pytestmark = [pytest.mark.root, pytest.mark.slow]


def _namespace_members(mnt_ns: str) -> list[int]:
    """Host pids of the processes in mount namespace ``mnt_ns`` (``mnt:[INODE]``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/mnt") == mnt_ns:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_private_root_writes_its_overlay_and_leaves_nothing(tmp_path: Path) -> None:
    lower = engine_root("trixie")
    bound = tmp_path / "bound"
    bound.mkdir()
    failing = pytest.raises(RuntimeError, match="a failing test")
    with failing, PrivateRoot(lower, tmp_path / "root", [bound]) as root:
        root.version("containerd", "--version")
        mnt_ns = os.readlink(f"/proc/{root.pid1}/ns/mnt")
        assert mnt_ns != os.readlink("/proc/self/ns/mnt")
        _, sleeper = root.spawn("sleep", "600", log=tmp_path / "sleep.log")
        assert sleeper in _namespace_members(mnt_ns)
        # the namespace's pid 1 is the reaper, on the root's Python; its /proc is that pid
        # namespace's
        assert root.run("cat", "/proc/1/cmdline").stdout.startswith("/usr/bin/python3\0-I\0-S")
        # the overlay is the namespace's root (pivot_root), the host's / is gone from it: a
        # setns into a container's mount namespace lands where the engine's paths point
        mounts = [
            line.split(" - ")
            for line in root.run("cat", "/proc/self/mountinfo").stdout.splitlines()
        ]
        [top] = [after for before, after in mounts if before.split()[4] == "/"]
        assert top.startswith("overlay ")
        assert root.run("readlink", "/proc/1/root").stdout.strip() == "/"
        root.run("sh", "-c", f"touch /etc/written-inside {bound}/seen-inside /run/x")
        assert (bound / "seen-inside").is_file()  # a bound path is the host's
        assert (tmp_path / "root/upper/etc/written-inside").is_file()
        assert not (lower / "etc/written-inside").exists()  # the cache is never written
        with open("/proc/self/mountinfo") as f:
            assert str(root.merged) not in f.read()  # no mount of it reached the host
        sockdir = root.sockdir
        raise RuntimeError("a failing test")
    assert _namespace_members(mnt_ns) == []
    assert not sockdir.exists()
    assert not os.path.exists("/run/x")


def test_cgroup2_only_view(tmp_path: Path) -> None:
    with PrivateRoot(engine_root("trixie"), tmp_path / "root", cgroup2=True) as root:
        fstype = root.run("stat", "-f", "-c", "%T", "/sys/fs/cgroup").stdout.strip()
        assert fstype == "cgroup2fs"
        assert "cgroup.controllers" in root.run("ls", "/sys/fs/cgroup").stdout.split()
    with PrivateRoot(engine_root("trixie"), tmp_path / "plain") as root:  # the host's layout
        assert root.run("stat", "-f", "-c", "%T", "/sys/fs/cgroup").stdout.strip() == "tmpfs"


def test_an_unprivileged_user_gets_a_user_namespace(tmp_path: Path) -> None:
    """Rootless podman needs ``CLONE_NEWUSER``, which the kernel refuses a chrooted process
    (EPERM): in the pivoted root a user gets one."""
    unshare = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    unshare += ["unshare", "--user", "--map-root-user", "id", "-u"]
    with PrivateRoot(engine_root("trixie"), tmp_path / "root") as root:
        assert root.run(*unshare).stdout == "0\n"
