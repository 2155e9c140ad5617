"""Other vendors through nvhook-runtime in front of real runc (jit mode), on their mocks.

What the container sees, from the inside: an AMD container exactly ``/dev/kfd`` and its
device's card and render nodes, the mock ``rocm-smi`` (which the image would carry) listing
that device alone; an Ascend container its ``davinci`` node, the manager nodes and the
driver tree (``npu-smi`` from the host's); an Intel container its card's nodes and by-path
links; a mixed node one NVIDIA and one AMD container running side by side; and cdi mode
from ``nvhook cdi generate --vendor amd``'s spec.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.mock.vendors import KFD_MAJOR, create
from tests.e2e.conftest import Shim, probe_rootfs
from tests.support.containers import Runc, make_bundle, require_root, unique_id

pytestmark = [pytest.mark.root, pytest.mark.runtime]

LOOK = "ls -l /dev /dev/dri 2>/dev/null; echo '--- smi'; {smi}; echo \"rc=$?\""


@pytest.fixture(scope="module")
def vendor_root(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    require_root()
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = create(name, tmp_path_factory.mktemp(name) / "root", nodes="char").root
        return made[name]

    return get


def _runc(shim: Shim, root: Path, tmp_path: Path, name: str) -> Runc:
    return shim.with_config(name, host={"root": str(root)}).runc_for(tmp_path / f"state-{name}")


def _bundle(
    tmp_path: Path, busybox: Path, name: str, env: list[str], smi: str, tool: Path | None
) -> Path:
    rootfs = probe_rootfs(tmp_path / name / "rootfs", busybox)
    if tool is not None:  # the image's ROCm: the mock's stand-in
        shutil.copy2(tool, rootfs / "bin" / tool.name)
    return make_bundle(tmp_path / name, ["sh", "-c", LOOK.format(smi=smi)], env, rootfs=rootfs)


def _nodes(output: str) -> dict[str, tuple[int, int]]:
    """The character devices ``ls -l /dev /dev/dri`` listed (runc's defaults left out)."""
    found: dict[str, tuple[int, int]] = {}
    directory = "/dev"
    for line in output.split("--- smi")[0].splitlines():
        if line.endswith(":") and line.startswith("/dev"):
            directory = line[:-1]
        elif line.startswith("c"):
            fields = line.split()
            found[f"{directory}/{fields[-1]}"] = (int(fields[4].rstrip(",")), int(fields[5]))
    for default in ("null", "zero", "full", "random", "urandom", "tty", "console", "ptmx"):
        found.pop(f"/dev/{default}", None)
    return found


def _smi(output: str) -> list[str]:
    lines = output.split("--- smi", 1)[1].splitlines()
    return [line for line in lines if line and not line.startswith("rc=")]


def test_amd_container_sees_kfd_and_its_partitions_nodes(
    shim: Shim, vendor_root: Callable[[str], Path], tmp_path: Path, busybox_copy: Path
) -> None:
    root = vendor_root("mi300x-8")
    runc = _runc(shim, root, tmp_path, "amd")
    smi = root / "opt/rocm/bin/rocm-smi"
    bundle = _bundle(tmp_path, busybox_copy, "a", ["AMD_VISIBLE_DEVICES=9"], "rocm-smi", smi)
    try:
        result = runc.run(bundle, unique_id("amd"))
    finally:
        runc.cleanup()
    assert result.returncode == 0, result.stderr
    assert "rc=0" in result.stdout, result.stdout + result.stderr
    assert _nodes(result.stdout) == {
        "/dev/kfd": (KFD_MAJOR, 0),
        "/dev/dri/card10": (226, 10),
        "/dev/dri/renderD137": (226, 137),
    }
    assert _smi(result.stdout) == ["GPU[9] : 0000:26:00.0 renderD137 CPX/NPS1 partition 1"]


def test_ascend_container_sees_davinci_managers_and_driver_tree(
    shim: Shim, vendor_root: Callable[[str], Path], tmp_path: Path, busybox_copy: Path
) -> None:
    root = vendor_root("ascend-910b")
    runc = _runc(shim, root, tmp_path, "ascend")
    look = "npu-smi; ls /usr/local/Ascend/driver/lib64 /usr/local/dcmi"
    env = ["ASCEND_VISIBLE_DEVICES=Ascend910-2"]
    bundle = _bundle(tmp_path, busybox_copy, "n", env, look, None)
    try:
        result = runc.run(bundle, unique_id("npu"))
    finally:
        runc.cleanup()
    assert result.returncode == 0, result.stderr
    assert set(_nodes(result.stdout)) == {
        "/dev/davinci2",
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
    }
    seen = _smi(result.stdout)
    assert seen[0] == "NPU 2: 910B3 0000:41:00.0 OK" and not seen[1].startswith("NPU")
    assert "libascend_hal.so" in seen and "libdcmi.so" in seen


def test_mixed_node_serves_nvidia_and_amd_side_by_side(
    shim: Shim, vendor_root: Callable[[str], Path], tmp_path: Path, busybox_copy: Path
) -> None:
    root = vendor_root("mixed-h100-mi300x")
    runc = _runc(shim, root, tmp_path, "mixed")
    smi = root / "opt/rocm/bin/rocm-smi"
    nvidia = _bundle(
        tmp_path, busybox_copy, "nv", ["NVIDIA_VISIBLE_DEVICES=0"], "nvidia-smi -L", None
    )
    amd = _bundle(tmp_path, busybox_copy, "amd", ["AMD_VISIBLE_DEVICES=1"], "rocm-smi", smi)
    try:
        ids = [runc.create(nvidia), runc.create(amd)]  # both created before either starts
        for cid in ids:
            runc.start(cid)
        for cid in ids:
            runc.wait_stopped(cid)
        outputs = [runc.output(cid) for cid in ids]
    finally:
        runc.cleanup()
    nv, am = outputs
    assert set(_nodes(nv)) >= {"/dev/nvidia0", "/dev/nvidiactl"}
    assert not any(n.startswith("/dev/dri") or n == "/dev/kfd" for n in _nodes(nv))
    assert _smi(nv)[0].startswith("GPU 0: NVIDIA H100 PCIe")
    assert set(_nodes(am)) == {"/dev/kfd", "/dev/dri/card2", "/dev/dri/renderD129"}
    assert _smi(am) == ["GPU[1] : 0000:a6:00.0 renderD129 SPX/NPS1 partition 0"]


def test_amd_cdi_name_through_the_generated_spec(
    shim: Shim, vendor_root: Callable[[str], Path], tmp_path: Path, busybox_copy: Path
) -> None:
    """``cdi.k8s.io/…: amd.com/gpu=9`` (what a device plugin annotates): mode auto takes it
    from ``nvhook cdi generate --vendor amd``'s spec, with the same nodes as jit mode."""
    from nvhook.cli import main

    root = vendor_root("mi300x-8")
    specs = tmp_path / "cdi"
    argv = ["cdi", "generate", "--root", str(root), "--vendor", "amd", "-o", f"{specs}/amd.json"]
    assert main(argv) == 0
    config = shim.with_config("amd-cdi", host={"root": str(root)}, cdi={"spec_dirs": [str(specs)]})
    runc = config.runc_for(tmp_path / "state")
    rootfs = probe_rootfs(tmp_path / "c" / "rootfs", busybox_copy)
    shutil.copy2(root / "opt/rocm/bin/rocm-smi", rootfs / "bin/rocm-smi")
    bundle = make_bundle(
        tmp_path / "c",
        ["sh", "-c", LOOK.format(smi="rocm-smi")],
        rootfs=rootfs,
        annotations={"cdi.k8s.io/amd": "amd.com/gpu=9"},
    )
    cid = unique_id("amdcdi")
    try:
        result = runc.run(bundle, cid)
    finally:
        runc.cleanup()
    assert result.returncode == 0, result.stderr
    assert set(_nodes(result.stdout)) == {"/dev/kfd", "/dev/dri/card10", "/dev/dri/renderD137"}
    assert _smi(result.stdout) == ["GPU[9] : 0000:26:00.0 renderD137 CPX/NPS1 partition 1"]
    (record,) = config.log_records(cid)
    assert record["mode"] == "cdi"


def test_intel_card_with_its_by_path_links_in_jit_mode(
    shim: Shim, vendor_root: Callable[[str], Path], tmp_path: Path, busybox_copy: Path
) -> None:
    """``intel.com/gpu=<uid>`` (Intel has no variable) in mode jit: the card's nodes, and its
    ``/dev/dri/by-path`` links made as real links by nvhook's createContainer hook (runc
    makes nodes, not links); the mock ``xpu-smi`` lists that card alone."""
    root = vendor_root("max-1550")
    config = shim.with_config("intel", host={"root": str(root)}, runtime={"mode": "jit"})
    runc = config.runc_for(tmp_path / "state")
    rootfs = probe_rootfs(tmp_path / "i" / "rootfs", busybox_copy)
    shutil.copy2(root / "usr/bin/xpu-smi", rootfs / "bin/xpu-smi")
    look = "ls -l /dev /dev/dri /dev/dri/by-path 2>/dev/null; echo '--- smi'; xpu-smi"
    bundle = make_bundle(
        tmp_path / "i",
        ["sh", "-c", look],
        rootfs=rootfs,
        annotations={"cdi.k8s.io/intel": "intel.com/gpu=0000-3a-00-0-0x0bd5"},
    )
    try:
        result = runc.run(bundle, unique_id("intel"))
    finally:
        runc.cleanup()
    assert result.returncode == 0, result.stderr
    assert set(_nodes(result.stdout)) == {"/dev/dri/card1", "/dev/dri/renderD129"}
    links = {
        line.split()[-3]: line.split()[-1]
        for line in result.stdout.split("--- smi")[0].splitlines()
        if line.startswith("l") and "pci-" in line
    }
    assert links == {
        "pci-0000:3a:00.0-card": "../card1",
        "pci-0000:3a:00.0-render": "../renderD129",
    }
    assert _smi(result.stdout) == ["Device 1: 0000:3a:00.0 card1 xe"]
