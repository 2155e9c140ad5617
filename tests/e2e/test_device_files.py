"""``create-container --params`` through ``nvhook-runtime`` and real runc: a container given
GPU 0 of the dgx-a100 mock reads ``ModifyDeviceFiles: 0`` in ``/proc/driver/nvidia/params``.

This machine has no NVIDIA driver, so the container's real procfs has no
``driver/nvidia/params``. A test-only createContainer hook, placed in config.json before the
shim adds its own, puts one there: a tmpfs over the container's ``/proc/driver`` holding a
copy of the mock's params (``ModifyDeviceFiles: 1``, as a real host's). That is the file the
driver would show; nvhook's step then runs over it exactly as on a GPU node (runc has mounted
the container's procfs in the rootfs, in the container's mount namespace, before
``pivot_root``). Each test has a control: the same container without nvhook's step sees the
host's ``ModifyDeviceFiles: 1``, so no test passes because the fixture hook did nothing.

The attack tests give the step a hostile target (the image cannot touch the container's
procfs, so the fixture hook plants it): a symlink at ``params`` aimed at a host file in each
escape form, a directory, a fifo. The host's files never change and nothing is mounted on
them; the ``/proc/self/root`` form and the non-files are refused (exit 11).
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from nvhook.discover.hooks import validate_injected_hook
from tests.e2e.attack_support import FORMS, escape_forms, hostile_bundle, snapshot
from tests.support.containers import Runc, require, unique_id

pytestmark = [pytest.mark.root, pytest.mark.runtime]

GPU0 = "NVIDIA_VISIBLE_DEVICES=0"
PARAMS = "/proc/driver/nvidia/params"
#: The container: its params file, then its mount table.
READ_PARAMS = ["sh", "-c", f"cat {PARAMS}; echo ---; cat /proc/self/mountinfo"]


def _params_and_mount(stdout: str) -> tuple[str, list[str] | None]:
    """The params the container read, and the options of the mount on it (None: none)."""
    params, _, mountinfo = stdout.partition("---\n")
    options = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if fields[4] == PARAMS:
            options = fields[5].split(",")  # the last mount on it is the one seen
    return params, options


def _fixture_hook(rootfs: Path, script: str) -> dict[str, Any]:
    """A createContainer hook that mounts a tmpfs over the rootfs's ``/proc/driver`` (the
    container's procfs, as runc mounted it) and runs ``script`` in ``$D``, its ``nvidia/``."""
    sh = require("/bin/sh")
    driver = shlex.quote(str(rootfs / "proc" / "driver"))
    body = (
        f"set -e; mount -t tmpfs -o size=64k nvhook-test {driver}; "
        f'D={driver}/nvidia; mkdir "$D"; cd "$D"; {script}'
    )
    return {"path": sh, "args": ["sh", "-c", body], "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]}


def _bundle(tmp_path: Path, busybox: Path, script: str) -> Path:
    bundle = tmp_path / "b"
    rootfs = (bundle / "rootfs").resolve()
    hook = _fixture_hook(rootfs, script)
    return hostile_bundle(bundle, busybox, READ_PARAMS, [GPU0], hooks={"createContainer": [hook]})


def _without_nvhook_params(bundle: Path) -> None:
    """config.json as the shim wrote it, less ``--params FILE`` in nvhook's hook: the control."""
    spec = json.loads((bundle / "config.json").read_text())
    hook = spec["hooks"]["createContainer"][1]
    at = hook["args"].index("--params")
    del hook["args"][at : at + 2]
    (bundle / "config.json").write_text(json.dumps(spec))


def _leftovers() -> list[str]:
    dirs = ("/run", "/tmp")
    return sorted(
        f"{d}/{n}" for d in dirs for n in os.listdir(d) if n.startswith(".nvhook-params.")
    )


def test_container_sees_modify_device_files_off(
    shim_runc: Runc, runc: Runc, busybox_copy: Path, dgx: Path, tmp_path: Path
) -> None:
    host_params = dgx / PARAMS.lstrip("/")
    original = host_params.read_bytes()
    assert b"\nModifyDeviceFiles: 1\n" in original
    before = _leftovers()
    bundle = _bundle(tmp_path, busybox_copy, f"cp {shlex.quote(str(host_params))} params")

    result = shim_runc.run(bundle)

    assert result.returncode == 0, result.stderr
    fixture, ours = json.loads((bundle / "config.json").read_text())["hooks"]["createContainer"]
    assert fixture["args"][0] == "sh"  # the fixture's hook stays first, nvhook's comes after
    validate_injected_hook(ours, lifecycle="createContainer")
    assert ours["args"][1:4] == ["create-container", "--params", str(host_params)]
    expected = original.replace(b"ModifyDeviceFiles: 1", b"ModifyDeviceFiles: 0").decode()
    params, options = _params_and_mount(result.stdout)
    assert params == expected  # every other line kept
    assert options is not None and {"ro", "nosuid", "nodev", "noexec"} <= set(options)
    assert host_params.read_bytes() == original
    assert _leftovers() == before  # the private copy's name was unlinked once mounted

    # control: the same container, nvhook's hook without --params, sees the host's 1
    _without_nvhook_params(bundle)
    result = runc.run(bundle)
    assert result.returncode == 0, result.stderr
    assert _params_and_mount(result.stdout) == (original.decode(), None)


@pytest.mark.parametrize("form", FORMS)
def test_params_symlinked_to_a_host_file(
    form: str, shim_runc: Runc, busybox_copy: Path, dgx: Path, tmp_path: Path
) -> None:
    """``params`` is a symlink aimed at a host file. Absolute and ``..`` forms resolve inside
    the rootfs, where nothing is: the step is skipped, the host file stays as it is, and no
    mount covers it. The ``/proc/self/root`` form is refused."""
    host = tmp_path / "host"
    host.mkdir()
    victim = host / "victim"
    victim.write_text("host file\n")
    before = snapshot(host)
    rootfs = (tmp_path / "b" / "rootfs").resolve()
    target = escape_forms(rootfs, victim)[FORMS.index(form)]
    # the control: followed from the hook's namespace, the link reaches the host file
    seen = tmp_path / "seen"
    script = (
        f"ln -s {shlex.quote(str(target))} params; "
        f"cat params >{shlex.quote(str(seen))} 2>&1 || true"
    )
    bundle = _bundle(tmp_path, busybox_copy, script)
    cid = unique_id("params-link")
    mounts_before = Path("/proc/self/mountinfo").read_text()

    result = shim_runc.run(bundle, cid)

    assert seen.read_text() == "host file\n"  # the attack is no dud
    assert snapshot(host) == before
    assert str(victim) not in Path("/proc/self/mountinfo").read_text()
    assert Path("/proc/self/mountinfo").read_text().count(".nvhook-params.") == (
        mounts_before.count(".nvhook-params.")
    )
    if form == "proc-self-root":
        assert result.returncode != 0
        message = (
            f"nvhook-hook create-container: refusing {PARAMS} in {rootfs}: "
            "a symlink loop or a /proc magic link (ELOOP)"
        )
        assert message in result.stderr, result.stderr
        assert Runc(shim_runc.root).call("state", cid).returncode != 0
        return
    assert result.returncode == 0, result.stderr
    # nothing at the link's in-root target, nothing mounted
    assert _params_and_mount(result.stdout) == ("", None)


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_params_not_a_regular_file_is_refused(
    kind: str, shim_runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    make = "mkdir params" if kind == "directory" else f"{require('mkfifo')} params"
    bundle = _bundle(tmp_path, busybox_copy, make)
    cid = unique_id("params-kind")

    result = shim_runc.run(bundle, cid)

    assert result.returncode != 0
    rootfs = (bundle / "rootfs").resolve()
    message = f"nvhook-hook create-container: refusing {PARAMS} in {rootfs}: not a regular file"
    assert message in result.stderr, result.stderr
    assert Runc(shim_runc.root).call("state", cid).returncode != 0
