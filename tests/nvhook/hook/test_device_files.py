"""``create-container --params``: the container's driver params say ``ModifyDeviceFiles: 0``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nvhook.hook.device_files import private_params
from tests.support.containers import require, require_root

from .conftest import snapshot, state_json

HOST_PARAMS = b"ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"


def test_private_params_sets_only_that_line() -> None:
    assert private_params(HOST_PARAMS) == (
        b"ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nDeviceFileUID: 0\n"
    )
    assert private_params(b"ModifyDeviceFiles: 0\n") == b"ModifyDeviceFiles: 0\n"
    assert private_params(b"A: 1") == b"A: 1\nModifyDeviceFiles: 0\n"  # missing: added
    assert private_params(b"") == b"ModifyDeviceFiles: 0\n"
    # a longer key that merely starts alike is not the line
    assert private_params(b"ModifyDeviceFilesX: 1\n").endswith(b"\nModifyDeviceFiles: 0\n")


#: Run in the private mount namespace: the step over ``TARGET`` in the rootfs ``ROOT``, then
#: what the rootfs shows there, and whether it can be written.
_CHILD = """
import os, sys
from nvhook.hook.device_files import disable_device_file_modification
root, host, target = sys.argv[1:4]
done = disable_device_file_modification(root, host, target=target)
print("done:", done)
if done:
    print(open(root + target).read(), end="")
    try:
        open(root + target, "w").write("x")
    except OSError as e:
        print("write:", e.strerror)
"""


def _in_mount_ns_with_proc(rootfs: Path, argv: list[str], stdin: str = "") -> str:
    unshare = require("unshare")
    (rootfs / "proc").mkdir(exist_ok=True)
    script = 'mount -t proc proc "$0" && exec "$@"'
    proc = subprocess.run(
        [unshare, "-m", "--propagation", "private", "sh", "-c", script, str(rootfs / "proc"),
         *argv],
        input=stdin, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


@pytest.mark.root
def test_copy_is_mounted_read_only_over_a_procfs_file(tmp_path: Path) -> None:
    """Over a real procfs file (``/proc/version`` here: this machine has no NVIDIA driver, so
    no ``/proc/driver/nvidia/params``), in a rootfs with a procfs mounted as runc leaves it:
    the file shows the private copy, read-only; the host's file is unchanged."""
    require_root()
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    host = tmp_path / "host"
    host.mkdir()
    (host / "params").write_bytes(HOST_PARAMS)
    before = snapshot(host)
    out = _in_mount_ns_with_proc(
        rootfs, [sys.executable, "-c", _CHILD, str(rootfs), str(host / "params"), "/proc/version"]
    )
    assert out.splitlines() == [
        "done: True",
        "ResmanDebugLevel: 4294967295",
        "ModifyDeviceFiles: 0",
        "DeviceFileUID: 0",
        "write: Read-only file system",
    ]
    assert snapshot(host) == before
    assert not list(Path("/run").glob(".nvhook-params.*"))  # the name went once mounted


@pytest.mark.root
def test_no_params_in_the_container_is_skipped(hook_bin: str, tmp_path: Path) -> None:
    """The hook's own target on this driverless machine: absent from the container's procfs,
    so the step is skipped without a word (a note would precede every real error message
    runc shows) and the hook exits 0."""
    require_root()
    rootfs = tmp_path / "bundle" / "rootfs"
    rootfs.mkdir(parents=True)
    (tmp_path / "bundle" / "config.json").write_text('{"root": {"path": "rootfs"}}')
    (tmp_path / "params").write_bytes(HOST_PARAMS)
    out = _in_mount_ns_with_proc(
        rootfs,
        [hook_bin, "create-container", "--params", str(tmp_path / "params")],
        state_json(tmp_path / "bundle"),
    )
    assert out == ""
    assert sorted(p.name for p in rootfs.iterdir()) == ["proc"]


@pytest.mark.root
def test_a_directory_target_is_refused(tmp_path: Path) -> None:
    require_root()
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    (tmp_path / "params").write_bytes(HOST_PARAMS)
    unshare = require("unshare")
    proc = subprocess.run(
        [unshare, "-m", "--propagation", "private", sys.executable, "-c", _CHILD, str(rootfs),
         str(tmp_path / "params"), "/"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert f"HookError: refusing / in {rootfs}: not a regular file" in proc.stderr
