"""Lay out a mock machine: a fake host root for one profile.

:func:`create` writes, under one directory and nowhere else (compiled objects come from the
build cache, :mod:`nvhook.mock.build`):

- ``dev/``: ``nvidia<minor>`` per GPU, ``nvidiactl``, ``nvidia-modeset``, ``nvidia-uvm``,
  ``nvidia-uvm-tools``, ``nvidia-caps/nvidia-cap<n>`` (MIG config, monitor, each GPU and compute
  instance), IMEX channels, NVSwitch nodes, ``dri/card*``, ``dri/renderD*`` and their
  ``dri/by-path`` links. Real character devices with the driver's numbers (195 for GPUs and
  control nodes, the dynamic majors that ``proc/devices`` announces for the others) when
  ``nodes="char"`` (needs root), empty regular files when ``nodes="file"``;
- ``proc/``: ``devices``, ``driver/nvidia/{version,params}``,
  ``driver/nvidia/gpus/<bus>/information``, ``driver/nvidia/capabilities/…/access``,
  ``driver/nvidia-caps/mig-minors``, as the driver writes them;
- the driver's user space at the Debian paths: every library of the driver's version
  (``usr/lib/x86_64-linux-gnu``, 32-bit copies in ``usr/lib/i386-linux-gnu``) as an ELF shared
  object with its real SONAME and SONAME link, ``etc/ld.so.conf`` and an ``etc/ld.so.cache``
  made by the real ``ldconfig -r``; binaries in ``usr/bin``; GSP firmware; the OpenCL ICD file;
  graphics vendor files and the Xorg module where the profile has them;
- ``run/nvidia-persistenced/socket`` (and the fabric manager's on NVSwitch systems): real unix
  sockets with nobody listening;
- ``etc/nvhook-mock/nvml.txt`` (what the fake NVML answers) and ``profile.json``.

``libnvidia-ml.so.1`` is the fake NVML (``csrc/nvml.c``); ``libcuda.so.1`` and
``usr/bin/nvidia-smi`` count the GPUs whose ``/dev`` nodes the caller can open
(``csrc/visible.c``). The result is a pure function of the profile and the node mode: two
layouts have the same files, bytes and modes.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path
from typing import Literal

from nvhook.errors import MockError
from nvhook.mock import build
from nvhook.mock.model import ARCHITECTURES, BRANDS, Profile, mig_caps_minor, parse_bus_id
from nvhook.mock.profiles import driver_files, load_profile
from oci._frozen import Frozen

__all__ = [
    "DATA_DIR",
    "LIB32_DIR",
    "LIB_DIR",
    "InstalledLibrary",
    "MockMachine",
    "NodeMode",
    "create",
    "installed_libraries",
]

LIB_DIR = "usr/lib/x86_64-linux-gnu"
LIB32_DIR = "usr/lib/i386-linux-gnu"
XORG_DIR = "usr/lib/xorg/modules"
DATA_DIR = "etc/nvhook-mock"

NodeMode = Literal["auto", "char", "file"]

_NVIDIA_MAJOR = 195
_DRM_MAJOR = 226
_CTL_MINOR = 255
_MODESET_MINOR = 254
_MIG_CONFIG_MINOR = 1
_MIG_MONITOR_MINOR = 2

# What a Debian host announces besides the NVIDIA driver (none in the dynamic ranges 234-254
# and 384-511 that the profiles use).
_BASE_CHAR_DEVICES = (
    (1, "mem"),
    (4, "/dev/vc/0"),
    (4, "tty"),
    (4, "ttyS"),
    (5, "/dev/tty"),
    (5, "/dev/console"),
    (5, "/dev/ptmx"),
    (7, "vcs"),
    (10, "misc"),
    (13, "input"),
    (21, "sg"),
    (29, "fb"),
    (128, "ptm"),
    (136, "pts"),
    (180, "usb"),
    (189, "usb_device"),
)
_BLOCK_DEVICES = (
    (7, "loop"),
    (8, "sd"),
    (9, "md"),
    (65, "sd"),
    (253, "device-mapper"),
    (259, "blkext"),
)


class MockMachine(Frozen):
    """A laid-out mock machine."""

    root: Path
    profile: Profile
    nodes: Literal["char", "file"] = "file"

    def __repr__(self) -> str:  # the profile would fill a screen
        return f"MockMachine(root={self.root!r}, nodes={self.nodes!r})"

    @property
    def lib_dir(self) -> Path:
        """Where the 64-bit driver libraries are (put it in LD_LIBRARY_PATH for the fake NVML)."""
        return self.root / LIB_DIR

    @property
    def lib32_dir(self) -> Path:
        return self.root / LIB32_DIR

    @property
    def bin_dir(self) -> Path:
        return self.root / "usr/bin"

    @property
    def dev_dir(self) -> Path:
        return self.root / "dev"

    @property
    def ldcache(self) -> Path:
        return self.root / "etc/ld.so.cache"


def create(profile: Profile | str, root: Path | str, *, nodes: NodeMode = "auto") -> MockMachine:
    """Lay out ``profile`` (a :class:`Profile` or a profile name) as a fake host at ``root``.

    ``root`` must not exist or be an empty directory. ``nodes="auto"`` makes character devices
    when running as root and regular files otherwise.
    """
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    mode = _node_mode(nodes)
    top = Path(root).absolute()
    if top.exists() and (not top.is_dir() or any(top.iterdir())):
        raise MockError(f"cannot lay out mock machine at {top}: it exists and is not empty")
    tree = _Tree(top, mode)
    tree.mkdir("")
    _driver_user_space(tree, prof)
    _proc(tree, prof)
    _dev(tree, prof)
    _run(tree, prof)
    _data(tree, prof, mode)
    _ldconfig(top)
    return MockMachine(root=top, profile=prof, nodes=mode)


def _node_mode(nodes: NodeMode) -> Literal["char", "file"]:
    if nodes == "auto":
        return "char" if os.geteuid() == 0 else "file"
    if nodes == "char" and os.geteuid() != 0:
        raise MockError("mock machine device nodes as character devices need root (mknod)")
    if nodes not in ("char", "file"):
        raise MockError(f"unknown node mode {nodes!r}: expected auto, char or file")
    return nodes


class _Tree:
    """Writes under one root, with explicit modes so that the umask does not matter."""

    def __init__(self, root: Path, nodes: Literal["char", "file"]) -> None:
        self.root = root
        self.nodes = nodes
        self._dirs: set[str] = set()

    def path(self, rel: str) -> Path:
        return self.root / rel if rel else self.root

    def mkdir(self, rel: str) -> None:
        if rel in self._dirs:
            return
        parent = os.path.dirname(rel)
        if rel:
            self.mkdir(parent)
        p = self.path(rel)
        try:
            p.mkdir(exist_ok=True)
            os.chmod(p, 0o755)
        except OSError as e:
            raise MockError(f"cannot create {p}: {e.strerror}") from e
        self._dirs.add(rel)

    def write(self, rel: str, content: bytes | str, mode: int = 0o644) -> None:
        self.mkdir(os.path.dirname(rel))
        p = self.path(rel)
        data = content.encode() if isinstance(content, str) else content
        try:
            p.write_bytes(data)
            os.chmod(p, mode)
        except OSError as e:
            raise MockError(f"cannot write {p}: {e.strerror}") from e

    def copy(self, rel: str, source: Path, mode: int = 0o755) -> None:
        self.mkdir(os.path.dirname(rel))
        p = self.path(rel)
        try:
            shutil.copyfile(source, p)
            os.chmod(p, mode)
        except OSError as e:
            raise MockError(f"cannot copy {source} to {p}: {e.strerror}") from e

    def symlink(self, rel: str, target: str) -> None:
        self.mkdir(os.path.dirname(rel))
        try:
            os.symlink(target, self.path(rel))
        except OSError as e:
            raise MockError(f"cannot create symlink {self.path(rel)}: {e.strerror}") from e

    def node(self, rel: str, major: int, minor: int, mode: int = 0o666) -> None:
        self.mkdir(os.path.dirname(rel))
        p = self.path(rel)
        try:
            if self.nodes == "char":
                os.mknod(p, stat.S_IFCHR | mode, os.makedev(major, minor))
                os.chmod(p, mode)
            else:
                self.write(rel, b"", mode)
        except OSError as e:
            raise MockError(f"cannot create device node {p} ({major}:{minor}): {e.strerror}") from e

    def unix_socket(self, rel: str) -> None:
        """Bind a unix socket and close it, leaving the socket file (as a stopped daemon does)."""
        self.mkdir(os.path.dirname(rel))
        parent = os.open(self.path(os.path.dirname(rel)), os.O_RDONLY | os.O_DIRECTORY)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                # through the directory's fd: the full path may exceed sun_path's 108 bytes
                s.bind(f"/proc/self/fd/{parent}/{os.path.basename(rel)}")
            os.chmod(self.path(rel), 0o777)
        except OSError as e:
            raise MockError(f"cannot create unix socket {self.path(rel)}: {e.strerror}") from e
        finally:
            os.close(parent)


# --- driver user space ------------------------------------------------------------------------


class InstalledLibrary(Frozen):
    """One driver library file of a laid-out profile."""

    path: str  # relative to the root: usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    soname: str  # libcuda.so.1 (a symlink of that name sits next to it unless it is the file)
    stem: str  # libcuda.so
    capability: str  # utility, compute, video, graphics, ngx (DRIVER-FILES.md)
    bits: Literal[32, 64]

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def soname_path(self) -> str:
        return f"{os.path.dirname(self.path)}/{self.soname}"


def installed_libraries(profile: Profile) -> tuple[InstalledLibrary, ...]:
    """The driver libraries a layout of ``profile`` has, 64-bit and 32-bit (not the Xorg ones)."""
    branch = profile.driver.branch
    platforms = dict(profile.driver.egl_platforms)
    out = []
    for lib in driver_files().libraries:
        if lib.since is not None and branch < lib.since:
            continue
        if lib.until is not None and branch > lib.until:
            continue
        if lib.platform is not None and lib.platform not in platforms:
            continue
        version = platforms[lib.platform] if lib.platform else profile.driver.version
        name = f"{lib.stem}.{version}"
        soname = lib.soname.format(version=profile.driver.version)
        dirs: list[tuple[str, Literal[32, 64]]] = [(LIB_DIR, 64)]
        if lib.compat32:
            dirs.append((LIB32_DIR, 32))
        for base, bits in dirs:
            folder = f"{base}/{lib.subdir}" if lib.subdir else base
            out.append(InstalledLibrary(f"{folder}/{name}", soname, lib.stem, lib.capability, bits))
    return tuple(out)


_SHARED = ("-O2", "-g0", "-fPIC", "-shared", "-fvisibility=hidden")
_LIBC = ("-Wl,--no-as-needed", "-lc")  # every driver library needs libc.so.6, like the real ones


def _stub64(soname: str | None, output: str) -> build.Unit:
    name = soname or output
    link = (f"-Wl,-soname,{soname}",) if soname else ()
    return build.Unit(
        output=output,
        sources=(("stub.c", build.csource("stub.c")),),
        compile=("stub.c",),
        args=(*_SHARED, f'-DNVHOOK_STUB_SONAME="{name}"', *link, *_LIBC),
    )


def _stub32(soname: str, output: str, standin: bytes) -> build.Unit:
    return build.Unit(
        output=output,
        sources=(("stub.c", build.csource("stub.c")), ("libc.so.6", standin)),
        compile=("stub.c",),
        args=(
            "-m32",
            "-nostdlib",
            *_SHARED,
            f'-DNVHOOK_STUB_SONAME="{soname}"',
            f"-Wl,-soname,{soname}",
            "-Wl,--no-as-needed",
            "libc.so.6",
        ),
    )


def _profile_header(prof: Profile) -> bytes:
    def c(s: str) -> str:
        return json.dumps(s, ensure_ascii=False)

    lines = [
        f"/* mock_profile.h: profile {prof.name}, generated by nvhook.mock.layout */",
        f"#define MOCK_PROFILE_NAME {c(prof.name)}",
        f"#define MOCK_DRIVER_VERSION {c(prof.driver.version)}",
        f"#define MOCK_CUDA_VERSION {prof.driver.cuda_version_int}",
        f"#define MOCK_CUDA_VERSION_STRING {c(prof.driver.cuda)}",
        f"#define MOCK_MODULE_LOADED {int(prof.driver.loaded)}",
        f"#define MOCK_NGPUS {len(prof.gpus)}u",
        "static const struct mock_gpu mock_gpus[] = {",
    ]
    migs: list[str] = []
    for g in prof.gpus:
        devices = g.mig_devices
        lines.append(
            f"    {{{g.minor}u, {c(g.name)}, {c(g.uuid)}, {c(_nvml_bus_id(g.bus_id))}, "
            f"{g.model.memory_mib}u, {int(g.mig_enabled)}, {len(migs)}u, {len(devices)}u}},"
        )
        migs += [
            f"    {{{c(m.profile.name)}, {c(m.uuid)}, {m.gi_caps_minor}u, {m.ci_caps_minor}u}},"
            for m in devices
        ]
    lines += [
        "    {0}",
        "};",
        "static const struct mock_mig mock_migs[] = {",
        *migs,
        "    {0}",
        "};",
    ]
    return ("\n".join(lines) + "\n").encode()


def _units(prof: Profile) -> dict[str, build.Unit]:
    """Everything to compile for ``prof``, by the path it takes under the root."""
    files = driver_files()
    version = prof.driver.version
    header = ("mock_profile.h", _profile_header(prof))
    visible = ("visible.c", build.csource("visible.c"))
    units: dict[str, build.Unit] = {}
    standin = build.build([build.libc32_standin()])[0].read_bytes()
    for lib in installed_libraries(prof):
        if lib.bits == 32:
            units[lib.path] = _stub32(lib.soname, lib.name, standin)
        elif lib.stem == "libnvidia-ml.so":
            units[lib.path] = build.Unit(
                output=lib.name,
                sources=(("nvml.c", build.csource("nvml.c")),),
                compile=("nvml.c",),
                args=(*_SHARED, "-Wall", "-pthread", f"-Wl,-soname,{lib.soname}", *_LIBC, "-ldl"),
            )
        elif lib.stem == "libcuda.so":
            units[lib.path] = build.Unit(
                output=lib.name,
                sources=(("cuda.c", build.csource("cuda.c")), visible, header),
                compile=("cuda.c",),
                args=(*_SHARED, "-Wall", f"-Wl,-soname,{lib.soname}", *_LIBC, "-ldl"),
            )
        else:
            units[lib.path] = _stub64(lib.soname, lib.name)
    if prof.display:
        units[f"{XORG_DIR}/drivers/nvidia_drv.so"] = _stub64(None, "nvidia_drv.so")
        glx = f"libglxserver_nvidia.so.{version}"
        units[f"{XORG_DIR}/extensions/{glx}"] = _stub64(glx, glx)
    units["usr/bin/nvidia-smi"] = build.Unit(
        output="nvidia-smi",
        sources=(("smi.c", build.csource("smi.c")), visible, header),
        compile=("smi.c",),
        args=("-O2", "-g0", "-Wall", "-static", "-s"),
    )
    tool = build.Unit(
        output="nvidia-tool",
        sources=(("tool.c", build.csource("tool.c")),),
        compile=("tool.c",),
        args=("-O2", "-g0", "-Wall", "-static", "-s", f'-DMOCK_DRIVER_VERSION="{version}"'),
    )
    for binary in files.binaries:
        wanted = {None: True, "nvswitch": prof.nvswitches > 0, "imex": prof.imex_channels > 0}
        if binary.name != "nvidia-smi" and wanted.get(binary.when, False):
            units[f"usr/bin/{binary.name}"] = tool
    return units


def _driver_user_space(tree: _Tree, prof: Profile) -> None:
    units = _units(prof)
    built = build.build(list(units.values()))
    for rel, source in zip(units, built, strict=True):
        tree.copy(rel, source, 0o755 if rel.startswith("usr/bin/") else 0o644)
    version = prof.driver.version
    for lib in installed_libraries(prof):
        if lib.soname != lib.name:
            tree.symlink(lib.soname_path, lib.name)
    if prof.display:
        glx = f"libglxserver_nvidia.so.{version}"
        tree.symlink(f"{XORG_DIR}/extensions/libglxserver_nvidia.so", glx)
    tree.write(
        f"{LIB_DIR}/nvidia/wine/nvngx.dll",
        _pe_placeholder("nvngx.dll", version),
    )
    tree.write(
        f"{LIB_DIR}/nvidia/wine/_nvngx.dll",
        _pe_placeholder("_nvngx.dll", version),
    )
    for fw in prof.driver.firmware:
        tree.write(
            f"lib/firmware/nvidia/{version}/{fw}",
            f"nvhook mock machine: GSP firmware {fw} of driver {version}\n",
        )
    tree.write("etc/OpenCL/vendors/nvidia.icd", "libnvidia-opencl.so.1\n")
    tree.write("etc/ld.so.conf", f"/{LIB_DIR}\n/{LIB32_DIR}\n")
    if prof.graphics_config:
        _graphics_config(tree, prof)
    if prof.display:
        tree.write(
            "usr/share/X11/xorg.conf.d/10-nvidia.conf",
            'Section "OutputClass"\n'
            '    Identifier "nvidia"\n'
            '    MatchDriver "nvidia-drm"\n'
            '    Driver "nvidia"\n'
            '    Option "AllowEmptyInitialConfiguration"\n'
            "EndSection\n",
        )


def _pe_placeholder(name: str, version: str) -> bytes:
    """The Wine NGX DLLs are Windows PE files; Linux only ever mounts them. A DOS stub will do."""
    text = f"nvhook mock machine: {name} of driver {version} (a Windows DLL, for Wine)\n"
    return b"MZ" + b"\0" * 58 + (64).to_bytes(4, "little") + text.encode()


def _json(value: object) -> str:
    return json.dumps(value, indent=4) + "\n"


def _graphics_config(tree: _Tree, prof: Profile) -> None:
    icd = {"file_format_version": "1.0.0", "ICD": {"library_path": "libEGL_nvidia.so.0"}}
    tree.write("usr/share/glvnd/egl_vendor.d/10_nvidia.json", _json(icd))
    order = {"wayland": "10", "gbm": "15", "xcb": "20", "xlib": "20"}
    for platform, _ in prof.driver.egl_platforms:
        lib = f"libnvidia-egl-{platform}.so.1"
        folder = "usr/share/egl/egl_external_platform.d"
        tree.write(
            f"{folder}/{order.get(platform, '30')}_nvidia_{platform}.json",
            _json({"file_format_version": "1.0.0", "ICD": {"library_path": lib}}),
        )
    api = prof.driver.vulkan_api
    tree.write(
        "usr/share/vulkan/icd.d/nvidia_icd.json",
        _json(
            {
                "file_format_version": "1.0.1",
                "ICD": {"library_path": "libGLX_nvidia.so.0", "api_version": api},
            }
        ),
    )
    layer = {
        "name": "VK_LAYER_NV_optimus",
        "type": "INSTANCE",
        "library_path": "libGLX_nvidia.so.0",
        "api_version": api,
        "implementation_version": "1",
        "description": "NVIDIA Optimus layer",
        "functions": {
            "vkGetInstanceProcAddr": "vk_optimusGetInstanceProcAddr",
            "vkGetDeviceProcAddr": "vk_optimusGetDeviceProcAddr",
        },
        "enable_environment": {"__NV_PRIME_RENDER_OFFLOAD": "1"},
        "disable_environment": {"DISABLE_LAYER_NV_OPTIMUS_1": ""},
    }
    tree.write(
        "usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
        _json({"file_format_version": "1.0.0", "layer": layer}),
    )
    tree.write(
        "usr/share/nvidia/nvoptix.bin",
        f"nvhook mock machine: OptiX data of driver {prof.driver.version}\n",
    )


def _ldconfig(root: Path) -> None:
    ldconfig = shutil.which("ldconfig", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if ldconfig is None:
        raise MockError(
            "ldconfig not found (package libc-bin): the mock machine needs its ld.so.cache"
        )
    try:
        proc = subprocess.run(
            [ldconfig, "-X", "-r", str(root)],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"},
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise MockError(f"cannot run {ldconfig} -r {root}: {e}") from e
    if proc.returncode != 0 or not (root / "etc/ld.so.cache").is_file():
        detail = proc.stderr.strip().splitlines()[-1:] or ["no cache written"]
        raise MockError(f"{ldconfig} -r {root} failed (exit {proc.returncode}): {detail[0]}")


# --- procfs -----------------------------------------------------------------------------------


def _proc_devices(prof: Profile) -> str:
    chars = list(_BASE_CHAR_DEVICES)
    if prof.driver.loaded:
        chars.append((_NVIDIA_MAJOR, prof.driver.frontend))
        chars += [(major, name) for name, major in prof.char_majors]
    if any(g.dri_card is not None for g in prof.gpus) or prof.dri_cards:
        chars.append((_DRM_MAJOR, "drm"))
    lines = ["Character devices:"]
    lines += [f"{major:3d} {name}" for major, name in sorted(chars, key=lambda mn: mn[0])]
    lines += ["", "Block devices:"]
    lines += [f"{major:3d} {name}" for major, name in _BLOCK_DEVICES]
    return "\n".join(lines) + "\n"


def _version_file(prof: Profile) -> str:
    d = prof.driver
    if d.kernel_module == "open":
        first = f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {d.version}  {d.build}"
    else:
        first = f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {d.version}  {d.build}"
    return f"{first}\nGCC version:  {d.gcc} \n"


def _params_file(prof: Profile) -> str:
    params: list[tuple[str, str]] = [
        ("ResmanDebugLevel", "4294967295"),
        ("RmLogonRC", "1"),
        ("ModifyDeviceFiles", "1"),
        ("DeviceFileUID", "0"),
        ("DeviceFileGID", "0"),
        ("DeviceFileMode", "438"),
        ("InitializeSystemMemoryAllocations", "1"),
        ("UsePageAttributeTable", "4294967295"),
        ("EnableMSI", "1"),
        ("EnablePCIeGen3", "0"),
        ("MemoryPoolSize", "0"),
        ("KMallocHeapMaxSize", "0"),
        ("VMallocHeapMaxSize", "0"),
        ("IgnoreMMIOCheck", "0"),
        ("TCEBypassMode", "0"),
        ("EnableStreamMemOPs", "0"),
        ("EnableUserNUMAManagement", "1"),
        ("NvLinkDisable", "0"),
        ("RmProfilingAdminOnly", "1"),
        ("PreserveVideoMemoryAllocations", "0"),
        ("EnableS0ixPowerManagement", "0"),
        ("S0ixPowerManagementVideoMemoryThreshold", "256"),
        ("DynamicPowerManagement", "3"),
        ("DynamicPowerManagementVideoMemoryThreshold", "200"),
        ("RegisterPCIDriver", "1"),
        ("EnablePCIERelaxedOrderingMode", "0"),
        ("EnableResizableBar", "0"),
        ("EnableGpuFirmware", "18"),
        ("EnableGpuFirmwareLogs", "2"),
        ("RmNvlinkBandwidthLinkCount", "0"),
        ("EnableDbgBreakpoint", "0"),
        ("OpenRmEnableUnsupportedGpus", "1"),
        ("DmaRemapPeerMmio", "1"),
    ]
    if prof.driver.branch >= 550:
        params += [("ImexChannelCount", "2048"), ("CreateImexChannel0", "0")]
    params += [
        ("RegistryDwords", '""'),
        ("RegistryDwordsPerDevice", '""'),
        ("RmMsg", '""'),
        ("GpuBlacklist", '""'),
        ("TemporaryFilePath", '""'),
        ("ExcludedGpus", '""'),
    ]
    return "".join(f"{k}: {v}\n" for k, v in params)


def _information_file(prof: Profile, index: int) -> str:
    g = prof.gpus[index]
    wide_dma = g.model.architecture in ("hopper", "blackwell")
    lines = [
        f"Model: \t\t {g.name}",
        f"IRQ:   \t\t {g.irq}",
        f"GPU UUID: \t {g.uuid}",
        f"Video BIOS: \t {g.model.vbios}",
        "Bus Type: \t PCIe",
        f"DMA Size: \t {52 if wide_dma else 47} bits",
        f"DMA Mask: \t {'0xfffffffffffff' if wide_dma else '0x7fffffffffff'}",
        f"Bus Location: \t {g.bus_id}",
        f"Device Minor: \t {g.minor}",
    ]
    if prof.driver.firmware:
        lines.append(f"GPU Firmware: \t {prof.driver.version}")
    lines.append("GPU Excluded:\t No")
    return "\n".join(lines) + "\n"


def _access_file(minor: int, mode: int = 0o444) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


@functools.cache
def _mig_minors() -> str:
    """Every possible MIG capability and its minor, for GPU minors 0-31 (the driver's table)."""
    lines = [f"config {_MIG_CONFIG_MINOR}", f"monitor {_MIG_MONITOR_MINOR}"]
    for gpu in range(32):
        for gi in range(15):
            lines.append(f"gpu{gpu}/gi{gi}/access {mig_caps_minor(gpu, gi)}")
            lines += [
                f"gpu{gpu}/gi{gi}/ci{ci}/access {mig_caps_minor(gpu, gi, ci)}" for ci in range(8)
            ]
    return "\n".join(lines) + "\n"


def _proc(tree: _Tree, prof: Profile) -> None:
    tree.write("proc/devices", _proc_devices(prof), 0o444)
    if not prof.driver.loaded:
        return
    nv = "proc/driver/nvidia"
    tree.write(f"{nv}/version", _version_file(prof), 0o444)
    tree.write(f"{nv}/params", _params_file(prof), 0o444)
    tree.mkdir(f"{nv}/gpus")
    for i, g in enumerate(prof.gpus):
        tree.write(f"{nv}/gpus/{g.bus_id}/information", _information_file(prof, i), 0o444)
    caps = f"{nv}/capabilities"
    tree.write(f"{caps}/mig/config", _access_file(_MIG_CONFIG_MINOR, 0o400), 0o444)
    tree.write(f"{caps}/mig/monitor", _access_file(_MIG_MONITOR_MINOR), 0o444)
    for g in prof.gpus:
        if not g.mig_enabled:
            continue
        tree.mkdir(f"{caps}/gpu{g.minor}/mig")
        for m in g.mig_devices:
            gi = f"{caps}/gpu{g.minor}/mig/gi{m.gi}"
            tree.write(f"{gi}/access", _access_file(m.gi_caps_minor), 0o444)
            tree.write(f"{gi}/ci{m.ci}/access", _access_file(m.ci_caps_minor), 0o444)
    tree.write("proc/driver/nvidia-caps/mig-minors", _mig_minors(), 0o444)


# --- /dev, /run ---------------------------------------------------------------------------------


def _dev(tree: _Tree, prof: Profile) -> None:
    tree.mkdir("dev")
    for card in prof.dri_cards:
        tree.node(f"dev/dri/card{card.card}", _DRM_MAJOR, card.card, 0o660)
        tree.symlink(f"dev/dri/by-path/pci-{card.bus_id}-card", f"../card{card.card}")
    if not prof.driver.loaded:
        return
    majors = dict(prof.char_majors)
    for g in prof.gpus:
        tree.node(f"dev/nvidia{g.minor}", _NVIDIA_MAJOR, g.minor)
    tree.node("dev/nvidiactl", _NVIDIA_MAJOR, _CTL_MINOR)
    tree.node("dev/nvidia-modeset", _NVIDIA_MAJOR, _MODESET_MINOR)
    tree.node("dev/nvidia-uvm", majors["nvidia-uvm"], 0)
    tree.node("dev/nvidia-uvm-tools", majors["nvidia-uvm"], 1)
    caps = majors["nvidia-caps"]
    tree.node(f"dev/nvidia-caps/nvidia-cap{_MIG_CONFIG_MINOR}", caps, _MIG_CONFIG_MINOR, 0o400)
    tree.node(f"dev/nvidia-caps/nvidia-cap{_MIG_MONITOR_MINOR}", caps, _MIG_MONITOR_MINOR, 0o444)
    for g in prof.gpus:
        for m in g.mig_devices:
            for minor in (m.gi_caps_minor, m.ci_caps_minor):
                if not tree.path(f"dev/nvidia-caps/nvidia-cap{minor}").exists():
                    tree.node(f"dev/nvidia-caps/nvidia-cap{minor}", caps, minor, 0o444)
    for ch in range(prof.imex_channels):
        major = majors["nvidia-caps-imex-channels"]
        tree.node(f"dev/nvidia-caps-imex-channels/channel{ch}", major, ch)
    if prof.nvswitches:
        tree.node("dev/nvidia-nvswitchctl", majors["nvidia-nvswitch"], _CTL_MINOR)
        for i in range(prof.nvswitches):
            tree.node(f"dev/nvidia-nvswitch{i}", majors["nvidia-nvswitch"], i)
    for g in prof.gpus:
        if g.dri_card is not None:
            tree.node(f"dev/dri/card{g.dri_card}", _DRM_MAJOR, g.dri_card, 0o660)
            tree.symlink(f"dev/dri/by-path/pci-{g.bus_id}-card", f"../card{g.dri_card}")
        if g.dri_render is not None:
            tree.node(f"dev/dri/renderD{g.dri_render}", _DRM_MAJOR, g.dri_render, 0o666)
            tree.symlink(f"dev/dri/by-path/pci-{g.bus_id}-render", f"../renderD{g.dri_render}")


def _run(tree: _Tree, prof: Profile) -> None:
    if not prof.driver.loaded:
        return
    tree.unix_socket("run/nvidia-persistenced/socket")
    if prof.nvswitches:
        tree.unix_socket("run/nvidia-fabricmanager/socket")


# --- what the fake NVML reads -------------------------------------------------------------------


def _nvml_bus_id(bus_id: str) -> str:
    domain, bus, device, _ = parse_bus_id(bus_id)
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def _nvml_data(prof: Profile) -> str:
    d = prof.driver
    lines = [
        f"# nvhook mock machine, profile {prof.name}: what the fake libnvidia-ml.so.1 answers",
        f"loaded\t{int(d.loaded)}",
        f"driver\t{d.version}",
        f"nvml\t{d.nvml_version}",
        f"cuda\t{d.cuda_version_int}",
    ]
    for g in prof.gpus:
        m = g.model
        domain, bus, device, _ = parse_bus_id(g.bus_id)
        cc_major, cc_minor = m.compute_capability.split(".")
        fields: list[object] = [
            "gpu",
            g.minor,
            g.uuid,
            f"{domain:04X}:{bus:02X}:{device:02X}.0",
            _nvml_bus_id(g.bus_id),
            domain,
            bus,
            device,
            f"0x{(m.pci_device_id << 16) | 0x10DE:08x}",
            f"0x{m.pci_subsystem_id:08x}",
            ARCHITECTURES[m.architecture],
            cc_major,
            cc_minor,
            m.memory_mib << 20,
            m.reserved_mib << 20,
            0,
            BRANDS[m.brand],
            int(m.mig_capable),
            int(g.mig_enabled),
            m.max_mig_devices,
            m.multiprocessors,
            g.name,
        ]
        lines.append("\t".join(str(f) for f in fields))
    for g in prof.gpus:
        for mig in g.mig_devices:
            p = mig.profile
            fields = [
                "mig",
                g.index,
                mig.uuid,
                mig.gi,
                mig.ci,
                p.memory_mib << 20,
                p.slices,
                p.slices,
                p.multiprocessors,
                p.copy_engines,
                p.decoders,
                p.encoders,
                p.jpegs,
                p.ofas,
                p.name,
            ]
            lines.append("\t".join(str(f) for f in fields))
    return "\n".join(lines) + "\n"


def _data(tree: _Tree, prof: Profile, nodes: str) -> None:
    tree.write(f"{DATA_DIR}/nvml.txt", _nvml_data(prof))
    summary = {"profile": prof.name, "nodes": nodes, "machine": _plain(prof)}
    tree.write(f"{DATA_DIR}/profile.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")


def _plain(value: object) -> object:
    """``value`` with every :class:`Frozen` in it turned into a dict of its fields (for JSON)."""
    if isinstance(value, Frozen):
        return {name: _plain(getattr(value, name)) for name in value.__frozen_fields__}
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value
