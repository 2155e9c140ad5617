"""Which driver files belong to which capability, and which drivers ship them, as data.

Library names are stems: on disk a library is ``<stem>.<driver version>``
(``libcuda.so.550.54.15``) with a SONAME symlink next to it, except the EGL
platform libraries, which carry their own version numbers. Paths here are
absolute paths inside a root (the driver root, or the host root for IPC).

The capabilities follow NVIDIA's own classification (libnvidia-container's
library tables, the NVIDIA Container Toolkit's CDI generator). Which driver
branches ship a library (``since``/``until``, driver major versions, both
inclusive) and which libraries have a 32-bit build (``compat32``) come from the
contents of NVIDIA's ``.run`` installers as distributions package them (the 64-bit
and ``32/`` file lists per branch); a file outside its range, or a 32-bit copy
NVIDIA never builds, is not reported missing (:func:`expected`), but is still
found when a host has it. ``nvhook/mock/driver.toml`` carries the same ranges for
the mock machine (``tests/nvhook/discover/test_catalog.py`` keeps them equal).
"""

from __future__ import annotations

from oci._frozen import Frozen

__all__ = [
    "BINARIES",
    "BINARY_PATHS",
    "COMPAT32_CAPABILITIES",
    "CONFIGS",
    "CONFIG_BASES",
    "CONFIG_LIBRARY",
    "DEFAULT_SEARCH_PATHS",
    "DEV_LINKS",
    "DISPLAYLESS_MODELS",
    "FABRICMANAGER_SOCKET",
    "FIRMWARE_DIR",
    "HOST_SPECIFIC",
    "IMEX_GENERATIONS",
    "LD_CACHE",
    "LIBRARIES",
    "MPS_PIPE_DIR",
    "PERSISTENCED_SOCKET",
    "VERSION_ANCHORS",
    "WINE_DIR",
    "XORG_MODULES",
    "XORG_MODULE_PATHS",
    "DevLink",
    "LibrarySpec",
    "XorgModule",
    "driver_branch",
    "expected",
    "expected_on",
]


class LibrarySpec(Frozen):
    """A driver library: its stem, the subdirectory of a library directory it lives in."""

    stem: str
    subdir: str = ""
    #: Versioned by its own numbers (EGL platform libraries), not the driver version.
    own_version: bool = False
    #: The first and last driver branch (major version) that ship it; None: no bound.
    since: int | None = None
    until: int | None = None
    #: NVIDIA builds a 32-bit copy (the installer's ``32/`` directory).
    compat32: bool = False


def _libs(*stems: str, compat32: bool = False) -> tuple[LibrarySpec, ...]:
    return tuple(LibrarySpec(s, compat32=compat32) for s in stems)


def _lib(
    stem: str,
    *,
    compat32: bool = False,
    since: int | None = None,
    until: int | None = None,
    subdir: str = "",
    own_version: bool = False,
) -> LibrarySpec:
    return LibrarySpec(stem, subdir, own_version, since, until, compat32)


#: Capability -> its libraries, with the driver branches that ship them and whether NVIDIA
#: builds a 32-bit copy. Bounds are set where a library came or went within the branches
#: containers meet (418 onwards); a library without bounds ships in all of them.
LIBRARIES: dict[str, tuple[LibrarySpec, ...]] = {
    "utility": (
        _lib("libnvidia-ml.so", compat32=True),
        _lib("libnvidia-cfg.so"),
        # not in the driver's installer: the libnvidia-nscq package that comes with the
        # fabric manager on NVSwitch systems (see HOST_SPECIFIC)
        _lib("libnvidia-nscq.so"),
    ),
    "compute": (
        _lib("libcuda.so", compat32=True),
        _lib("libcudadebugger.so", since=520),  # the CUDA debugger's backend, from CUDA 11.8
        _lib("libnvidia-opencl.so", compat32=True),
        _lib("libnvidia-gpucomp.so", compat32=True, since=530),
        _lib("libnvidia-ptxjitcompiler.so", compat32=True),
        _lib("libnvidia-fatbinaryloader.so", compat32=True, until=440),  # merged into libcuda
        _lib("libnvidia-allocator.so", compat32=True, since=470),
        _lib("libnvidia-compiler.so", compat32=True, until=525),  # OpenCL: gpucomp from 530
        _lib("libnvidia-pkcs11.so", since=525),
        _lib("libnvidia-pkcs11-openssl3.so", since=530),
        _lib("libnvidia-nvvm.so", compat32=True, since=495),
        _lib("libnvidia-tileiras.so", compat32=True, since=580),
    ),
    "video": (
        _lib("libvdpau_nvidia.so", compat32=True, subdir="vdpau"),
        _lib("libnvidia-encode.so", compat32=True),
        _lib("libnvidia-opticalflow.so", compat32=True, since=418),
        _lib("libnvcuvid.so", compat32=True),
    ),
    "graphics": (
        *_libs(
            "libnvidia-eglcore.so",
            "libnvidia-glcore.so",
            "libnvidia-tls.so",
            "libnvidia-glsi.so",
            "libnvidia-fbc.so",
            compat32=True,
        ),
        _lib("libnvidia-ifr.so", compat32=True, until=470),  # NvIFR, dropped after 470
        _lib("libnvidia-rtcore.so"),
        _lib("libnvoptix.so"),
        *_libs(
            "libGLX_nvidia.so",
            "libEGL_nvidia.so",
            "libGLESv2_nvidia.so",
            "libGLESv1_CM_nvidia.so",
            "libnvidia-glvkspirv.so",
            compat32=True,
        ),
        _lib("libnvidia-cbl.so"),
        _lib("libnvidia-egl-gbm.so", own_version=True, since=495),
        _lib("libnvidia-egl-wayland.so", own_version=True),
        _lib("libnvidia-egl-xcb.so", own_version=True, since=560),
        _lib("libnvidia-egl-xlib.so", own_version=True, since=560),
        _lib("libnvidia-vulkan-producer.so", since=470, until=554),  # gone from 555
    ),
    "ngx": (_lib("libnvidia-ngx.so", since=450),),
}

#: Capabilities whose libraries have 32-bit copies (the ``compat32`` capability).
COMPAT32_CAPABILITIES: tuple[str, ...] = ("utility", "compute", "video", "graphics")

#: Libraries whose file name tells the driver version when none is given, in order of trust.
VERSION_ANCHORS: tuple[str, ...] = (
    "libnvidia-ml.so",
    "libcuda.so",
    "libGLX_nvidia.so",
    "libnvidia-glcore.so",
    "libnvidia-encode.so",
    "libnvcuvid.so",
)

#: Capability -> its binaries. The IMEX daemon and its control tool exist on IMEX systems
#: only, ``nv-fabricmanager`` on NVSwitch systems only (see :data:`HOST_SPECIFIC`).
BINARIES: dict[str, tuple[str, ...]] = {
    "utility": (
        "nvidia-smi",
        "nvidia-debugdump",
        "nvidia-persistenced",
        "nv-fabricmanager",
        "nvidia-imex",
        "nvidia-imex-ctl",
    ),
    "compute": ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"),
}

#: Files installed only on hosts with some hardware: name or stem -> ``"nvswitch"`` (NVSwitch
#: systems: the fabric manager and its NSCQ library) or ``"imex"`` (multi-node NVLink systems
#: with IMEX channels). A host without that hardware does not lack them.
HOST_SPECIFIC: dict[str, str] = {
    "nv-fabricmanager": "nvswitch",
    "libnvidia-nscq.so": "nvswitch",
    "nvidia-imex": "imex",
    "nvidia-imex-ctl": "imex",
}


#: GPU generations whose multi-node NVLink systems run IMEX (NVIDIA's IMEX guide: "IMEX is
#: supported on NVIDIA Grace Hopper and Grace Blackwell multi-node NVLink systems"), by the
#: model names ``/proc/driver/nvidia/gpus/*/information`` gives. A host with IMEX channel
#: nodes expects the daemon whatever its GPUs; one without them expects it only with
#: these GPUs on NVSwitches.
IMEX_GENERATIONS: tuple[str, ...] = (
    "H100",
    "H200",
    "H800",
    "H20",
    "GH200",
    "B200",
    "B100",
    "GB200",
    "GB300",
    "B300",
)

#: Data center GPUs without a display engine or outputs (NVIDIA's product briefs list no
#: display connectors, and NVML's ``nvmlDeviceGetDisplayMode`` is unsupported on them): a
#: host of only these GPUs does not lack the ``display`` capability's Xorg files.
DISPLAYLESS_MODELS: tuple[str, ...] = (
    "A100", "A30", "A800", "H100", "H200", "H800", "H20", "GH200", "B100", "B200", "GB200",
    "B300", "GB300",
)  # fmt: skip

#: Configuration file -> the library stem it points the loader at (its ``library_path``, or
#: the data the library reads): NVIDIA's packages ship each with its library, so a file is
#: lacking only where its library was found (``libnvidia-gl``, ``libnvidia-egl-*``).
CONFIG_LIBRARY: dict[str, str] = {
    "OpenCL/vendors/nvidia.icd": "libnvidia-opencl.so",
    "glvnd/egl_vendor.d/10_nvidia.json": "libEGL_nvidia.so",
    "egl/egl_external_platform.d/10_nvidia_wayland.json": "libnvidia-egl-wayland.so",
    "egl/egl_external_platform.d/15_nvidia_gbm.json": "libnvidia-egl-gbm.so",
    "egl/egl_external_platform.d/20_nvidia_xcb.json": "libnvidia-egl-xcb.so",
    "egl/egl_external_platform.d/20_nvidia_xlib.json": "libnvidia-egl-xlib.so",
    "vulkan/icd.d/nvidia_icd.json": "libGLX_nvidia.so",
    "vulkan/implicit_layer.d/nvidia_layers.json": "libGLX_nvidia.so",
    "nvidia/nvoptix.bin": "libnvoptix.so",
}

#: The display capability's files other than configs (Xorg modules).
_DISPLAY_FILES = frozenset(
    {"nvidia_drv.so", "libglxserver_nvidia.so", "X11/xorg.conf.d/10-nvidia.conf"}
)


def _model_in(model: str, names: tuple[str, ...]) -> bool:
    words = model.replace("-", " ").upper().split()
    return any(
        w == n or (w.startswith(n) and not w[len(n)].isdigit()) for w in words for n in names
    )


def expected_on(
    name: str,
    *,
    models: tuple[str, ...],
    nvswitch: bool,
    imex_channels: bool,
    found_stems: frozenset[str],
) -> bool:
    """Whether a driver file ``name`` (a stem, binary or config path) that was not found is
    lacking on a host of GPU ``models`` (``/proc``'s names), with NVSwitches or not, with IMEX
    channel nodes or not, where the library stems ``found_stems`` were found. False: the
    host's hardware or its driver flavour does not call for it (:data:`HOST_SPECIFIC`,
    :data:`IMEX_GENERATIONS`, :data:`DISPLAYLESS_MODELS`, :data:`CONFIG_LIBRARY`)."""
    kind = HOST_SPECIFIC.get(name)
    if kind == "nvswitch":
        return nvswitch
    if kind == "imex":
        return imex_channels or (nvswitch and any(_model_in(m, IMEX_GENERATIONS) for m in models))
    if name in _DISPLAY_FILES:
        return not models or not all(_model_in(m, DISPLAYLESS_MODELS) for m in models)
    library = CONFIG_LIBRARY.get(name)
    if library is not None:
        return library in found_stems
    return True


def driver_branch(version: str | None) -> int | None:
    """The branch (major version) of a driver version such as ``550.54.15``; None if unknown."""
    if version is None:
        return None
    head = version.partition(".")[0]
    return int(head) if head.isdigit() else None


def expected(spec: LibrarySpec, version: str | None, *, bits: int = 64) -> bool:
    """Whether driver ``version`` ships ``spec`` (its 32-bit copy when ``bits`` is 32).

    An unknown version expects every library whose bitness NVIDIA builds.
    """
    if bits == 32 and not spec.compat32:
        return False
    branch = driver_branch(version)
    if branch is None:
        return True
    if spec.since is not None and branch < spec.since:
        return False
    return spec.until is None or branch <= spec.until


#: Capability -> configuration and data files, relative to each of :data:`CONFIG_BASES`
#: (the first base holding a file wins, as a loader reading the XDG dirs would pick it).
CONFIGS: dict[str, tuple[str, ...]] = {
    "compute": ("OpenCL/vendors/nvidia.icd",),
    "graphics": (
        "glvnd/egl_vendor.d/10_nvidia.json",
        "egl/egl_external_platform.d/10_nvidia_wayland.json",
        "egl/egl_external_platform.d/15_nvidia_gbm.json",
        "egl/egl_external_platform.d/20_nvidia_xcb.json",
        "egl/egl_external_platform.d/20_nvidia_xlib.json",
        "vulkan/icd.d/nvidia_icd.json",
        "vulkan/implicit_layer.d/nvidia_layers.json",
        "nvidia/nvoptix.bin",
    ),
    "display": ("X11/xorg.conf.d/10-nvidia.conf",),
}

#: Where configuration files are looked for: /etc, then the XDG data dirs.
CONFIG_BASES: tuple[str, ...] = ("/etc", "/usr/local/share", "/usr/share")


class XorgModule(Frozen):
    """An Xorg module of the ``display`` capability, in a subdirectory of a modules dir."""

    subdir: str
    name: str
    #: ``<name>.<driver version>`` on disk, with a ``<name>`` symlink (which Xorg loads).
    versioned: bool = False


XORG_MODULES: tuple[XorgModule, ...] = (
    XorgModule("drivers", "nvidia_drv.so"),
    XorgModule("extensions", "libglxserver_nvidia.so", versioned=True),
)

#: Xorg module directories, in the order distributions use them.
XORG_MODULE_PATHS: tuple[str, ...] = (
    "/usr/lib/xorg/modules",
    "/usr/lib64/xorg/modules",
    "/usr/lib/x86_64-linux-gnu/xorg/modules",
    "/usr/lib/aarch64-linux-gnu/xorg/modules",
)

#: NGX's Windows DLLs (for Proton/Wine), under a library directory.
WINE_DIR = "nvidia/wine"


class DevLink(Frozen):
    """A symlink NVIDIA's tools create next to a library that the driver does not ship.

    ``link`` is created in the library's directory and points to the library's
    SONAME (``to_soname``) or to its file name.
    """

    stem: str
    link: str
    to_soname: bool = True


#: ``libcuda.so`` (many programs dlopen it, or link ``-lcuda``), ``libnvidia-ml.so`` (likewise,
#: ``-lnvidia-ml``), ``libnvidia-opticalflow.so`` (the driver omits it; NVIDIA's toolkit adds
#: it), and ``libGLX_indirect.so.0``, which GLVND loads for indirect GLX.
DEV_LINKS: tuple[DevLink, ...] = (
    DevLink("libcuda.so", "libcuda.so"),
    DevLink("libnvidia-ml.so", "libnvidia-ml.so"),
    DevLink("libnvidia-opticalflow.so", "libnvidia-opticalflow.so"),
    DevLink("libGLX_nvidia.so", "libGLX_indirect.so.0", to_soname=False),
)

#: The driver root's loader cache.
LD_CACHE = "/etc/ld.so.cache"

#: Library directories searched after the cache (a file found here must match the
#: architecture by its ELF header, so 32- and 64-bit directories can share one list).
DEFAULT_SEARCH_PATHS: tuple[str, ...] = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/i386-linux-gnu",
    "/usr/lib64",
    "/usr/lib32",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib/i386-linux-gnu",
    "/lib64",
    "/lib32",
    "/usr/lib",
    "/lib",
)

#: Where binaries are looked for, in order.
BINARY_PATHS: tuple[str, ...] = ("/usr/bin", "/usr/sbin", "/bin", "/sbin")

#: GSP firmware: ``<FIRMWARE_DIR>/<driver version>/gsp_*.bin`` (optional).
FIRMWARE_DIR = "/lib/firmware/nvidia"

#: IPC endpoints on the host root, mounted only when present.
PERSISTENCED_SOCKET = "/run/nvidia-persistenced/socket"
FABRICMANAGER_SOCKET = "/run/nvidia-fabricmanager/socket"
MPS_PIPE_DIR = "/tmp/nvidia-mps"
