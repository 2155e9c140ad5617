"""The device cgroup rules of hook mode, on fake /proc trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvhook.errors import HookError
from nvhook.hook.cgroups import allow_devices, devices_cgroup, rule_line, unified_cgroup
from nvhook.hook.container_init import ContainerInit

MOUNTINFO_V1 = (
    "30 25 0:26 / /sys/fs/cgroup/devices rw,nosuid - cgroup cgroup rw,devices\n"
    "31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
)


def _proc(tmp_path: Path, cgroup: str, mountinfo: str = MOUNTINFO_V1) -> Path:
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "self").mkdir()
    (proc / "42/cgroup").write_text(cgroup)
    (proc / "self/mountinfo").write_text(mountinfo)
    return proc


def _cg(proc: Path) -> str:
    """The fake pid 42's /proc/42/cgroup text, as the check of its pid read it."""
    return (proc / "42/cgroup").read_text()


def _init(proc: Path) -> ContainerInit:
    """The fake pid 42 as :func:`check_init` would hand it over (no namespace, no pidfd)."""
    return ContainerInit(42, _cg(proc), -1, None)


@pytest.mark.parametrize(
    ("rule", "line"),
    [
        ({"allow": True, "type": "c", "major": 195, "minor": 3, "access": "rwm"}, "c 195:3 rwm"),
        ({"allow": True, "type": "c", "major": 195, "access": "rw"}, "c 195:* rw"),
        ({"allow": True, "type": "b", "major": 8, "minor": -1}, "b 8:* rwm"),
        ({"allow": True}, "a *:* rwm"),
    ],
)
def test_rule_line(rule: dict[str, object], line: str) -> None:
    assert rule_line(rule) == line


def test_rule_line_refuses_odd_access() -> None:
    with pytest.raises(HookError, match="access"):
        rule_line({"allow": True, "type": "c", "major": 1, "minor": 1, "access": "rwx"})


def test_v1_cgroup_dir(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "12:devices:/docker/abc\n0::/docker/abc\n")
    assert devices_cgroup(42, _cg(proc), proc=str(proc)) == "/sys/fs/cgroup/devices/docker/abc"


def test_mount_root_is_stripped(tmp_path: Path) -> None:
    info = "30 25 0:26 /outer /cg rw - cgroup cgroup rw,devices,freezer\n"
    proc = _proc(tmp_path, "5:freezer,devices:/outer/c1\n", info)
    assert devices_cgroup(42, _cg(proc), proc=str(proc)) == "/cg/c1"


def test_v2_only_has_no_v1_devices_cgroup(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "0::/system.slice/c1\n")
    with pytest.raises(HookError, match=r"no cgroup v1 devices controller.*cgroup v2"):
        devices_cgroup(42, _cg(proc), proc=str(proc))


def test_v2_cgroup_dir(tmp_path: Path) -> None:
    """The unified cgroup is found under the cgroup2 mount (tests/nvhook/hook/test_cgroup_bpf.py
    extends a real one's device program)."""
    proc = _proc(tmp_path, "0::/system.slice/c1\n")
    found = unified_cgroup(42, _cg(proc), proc=str(proc))
    assert found == "/sys/fs/cgroup/unified/system.slice/c1"
    with pytest.raises(HookError, match="unexpected cgroup v2 path"):
        unified_cgroup(42, "0::/a/../b\n", proc=str(proc))


def test_v2_rules_extend_the_device_programs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nvhook.hook import cgroup_bpf

    calls: list[tuple[str, list[dict[str, object]]]] = []

    def extend(directory: str, rules: list[dict[str, object]]) -> int:
        calls.append((directory, list(rules)))
        return 1

    monkeypatch.setattr(cgroup_bpf, "extend", extend)
    proc = _proc(tmp_path, "0::/c1\n")
    rules: list[dict[str, object]] = [{"allow": True, "type": "c", "major": 195, "minor": 0}]
    assert allow_devices(_init(proc), rules, proc=str(proc)) == "/sys/fs/cgroup/unified/c1"
    assert calls == [("/sys/fs/cgroup/unified/c1", rules)]


#: A kernel with v1 hierarchies, seen from a mount namespace that mounted cgroup2 over the v1
#: tmpfs (a cgroup2-only view, as an engine gets it): the v1 mounts are listed but hidden.
MOUNTINFO_OVERMOUNTED = (
    "23 22 0:22 / /sys rw - sysfs sysfs rw\n"
    "29 23 0:25 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n"
    "30 29 0:26 / /sys/fs/cgroup/devices rw,nosuid - cgroup cgroup rw,devices\n"
    "31 29 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    "40 23 0:27 / /sys/fs/cgroup rw - cgroup2 none rw\n"
)


def test_hidden_v1_mounts_do_not_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pid still has a devices line, but runc's filter is the eBPF one of the visible
    cgroup2 mount: that one is extended, under /sys/fs/cgroup (not the hidden unified)."""
    from nvhook.hook import cgroup_bpf

    calls: list[str] = []
    monkeypatch.setattr(cgroup_bpf, "extend", lambda directory, rules: calls.append(directory))
    proc = _proc(tmp_path, "12:devices:/\n0::/docker/c1\n", MOUNTINFO_OVERMOUNTED)
    rules: list[dict[str, object]] = [{"allow": True, "type": "c", "major": 195, "minor": 1}]
    assert allow_devices(_init(proc), rules, proc=str(proc)) == "/sys/fs/cgroup/docker/c1"
    assert calls == ["/sys/fs/cgroup/docker/c1"]
    with pytest.raises(HookError, match="no cgroup v1 devices hierarchy is mounted"):
        devices_cgroup(42, _cg(proc), proc=str(proc))


def test_a_mount_below_a_later_one_of_its_own_parent_chain_stays(tmp_path: Path) -> None:
    """A later entry that is the devices mount's own parent does not hide it."""
    info = (
        "30 41 0:26 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n"
        "41 23 0:25 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
    )
    proc = _proc(tmp_path, "12:devices:/c1\n", info)
    assert devices_cgroup(42, _cg(proc), proc=str(proc)) == "/sys/fs/cgroup/devices/c1"


def test_allow_writes_one_rule_per_write(tmp_path: Path) -> None:
    cg = tmp_path / "cg/c1"
    cg.mkdir(parents=True)
    (cg / "devices.allow").write_text("")
    info = f"30 25 0:26 / {tmp_path}/cg rw - cgroup cgroup rw,devices\n"
    proc = _proc(tmp_path, "3:devices:/c1\n", info)
    rules = [
        {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rwm"},
        {"allow": False, "type": "a"},  # not ours to write: runc's deny-all
        {"allow": True, "type": "c", "major": 195, "minor": 255, "access": "rw"},
    ]
    assert allow_devices(_init(proc), rules, proc=str(proc)) == str(cg)
    # a plain file here: the two allow rules, in order, with no separator (the kernel file
    # takes one rule per write(2)); the deny rule is not written
    assert (cg / "devices.allow").read_text() == "c 195:0 rwmc 195:255 rw"
