"""The container harness works on this machine: each helper runs a real container."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.containers import (
    BUSYBOX_IMAGE,
    CaptureRuntime,
    Containerd,
    Podman,
    Runc,
    allow_device,
    busybox_rootfs,
    cdi_spec,
    char_device,
    make_bundle,
    require,
    unique_id,
)

pytestmark = [pytest.mark.root, pytest.mark.runtime]

# Device numbers of /dev/nvidia0 and /dev/nvidia1; no driver is behind them on this machine.
NVIDIA_MAJOR = 195


def test_busybox_rootfs_has_applets_and_users(tmp_path: Path) -> None:
    rootfs = busybox_rootfs(tmp_path / "rootfs")
    assert (rootfs / "bin" / "busybox").is_file()
    assert os.readlink(rootfs / "bin" / "sh") == "/bin/busybox"
    assert (rootfs / "usr" / "bin" / "awk").is_symlink()
    assert "root:x:0:0" in (rootfs / "etc" / "passwd").read_text()
    assert all((rootfs / d).is_dir() for d in ("dev", "proc", "sys", "tmp", "etc"))


def test_make_bundle_edits_runc_spec(tmp_path: Path) -> None:
    bundle = make_bundle(
        tmp_path / "b", ["echo", "hi"], ["A=1"], readonly=False, annotations={"k": "v"}
    )
    spec = json.loads((bundle / "config.json").read_text())
    assert spec["process"]["terminal"] is False
    assert spec["process"]["args"] == ["echo", "hi"]
    assert spec["process"]["env"][-1] == "A=1"
    assert spec["root"] == {"path": "rootfs", "readonly": False}
    assert spec["annotations"] == {"k": "v"}


def test_runc_run_echo(runc: Runc, tmp_path: Path) -> None:
    result = runc.run(make_bundle(tmp_path / "b", ["echo", "hi"]), check=True)
    assert result.stdout == "hi\n"


def test_runc_create_start_delete(runc: Runc, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b", ["sh", "-c", "echo started"])
    cid = runc.create(bundle)
    assert runc.state(cid)["status"] == "created"
    runc.start(cid)
    runc.wait_stopped(cid)
    assert runc.output(cid) == "started\n"
    assert runc.delete(cid).returncode == 0


def test_device_cgroup_allowed_node_enxio_denied_node_eperm(runc: Runc, tmp_path: Path) -> None:
    """The primitive of every GPU-visibility test: allowed → ENXIO (no driver), denied → EPERM."""
    script = "cat /dev/nvidia0 2>&1; cat /dev/nvidia1 2>&1; ls -l /dev/nvidia0 /dev/nvidia1"
    bundle = make_bundle(
        tmp_path / "b",
        ["sh", "-c", script],
        devices=[
            char_device("/dev/nvidia0", NVIDIA_MAJOR, 0),
            char_device("/dev/nvidia1", NVIDIA_MAJOR, 1),
        ],
        device_rules=[allow_device(NVIDIA_MAJOR, 0)],
    )
    out = runc.run(bundle, check=True).stdout
    lines = out.splitlines()
    assert "/dev/nvidia0" in lines[0] and "No such device or address" in lines[0], out
    assert "/dev/nvidia1" in lines[1] and "Operation not permitted" in lines[1], out
    assert lines[2].startswith("crw-rw-rw-") and "195,   0" in lines[2], out
    assert lines[3].startswith("crw-rw-rw-") and "195,   1" in lines[3], out


def test_runc_through_capture_runtime(capture_runtime: CaptureRuntime, tmp_path: Path) -> None:
    runc = Runc(tmp_path / "root", binary=str(capture_runtime.path))
    try:
        bundle = make_bundle(tmp_path / "b", ["true"], ["MARK=1"])
        cid = runc.create(bundle, "cap1")
        runc.start(cid)
        runc.wait_stopped(cid)
    finally:
        runc.cleanup()
    assert capture_runtime.last()["process"]["env"][-1] == "MARK=1"
    assert list(capture_runtime.configs()) == ["cap1"]
    commands = [c[2] for c in capture_runtime.calls()]  # after `--root R`
    assert commands[:2] == ["create", "start"]


def test_capture_runtime_finds_bundle_in_each_form(tmp_path: Path) -> None:
    """`--bundle B`, `-b B`, `--bundle=B` and the cwd all name the bundle; only create copies."""
    require("runc")
    fake = tmp_path / "fake-runc"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    cap = CaptureRuntime.create(tmp_path / "cap", real=str(fake))
    for n, form in enumerate((["--bundle", "{b}"], ["-b", "{b}"], ["--bundle={b}"], []), start=1):
        bundle = tmp_path / f"b{n}"
        bundle.mkdir()
        (bundle / "config.json").write_text(json.dumps({"n": n}))
        argv = [str(cap.path), "--root", "/x", "--log", "l.json", "create"]
        argv += [a.format(b=bundle) for a in form] + ["--pid-file", "p", f"id{n}"]
        subprocess.run(argv, check=True, cwd=bundle)
    subprocess.run([str(cap.path), "--root", "/x", "delete", "--force", "id1"], check=True)
    assert {k: v["n"] for k, v in cap.configs().items()} == {"id1": 1, "id2": 2, "id3": 3, "id4": 4}
    assert cap.calls()[-1] == ["--root", "/x", "delete", "--force", "id1"]


def test_podman_run_busybox(podman: Podman) -> None:
    result = podman.run(["echo", "hi"], check=True)
    assert result.stdout == "hi\n"


def test_podman_through_capture_runtime_with_cdi_device(
    podman: Podman, capture_runtime: CaptureRuntime
) -> None:
    kind = f"test.nvhook.example/{unique_id('harness').replace('-', '')}"
    spec = {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [{"name": "one", "containerEdits": {"env": ["FROM_CDI=1"]}}],
    }
    with cdi_spec(spec, unique_id("nvhook-harness")):
        result = podman.run(
            ["sh", "-c", "echo $FROM_CDI"],
            runtime=str(capture_runtime.path),
            devices=[f"{kind}=one"],
            check=True,
        )
    assert result.stdout == "1\n"
    assert "FROM_CDI=1" in capture_runtime.last()["process"]["env"]


def test_containerd_ctr_run(containerd: Containerd) -> None:
    result = containerd.run(BUSYBOX_IMAGE, None, ["echo", "hi"], check=True)
    assert result.stdout == "hi\n"


def test_containerd_through_capture_runtime(
    containerd: Containerd, capture_runtime: CaptureRuntime
) -> None:
    result = containerd.run(
        BUSYBOX_IMAGE,
        "ctrd-cap",
        ["sh", "-c", "echo $X"],
        runc_binary=str(capture_runtime.path),
        env={"X": "y"},
        check=True,
    )
    assert result.stdout == "y\n"
    assert "X=y" in capture_runtime.configs()["ctrd-cap"]["process"]["env"]


@pytest.mark.slow
def test_containerd_with_cri_plugin_starts(tmp_path: Path) -> None:
    with Containerd(tmp_path / "c", cri=True, runtimes={"nvhook": "/bin/true"}) as ctrd:
        plugins = ctrd.ctr("plugins", "ls").stdout
    cri = [
        line.split() for line in plugins.splitlines() if line.startswith("io.containerd.grpc.v1")
    ]
    assert ["io.containerd.grpc.v1", "cri", "linux/amd64", "ok"] in cri, plugins
