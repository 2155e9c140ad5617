"""nvhook.discover.driver: a driver's files by capability, and the mounts they become."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nvhook.discover import (
    DATA_OPTIONS,
    EXEC_OPTIONS,
    IPC_OPTIONS,
    CapabilityFiles,
    DriverFiles,
    Symlink,
    discover_driver_files,
)
from nvhook.discover.arch import machine_arch
from nvhook.errors import DriverError, RequestError
from oci.cdi.edits import Edits, Mount
from tests.nvhook.discover import fakeroot
from tests.nvhook.discover.fakeroot import I386, VERSION, X86, FakeRoot, driver_library

compiler = fakeroot.compiler
fake_root = fakeroot.fake_root

V = VERSION


@pytest.fixture
def driver(fake_root: FakeRoot) -> FakeRoot:
    """A driver install: utility, compute, video, graphics and display files, some 32-bit."""
    r = fake_root
    for stem in (
        "libnvidia-ml.so",
        "libnvidia-cfg.so",
        "libcuda.so",
        "libnvidia-ptxjitcompiler.so",
    ):
        driver_library(r, stem)
    for stem in ("libnvidia-opencl.so", "libnvidia-nvvm.so", "libnvidia-gpucomp.so"):
        driver_library(r, stem)
    for stem in ("libnvidia-encode.so", "libnvidia-opticalflow.so", "libnvcuvid.so"):
        driver_library(r, stem)
    driver_library(r, "libvdpau_nvidia.so", directory=f"{X86}/vdpau")
    for stem in ("libGLX_nvidia.so", "libEGL_nvidia.so", "libnvidia-glcore.so"):
        driver_library(r, stem)
    driver_library(r, "libnvidia-egl-wayland.so", version="1.1.13")
    for stem in ("libcuda.so", "libnvidia-ml.so", "libGLX_nvidia.so"):
        driver_library(r, stem, directory=I386, arch="i386")
    r.ldconfig(X86, I386)
    for name in ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"):
        r.binary(f"/usr/bin/{name}")
    r.binary("/usr/bin/nvidia-cuda-mps-control")
    r.binary("/usr/bin/nvidia-cuda-mps-server")
    r.file("/etc/OpenCL/vendors/nvidia.icd", "libnvidia-opencl.so.1\n")
    r.file("/usr/share/glvnd/egl_vendor.d/10_nvidia.json", "{}")
    r.file("/etc/vulkan/icd.d/nvidia_icd.json", "{}")
    r.file("/usr/share/vulkan/icd.d/nvidia_icd.json", "{}")  # /etc wins
    r.file("/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json", "{}")
    r.file("/usr/share/X11/xorg.conf.d/10-nvidia.conf", "")
    r.library("/usr/lib/xorg/modules/drivers", "nvidia_drv.so", None)
    r.library("/usr/lib/xorg/modules/extensions", f"libglxserver_nvidia.so.{V}", None)
    for name in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        r.file(f"/lib/firmware/nvidia/{V}/{name}", "fw")
    r.file(f"/lib/firmware/nvidia/{V}/README", "not firmware")
    r.file("/lib/firmware/nvidia/535.1/gsp_ga10x.bin", "an old driver's")
    return r


def _unix_socket(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(path))
    finally:
        s.close()


def test_compute_and_utility(driver: FakeRoot) -> None:
    files = discover_driver_files(str(driver), ["utility", "compute"], driver_version=V)
    assert files.driver_root == str(driver)
    assert files.host_root == str(driver)
    assert files.driver_version == V
    assert [c.capability for c in files.capabilities] == ["compute", "utility"]
    compute, utility = files.capabilities
    assert compute == files.capability("compute")
    assert utility.libraries == (
        f"{X86}/libnvidia-cfg.so.{V}",
        f"{X86}/libnvidia-ml.so.{V}",
    )
    assert utility.binaries == (
        "/usr/bin/nvidia-debugdump",
        "/usr/bin/nvidia-persistenced",
        "/usr/bin/nvidia-smi",
    )
    assert utility.missing == (
        "libnvidia-nscq.so",
        "nv-fabricmanager",
        "nvidia-imex",
        "nvidia-imex-ctl",
    )
    assert utility.searched[:2] == ("/etc/ld.so.cache", "/usr/lib/x86_64-linux-gnu")
    assert "/usr/sbin" in utility.searched
    assert compute.libraries == tuple(
        sorted(
            f"{X86}/{stem}.{V}"
            for stem in (
                "libcuda.so",
                "libnvidia-ptxjitcompiler.so",
                "libnvidia-opencl.so",
                "libnvidia-nvvm.so",
                "libnvidia-gpucomp.so",
            )
        )
    )
    assert compute.binaries == (
        "/usr/bin/nvidia-cuda-mps-control",
        "/usr/bin/nvidia-cuda-mps-server",
    )
    assert compute.configs == ("/etc/OpenCL/vendors/nvidia.icd",)
    assert "libcudadebugger.so" in compute.missing
    # what driver 550 does not ship is looked for but never missing
    assert "libnvidia-tileiras.so" not in compute.missing  # 580 onwards
    assert "libnvidia-fatbinaryloader.so" not in compute.missing  # 440 and before
    assert files.missing["utility"] == utility.missing
    assert files.firmware == (
        f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{V}/gsp_tu10x.bin",
    )
    assert files.ipc == ()
    assert files.mps_pipe_dir is None
    assert files.problems == ()
    assert Symlink(f"libcuda.so.{V}", f"{X86}/libcuda.so.1") in files.symlinks
    assert Symlink("libcuda.so.1", f"{X86}/libcuda.so") in files.symlinks
    assert Symlink(f"libnvidia-ml.so.{V}", f"{X86}/libnvidia-ml.so.1") in files.symlinks
    assert Symlink("libnvidia-ml.so.1", f"{X86}/libnvidia-ml.so") in files.symlinks
    assert Symlink(f"libnvidia-nvvm.so.{V}", f"{X86}/libnvidia-nvvm.so.4") in files.symlinks
    # libnvidia-gpucomp's SONAME is its file name: nothing to link
    assert not [s for s in files.symlinks if "gpucomp" in s.link]
    assert list(files.symlinks) == sorted(set(files.symlinks))
    assert not [s for s in files.symlinks if "i386" in s.link]


def test_edits(driver: FakeRoot) -> None:
    files = discover_driver_files(str(driver), ["compute", "utility"], driver_version=V)
    edits = files.to_edits()
    assert isinstance(edits, Edits)
    assert not (edits.env or edits.device_nodes or edits.hooks)
    by_path = {m.container_path: m for m in edits.mounts}
    assert [m.container_path for m in edits.mounts] == sorted(by_path)
    cuda = f"{X86}/libcuda.so.{V}"
    assert by_path[cuda] == Mount(str(driver) + cuda, cuda, options=EXEC_OPTIONS)
    assert EXEC_OPTIONS == ("ro", "nosuid", "nodev", "bind")
    assert by_path["/usr/bin/nvidia-smi"].options == EXEC_OPTIONS
    assert by_path["/etc/OpenCL/vendors/nvidia.icd"].options == DATA_OPTIONS
    assert by_path[f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin"].options == DATA_OPTIONS
    assert "noexec" in DATA_OPTIONS and "ro" in DATA_OPTIONS
    expected = {
        *(p for c in files.capabilities for p in (*c.libraries, *c.binaries, *c.configs)),
        *files.firmware,
    }
    assert set(by_path) == expected
    for mount in edits.mounts:
        assert mount.host_path == str(driver) + mount.container_path
        assert Path(mount.host_path).is_file()
        assert not Path(mount.host_path).is_symlink()


def test_container_root_map(driver: FakeRoot) -> None:
    files = discover_driver_files(str(driver), ["utility"], driver_version=V)
    smi = {m.container_path: m for m in files.to_edits().mounts}["/usr/bin/nvidia-smi"]
    assert smi.host_path == f"{driver}/usr/bin/nvidia-smi"
    mapped = files.to_edits(
        container_root_map={str(driver.path.parent): "/x", str(driver): "/run/nvidia/driver/"}
    )
    smi = {m.container_path: m for m in mapped.mounts}["/usr/bin/nvidia-smi"]
    assert smi.host_path == "/run/nvidia/driver/usr/bin/nvidia-smi"  # the longer prefix wins
    assert smi.container_path == "/usr/bin/nvidia-smi"
    to_root = files.to_edits(container_root_map={str(driver): "/"})
    assert {m.host_path for m in to_root.mounts} == {m.container_path for m in to_root.mounts}


def test_graphics_video_display(driver: FakeRoot) -> None:
    files = discover_driver_files(str(driver), ["graphics", "video", "display"], driver_version=V)
    assert [c.capability for c in files.capabilities] == ["video", "graphics", "display"]
    video, graphics, display = files.capabilities
    assert f"{X86}/vdpau/libvdpau_nvidia.so.{V}" in video.libraries
    assert f"{X86}/vdpau/" + "libvdpau_nvidia.so.1" in {s.link for s in files.symlinks}
    assert f"{X86}/vdpau" in video.searched
    assert Symlink("libnvidia-opticalflow.so.1", f"{X86}/libnvidia-opticalflow.so") in (
        files.symlinks
    )
    assert f"{X86}/libnvidia-egl-wayland.so.1.1.13" in graphics.libraries
    assert f"{X86}/libGLX_nvidia.so.{V}" in graphics.libraries
    assert Symlink(f"libGLX_nvidia.so.{V}", f"{X86}/libGLX_indirect.so.0") in files.symlinks
    assert Symlink(f"libGLX_nvidia.so.{V}", f"{X86}/libGLX_nvidia.so.0") in files.symlinks
    assert graphics.configs == (
        "/etc/vulkan/icd.d/nvidia_icd.json",
        "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
    )
    assert "vulkan/implicit_layer.d/nvidia_layers.json" in graphics.missing
    assert "libnvidia-egl-gbm.so" in graphics.missing
    assert display.libraries == (
        "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
        f"/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.{V}",
    )
    assert display.configs == ("/usr/share/X11/xorg.conf.d/10-nvidia.conf",)
    assert (
        Symlink(
            f"libglxserver_nvidia.so.{V}", "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so"
        )
        in files.symlinks
    )
    mounts = {m.container_path: m for m in files.to_edits().mounts}
    assert mounts["/usr/lib/xorg/modules/drivers/nvidia_drv.so"].options == EXEC_OPTIONS
    assert mounts["/usr/share/glvnd/egl_vendor.d/10_nvidia.json"].options == DATA_OPTIONS
    assert files.ipc == () and files.mps_pipe_dir is None  # neither utility nor compute


GBM = Symlink("../libnvidia-allocator.so.1", f"{X86}/gbm/nvidia-drm_gbm.so")


def test_gbm_backend_with_graphics_or_display(driver: FakeRoot) -> None:
    """GBM's backend link comes with graphics or display (once, with the allocator it points
    to, mounted even without compute), never with compute alone or without the allocator."""
    assert GBM not in discover_driver_files(str(driver), ["graphics"], driver_version=V).symlinks
    driver_library(driver, "libnvidia-allocator.so")
    driver.ldconfig(X86, I386)
    allocator = f"{X86}/libnvidia-allocator.so.{V}"
    for caps in (["graphics"], ["display"], ["graphics", "display"]):
        files = discover_driver_files(str(driver), caps, driver_version=V)
        assert GBM in files.symlinks, caps
        assert Symlink(f"libnvidia-allocator.so.{V}", f"{X86}/libnvidia-allocator.so.1") in (
            files.symlinks
        )
        holders = [c.capability for c in files.capabilities if allocator in c.libraries]
        assert holders == [caps[0]]
        assert allocator in {m.container_path for m in files.to_edits().mounts}
    compute = discover_driver_files(str(driver), ["compute"], driver_version=V)
    assert allocator in compute.capability("compute").libraries
    assert GBM not in compute.symlinks


@pytest.mark.parametrize("how", ["flag", "capability"])
def test_compat32(driver: FakeRoot, how: str) -> None:
    caps = ["compute", "utility", "graphics"]
    if how == "flag":
        files = discover_driver_files(str(driver), caps, driver_version=V, compat32=True)
    else:
        files = discover_driver_files(str(driver), [*caps, "compat32"], driver_version=V)
    compat = files.capability("compat32")
    assert files.capabilities[-1] is compat
    assert compat.libraries == (
        f"{I386}/libGLX_nvidia.so.{V}",
        f"{I386}/libcuda.so.{V}",
        f"{I386}/libnvidia-ml.so.{V}",
    )
    assert "libnvidia-opencl.so" in compat.missing
    assert Symlink("libcuda.so.1", f"{I386}/libcuda.so") in files.symlinks
    assert Symlink(f"libcuda.so.{V}", f"{I386}/libcuda.so.1") in files.symlinks
    assert f"{I386}/libcuda.so.{V}" not in files.capability("compute").libraries


def test_compat32_only_covers_the_requested_capabilities(driver: FakeRoot) -> None:
    files = discover_driver_files(str(driver), ["utility"], driver_version=V, compat32=True)
    assert files.capability("compat32").libraries == (f"{I386}/libnvidia-ml.so.{V}",)
    assert discover_driver_files(str(driver), ["compat32"], driver_version=V).capabilities == (
        CapabilityFiles("compat32", searched=("/etc/ld.so.cache", *_search())),
    )


def _search() -> tuple[str, ...]:
    from nvhook.discover import DEFAULT_SEARCH_PATHS

    return DEFAULT_SEARCH_PATHS


def test_compat32_on_aarch64_is_all_missing(fake_root: FakeRoot) -> None:
    files = discover_driver_files(
        str(fake_root), ["utility"], driver_version=V, compat32=True, arch="aarch64"
    )
    # every 32-bit copy NVIDIA builds; libnvidia-cfg and libnvidia-nscq have none
    assert files.capability("compat32").missing == ("libnvidia-ml.so",)
    assert "compat32: aarch64 has no 32-bit driver libraries" in files.problems


def test_ipc_on_the_host_root(driver: FakeRoot, tmp_path: Path) -> None:
    host = tmp_path / "host"
    _unix_socket(host / "run/nvidia-persistenced/socket")
    (host / "var").mkdir()
    (host / "var/run").symlink_to("/run")
    (host / "tmp/nvidia-mps").mkdir(parents=True)
    _unix_socket(driver.at("/run/nvidia-fabricmanager/socket"))  # on the driver root: not looked at
    files = discover_driver_files(str(driver), ["compute"], driver_version=V, host_root=str(host))
    assert files.host_root == str(host)
    assert files.ipc == ("/run/nvidia-persistenced/socket",)
    assert files.mps_pipe_dir == "/tmp/nvidia-mps"
    mounts = {m.container_path: m for m in files.to_edits().mounts}
    assert mounts["/run/nvidia-persistenced/socket"] == Mount(
        f"{host}/run/nvidia-persistenced/socket",
        "/run/nvidia-persistenced/socket",
        options=IPC_OPTIONS,
    )
    assert mounts["/tmp/nvidia-mps"] == Mount(
        f"{host}/tmp/nvidia-mps", "/tmp/nvidia-mps", options=IPC_OPTIONS
    )
    assert "ro" not in IPC_OPTIONS
    # host_root defaults to the driver root
    default = discover_driver_files(str(driver), ["utility"], driver_version=V)
    assert default.ipc == ("/run/nvidia-fabricmanager/socket",)
    assert default.mps_pipe_dir is None  # MPS is compute's


def test_version_inferred_from_the_libraries(driver: FakeRoot) -> None:
    files = discover_driver_files(str(driver), ["utility"], driver_version=None)
    assert files.driver_version == V
    assert f"{X86}/libnvidia-ml.so.{V}" in files.capability("utility").libraries
    assert len(files.firmware) == 2


def test_other_driver_version_finds_nothing_and_says_why(driver: FakeRoot) -> None:
    files = discover_driver_files(str(driver), ["utility"], driver_version="535.1")
    utility = files.capability("utility")
    assert utility.libraries == ()
    assert "libnvidia-ml.so" in utility.missing
    assert files.firmware == ("/lib/firmware/nvidia/535.1/gsp_ga10x.bin",)
    assert any("libnvidia-ml.so.1 is libnvidia-ml.so." in p for p in files.problems)
    assert utility.binaries  # binaries are not versioned


def test_no_cache_and_a_corrupt_cache(driver: FakeRoot) -> None:
    good = discover_driver_files(str(driver), ["compute", "utility"], driver_version=V)
    cache = driver.at("/etc/ld.so.cache")
    cache.write_bytes(cache.read_bytes()[:100])
    broken = discover_driver_files(str(driver), ["compute", "utility"], driver_version=V)
    assert broken.capabilities == good.capabilities  # the directories still have everything
    assert broken.symlinks == good.symlinks  # SONAMEs read from the files
    assert len(broken.problems) == 1
    assert broken.problems[0].startswith(f"{cache}: ld.so.cache truncated")
    cache.unlink()
    none = discover_driver_files(str(driver), ["compute", "utility"], driver_version=V)
    assert none.capabilities == good.capabilities
    assert none.problems == (f"{cache}: no ld.so.cache; searched directories only",)


def test_all_and_nothing(driver: FakeRoot) -> None:
    every = discover_driver_files(str(driver), ["all"], driver_version=V)
    assert [c.capability for c in every.capabilities] == [
        "compute",
        "utility",
        "video",
        "graphics",
        "display",
        "ngx",
        "compat32",
    ]
    assert every.capability("ngx").missing == ("libnvidia-ngx.so", "nvidia/wine/*.dll")
    nothing = discover_driver_files(str(driver), [], driver_version=V)
    assert nothing == DriverFiles(str(driver), str(driver), V, arch=machine_arch())
    assert nothing.to_edits() == Edits()
    with pytest.raises(KeyError):
        nothing.capability("compute")


def test_ngx(driver: FakeRoot) -> None:
    driver_library(driver, "libnvidia-ngx.so")
    driver.file(f"{X86}/nvidia/wine/nvngx.dll", "MZ")
    driver.file(f"{X86}/nvidia/wine/_nvngx.dll", "MZ")
    driver.file(f"{X86}/nvidia/wine/readme.txt", "")
    ngx = discover_driver_files(str(driver), ["ngx"], driver_version=V).capability("ngx")
    assert ngx.libraries == (
        f"{X86}/libnvidia-ngx.so.{V}",
        f"{X86}/nvidia/wine/_nvngx.dll",
        f"{X86}/nvidia/wine/nvngx.dll",
    )
    assert ngx.missing == ()


def test_deterministic(driver: FakeRoot) -> None:
    a = discover_driver_files(str(driver), ["utility", "compute", "graphics"], driver_version=V)
    b = discover_driver_files(str(driver), ("graphics", "compute", "utility"), driver_version=V)
    assert a == b
    assert a.to_edits() == b.to_edits()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"capabilities": ["compute", "gpu"]}, RequestError, "unknown driver capability 'gpu'"),
        ({"driver_version": "550.54.15; rm"}, DriverError, "is not a version"),
        ({"arch": "riscv64"}, DriverError, "unsupported architecture 'riscv64'"),
    ],
)
def test_errors(fake_root: FakeRoot, kwargs: dict[str, object], error: type, message: str) -> None:
    args: dict[str, object] = {"capabilities": ["compute"], "driver_version": V, **kwargs}
    with pytest.raises(error, match=message):
        discover_driver_files(str(fake_root), **args)  # type: ignore[arg-type]


def test_roots_must_be_directories(fake_root: FakeRoot, tmp_path: Path) -> None:
    missing = str(tmp_path / "run/nvidia/driver")
    with pytest.raises(DriverError, match=rf"^{missing}: driver root is not a directory$"):
        discover_driver_files(missing, ["compute"], driver_version=V)
    with pytest.raises(DriverError, match=rf"^{missing}: host root is not a directory$"):
        discover_driver_files(str(fake_root), ["compute"], driver_version=V, host_root=missing)


def test_arch_aliases(driver: FakeRoot) -> None:
    amd64 = discover_driver_files(str(driver), ["utility"], driver_version=V, arch="amd64")
    assert amd64 == discover_driver_files(str(driver), ["utility"], driver_version=V, arch="x86_64")
    arm = discover_driver_files(str(driver), ["utility"], driver_version=V, arch="arm64")
    assert arm.capability("utility").libraries == ()  # x86-64 files are not aarch64's


def test_stays_light(driver: FakeRoot) -> None:
    """The shim runs this on every container start (docs/architecture.md D5): no heavy imports."""
    code = (
        "import sys\n"
        "from nvhook.discover import discover_driver_files\n"
        f"discover_driver_files({str(driver)!r}, ['all'], driver_version=None).to_edits()\n"
        "heavy = ('pydantic', 'click', 'yaml', 'pynvml', 'json', 'pathlib', 'subprocess')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(Path(__file__).parents[3])},
    )
    assert out.stdout.strip() == "[]"
