"""apply(): unit checks beyond the golden cases, and the idempotence property."""

from __future__ import annotations

import copy
import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from oci.cdi.apply import apply, clean_path, mount_depth
from oci.cdi.edits import HOOK_NAMES, DeviceNode, Edits, Hook, IntelRdt, Mount, NetDevice

BASE: dict[str, Any] = {
    "ociVersion": "1.0.2",
    "process": {"user": {"uid": 0, "gid": 0}, "args": ["sh"], "env": ["PATH=/bin", "A=0"]},
    "root": {"path": "rootfs"},
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
    ],
    "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
}


def fake_lstat(path: str) -> os.stat_result:
    """Every host path is the character device 10:<len(path)>."""
    rdev = os.makedev(10, len(path))
    return os.stat_result((0o20666, 0, 0, 1, 0, 0, 0, 0, 0, 0), {"st_rdev": rdev})


_name = st.text("abcdefgh", min_size=1, max_size=3)
_path = st.lists(_name, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
_nodes = st.builds(
    DeviceNode,
    path=_path,
    type=st.sampled_from([None, "c", "p"]),
    major=st.none() | st.integers(0, 300),
    minor=st.integers(0, 300),
    permissions=st.sampled_from([None, "r", "rw", "rwm", "m"]),
    uid=st.none() | st.integers(0, 2000),
)
_mounts = st.builds(
    Mount,
    host_path=_path,
    container_path=_path,
    type=st.none() | st.just("bind"),
    options=st.lists(st.sampled_from(["ro", "bind", "nosuid"]), max_size=3).map(tuple),
)
_hooks = st.builds(
    Hook,
    hook_name=st.sampled_from(HOOK_NAMES),
    path=_path,
    args=st.lists(_name, max_size=2).map(tuple),
    timeout=st.none() | st.integers(1, 10),
)
_edits = st.builds(
    Edits,
    env=st.lists(st.tuples(_name, _name).map("=".join), max_size=4).map(tuple),
    device_nodes=st.lists(_nodes, max_size=4).map(tuple),
    mounts=st.lists(_mounts, max_size=4).map(tuple),
    hooks=st.lists(_hooks, max_size=3).map(tuple),
    additional_gids=st.lists(st.integers(0, 50), max_size=3).map(tuple),
    net_devices=st.lists(st.builds(NetDevice, _name, _name), max_size=2).map(tuple),
    intel_rdt=st.none() | st.builds(IntelRdt, clos_id=_name),
)


@settings(max_examples=150, deadline=None)
@given(_edits)
def test_apply_is_idempotent(edits: Edits) -> None:
    once = apply(edits, BASE, lstat=fake_lstat)
    assert apply(edits, once, lstat=fake_lstat) == once


@settings(max_examples=50, deadline=None)
@given(_edits)
def test_apply_never_touches_its_input(edits: Edits) -> None:
    before = copy.deepcopy(BASE)
    apply(edits, BASE, lstat=fake_lstat)
    assert before == BASE


@settings(max_examples=50, deadline=None)
@given(_edits, _edits)
def test_edits_concatenate_like_lists(a: Edits, b: Edits) -> None:
    assert (a + Edits()) == a == (Edits() + a)
    joined = a + b
    assert joined.env == a.env + b.env
    assert joined.intel_rdt == (b.intel_rdt if b.intel_rdt is not None else a.intel_rdt)
    assert Edits.from_dict(joined.to_dict()) == joined


def test_empty_edits_return_an_equal_copy() -> None:
    out = apply(Edits(), BASE)
    assert out == BASE
    assert out is not BASE


def test_clean_path_matches_go() -> None:
    assert clean_path("") == "."
    assert clean_path("//usr/lib/") == "/usr/lib"
    assert clean_path("/a/b/../c/.") == "/a/c"
    assert mount_depth("/") == 1
    assert mount_depth("/dev/pts") == 2


def _go_clean(path: str) -> str:
    """The oracle: ``normpath``, then a leading ``//`` made ``/`` (as Go's filepath.Clean)."""
    if not path:
        return "."
    cleaned = os.path.normpath(path)
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


@settings(max_examples=2000)
@given(st.text(alphabet="/.ab", max_size=12))
def test_clean_path_s_shortcut_for_clean_paths_changes_nothing(path: str) -> None:
    """A path already clean is returned as it is without ``normpath``; every path cleans
    as the oracle cleans it (the alphabet reaches each case: ``//``, ``.``, ``..``, ``.a``)."""
    assert clean_path(path) == _go_clean(path)
    for clean in ("/", "/a", "/a.b/c..", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"):
        assert clean_path(clean) == _go_clean(clean) == clean


def _group_node_lstat(path: str) -> os.stat_result:
    """Every host path is ``crw-rw----`` 226:<len(path)> (a DRM card: group video)."""
    rdev = os.makedev(226, len(path))
    return os.stat_result((0o20660, 0, 0, 1, 0, 44, 0, 0, 0, 0), {"st_rdev": rdev})


def _node_of(node: DeviceNode) -> dict[str, Any]:
    devices: list[dict[str, Any]] = apply(
        Edits(device_nodes=(node,)), BASE, lstat=_group_node_lstat
    )["linux"]["devices"]
    return devices[0]


def test_filled_node_takes_the_host_file_mode() -> None:
    """As the reference's fillMissingInfo: a node completed from the host gets its permission
    bits when it has no fileMode; a given fileMode is kept."""
    assert _node_of(DeviceNode("/dev/card1")) == {
        "path": "/dev/card1",
        "type": "c",
        "major": 226,
        "minor": len("/dev/card1"),
        "fileMode": 0o660,
    }
    assert _node_of(DeviceNode("/dev/card1", type="c", major=0))["fileMode"] == 0o660
    assert _node_of(DeviceNode("/dev/card1", file_mode=0o600))["fileMode"] == 0o600


def test_minimally_specified_node_takes_the_host_file_mode() -> None:
    """The reference (pkg/cdi/container-edits_unix.go since 457489d, "Ensure that filemode
    is set for device nodes") fills a missing fileMode from the host node even when the node
    gives its type and major (rootless engines bind-mount nodes); its type and numbers stay."""
    assert _node_of(DeviceNode("/dev/card1", type="c", major=195, minor=7)) == {
        "path": "/dev/card1",
        "type": "c",
        "major": 195,
        "minor": 7,
        "fileMode": 0o660,
    }
    fifo = _node_of(DeviceNode("/dev/pipe", type="p"))
    assert (fifo["type"], fifo["fileMode"]) == ("p", 0o660)
    given = DeviceNode("/dev/card1", type="c", major=195, file_mode=0o600)
    assert _node_of(given)["fileMode"] == 0o600


def test_minimally_specified_node_without_a_host_node_has_no_file_mode() -> None:
    """A missing or non-node host path is no error for a minimally specified node (the
    reference ignores the stat error then) and leaves fileMode out."""

    def missing(path: str) -> os.stat_result:
        raise FileNotFoundError(2, "No such file or directory", path)

    def regular(path: str) -> os.stat_result:
        return os.stat_result((0o100644, 0, 0, 1, 0, 0, 0, 0, 0, 0))

    node = DeviceNode("/dev/card1", type="c", major=195, minor=1)
    for lstat in (missing, regular):
        devices = apply(Edits(device_nodes=(node,)), BASE, lstat=lstat)["linux"]["devices"]
        assert devices == [{"path": "/dev/card1", "type": "c", "major": 195, "minor": 1}]


def test_given_file_mode_needs_no_stat() -> None:
    """A fully specified node (jit's, generate's) is applied without a stat of the host."""

    def no_stat(path: str) -> os.stat_result:
        raise AssertionError(f"stat of {path}")

    node = DeviceNode("/dev/nvidia0", type="c", major=195, minor=0, file_mode=0o666)
    assert apply(Edits(device_nodes=(node,)), BASE, lstat=no_stat)["linux"]["devices"][0] == {
        "path": "/dev/nvidia0",
        "type": "c",
        "major": 195,
        "minor": 0,
        "fileMode": 0o666,
    }
