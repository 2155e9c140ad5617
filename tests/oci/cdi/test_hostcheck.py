"""oci.cdi.hostcheck: a spec's mounts, device nodes and hooks against the host's files."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from oci.cdi.edits import DeviceNode, Edits, Hook, Mount
from oci.cdi.hostcheck import HostProblem, check_edits, expected_kind, missing_host_paths


def _bind(path: str | Path) -> Mount:
    return Mount(host_path=str(path), container_path="/x", options=("ro", "bind"))


def _node(path: str, **fields: object) -> DeviceNode:
    return DeviceNode.from_dict({"path": path, **fields})


def _hook(path: str | Path) -> Hook:
    return Hook(hook_name="createContainer", path=str(path), args=("h",))


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "regular file"),
        ("/usr/lib/libnvidia-ml.so", "regular file"),
        ("/usr/bin/nvidia-smi", "regular file"),
        ("/etc/vulkan/icd.d/nvidia_icd.json", "regular file"),
        ("/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin", "regular file"),
        ("/run/nvidia-persistenced/socket", "socket"),
        ("/run/foo.sock", "socket"),
        ("/tmp/nvidia-mps/", "directory"),
        ("/tmp/nvidia-mps", None),
        ("/opt/vendor/thing", None),
    ],
)
def test_expected_kind_from_the_name(path: str, kind: str | None) -> None:
    assert expected_kind(path) == kind


def test_missing_and_dangling_mount_sources(tmp_path: Path) -> None:
    lib = tmp_path / "libx.so.1"
    lib.write_bytes(b"")
    (tmp_path / "libdangling.so.1").symlink_to("libgone.so.1")
    edits = Edits(
        mounts=(
            _bind(lib),
            _bind(tmp_path / "libmissing.so.2"),
            _bind(tmp_path / "libdangling.so.1"),
            Mount(host_path="tmpfs", container_path="/tmp", type="tmpfs"),  # names no file
        )
    )
    expected = [
        HostProblem(f"mount {tmp_path}/libmissing.so.2", f"{tmp_path}/libmissing.so.2",
                    "host file is missing", True),
        HostProblem(f"mount {tmp_path}/libdangling.so.1", f"{tmp_path}/libdangling.so.1",
                    "host file is a dangling link to libgone.so.1", True),
    ]  # fmt: skip
    assert missing_host_paths(edits) == expected
    assert check_edits(edits) == expected


def test_a_mount_of_another_kind(tmp_path: Path) -> None:
    (tmp_path / "libx.so.1").mkdir()
    sock = tmp_path / "socket"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock))
    edits = Edits(mounts=(_bind(tmp_path / "libx.so.1"), _bind(sock), _bind(tmp_path)))
    assert missing_host_paths(edits) == []  # they exist: runc would mount them
    assert [(p.what, p.problem) for p in check_edits(edits)] == [
        (f"mount {tmp_path}/libx.so.1", "host file is a directory, not a regular file")
    ]


def test_host_path_maps_every_lookup(tmp_path: Path) -> None:
    (tmp_path / "usr").mkdir()
    (tmp_path / "usr" / "libx.so.1").write_bytes(b"")
    edits = Edits(mounts=(_bind("/usr/libx.so.1"),))
    assert check_edits(edits, host_path=lambda p: f"{tmp_path}{p}") == []
    assert missing_host_paths(edits, host_path=lambda p: f"{tmp_path}/nope{p}") != []


def test_device_nodes_are_read_at_start_only_when_the_spec_leaves_them_to_the_host() -> None:
    given = _node("/dev/gone0", type="c", major=195, minor=0)
    from_host = _node("/dev/gone1", hostPath="/nonexistent/gone1")
    problems = missing_host_paths(Edits(device_nodes=(given, from_host)))
    assert problems == [
        HostProblem("device node /dev/gone1", "/nonexistent/gone1", "host device is missing", True)
    ]
    assert [p.what for p in check_edits(Edits(device_nodes=(given, from_host)))] == [
        "device node /dev/gone0",
        "device node /dev/gone1",
    ]


def test_device_node_type_and_numbers(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    nodes = (
        _node("/dev/null"),  # 1:3, filled from the host
        _node("/dev/null", type="c", major=1, minor=3),
        _node("/dev/n1", hostPath="/dev/null", type="c", major=1, minor=5),
        _node("/dev/n2", hostPath="/dev/null", type="b", major=1, minor=3),
        _node("/dev/n3", hostPath=str(plain), type="c", major=1, minor=3),
        _node("/dev/f", hostPath=str(fifo), type="p"),
    )
    assert [(p.what, p.problem) for p in check_edits(Edits(device_nodes=nodes))] == [
        ("device node /dev/n1", "host device is 1:3; the spec says 1:5"),
        ("device node /dev/n2", "host file is a character device; the spec says type 'b'"),
        ("device node /dev/n3", "host file is a regular file, not a device node"),
    ]


def test_hooks_must_be_executable_files(tmp_path: Path) -> None:
    runnable = tmp_path / "hook"
    runnable.write_text("#!/bin/sh\n")
    runnable.chmod(0o755)
    plain = tmp_path / "plain"
    plain.write_text("")
    plain.chmod(0o644)
    hooks = tuple(_hook(p) for p in (runnable, plain, tmp_path, tmp_path / "gone"))
    problems = [(p.what, p.problem) for p in check_edits(Edits(hooks=hooks))]
    expected = [
        (f"hook {plain}", "is not executable"),
        (f"hook {tmp_path}", "is a directory, not a program"),
        (f"hook {tmp_path}/gone", "host file is missing"),
    ]
    assert problems == expected  # root too: it may execute a file only with an x bit set
    assert missing_host_paths(Edits(hooks=hooks)) == []  # hooks fail later, in runc


def test_a_path_that_cannot_be_inspected(tmp_path: Path) -> None:
    """A host path through a regular file (ENOTDIR) is neither missing nor present: said as
    such, for a mount and a device node, and not taken for a missing file at start."""
    (tmp_path / "file").write_text("")
    good = tmp_path / "lib.so.1"
    good.write_text("")
    through = tmp_path / "file" / "lib.so.1"
    edits = Edits(mounts=(_bind(through),), device_nodes=(_node("/dev/n", hostPath=str(through)),))
    problems = [(p.what, p.problem, p.missing) for p in check_edits(edits)]
    assert problems == [
        (f"mount {through}", "cannot inspect host file: Not a directory", False),
        ("device node /dev/n", "cannot inspect host device: Not a directory", False),
    ]
    assert check_edits(Edits(mounts=(_bind(good),))) == []  # the control: the same, readable
