"""call_unprivileged: who the check runs as, and what comes back from it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.unprivileged import NOBODY, call_unprivileged


def _credentials() -> tuple[tuple[int, ...], tuple[int, ...], list[int], str]:
    status = Path("/proc/self/status").read_text()
    cap_eff = next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:"))
    return os.getresuid(), os.getresgid(), os.getgroups(), cap_eff


def test_runs_as_nobody_without_groups_or_capabilities() -> None:
    uids, gids, groups, cap_eff = call_unprivileged(_credentials)
    if os.geteuid() == 0:
        assert (uids, gids, groups) == ((NOBODY,) * 3, (NOBODY,) * 3, [])
    else:  # already unprivileged: called directly
        assert uids == os.getresuid() and gids == os.getresgid()
    assert int(cap_eff, 16) == 0
    assert os.geteuid() == os.getresuid()[0]  # the caller is unchanged


def test_the_exception_comes_back(unprivileged_tmp: Path) -> None:
    secret = unprivileged_tmp / "secret"
    secret.write_text("root only")
    secret.chmod(0o600 if os.geteuid() == 0 else 0)
    with pytest.raises(PermissionError) as info:
        call_unprivileged(secret.read_text)
    assert info.value.filename == str(secret)
    public = unprivileged_tmp / "public"
    public.write_text("anyone")
    assert call_unprivileged(public.read_text) == "anyone"  # the directory is reachable


def test_an_unpicklable_outcome_is_described() -> None:
    if os.geteuid() != 0:  # called in-process: nothing is pickled
        assert call_unprivileged(lambda: lambda: 1)() == 1
        return
    with pytest.raises(AssertionError, match="unpicklable"):
        call_unprivileged(lambda: lambda: 1)
