"""The driver's user space in a mock machine, at the Debian paths.

Every library of the driver's version from ``driver.toml`` (``usr/lib/x86_64-linux-gnu``,
32-bit copies in ``usr/lib/i386-linux-gnu``; ``usr/lib/aarch64-linux-gnu`` and no 32-bit
copies for a profile with ``arch = "aarch64"``: :func:`lib_dirs`) as an ELF shared object
with its real SONAME and SONAME link; ``libnvidia-ml.so.1`` is the fake NVML
(``csrc/nvml.c``, exporting every name of ``csrc/nvml_names.txt``: :func:`nvml_unit`),
``libcuda.so.1`` and
``usr/bin/nvidia-smi`` count the GPUs whose ``/dev`` nodes the caller can open
(``csrc/visible.c``, with the profile compiled in as ``mock_profile.h``), the other binaries
are one small static tool. Then the Wine NGX DLLs, GSP firmware, the OpenCL ICD file,
``etc/ld.so.conf``, the graphics vendor files and the Xorg module where the profile has them,
and an ``etc/ld.so.cache`` made by the real ``ldconfig -r``.

All of that is compiled with this machine's C compiler when the profile's architecture is
this machine's (or unset: :func:`compiled`). A profile of another architecture gets written
objects instead (:mod:`nvhook.mock.elfgen`: libraries with the right ELF machine, SONAME and
``DT_NEEDED``, binaries that exit 0, no NVML or CUDA behaviour) and an ``ld.so.cache``
written in Python with that architecture's flags (:mod:`nvhook.mock.ldcache`): what
discovery, ``ldconfig -p`` and a container of that architecture read, nothing that runs here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Literal

from nvhook.discover.arch import machine_arch
from nvhook.errors import MockError
from nvhook.mock import build, elfgen, ldcache
from nvhook.mock._tree import Tree
from nvhook.mock.model import Profile
from nvhook.mock.nvmldata import nvml_bus_id
from nvhook.mock.profiles import driver_files
from oci._frozen import Frozen

__all__ = [
    "LIB32_DIR",
    "LIB_DIR",
    "XORG_DIR",
    "InstalledLibrary",
    "compiled",
    "installed_libraries",
    "lib_dirs",
    "libcuda_unit",
    "nvml_unit",
    "run_ldconfig",
    "write_ld_cache",
    "write_user_space",
]

LIB_DIR = "usr/lib/x86_64-linux-gnu"
LIB32_DIR = "usr/lib/i386-linux-gnu"
XORG_DIR = "usr/lib/xorg/modules"
#: Architecture -> (the 64-bit library directory, the 32-bit one or None), Debian's multiarch.
_LIB_DIRS: dict[str, tuple[str, str | None]] = {
    "x86_64": (LIB_DIR, LIB32_DIR),
    "aarch64": ("usr/lib/aarch64-linux-gnu", None),  # NVIDIA ships no 32-bit ARM driver
}


def lib_dirs(profile: Profile) -> tuple[str, str | None]:
    """Where ``profile``'s libraries go: the 64-bit directory, the 32-bit one (None: none)."""
    return _LIB_DIRS[profile.arch or "x86_64"]


def compiled(profile: Profile) -> bool:
    """Whether ``profile``'s objects are compiled here (its architecture is this machine's,
    or unset) rather than written by :mod:`nvhook.mock.elfgen`."""
    return profile.arch is None or profile.arch == machine_arch()


class InstalledLibrary(Frozen):
    """One driver library file of a laid-out profile."""

    path: str  # relative to the root: usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    soname: str  # libcuda.so.1 (a symlink of that name sits next to it unless it is the file)
    stem: str  # libcuda.so
    capability: str  # utility, compute, video, graphics, ngx (driver.toml)
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
        lib64, lib32 = lib_dirs(profile)
        dirs: list[tuple[str, Literal[32, 64]]] = [(lib64, 64)]
        if lib.compat32 and lib32 is not None:
            dirs.append((lib32, 32))
        for base, bits in dirs:
            folder = f"{base}/{lib.subdir}" if lib.subdir else base
            out.append(InstalledLibrary(f"{folder}/{name}", soname, lib.stem, lib.capability, bits))
    return tuple(out)


_SHARED = ("-O2", "-g0", "-fPIC", "-shared", "-fvisibility=hidden")
#: Warnings for every mock source; an implicit declaration is an error, as GCC 14 and later
#: make it, so that a missing include fails on every compiler the tests run, not only there.
_WARN = ("-Wall", "-Werror=implicit-function-declaration")
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


def nvml_unit(output: str, soname: str) -> build.Unit:
    """The fake NVML: ``nvml.c`` and its generated ``nvml_unsupported.h`` (:mod:`.nvmlapi`)."""
    from nvhook.mock import nvmlapi  # here: `python -m nvhook.mock.nvmlapi` runs it as __main__

    source = build.csource("nvml.c")
    stubs = nvmlapi.unsupported_source(source.decode(), nvmlapi.listed_names().names)
    return build.Unit(
        output=output,
        sources=(("nvml.c", source), ("nvml_unsupported.h", stubs)),
        compile=("nvml.c",),
        args=(*_SHARED, *_WARN, "-Wextra", "-pthread", f"-Wl,-soname,{soname}", *_LIBC, "-ldl"),
    )


def libcuda_unit(
    prof: Profile,
    name: str,
    soname: str,
    *,
    cuda: str | None = None,
    extra: tuple[tuple[str, bytes], ...] = (),
) -> build.Unit:
    """The stub ``libcuda`` of ``prof`` (``cuda``: the CUDA version it reports, default the
    profile's; ``extra``: more C sources linked in, as ``(file name, content)``)."""
    return build.Unit(
        output=name,
        sources=(
            ("cuda.c", build.csource("cuda.c")),
            ("visible.c", build.csource("visible.c")),
            ("mock_profile.h", _profile_header(prof, cuda=cuda)),
            *extra,
        ),
        compile=("cuda.c", *(n for n, _ in extra)),
        args=(*_SHARED, *_WARN, f"-Wl,-soname,{soname}", *_LIBC, "-ldl"),
    )


def _profile_header(prof: Profile, *, cuda: str | None = None) -> bytes:
    def c(s: str) -> str:
        return json.dumps(s, ensure_ascii=False)

    cuda = cuda or prof.driver.cuda
    major, minor = cuda.split(".")
    lines = [
        f"/* mock_profile.h: profile {prof.name}, generated by nvhook.mock.layout */",
        f"#define MOCK_PROFILE_NAME {c(prof.name)}",
        f"#define MOCK_DRIVER_VERSION {c(prof.driver.version)}",
        f"#define MOCK_CUDA_VERSION {int(major) * 1000 + int(minor) * 10}",
        f"#define MOCK_CUDA_VERSION_STRING {c(cuda)}",
        f"#define MOCK_MODULE_LOADED {int(prof.driver.loaded)}",
        f"#define MOCK_NGPUS {len(prof.gpus)}u",
        "static const struct mock_gpu mock_gpus[] = {",
    ]
    migs: list[str] = []
    for g in prof.gpus:
        devices = g.mig_devices
        lines.append(
            f"    {{{g.minor}u, {c(g.name)}, {c(g.uuid)}, {c(nvml_bus_id(g.bus_id))}, "
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
    libraries = installed_libraries(prof)
    standin = b""
    if any(lib.bits == 32 for lib in libraries):
        standin = build.build([build.libc32_standin()])[0].read_bytes()
    for lib in libraries:
        if lib.bits == 32:
            units[lib.path] = _stub32(lib.soname, lib.name, standin)
        elif lib.stem == "libnvidia-ml.so":
            units[lib.path] = nvml_unit(lib.name, lib.soname)
        elif lib.stem == "libcuda.so":
            units[lib.path] = libcuda_unit(prof, lib.name, lib.soname)
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
        args=("-O2", "-g0", *_WARN, "-static", "-s"),
    )
    tool = build.Unit(
        output="nvidia-tool",
        sources=(("tool.c", build.csource("tool.c")),),
        compile=("tool.c",),
        args=("-O2", "-g0", *_WARN, "-static", "-s", f'-DMOCK_DRIVER_VERSION="{version}"'),
    )
    mps = build.Unit(
        output="nvidia-cuda-mps-control",
        sources=(("mps.c", build.csource("mps.c")),),
        compile=("mps.c",),
        args=("-O2", "-g0", *_WARN, "-static", "-s", f'-DMOCK_DRIVER_VERSION="{version}"'),
    )
    for binary in files.binaries:
        wanted = {None: True, "nvswitch": prof.nvswitches > 0, "imex": prof.imex_channels > 0}
        if binary.name == "nvidia-cuda-mps-control":
            units[f"usr/bin/{binary.name}"] = mps  # the MPS control daemon stand-in (mps.c)
        elif binary.name != "nvidia-smi" and wanted.get(binary.when, False):
            units[f"usr/bin/{binary.name}"] = tool
    return units


def _written(prof: Profile) -> dict[str, bytes]:
    """What :func:`_units` compiles, as :mod:`.elfgen` objects of ``prof``'s architecture."""
    arch = prof.arch or machine_arch()
    out = {lib.path: elfgen.shared_object(arch, lib.soname) for lib in installed_libraries(prof)}
    if prof.display:
        out[f"{XORG_DIR}/drivers/nvidia_drv.so"] = elfgen.shared_object(
            arch, None, name="nvidia_drv.so"
        )
        glx = f"libglxserver_nvidia.so.{prof.driver.version}"
        out[f"{XORG_DIR}/extensions/{glx}"] = elfgen.shared_object(arch, glx)
    tool = elfgen.executable(arch)
    for binary in driver_files().binaries:
        wanted = {None: True, "nvswitch": prof.nvswitches > 0, "imex": prof.imex_channels > 0}
        if wanted.get(binary.when, False):
            out[f"usr/bin/{binary.name}"] = tool
    return out


def write_user_space(tree: Tree, prof: Profile) -> None:
    """Libraries, binaries, firmware and configuration files (not yet the ld.so.cache)."""
    if compiled(prof):
        units = _units(prof)
        built = build.build(list(units.values()))
        for rel, source in zip(units, built, strict=True):
            tree.copy(rel, source, 0o755 if rel.startswith("usr/bin/") else 0o644)
    else:
        for rel, content in _written(prof).items():
            tree.write(rel, content, 0o755 if rel.startswith("usr/bin/") else 0o644)
    lib64, lib32 = lib_dirs(prof)
    version = prof.driver.version
    for lib in installed_libraries(prof):
        if lib.soname != lib.name:
            tree.symlink(lib.soname_path, lib.name)
    if prof.display:
        glx = f"libglxserver_nvidia.so.{version}"
        tree.symlink(f"{XORG_DIR}/extensions/libglxserver_nvidia.so", glx)
    tree.write(
        f"{lib64}/nvidia/wine/nvngx.dll",
        _pe_placeholder("nvngx.dll", version),
    )
    tree.write(
        f"{lib64}/nvidia/wine/_nvngx.dll",
        _pe_placeholder("_nvngx.dll", version),
    )
    for fw in prof.driver.firmware:
        tree.write(
            f"lib/firmware/nvidia/{version}/{fw}",
            f"nvhook mock machine: GSP firmware {fw} of driver {version}\n",
        )
    tree.write("etc/OpenCL/vendors/nvidia.icd", "libnvidia-opencl.so.1\n")
    tree.write("etc/ld.so.conf", "".join(f"/{d}\n" for d in (lib64, lib32) if d))
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


def _graphics_config(tree: Tree, prof: Profile) -> None:
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


def write_ld_cache(root: Path, prof: Profile) -> None:
    """``root/etc/ld.so.cache``: the real ``ldconfig`` over compiled objects, else written."""
    if compiled(prof):
        run_ldconfig(root)
    else:
        ldcache.write_ld_cache(root, prof.arch or machine_arch())


def run_ldconfig(root: Path) -> None:
    """Write ``root/etc/ld.so.cache`` with the host's ``ldconfig -X -r root``."""
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
