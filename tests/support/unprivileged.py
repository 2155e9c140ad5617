"""Checks that need an unprivileged user, also when the suite runs as root.

Root reads and writes any file whatever its mode, so a test of what happens with an
unreadable file, or a directory nobody may write, must drop root to mean anything::

    call_unprivileged(fn) -> value        fn() as uid/gid 65534 (nobody), no groups
    unprivileged_tmp   (fixture)          a fresh directory that user can reach
    run_as_nobody(args)                   ``python -m nvhook ARGS`` as nobody, via setpriv

As root, :func:`call_unprivileged` forks; the child sets its groups, gid and uid to
nobody's (so the kernel drops every capability) and calls ``fn``; what ``fn`` returned,
or the exception it raised, comes back pickled, so ``pytest.raises`` works as usual. A
fork rather than ``setpriv … python -c`` because the child then needs no access to the
checkout, the interpreter or the test's state (monkeypatches included). Not root: ``fn``
is called directly, since the user running the suite already lacks the privilege.

pytest's ``tmp_path`` lies under a 0700 directory of the user running the suite, which
nobody cannot enter, so a check there would fail at the parent directory for the wrong
reason: ``unprivileged_tmp`` is a 0755 directory in the system temp dir instead.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from tests.support.basics import require, require_root

__all__ = ["NOBODY", "call_unprivileged", "run_as_nobody", "unprivileged_tmp"]

NOBODY = 65534
"""The uid and gid the checks run as (``nobody``/``nogroup`` on Debian)."""

T = TypeVar("T")


def call_unprivileged(fn: Callable[[], T]) -> T:
    """``fn()`` run as uid and gid :data:`NOBODY` without supplementary groups."""
    if os.geteuid() != 0:
        return fn()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            try:
                outcome: tuple[bool, object] = (True, fn())
            except BaseException as e:
                outcome = (False, e)
            try:
                data = pickle.dumps(outcome)
                pickle.loads(data)
            except Exception as e:
                data = pickle.dumps((False, AssertionError(f"unpicklable {outcome!r}: {e}")))
            with os.fdopen(write_end, "wb") as f:
                f.write(data)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert data, f"the unprivileged child died without an outcome (wait status {status})"
    ok, value = pickle.loads(data)
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _make_removable(path: Path) -> None:
    """Give the owner back rwx on every directory under ``path`` (tests chmod them 0)."""
    path.chmod(0o700)
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            _make_removable(Path(entry.path))


@pytest.fixture
def unprivileged_tmp() -> Iterator[Path]:
    """A fresh directory (mode 0755, in the system temp dir) that :data:`NOBODY` can reach."""
    path = Path(tempfile.mkdtemp(prefix="nvhook-unprivileged-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        _make_removable(path)
        shutil.rmtree(path)


def run_as_nobody(args: Sequence[str], *, cwd: str = "/") -> subprocess.CompletedProcess[str]:
    """``python -m nvhook ARGS`` as uid/gid :data:`NOBODY` without supplementary groups,
    through ``setpriv`` (skips without root or setpriv; fails under CI)."""
    require_root()
    setpriv = require("setpriv")
    argv = [
        setpriv,
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        sys.executable,
        "-m",
        "nvhook",
        *args,
    ]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
