"""Graphics links under real runc, on the l40s-x4 mock (it has DRI nodes; the dgx-a100 has none).

A GPU given with the ``graphics`` capability gets its ``/dev/dri`` card and render nodes
(runc makes them) and, from the createContainer hook, the ``/dev/dri/by-path`` links to
them and GBM's backend link ``gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1``. The
hook runs after runc has mounted the container's ``/dev`` tmpfs and made its nodes, so the
links land in the container's ``/dev``; its arguments list every GPU's links (jit and
generated specs alike) and it makes those of the nodes present, so each container gets only
its own GPU's. The same hook writes the NVIDIA application profile that shows EGL and Vulkan
only the container's GPUs, from the ``/dev/nvidiaN`` nodes runc made: its mask holds their
minors, which on this mock do not follow the indices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvhook.hook.app_profile import PROFILE_PATH, profile
from nvhook.planner import Host
from nvhook.tools.generate import generate_spec
from oci.cdi.write import write_spec
from tests.e2e.conftest import Shim
from tests.support.containers import Runc, make_bundle, unique_id

pytestmark = [pytest.mark.root, pytest.mark.runtime]

LIB = "/usr/lib/x86_64-linux-gnu"
#: ``ls -l`` of what a DRM client looks at, one section each.
LOOK = (
    "echo '--- dri'; ls -l /dev/dri; echo '--- by-path'; ls -l /dev/dri/by-path; "
    f"echo '--- gbm'; ls -l {LIB}/gbm; cat {LIB}/gbm/nvidia-drm_gbm.so > /dev/null && echo read; "
    f"echo '--- profile'; cat {PROFILE_PATH}; echo; ls -ln {PROFILE_PATH}"
)


@pytest.fixture(scope="module")
def l40s(mock_machine: Callable[..., Path]) -> Path:
    return mock_machine("l40s-x4", as_root_nodes=True)


@pytest.fixture
def l40s_runc(shim: Shim, l40s: Path, tmp_path: Path) -> Iterator[tuple[Shim, Runc]]:
    ours = dataclasses.replace(shim, machine=l40s).with_config(unique_id("l40s"))
    helper = ours.runc_for(tmp_path / "state")
    try:
        yield ours, helper
    finally:
        helper.cleanup()


def _sections(output: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current: list[str] = []
    for line in output.splitlines():
        if line.startswith("--- "):
            current = out.setdefault(line[4:], [])
        else:
            current.append(line)
    return out


def _links(lines: list[str]) -> dict[str, str]:
    """``ls -l`` lines of symlinks -> {name: target}."""
    return {
        line.split(" -> ")[0].split()[-1]: line.split(" -> ")[1]
        for line in lines
        if line.startswith("l") and " -> " in line
    }


def _run(helper: Runc, tmp_path: Path, busybox_copy: Path, env: list[str]) -> dict[str, list[str]]:
    from tests.e2e.conftest import probe_rootfs

    rootfs = probe_rootfs(tmp_path / "b" / "rootfs", busybox_copy)
    bundle = make_bundle(tmp_path / "b", ["sh", "-c", LOOK], env, rootfs=rootfs)
    result = helper.run(bundle)
    assert result.returncode == 0, result.stderr
    return _sections(result.stdout)


def test_jit_graphics_links_in_the_containers_dev(
    l40s_runc: tuple[Shim, Runc], tmp_path: Path, busybox_copy: Path
) -> None:
    """GPU 0 of the L40S x4 is bus 01:00.0, whose nodes are card2 and renderD129."""
    _, helper = l40s_runc
    env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=graphics"]
    seen = _run(helper, tmp_path, busybox_copy, env)
    assert _links(seen["by-path"]) == {
        "pci-0000:01:00.0-card": "../card2",
        "pci-0000:01:00.0-render": "../renderD129",
    }
    nodes = {line.split()[-1] for line in seen["dri"] if line.startswith("c")}
    assert nodes == {"card2", "renderD129"}
    assert _links(seen["gbm"]) == {"nvidia-drm_gbm.so": "../libnvidia-allocator.so.1"}
    assert "read" in seen["gbm"]  # the chain resolves to the mounted allocator
    assert seen["profile"][0] == profile(1 << 1).decode()  # GPU 0 is minor 1
    assert seen["profile"][1].split()[:4] == ["-r--r--r--", "1", "0", "0"]


def test_jit_two_gpus_profile_holds_both_minors(
    l40s_runc: tuple[Shim, Runc], tmp_path: Path, busybox_copy: Path
) -> None:
    """GPUs 0 and 3 are minors 1 and 0: the mask is 0x3, one file for both (the hook is one)."""
    _, helper = l40s_runc
    env = ["NVIDIA_VISIBLE_DEVICES=0,3", "NVIDIA_DRIVER_CAPABILITIES=graphics"]
    seen = _run(helper, tmp_path, busybox_copy, env)
    assert seen["profile"][0] == profile(0b11).decode()
    assert seen["profile"][0].endswith(
        '"EGLVisibleDGPUDevices",0x3]}],"rules":[{"pattern":[],"profile":"_container_"}]}'
    )


def test_generated_spec_gives_each_container_its_own_links(
    l40s_runc: tuple[Shim, Runc], l40s: Path, tmp_path: Path, busybox_copy: Path
) -> None:
    """mode cdi with a generated spec: its one hook lists all four GPUs' by-path links; the
    container given device ``3`` (bus c1:00.0: card1, renderD128) gets those two only."""
    ours, _ = l40s_runc
    vendor = f"e2e.nvhook.test{unique_id('g').replace('-', '')}"
    generated = generate_spec(
        Host(root=str(l40s)), vendor=vendor, capabilities=["graphics"], name_strategies=["index"]
    )
    write_spec(ours.cdi_dir / f"{vendor}.json", generated.spec)
    cdi = ours.with_config(
        unique_id("l40s-cdi"), runtime={"mode": "cdi"}, cdi={"default_kind": f"{vendor}/gpu"}
    )
    helper = cdi.runc_for(tmp_path / "state-cdi")
    try:
        seen = _run(helper, tmp_path, busybox_copy, ["NVIDIA_VISIBLE_DEVICES=3"])
    finally:
        helper.cleanup()
    assert _links(seen["by-path"]) == {
        "pci-0000:c1:00.0-card": "../card1",
        "pci-0000:c1:00.0-render": "../renderD128",
    }
    assert _links(seen["gbm"]) == {"nvidia-drm_gbm.so": "../libnvidia-allocator.so.1"}
    assert seen["profile"][0] == profile(1 << 0).decode()  # device 3 is minor 0
