"""Which driver files belong to which capability, as data (DRIVER-FILES.md is the source).

Library names are stems: on disk a library is ``<stem>.<driver version>``
(``libcuda.so.550.54.15``) with a SONAME symlink next to it, except the EGL
platform libraries, which carry their own version numbers. Paths here are
absolute paths inside a root (the driver root, or the host root for IPC).
"""

from __future__ import annotations

from oci._frozen import Record as NamedTuple

__all__ = [
    "BINARIES",
    "BINARY_PATHS",
    "COMPAT32_CAPABILITIES",
    "CONFIGS",
    "CONFIG_BASES",
    "DEFAULT_SEARCH_PATHS",
    "DEV_LINKS",
    "FABRICMANAGER_SOCKET",
    "FIRMWARE_DIR",
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
]


class LibrarySpec(NamedTuple):
    """A driver library: its stem, the subdirectory of a library directory it lives in."""

    stem: str
    subdir: str = ""
    #: Versioned by its own numbers (EGL platform libraries), not the driver version.
    own_version: bool = False


def _libs(*stems: str) -> tuple[LibrarySpec, ...]:
    return tuple(LibrarySpec(s) for s in stems)


#: Capability -> its libraries, in DRIVER-FILES.md's order.
LIBRARIES: dict[str, tuple[LibrarySpec, ...]] = {
    "utility": _libs("libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so"),
    "compute": _libs(
        "libcuda.so",
        "libcudadebugger.so",
        "libnvidia-opencl.so",
        "libnvidia-gpucomp.so",
        "libnvidia-ptxjitcompiler.so",
        "libnvidia-fatbinaryloader.so",
        "libnvidia-allocator.so",
        "libnvidia-compiler.so",
        "libnvidia-pkcs11.so",
        "libnvidia-pkcs11-openssl3.so",
        "libnvidia-nvvm.so",
        "libnvidia-tileiras.so",
    ),
    "video": (
        LibrarySpec("libvdpau_nvidia.so", subdir="vdpau"),
        *_libs("libnvidia-encode.so", "libnvidia-opticalflow.so", "libnvcuvid.so"),
    ),
    "graphics": (
        *_libs(
            "libnvidia-eglcore.so",
            "libnvidia-glcore.so",
            "libnvidia-tls.so",
            "libnvidia-glsi.so",
            "libnvidia-fbc.so",
            "libnvidia-ifr.so",
            "libnvidia-rtcore.so",
            "libnvoptix.so",
            "libGLX_nvidia.so",
            "libEGL_nvidia.so",
            "libGLESv2_nvidia.so",
            "libGLESv1_CM_nvidia.so",
            "libnvidia-glvkspirv.so",
            "libnvidia-cbl.so",
        ),
        LibrarySpec("libnvidia-egl-gbm.so", own_version=True),
        LibrarySpec("libnvidia-egl-wayland.so", own_version=True),
        LibrarySpec("libnvidia-egl-xcb.so", own_version=True),
        LibrarySpec("libnvidia-egl-xlib.so", own_version=True),
        LibrarySpec("libnvidia-vulkan-producer.so"),
    ),
    "ngx": _libs("libnvidia-ngx.so"),
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
#: only, ``nv-fabricmanager`` on NVSwitch systems only; elsewhere they are reported missing.
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


class XorgModule(NamedTuple):
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


class DevLink(NamedTuple):
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
