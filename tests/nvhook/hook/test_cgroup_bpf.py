"""cgroup v2's device filter, extended on this machine's kernel (``nvhook.hook.cgroup_bpf``).

A cgroup of its own under the unified hierarchy gets a device program as runc makes one
(deny all, allow ``c 1:3``); a process moved into it opens device nodes made in a temporary
directory: ``c 1:3`` opens, ``c 1:5`` and ``c 1:7`` are refused (EPERM). After
:func:`extend` with an allow rule for ``c 1:5 rw``, exactly ``c 1:5`` opens in addition.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvhook.errors import HookError
from nvhook.hook import cgroup_bpf
from tests.support.containers import unique_id

pytestmark = [pytest.mark.root]

UNIFIED = Path("/sys/fs/cgroup/unified")
#: Moves itself into the cgroup argv[1], then opens each node argv[2:]: errno or 0 per line.
PROBE = """
import os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write("0")
for path in sys.argv[2:]:
    try:
        os.close(os.open(path, os.O_RDONLY))
        print(0)
    except OSError as e:
        print(e.errno)
"""
NODES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7)}


@pytest.fixture
def cgroup() -> Iterator[Path]:
    base = UNIFIED if UNIFIED.is_dir() else Path("/sys/fs/cgroup")
    if not (base / "cgroup.procs").exists() or os.geteuid() != 0:
        pytest.skip("no cgroup v2 hierarchy writable here")
    path = base / unique_id("nvhook-bpf")
    path.mkdir()
    try:
        yield path
    finally:
        path.rmdir()


def opens(cgroup: Path, nodes: Path) -> dict[str, int]:
    names = list(NODES)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(cgroup), *(str(nodes / n) for n in names)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return dict(zip(names, map(int, out.split()), strict=True))


def test_extend_allows_exactly_the_added_node(cgroup: Path, tmp_path: Path) -> None:
    for name, (major, minor) in NODES.items():
        os.mknod(tmp_path / name, 0o666 | 0o020000, os.makedev(major, minor))
    assert opens(cgroup, tmp_path) == {"null": 0, "zero": 0, "full": 0}  # no program yet
    base = cgroup_bpf.filter_program([(False, ("a", -1, -1, "rwm")), (True, ("c", 1, 3, "rwm"))])
    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        prog = cgroup_bpf.load(base)
        cgroup_bpf.attach(fd, prog, cgroup_bpf.F_ALLOW_MULTI)
        os.close(prog)
        flags, before_ids = cgroup_bpf.attached(fd)
        assert flags == cgroup_bpf.F_ALLOW_MULTI and len(before_ids) == 1
        assert opens(cgroup, tmp_path) == {"null": 0, "zero": errno.EPERM, "full": errno.EPERM}

        rule = {"allow": True, "type": "c", "major": 1, "minor": 5, "access": "rw"}
        assert cgroup_bpf.extend(str(cgroup), [rule]) == 1

        assert opens(cgroup, tmp_path) == {"null": 0, "zero": 0, "full": errno.EPERM}
        _, after_ids = cgroup_bpf.attached(fd)
        assert len(after_ids) == 1 and after_ids != before_ids  # replaced, not added beside
    finally:
        os.close(fd)


def test_access_letters_are_honoured(cgroup: Path, tmp_path: Path) -> None:
    """A rule granting ``m`` only (mknod) does not let the node open for reading."""
    os.mknod(tmp_path / "zero", 0o666 | 0o020000, os.makedev(1, 5))
    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        prog = cgroup_bpf.load(cgroup_bpf.filter_program([(False, ("a", -1, -1, "rwm"))]))
        cgroup_bpf.attach(fd, prog, cgroup_bpf.F_ALLOW_MULTI)
        os.close(prog)
        rule = {"allow": True, "type": "c", "major": 1, "minor": 5, "access": "m"}
        assert cgroup_bpf.extend(str(cgroup), [rule]) == 1
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(cgroup), str(tmp_path / "zero")],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout  # fmt: skip
        assert int(out) == errno.EPERM
    finally:
        os.close(fd)


def test_programs_with_calls_are_not_copied() -> None:
    call = bytes([0x85, 0, 0, 0, 14, 0, 0, 0])  # BPF_JMP | BPF_CALL, helper 14
    with pytest.raises(HookError, match=r"opcode 0x85 at 0"):
        cgroup_bpf.prefix_program([("c", 1, 5, "rw")], call)
