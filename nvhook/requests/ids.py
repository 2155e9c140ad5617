"""The values of a container's request: device ids, the device request, provenance, Requests.

:mod:`nvhook.requests.parse` builds them from a ``config.json``; the device resolvers
(:mod:`nvhook.devices.gpus`), the edits (:mod:`nvhook.planner`) and ``nvhook explain`` read
them.

- A device id is one item of a device list: :class:`Index` (``0``), :class:`Uuid`
  (``GPU-…``), :class:`MigIndex` (``0:1``), :class:`MigUuid` (``MIG-…``),
  :class:`LegacyMig` (``MIG-GPU-<uuid>/<gi>/<ci>``) or :class:`CdiName`
  (``vendor/class=name``); ``str()`` gives it back as written.
- A device request is a sum type: :class:`All`, :class:`NoGpus` (``none``: driver
  files and control nodes only), :class:`Void` (nothing) or :class:`Devices`.
- :class:`Source` and :class:`Ignored` say where each request was found (a
  :class:`SourceKind`) and, for the latter, why it does not count.
- The value types derive from :class:`oci._frozen.Frozen` rather than ``@dataclass``:
  same semantics (frozen, slots, eq/hash/repr by field), without importing
  ``dataclasses``/``inspect`` on every container start (docs/architecture.md D5).
"""

from __future__ import annotations

from nvhook.constants import DEVICE_ALL, DEVICE_NONE, DEVICE_VOID
from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from dataclasses import KW_ONLY

    from nvhook.requests.requirements import Requirement

__all__ = [
    "All",
    "CdiName",
    "DeviceId",
    "DeviceRequest",
    "Devices",
    "Features",
    "Ignored",
    "Index",
    "LegacyMig",
    "MigIndex",
    "MigUuid",
    "NoGpus",
    "Requests",
    "Source",
    "SourceKind",
    "Uuid",
    "VendorName",
    "Void",
]

# --- device ids --------------------------------------------------------------------------


class _Text(Frozen):
    """A device id that is its text (a UUID, a MIG UUID, a CDI name); subclasses tell which."""

    value: str

    def __str__(self) -> str:
        return self.value


class Index(Frozen):
    """A GPU by NVML index (``0``)."""

    n: int

    def __str__(self) -> str:
        return str(self.n)


class Uuid(_Text):
    """A GPU by UUID (``GPU-8c6ae9a5-…``), as written."""


class MigIndex(Frozen):
    """A MIG device by ``<gpu index>:<mig index>`` (``0:1``)."""

    gpu: int
    mig: int

    def __str__(self) -> str:
        return f"{self.gpu}:{self.mig}"


class MigUuid(_Text):
    """A MIG device by UUID (``MIG-<uuid>``, drivers R470+), as written."""


class LegacyMig(Frozen):
    """A MIG device in the pre-R470 form ``MIG-GPU-<uuid>/<gi>/<ci>``."""

    gpu_uuid: str  # "GPU-…"
    gi: int
    ci: int

    def __str__(self) -> str:
        return f"MIG-{self.gpu_uuid}/{self.gi}/{self.ci}"


class CdiName(_Text):
    """A fully qualified CDI device name ``vendor/class=name``."""


class VendorName(_Text):
    """Another vendor's device asked for by its request variable (``AMD_VISIBLE_DEVICES``),
    as a qualified name of its CDI kind (``amd.com/gpu=0``): served from the vendor's
    discovery in jit mode (:mod:`nvhook.vendors.registry`), from spec files in cdi mode."""


DeviceId = Index | Uuid | MigIndex | MigUuid | LegacyMig | CdiName | VendorName

# --- device requests (a sum type) -----------------------------------------------------------


class All(Frozen):
    """Every GPU (``all``)."""

    def __str__(self) -> str:
        return DEVICE_ALL


class NoGpus(Frozen):
    """Driver files and control nodes, no GPU (``none``)."""

    def __str__(self) -> str:
        return DEVICE_NONE


class Void(Frozen):
    """Nothing at all (``void``, empty or unset)."""

    def __str__(self) -> str:
        return DEVICE_VOID


class Devices(Frozen):
    """These devices, in request order, without duplicates (never empty)."""

    ids: tuple[DeviceId, ...]

    def __str__(self) -> str:
        return ",".join(str(i) for i in self.ids)


DeviceRequest = All | NoGpus | Void | Devices

# --- provenance ----------------------------------------------------------------------------


class SourceKind:
    """Where a request was found (plain strings, not ``enum``: a ``bench/figures.py`` row)."""

    ENV = "env"  # a process.env variable
    ANNOTATION = "annotation"  # an OCI annotation
    MOUNT = "mount"  # a device-list volume mount
    LEGACY_IMAGE = "legacy-image"  # CUDA_VERSION without NVIDIA_REQUIRE_CUDA: all GPUs
    POLICY = "policy"  # policy.privileged_gets_all


class Source(Frozen):
    """Where (part of) the device request came from, and what it asked for.

    ``name`` is the env variable, annotation key, mount destination or policy switch;
    ``value`` the raw value (cut to 200 characters; ``""`` for mounts).
    """

    kind: str  # a SourceKind value
    name: str
    value: str
    devices: DeviceRequest


class Ignored(Frozen):
    """A request that was found but does not count, and why (same fields as :class:`Source`)."""

    kind: str  # a SourceKind value
    name: str
    value: str
    reason: str


class Features(Frozen, kw_only=True):
    """Optional features, each from its ``NVIDIA_*=enabled`` variable."""

    gds: bool = False
    mofed: bool = False
    gdrcopy: bool = False
    nvswitch: bool = False


class Requests(Frozen):
    """Everything a container asks for, parsed and filtered by policy (requirements unchecked).

    - ``devices``: the device request (:data:`DeviceRequest`);
    - ``sources``: where it came from, one entry per variable, annotation key or mount;
    - ``ignored``: requests found but not honoured, with the reason;
    - ``capabilities``: driver capabilities, canonical order (empty when nothing is wanted);
    - ``requirements``: parsed ``NVIDIA_REQUIRE_*`` (see :func:`check_requirements`);
    - ``disable_require``: ``NVIDIA_DISABLE_REQUIRE`` is true;
    - ``imex_channels``: :class:`All` or channel numbers;
    - ``features``: GDS, MOFED, GDRCopy, NVSwitch;
    - ``warnings``: one-line messages for the log and ``explain``;
    - ``is_privileged``: ``CAP_SYS_ADMIN`` in ``process.capabilities.bounding``.
    """

    devices: DeviceRequest
    _: KW_ONLY
    sources: tuple[Source, ...] = ()
    ignored: tuple[Ignored, ...] = ()
    capabilities: tuple[str, ...] = ()
    requirements: tuple[Requirement, ...] = ()
    disable_require: bool = False
    imex_channels: All | tuple[int, ...] = ()
    features: Features = Features()
    warnings: tuple[str, ...] = ()
    is_privileged: bool = False

    @property
    def wants_anything(self) -> bool:
        """False: the shim execs the runtime and leaves config.json untouched."""
        return not isinstance(self.devices, Void) or self.imex_channels != ()
