"""Names the outside world gives us: env variables, annotation prefixes, mount roots, capabilities.

One module for every name a container image, an orchestrator or NVIDIA's own
tooling puts into a ``config.json`` (docs/architecture.md section 5: constants in one
module). Values only, no imports: the shim loads this on every container start
(docs/architecture.md D5).
"""

from __future__ import annotations

__all__ = [
    "ALL_CAPABILITIES",
    "CAPABILITY_ALL",
    "CAP_SYS_ADMIN",
    "CDI_CLASS",
    "CDI_OUTPUT",
    "CDI_VENDOR",
    "DEFAULT_ANNOTATION_PREFIXES",
    "DEFAULT_CAPABILITIES",
    "DEVICE_ALL",
    "DEVICE_LIST_MOUNT_ROOT",
    "DEVICE_LIST_MOUNT_SOURCE",
    "DEVICE_NONE",
    "DEVICE_VOID",
    "ENV_CUDA_COMPAT_DIR",
    "ENV_CUDA_VERSION",
    "ENV_DISABLE_CUDA_COMPAT",
    "ENV_DISABLE_REQUIRE",
    "ENV_DRIVER_CAPABILITIES",
    "ENV_FEATURES",
    "ENV_GDRCOPY",
    "ENV_GDS",
    "ENV_IMEX_CHANNELS",
    "ENV_MOFED",
    "ENV_NVSWITCH",
    "ENV_REQUIRE_CUDA",
    "ENV_REQUIRE_IGNORED",
    "ENV_REQUIRE_PREFIX",
    "ENV_VENDOR_DEVICES",
    "ENV_VISIBLE_DEVICES",
    "FALLBACK_RUNTIMES",
    "FEATURE_DISABLED",
    "FEATURE_ENABLED",
    "HOOK_PROGRAM",
    "MAX_ENV_VALUE_CHARS",
    "REQUIREMENT_KEYS",
    "VERSION",
]

# --- process.env -------------------------------------------------------------------------

#: Which GPUs: ``all``, ``none``, ``void``, indices, UUIDs, MIG ids, CDI names.
ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
#: Other vendors' request variables (:mod:`nvhook.requests.vendors`, their grammars).
ENV_VENDOR_DEVICES = ("AMD_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES")
#: Which parts of the driver: a comma list of :data:`ALL_CAPABILITIES` or ``all``.
ENV_DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
#: Every variable with this prefix is a requirement (``cuda>=12.4 brand=tesla,driver>=470``).
ENV_REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
#: The requirement CUDA images set; its absence next to ``CUDA_VERSION`` marks a legacy image.
ENV_REQUIRE_CUDA = "NVIDIA_REQUIRE_CUDA"
#: ``NVIDIA_REQUIRE_*`` variables that are not requirement expressions (Jetson images set
#: ``NVIDIA_REQUIRE_JETPACK``; NVIDIA's toolkit skips it too).
ENV_REQUIRE_IGNORED: tuple[str, ...] = ("NVIDIA_REQUIRE_JETPACK",)
#: A boolean (Go ``strconv.ParseBool`` spelling) that turns the requirement check off.
ENV_DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"
#: A boolean (``ParseBool`` spelling): true keeps the host's ``libcuda`` even when the image
#: ships a newer one for CUDA forward compatibility (:mod:`nvhook.hook.cuda_compat`).
ENV_DISABLE_CUDA_COMPAT = "NVIDIA_DISABLE_CUDA_COMPAT"
#: Where the image keeps its CUDA forward compatibility libraries (default
#: ``/usr/local/cuda/compat``), a path inside the container.
ENV_CUDA_COMPAT_DIR = "NVIDIA_CUDA_COMPAT_DIR"
#: Set by CUDA images before NVIDIA_REQUIRE_CUDA existed (legacy images).
ENV_CUDA_VERSION = "CUDA_VERSION"
#: IMEX channels: ``all`` or a comma list of channel numbers.
ENV_IMEX_CHANNELS = "NVIDIA_IMEX_CHANNELS"
#: Optional features, each ``enabled`` (or ``disabled``/empty/unset).
ENV_GDS = "NVIDIA_GDS"
ENV_MOFED = "NVIDIA_MOFED"
ENV_GDRCOPY = "NVIDIA_GDRCOPY"
ENV_NVSWITCH = "NVIDIA_NVSWITCH"
#: Feature field name -> env variable, in a fixed order.
ENV_FEATURES: tuple[tuple[str, str], ...] = (
    ("gds", ENV_GDS),
    ("mofed", ENV_MOFED),
    ("gdrcopy", ENV_GDRCOPY),
    ("nvswitch", ENV_NVSWITCH),
)
FEATURE_ENABLED = "enabled"
FEATURE_DISABLED = "disabled"

#: Longest value of one of our variables (or annotations) that we parse; a real device list
#: of 64 UUIDs is under 3,000 characters, so anything this long is a mistake or an attack.
MAX_ENV_VALUE_CHARS = 65536

# --- special device values -----------------------------------------------------------------

DEVICE_ALL = "all"  # every GPU
DEVICE_NONE = "none"  # driver files and control nodes, no GPU
DEVICE_VOID = "void"  # nothing at all (the same as unset or empty)

# --- driver capabilities -----------------------------------------------------------------

#: Every capability, in the canonical order used for output.
ALL_CAPABILITIES: tuple[str, ...] = (
    "compute",
    "utility",
    "video",
    "graphics",
    "display",
    "ngx",
    "compat32",
)
CAPABILITY_ALL = "all"
#: What a container gets when NVIDIA_DRIVER_CAPABILITIES is unset or empty.
DEFAULT_CAPABILITIES: tuple[str, ...] = ("compute", "utility")

# --- requirements ------------------------------------------------------------------------

#: Keys a requirement condition may test, as libnvidia-container's DSL knows them.
REQUIREMENT_KEYS: tuple[str, ...] = ("cuda", "driver", "arch", "brand")

# --- annotations and mounts ----------------------------------------------------------------

#: Annotation keys under these prefixes carry comma lists of qualified CDI device names.
DEFAULT_ANNOTATION_PREFIXES: tuple[str, ...] = ("cdi.k8s.io/",)
#: Device lists as volume mounts: ``<root>/<id>`` and ``<root>/cdi/<vendor>/<class>/<name>``.
DEVICE_LIST_MOUNT_ROOT = "/var/run/nvidia-container-devices"
#: Such a mount counts only when its source is this (what the device plugin mounts).
DEVICE_LIST_MOUNT_SOURCE = "/dev/null"

# --- CDI -------------------------------------------------------------------------------------

#: The vendor and class of the devices ``nvhook cdi generate`` writes (``nvidia.com/gpu=0``).
CDI_VENDOR = "nvidia.com"
CDI_CLASS = "gpu"
#: Where ``nvhook cdi generate`` writes by default (``.yaml`` with ``--format yaml``).
CDI_OUTPUT = "/var/run/cdi/nvidia.json"

# --- process.capabilities ------------------------------------------------------------------

#: A container is privileged when this is in ``process.capabilities.bounding``.
CAP_SYS_ADMIN = "CAP_SYS_ADMIN"

#: nvhook's version, as in pyproject.toml (a test keeps them equal): printed by
#: ``nvhook-runtime --version`` without importing importlib.metadata on every call.
VERSION = "0.1.0"
#: Where runc lives on Debian/Ubuntu and most distributions, tried after the runtimes of
#: ``runtime.runtimes`` (the shim's exec, and the native front-end's data file).
FALLBACK_RUNTIMES = ("/usr/sbin/runc", "/usr/bin/runc")
#: The hook program's name: ``args[0]`` of every hook nvhook injects, and its launcher's.
HOOK_PROGRAM = "nvhook-hook"
