"""The bounds of :mod:`nvhook.hook.mountns` (its injection is tested through runc in
``tests/e2e/test_prestart_runc.py`` and ``test_prestart_attacks.py``)."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from nvhook.errors import HookError
from nvhook.hook import mountns
from nvhook.hook.container_init import ContainerInit


def test_a_child_that_does_not_finish_is_killed() -> None:
    marker: list[int] = []

    def forever() -> None:
        time.sleep(60)
        marker.append(1)

    started = time.monotonic()
    with pytest.raises(HookError, match=r"^the injection did not finish within 0.3s: killed it$"):
        mountns._in_child(forever, timeout=0.3)
    assert time.monotonic() - started < 30  # not the child's 60 s


def test_a_child_error_is_raised_in_the_parent() -> None:
    def fail() -> None:
        raise HookError("refusing this")

    with pytest.raises(HookError, match=r"^refusing this$"):
        mountns._in_child(fail, timeout=30)
    mountns._in_child(lambda: None, timeout=30)  # and a child that succeeds is fine


@pytest.mark.parametrize("what", ["devices", "mounts"])
def test_too_many_nodes_or_mounts_are_refused_before_anything(
    what: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mountns, "MAX_DEVICES", 3)
    monkeypatch.setattr(mountns, "MAX_MOUNTS", 3)
    device = {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}
    mount = {"source": "/nonexistent", "destination": "/x", "options": ["ro"]}
    many = 6 if what == "devices" else 3
    devices: list[dict[str, Any]] = [device] * many
    mounts: list[dict[str, Any]] = [mount] * (9 - many)
    name = "device nodes" if what == "devices" else "mounts"
    with pytest.raises(HookError, match=rf"^refusing to inject 6 {name} \(at most 3\)$"):
        mountns.check_bounds(devices, mounts)
    init = ContainerInit(os.getpid(), "", -1, None)  # never entered: refused before
    with pytest.raises(HookError, match=rf"^refusing to inject 6 {name} \(at most 3\)$"):
        mountns.inject(init, "/nonexistent", devices=devices, mounts=mounts)
    # at the bound itself, the next step speaks: the first mount's source is cloned
    mountns.check_bounds(devices[:3], mounts[:3])
    with pytest.raises(HookError, match=r"^cannot clone /nonexistent for /x: No such file"):
        mountns.inject(init, "/nonexistent", devices=devices[:3], mounts=mounts[:3])
