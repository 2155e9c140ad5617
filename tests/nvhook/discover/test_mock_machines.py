"""Driver discovery on the mock GPU machine's profiles (``mock_machine`` from tests/conftest.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.discover import EXEC_OPTIONS, DriverFiles, discover_driver_files
from nvhook.mock import load_profile

X86 = "/usr/lib/x86_64-linux-gnu"
I386 = "/usr/lib/i386-linux-gnu"

MockMachine = Callable[..., Path]


def _discover(root: Path, profile: str, caps: list[str], *, compat32: bool = False) -> DriverFiles:
    version = load_profile(profile).driver.version
    files = discover_driver_files(str(root), caps, driver_version=version, compat32=compat32)
    assert files.driver_version == version
    assert files.problems == ()
    return files


def _names(paths: tuple[str, ...]) -> set[str]:
    return {p.rpartition("/")[2] for p in paths}


@pytest.mark.parametrize("profile", ["dgx-a100", "h100-pcie", "l40s-x4", "gb200-imex", "no-gpu"])
def test_compute_and_utility(mock_machine: MockMachine, profile: str) -> None:
    root = mock_machine(profile)
    files = _discover(root, profile, ["compute", "utility"])
    v = files.driver_version
    compute, utility = files.capability("compute"), files.capability("utility")
    assert f"{X86}/libcuda.so.{v}" in compute.libraries
    assert f"{X86}/libnvidia-ml.so.{v}" in utility.libraries
    assert "/usr/bin/nvidia-smi" in utility.binaries
    assert "/usr/bin/nvidia-cuda-mps-control" in compute.binaries
    assert "libcuda.so" not in compute.missing
    assert f"/lib/firmware/nvidia/{v}/gsp_ga10x.bin" in files.firmware
    links = {(s.target, s.link) for s in files.symlinks}
    assert (f"libcuda.so.{v}", f"{X86}/libcuda.so.1") in links
    assert ("libcuda.so.1", f"{X86}/libcuda.so") in links
    assert (f"libnvidia-ml.so.{v}", f"{X86}/libnvidia-ml.so.1") in links
    # the mock's own SONAME links agree with the ones we would create
    for s in files.symlinks:
        if os.path.lexists(f"{root}{s.link}") and not s.link.endswith(".so"):
            assert os.readlink(f"{root}{s.link}") == s.target, s
    # without a version, the same files are found
    assert discover_driver_files(str(root), ["compute", "utility"], driver_version=None) == files
    for mount in files.to_edits().mounts:
        assert mount.host_path == f"{root}{mount.container_path}"
        assert os.path.exists(mount.host_path), mount


def test_dgx_has_fabric_manager_and_its_socket(mock_machine: MockMachine) -> None:
    files = _discover(mock_machine("dgx-a100"), "dgx-a100", ["utility"])
    assert "/usr/bin/nv-fabricmanager" in files.capability("utility").binaries
    assert files.ipc == ("/run/nvidia-fabricmanager/socket", "/run/nvidia-persistenced/socket")


def test_no_gpu_still_has_the_driver_files(mock_machine: MockMachine) -> None:
    files = _discover(mock_machine("no-gpu"), "no-gpu", ["compute", "utility"])
    assert files.capability("compute").libraries
    assert files.ipc == ()  # no module, no persistenced


def test_imex_binaries(mock_machine: MockMachine) -> None:
    utility = _discover(mock_machine("gb200-imex"), "gb200-imex", ["utility"]).capability("utility")
    assert {"nvidia-imex", "nvidia-imex-ctl"} <= _names(utility.binaries)
    assert "nv-fabricmanager" in utility.missing


def test_graphics_and_display_on_l40s(mock_machine: MockMachine) -> None:
    files = _discover(mock_machine("l40s-x4"), "l40s-x4", ["graphics", "display"])
    v = files.driver_version
    graphics, display = files.capability("graphics"), files.capability("display")
    for stem in ("libGLX_nvidia.so", "libEGL_nvidia.so", "libGLESv2_nvidia.so"):
        assert f"{X86}/{stem}.{v}" in graphics.libraries
    assert any(n.startswith("libnvidia-egl-wayland.so.") for n in _names(graphics.libraries))
    assert {"10_nvidia.json", "nvidia_icd.json"} <= _names(graphics.configs)
    assert any(c.endswith("glvnd/egl_vendor.d/10_nvidia.json") for c in graphics.configs)
    assert {"nvidia_drv.so", f"libglxserver_nvidia.so.{v}"} == _names(display.libraries)
    mounts = {m.container_path: m for m in files.to_edits().mounts}
    assert all(mounts[p].options == EXEC_OPTIONS for p in display.libraries)


def test_graphics_files_missing_on_dgx_are_reported(mock_machine: MockMachine) -> None:
    files = _discover(mock_machine("dgx-a100"), "dgx-a100", ["graphics", "display"])
    graphics, display = files.capability("graphics"), files.capability("display")
    assert "vulkan/icd.d/nvidia_icd.json" in graphics.missing
    assert graphics.libraries  # the libraries are there all the same
    assert "nvidia_drv.so" in display.missing


def test_compat32_finds_the_i386_copies(mock_machine: MockMachine) -> None:
    files = _discover(mock_machine("dgx-a100"), "dgx-a100", ["compute", "utility"], compat32=True)
    v = files.driver_version
    compat = files.capability("compat32")
    assert f"{I386}/libcuda.so.{v}" in compat.libraries
    assert f"{I386}/libnvidia-ml.so.{v}" in compat.libraries
    assert all(p.startswith(I386 + "/") for p in compat.libraries)
    # every 32-bit copy driver 550 has is there; libnvidia-cfg has none, so it is not missing
    assert compat.missing == ()
    assert ("libcuda.so.1", f"{I386}/libcuda.so") in {(s.target, s.link) for s in files.symlinks}


@pytest.mark.parametrize("profile", ["dgx-a100", "h100-pcie", "l40s-x4", "gb200-imex", "no-gpu"])
def test_everything_the_mock_installed_is_found(mock_machine: MockMachine, profile: str) -> None:
    """The mock's own table (nvhook/mock/driver.toml) is the oracle: each library or binary
    it laid out is found, under the capability that table gives it, 32-bit ones in compat32."""
    from nvhook.mock.profiles import driver_files

    root = mock_machine(profile)
    files = _discover(root, profile, ["all"])
    table = driver_files()
    checked = 0
    for lib in table.libraries:
        for directory, cap in ((X86, lib.capability), (I386, "compat32")):
            folder = f"{root}{directory}/{lib.subdir}".rstrip("/")
            on_disk = [
                n
                for n in (os.listdir(folder) if os.path.isdir(folder) else ())
                if n.startswith(lib.stem + ".") and not os.path.islink(f"{folder}/{n}")
            ]
            for name in on_disk:
                path = f"{directory}/{lib.subdir}/{name}" if lib.subdir else f"{directory}/{name}"
                assert path in files.capability(cap).libraries, (cap, path)
                checked += 1
    for binary in table.binaries:
        if os.path.exists(f"{root}/usr/bin/{binary.name}"):
            assert f"/usr/bin/{binary.name}" in files.capability(binary.capability).binaries
            checked += 1
    assert checked > 40
