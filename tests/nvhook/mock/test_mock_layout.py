"""A laid-out mock machine: driver files, ld.so.cache, /proc, /dev, sockets, the stub driver."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.devices.procfs import read_majors
from nvhook.discover.elf import ARCH_ELF, read_elf
from nvhook.errors import MockError
from nvhook.mock import compiled, create, lib_dirs, list_profiles, load_profile
from nvhook.mock.layout import LIB_DIR, installed_libraries
from nvhook.mock.model import Profile
from tests.support.containers import require, require_root

PROFILES = list_profiles()
LOADED = [p for p in PROFILES if load_profile(p).driver.loaded]
#: Profiles whose objects are compiled here and run (not gh200's aarch64 ones on x86-64).
RUNNABLE = [p for p in PROFILES if compiled(load_profile(p))]
#: How ``ldconfig -p`` and ``readelf -h`` name a profile's 64-bit architecture.
LDCONFIG_ARCH = {"x86_64": "x86-64", "aarch64": "AArch64"}
READELF_MACHINE = {"x86_64": "X86-64", "aarch64": "AArch64"}


def arch_of(profile: str) -> str:
    """The architecture of a profile's objects: its own, else this machine's."""
    return load_profile(profile).arch or os.uname().machine


Machine = Callable[..., Path]


def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=60, check=False
    )


# --- driver libraries -----------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
def test_ldconfig_cache_finds_the_driver(profile: str, mock_machine: Machine) -> None:
    root = mock_machine(profile)
    lib64, lib32 = lib_dirs(load_profile(profile))
    out = run(require("ldconfig"), "-p", "-C", root / "etc/ld.so.cache")
    assert out.returncode == 0, out.stderr
    label = LDCONFIG_ARCH[arch_of(profile)]
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1"):
        assert f"{soname} (libc6,{label}) => /{lib64}/{soname}" in out.stdout
        if lib32 is not None:
            assert f"{soname} (libc6) => /{lib32}/{soname}" in out.stdout
    assert ("(libc6)" in out.stdout) == (lib32 is not None)
    for lib in installed_libraries(load_profile(profile)):
        if "/vdpau/" not in lib.path:  # like the real driver's: vdpau/ is not a linker dir
            assert f"=> /{lib.soname_path}\n" in out.stdout


@pytest.mark.parametrize("profile", PROFILES)
def test_every_library_is_an_elf_with_its_real_soname(profile: str, mock_machine: Machine) -> None:
    root = mock_machine(profile)
    readelf = require("readelf")
    libs = installed_libraries(load_profile(profile))
    assert len(libs) > 30  # 33 64-bit ones in driver 550; x86-64 adds 32-bit copies
    for lib in libs:
        path = root / lib.path
        dynamic = run(readelf, "-d", path).stdout
        assert f"Library soname: [{lib.soname}]" in dynamic, lib.path
        assert "Shared library: [libc.so.6]" in dynamic, lib.path
        header = run(readelf, "-h", path).stdout
        if lib.bits == 64:
            assert "ELF64" in header and READELF_MACHINE[arch_of(profile)] in header, lib.path
        else:
            assert "ELF32" in header and "Intel 80386" in header, lib.path
        link = root / lib.soname_path
        if lib.soname != lib.name:
            assert link.is_symlink() and os.readlink(link) == lib.name
        assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_library_sets_follow_the_driver_version(mock_machine: Machine) -> None:
    def names(profile: str) -> set[str]:
        return {lib.name for lib in installed_libraries(load_profile(profile)) if lib.bits == 64}

    dgx, h100, l40s = names("dgx-a100"), names("h100-pcie"), names("l40s-x4")
    assert {
        "libcuda.so.550.54.15",
        "libnvidia-ml.so.550.54.15",
        "libnvidia-ngx.so.550.54.15",
    } <= dgx
    assert "libnvidia-tileiras.so.580.65.06" in h100 and not any("tileiras" in n for n in dgx)
    assert any("vulkan-producer" in n for n in dgx) and not any(
        "vulkan-producer" in n for n in h100
    )
    assert "libnvidia-egl-xcb.so.1.0.3" in h100 and not any("egl-xcb" in n for n in l40s)
    assert "libnvidia-egl-wayland.so.1.1.11" in l40s
    root = mock_machine("dgx-a100")
    assert (root / LIB_DIR / "vdpau/libvdpau_nvidia.so.1").is_symlink()
    assert (root / LIB_DIR / "nvidia/wine/nvngx.dll").read_bytes().startswith(b"MZ")


@pytest.mark.parametrize("profile", PROFILES)
def test_binaries_firmware_and_config(profile: str, mock_machine: Machine) -> None:
    prof = load_profile(profile)
    root = mock_machine(profile)
    binaries = {
        "nvidia-smi",
        "nvidia-debugdump",
        "nvidia-persistenced",
        "nvidia-cuda-mps-control",
        "nvidia-cuda-mps-server",
    }
    if prof.nvswitches:
        binaries.add("nv-fabricmanager")
    if prof.imex_channels:
        binaries |= {"nvidia-imex", "nvidia-imex-ctl"}
    assert {p.name for p in (root / "usr/bin").iterdir()} == binaries
    for name in binaries:
        assert os.access(root / "usr/bin" / name, os.X_OK)
        info = read_elf(str(root / "usr/bin" / name))
        assert info is not None and (info.elf_class, info.machine) == ARCH_ELF[arch_of(profile)]
    if compiled(prof):
        version = run(root / "usr/bin/nvidia-persistenced", "--version")
        assert version.returncode == 0 and prof.driver.version in version.stdout
    assert "no dynamic section" in run(require("readelf"), "-d", root / "usr/bin/nvidia-smi").stdout
    firmware = root / "lib/firmware/nvidia" / prof.driver.version
    assert sorted(p.name for p in firmware.iterdir()) == sorted(prof.driver.firmware)
    assert (root / "etc/OpenCL/vendors/nvidia.icd").read_text() == "libnvidia-opencl.so.1\n"
    conf = "".join(f"/{d}\n" for d in lib_dirs(prof) if d)
    assert (root / "etc/ld.so.conf").read_text() == conf
    data = json.loads((root / "etc/nvhook-mock/profile.json").read_text())
    assert data["profile"] == profile


@pytest.mark.parametrize("profile", ["l40s-x4", "h100-pcie"])
def test_graphics_vendor_files_name_shipped_libraries(profile: str, mock_machine: Machine) -> None:
    root = mock_machine(profile)
    files = [
        "usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        "usr/share/vulkan/icd.d/nvidia_icd.json",
        "usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
        *(
            str(p.relative_to(root))
            for p in (root / "usr/share/egl/egl_external_platform.d").iterdir()
        ),
    ]
    assert len(files) >= 5
    for rel in files:
        doc = json.loads((root / rel).read_text())
        library = (doc.get("ICD") or doc["layer"])["library_path"]
        assert (root / LIB_DIR / library).exists(), f"{rel} names {library}"
    api = json.loads((root / files[1]).read_text())["ICD"]["api_version"]
    assert api == load_profile(profile).driver.vulkan_api


def test_display_files_only_where_the_profile_has_them(mock_machine: Machine) -> None:
    l40s = mock_machine("l40s-x4")
    assert (l40s / "usr/lib/xorg/modules/drivers/nvidia_drv.so").is_file()
    assert os.readlink(l40s / "usr/lib/xorg/modules/extensions/libglxserver_nvidia.so") == (
        "libglxserver_nvidia.so.535.230.02"
    )
    assert (l40s / "usr/share/X11/xorg.conf.d/10-nvidia.conf").is_file()
    dgx = mock_machine("dgx-a100")
    assert not (dgx / "usr/lib/xorg").exists() and not (dgx / "usr/share/vulkan").exists()


# --- /proc ------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
def test_proc_files_in_the_drivers_formats(profile: str, mock_machine: Machine) -> None:
    prof = load_profile(profile)
    root = mock_machine(profile)
    devices = (root / "proc/devices").read_text()
    chars, _, blocks = devices.partition("\n\nBlock devices:\n")
    assert chars.startswith("Character devices:\n") and blocks.endswith("\n")
    for line in chars.splitlines()[1:]:
        assert line[:3].strip().isdigit() and line[3] == " ", line
    if not prof.driver.loaded:
        assert not (root / "proc/driver").exists()
        assert "nvidia" not in devices
        return
    assert "195 nvidia-frontend\n" in devices
    version = (root / "proc/driver/nvidia/version").read_text().splitlines()
    assert version[0].startswith("NVRM version: NVIDIA UNIX ")
    assert f"  {prof.driver.version}  " in version[0] and version[1].startswith("GCC version:")
    for g in prof.gpus:
        lines = (root / f"proc/driver/nvidia/gpus/{g.bus_id}/information").read_text().splitlines()
        fields = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
        assert fields["Model"] == g.name and fields["GPU UUID"] == g.uuid
        assert fields["Bus Location"] == g.bus_id and fields["Device Minor"] == str(g.minor)
        assert lines[0] == f"Model: \t\t {g.name}"
        caps = root / f"proc/driver/nvidia/capabilities/gpu{g.minor}/mig"
        assert caps.is_dir() == g.mig_enabled
        for d in g.mig_devices:
            gi = (caps / f"gi{d.gi}/access").read_text()
            ci = (caps / f"gi{d.gi}/ci{d.ci}/access").read_text()
            assert (
                gi
                == f"DeviceFileMinor: {d.gi_caps_minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
            )
            assert ci.startswith(f"DeviceFileMinor: {d.ci_caps_minor}\n")
    mig_minors = (root / "proc/driver/nvidia-caps/mig-minors").read_text().splitlines()
    assert mig_minors[:4] == ["config 1", "monitor 2", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4"]
    assert mig_minors[-1] == "gpu31/gi14/ci7/access 4322"


# --- /dev and /run ----------------------------------------------------------------------------


def expected_nodes(prof: Profile) -> dict[str, tuple[str, int]]:
    """Device nodes of a profile: path → (/proc/devices name of the major, minor)."""
    if not prof.driver.loaded:
        nodes = {}
    else:
        nodes = {f"dev/nvidia{g.minor}": ("nvidia-frontend", g.minor) for g in prof.gpus}
        nodes |= {
            "dev/nvidiactl": ("nvidia-frontend", 255),
            "dev/nvidia-modeset": ("nvidia-frontend", 254),
            "dev/nvidia-uvm": ("nvidia-uvm", 0),
            "dev/nvidia-uvm-tools": ("nvidia-uvm", 1),
            "dev/nvidia-caps/nvidia-cap1": ("nvidia-caps", 1),
            "dev/nvidia-caps/nvidia-cap2": ("nvidia-caps", 2),
        }
        for g in prof.gpus:
            for d in g.mig_devices:
                for minor in (d.gi_caps_minor, d.ci_caps_minor):
                    nodes[f"dev/nvidia-caps/nvidia-cap{minor}"] = ("nvidia-caps", minor)
            if g.dri_card is not None:
                nodes[f"dev/dri/card{g.dri_card}"] = ("drm", g.dri_card)
            if g.dri_render is not None:
                nodes[f"dev/dri/renderD{g.dri_render}"] = ("drm", g.dri_render)
        for ch in range(prof.imex_channels):
            nodes[f"dev/nvidia-caps-imex-channels/channel{ch}"] = ("nvidia-caps-imex-channels", ch)
        if prof.nvswitches:
            nodes["dev/nvidia-nvswitchctl"] = ("nvidia-nvswitch", 255)
            for i in range(prof.nvswitches):
                nodes[f"dev/nvidia-nvswitch{i}"] = ("nvidia-nvswitch", i)
    for card in prof.dri_cards:
        nodes[f"dev/dri/card{card.card}"] = ("drm", card.card)
    return nodes


def node_paths(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in (root / "dev").rglob("*")
        if not p.is_dir() and not p.is_symlink()
    }


@pytest.mark.parametrize("profile", PROFILES)
def test_dev_nodes_as_files(profile: str, mock_machine: Machine) -> None:
    prof = load_profile(profile)
    root = mock_machine(profile)
    assert node_paths(root) == set(expected_nodes(prof))
    for rel in expected_nodes(prof):
        assert stat.S_ISREG((root / rel).lstat().st_mode)


@pytest.mark.root
@pytest.mark.parametrize("profile", PROFILES)
def test_char_nodes_have_the_announced_majors(profile: str, mock_machine: Machine) -> None:
    require_root()
    prof = load_profile(profile)
    root = mock_machine(profile, as_root_nodes=True)
    majors = read_majors(root)
    nodes = expected_nodes(prof)
    assert node_paths(root) == set(nodes)
    for rel, (name, minor) in nodes.items():
        st = (root / rel).lstat()
        assert stat.S_ISCHR(st.st_mode), rel
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (majors[name], minor), rel
    if prof.driver.loaded:
        assert majors["nvidia-frontend"] == 195


def test_dri_by_path_links_match_the_gpus(mock_machine: Machine) -> None:
    prof = load_profile("l40s-x4")
    by_path = mock_machine("l40s-x4") / "dev/dri/by-path"
    for g in prof.gpus:
        assert os.readlink(by_path / f"pci-{g.bus_id}-card") == f"../card{g.dri_card}"
        assert os.readlink(by_path / f"pci-{g.bus_id}-render") == f"../renderD{g.dri_render}"
    assert os.readlink(by_path / "pci-0000:03:00.0-card") == "../card0"


@pytest.mark.parametrize("profile", PROFILES)
def test_ipc_sockets(profile: str, mock_machine: Machine) -> None:
    prof = load_profile(profile)
    root = mock_machine(profile)
    sockets = {
        "run/nvidia-persistenced/socket": prof.driver.loaded,
        "run/nvidia-fabricmanager/socket": prof.nvswitches > 0,
    }
    for rel, present in sockets.items():
        path = root / rel
        assert path.exists() == present, rel
        if present:
            assert stat.S_ISSOCK(path.lstat().st_mode)


# --- the stub driver on the host ---------------------------------------------------------------


def smi_listing(prof: Profile, gpus: list[int] | None = None) -> str:
    lines = []
    shown = [g for g in prof.gpus if gpus is None or g.index in gpus]
    for n, g in enumerate(shown):
        lines.append(f"GPU {n}: {g.name} (UUID: {g.uuid})")
        lines += [
            f"  MIG {d.profile.name:<12} Device {d.index:2d}: (UUID: {d.uuid})"
            for d in g.mig_devices
        ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("profile", RUNNABLE)
def test_nvidia_smi_on_the_host_lists_every_gpu(profile: str, mock_machine: Machine) -> None:
    prof = load_profile(profile)
    out = run(mock_machine(profile) / "usr/bin/nvidia-smi", "-L")
    if not prof.driver.loaded:
        assert out.returncode == 9 and "couldn't communicate with the NVIDIA driver" in out.stdout
        return
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout == smi_listing(prof)


@pytest.mark.root
def test_nvidia_smi_with_char_nodes(mock_machine: Machine) -> None:
    require_root()
    out = run(mock_machine("dgx-a100", as_root_nodes=True) / "usr/bin/nvidia-smi", "-L")
    assert out.stdout == smi_listing(load_profile("dgx-a100"))  # ENXIO counts as visible


def test_nvidia_smi_skips_gpus_without_nodes(make_mock_machine: Machine) -> None:
    prof = load_profile("dgx-a100")
    root = make_mock_machine("dgx-a100")
    (root / "dev/nvidia3").unlink()
    (root / "dev/nvidia0").unlink()
    out = run(root / "usr/bin/nvidia-smi", "-L")
    assert out.stdout == smi_listing(prof, [1, 2, 4, 5, 6, 7])
    for rel in (
        "dev/nvidia1",
        "dev/nvidia2",
        "dev/nvidia4",
        "dev/nvidia5",
        "dev/nvidia6",
        "dev/nvidia7",
    ):
        (root / rel).unlink()
    out = run(root / "usr/bin/nvidia-smi", "-L")
    assert (out.returncode, out.stdout) == (6, "No devices were found\n")


def test_nvidia_smi_skips_mig_devices_without_caps(make_mock_machine: Machine) -> None:
    prof = load_profile("dgx-a100")
    root = make_mock_machine("dgx-a100")
    hidden = prof.gpus[0].mig_devices[1]
    (root / f"dev/nvidia-caps/nvidia-cap{hidden.ci_caps_minor}").unlink()
    out = run(root / "usr/bin/nvidia-smi", "-L").stdout
    assert hidden.uuid not in out
    assert prof.gpus[0].mig_devices[0].uuid in out and prof.gpus[0].mig_devices[2].uuid in out
    assert "Device  1: (UUID: " + prof.gpus[0].mig_devices[2].uuid in out  # renumbered


def cuda_count(lib: Path) -> tuple[int, int, int, int]:
    """(cuDriverGetVersion, cuDeviceGetCount before init, cuInit(0), devices) of a libcuda."""
    cuda = ctypes.CDLL(str(lib))
    version, count = ctypes.c_int(), ctypes.c_int(-1)
    rc_version = cuda.cuDriverGetVersion(ctypes.byref(version))
    assert rc_version == 0
    early = cuda.cuDeviceGetCount(ctypes.byref(count))
    assert cuda.cuInit(1) == 1  # flags must be 0
    init = cuda.cuInit(0)
    cuda.cuDeviceGetCount(ctypes.byref(count))
    return version.value, early, init, count.value


@pytest.mark.parametrize("profile", RUNNABLE)
def test_stub_libcuda_counts_visible_devices(profile: str, mock_machine: Machine) -> None:
    prof = load_profile(profile)
    version, early, init, count = cuda_count(mock_machine(profile) / LIB_DIR / "libcuda.so.1")
    assert version == prof.driver.cuda_version_int
    assert early == 3  # CUDA_ERROR_NOT_INITIALIZED
    expected = sum(len(g.mig_devices) if g.mig_enabled else 1 for g in prof.gpus)
    if expected == 0:
        assert init == 100  # CUDA_ERROR_NO_DEVICE
    else:
        assert (init, count) == (0, expected)


def test_stub_libcuda_counts_a_mig_device_only_with_its_access_nodes(
    make_mock_machine: Machine,
) -> None:
    """The driver's rule: a MIG device needs its GPU's node and both access nodes."""
    prof = load_profile("dgx-a100")
    root = make_mock_machine("dgx-a100")
    full = sum(len(g.mig_devices) if g.mig_enabled else 1 for g in prof.gpus)
    hidden = prof.gpus[0].mig_devices[1]
    (root / f"dev/nvidia-caps/nvidia-cap{hidden.gi_caps_minor}").unlink()
    assert cuda_count(root / LIB_DIR / "libcuda.so.1")[2:] == (0, full - 1)


def test_stub_libcuda_skips_gpus_without_nodes(make_mock_machine: Machine) -> None:
    root = make_mock_machine("l40s-x4")
    (root / "dev/nvidia0").unlink()
    assert cuda_count(root / LIB_DIR / "libcuda.so.1")[2:] == (0, 3)


# --- the layout as a whole -----------------------------------------------------------------------


def tree_listing(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under root: type, mode, device numbers, link target or content hash."""
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            rel = str(path.relative_to(root))
            if stat.S_ISSOCK(st.st_mode):
                continue
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", mode)
            elif stat.S_ISCHR(st.st_mode):
                out[rel] = ("char", mode, os.major(st.st_rdev), os.minor(st.st_rdev))
            else:
                out[rel] = ("file", mode, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


@pytest.mark.parametrize("profile", PROFILES)
def test_layout_is_deterministic_and_fast(
    profile: str, mock_machine: Machine, tmp_path: Path
) -> None:
    first = mock_machine(profile)  # laid out (and its objects cached) before the clock starts
    start = time.monotonic()
    create(profile, tmp_path / "again", nodes="file")
    elapsed = time.monotonic() - start
    assert tree_listing(tmp_path / "again") == tree_listing(first)
    assert elapsed < 5, f"a warm layout of {profile} took {elapsed:.1f}s"


def test_nothing_is_written_outside_the_root_and_the_cache(tmp_path: Path) -> None:
    home, tmp, cwd, cache, parent = (tmp_path / d for d in ("home", "tmp", "cwd", "cache", "out"))
    for d in (home, tmp, cwd, parent):
        d.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "NVHOOK_MOCK_CACHE": str(cache),  # empty: everything is compiled
    }
    code = "import sys; from nvhook.mock import create; create('dgx-a100', sys.argv[1])"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(parent / "root")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in parent.iterdir()] == ["root"]
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == [] and list(cwd.iterdir()) == []
    assert any(cache.rglob("*-libcuda.so.550.54.15"))
    assert list((cache / "tmp").iterdir()) == []


def test_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "keep").write_text("mine")
    with pytest.raises(MockError, match=r"exists and is not empty"):
        create("h100-pcie", tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["keep"]


def test_unknown_node_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MockError, match=r"unknown node mode 'block'"):
        create("h100-pcie", tmp_path / "x", nodes="block")  # type: ignore[arg-type]


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_a_mock_socket_is_0777_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    """The socket a stopped daemon leaves (bound, never listening): its documented mode,
    narrower than it before the chmod, never wider."""
    from nvhook.mock._tree import Tree

    before: list[int] = []
    real_chmod = os.chmod

    def chmod(path: str | Path, mode: int) -> None:
        before.append(stat.S_IMODE(os.lstat(path).st_mode))
        real_chmod(path, mode)

    old = os.umask(umask)
    try:
        tree = Tree(tmp_path, "file")
        with pytest.MonkeyPatch.context() as m:
            m.setattr(os, "chmod", chmod)
            tree.unix_socket("run/daemon/socket")
    finally:
        os.umask(old)
    sock = tmp_path / "run/daemon/socket"
    assert sock.is_socket() and stat.S_IMODE(sock.lstat().st_mode) == 0o777
    assert before[-1] == 0o777 & ~umask
