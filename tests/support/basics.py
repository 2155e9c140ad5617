"""What every part of the container harness needs: tool and root requirements, commands, ids.

A missing tool or missing root skips the test, except under CI (env ``CI`` set), which installs
everything and runs as root: there it fails, so that nothing is silently skipped.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

import pytest

from nvhook.errors import ContainerEngineError

__all__ = [
    "Json",
    "Result",
    "fail_on_engine_error",
    "in_ci",
    "missing",
    "require",
    "require_root",
    "rmdir_if_empty",
    "run_command",
    "unique_id",
    "wait_for_line",
]

Json = dict[str, Any]
Result = subprocess.CompletedProcess[str]

_ids = itertools.count()


def unique_id(prefix: str) -> str:
    """A name no other test, nor any concurrent pytest process on this machine, uses."""
    return f"{prefix}-{os.getpid()}-{next(_ids)}"


def in_ci() -> bool:
    """True when env ``CI`` is set (CI installs every tool, so a missing one is a failure)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def missing(reason: str) -> NoReturn:
    """Skip the test for ``reason``; under CI, fail it."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


def require(tool: str) -> str:
    """Return the absolute path of ``tool``; skip the test when it is missing (fail under CI)."""
    path = shutil.which(tool)
    if path is None:
        missing(f"{tool} not found on PATH (./dev setup installs it)")
    return os.path.realpath(path)


def require_root() -> None:
    """Skip the test unless it runs as root (fail under CI)."""
    if os.geteuid() != 0:
        missing("needs root")


def run_command(
    argv: Sequence[str],
    *,
    timeout: float,
    check: bool,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Result:
    """Run ``argv`` capturing text output; with ``check`` a failure fails the test readably."""
    proc = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"command failed with exit status {proc.returncode}: {' '.join(argv)}\n"
            f"--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}",
            pytrace=False,
        )
    return proc


@contextlib.contextmanager
def fail_on_engine_error() -> Iterator[None]:
    """Fail the test readably when nvhook's containerd or image helpers raise."""
    try:
        yield
    except ContainerEngineError as e:
        pytest.fail(e.message, pytrace=False)


def rmdir_if_empty(*paths: str) -> None:
    """Remove each directory that is empty (deepest first); leave anything in use alone."""
    for p in paths:
        with contextlib.suppress(OSError):
            os.rmdir(p)


def wait_for_line(
    proc: subprocess.Popen[bytes], log: IO[bytes], line: bytes, *, what: str, timeout: float = 30
) -> None:
    """Until ``proc`` has written ``line`` to ``log`` (the file its stderr goes to): the line
    a daemon prints once it serves. Not its socket's appearing: a socket file is there from
    ``bind``, before the ``chmod`` and ``listen`` that follow, so a connect in between is
    refused. Kills ``proc`` and fails if it exits or ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while line not in os.pread(log.fileno(), 1 << 16, 0):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            said = os.pread(log.fileno(), 1 << 16, 0).decode(errors="replace")
            pytest.fail(f"{what} did not start: {said}", pytrace=False)
        time.sleep(0.02)
