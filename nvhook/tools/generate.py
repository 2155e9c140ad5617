"""``nvhook cdi generate``: the host's GPUs as one CDI spec file (docs/architecture.md D1, D10).

:func:`generate_spec` discovers the host the way the shim's jit mode does and
returns a :class:`~oci.cdi.spec.Spec` of kind ``<vendor>/<class>``:

- **devices**, in this order: per GPU (NVML index order) its index (``0``) and its
  UUID (``GPU-…``), then each of its MIG devices by ``<gpu>:<mig>`` (``0:1``) and by
  MIG UUID (``MIG-…``); last ``all``. MIG UUIDs only NVML knows, so generate always
  resolves through NVML (:func:`nvhook.edits.nvml_view`), loaded from the driver root;
- **per-device edits** are the device's nodes and nothing else: ``/dev/nvidia<minor>``
  (the driver's minor, not the index), for a MIG device also its parent's node and
  the ``nvidia-caps`` nodes of its GPU and compute instance, and, when graphics or
  display is among the capabilities, the GPU's ``/dev/dri`` card and render nodes;
  ``all`` has the nodes of every GPU and of every MIG device (the ``nvidia-caps``
  access nodes of each GPU and compute instance), as jit's ``all`` gives them;
- **spec-level edits** (added once whichever devices are asked for): the control
  nodes, the driver files of the chosen capabilities, the ``create-symlinks`` and
  ``update-ldcache`` hooks, and ``NVIDIA_VISIBLE_DEVICES=void`` (a second injector then
  adds nothing): exactly what jit mode injects for ``NVIDIA_VISIBLE_DEVICES=none``
  (:func:`nvhook.edits.plan` computes them, so the two modes cannot drift apart);
- **every device node records the host node's access** (:func:`with_host_access`): its
  ``fileMode``, and for a node only its owner or group may open (``nvidia-cap1``, a DRM
  card of group ``video``) its ``uid`` and ``gid``, so the node in the container is
  opened by whom the host's is, whichever CDI consumer applies the spec. jit mode writes
  nodes without a ``stat`` of ``/dev``, so it leaves both to the runtime's defaults;

Decisions:

- **Capabilities: all by default.** A CDI consumer (podman ``--device``, containerd,
  a DRA driver) can only choose devices, not driver capabilities, so the spec carries
  every capability's files; a capability the host lacks adds nothing (its files are
  simply not found). ``capabilities`` narrows it (e.g. ``compute,utility`` for a
  smaller mount list); the graphics/display DRI nodes follow the same choice.
- **IMEX channels and NVSwitch nodes are left out**: in jit mode they come with
  ``NVIDIA_IMEX_CHANNELS`` / ``NVIDIA_NVSWITCH=enabled``, features of a container rather
  than devices of this kind.
- **Version.** The content needs ``cdiVersion`` 0.5.0 (device names starting with a
  digit; ``hostPath`` in device nodes) and nothing newer: no annotations (0.6.0),
  no ``additionalGids``/``intelRdt`` (0.7.0), no ``netDevices`` (1.1.0). So Debian's
  podman 4.3 and containerd 1.7.0-1.7.11 read it. :func:`oci.cdi.write.dump_spec`
  computes the version from the content, deduplicates and validates.
- **Format: JSON by default** (``/var/run/cdi/nvidia.json``). In mode cdi the shim reads
  the spec on every container start: this spec (8 GPUs, every capability) resolves in about
  2 ms from JSON (the stdlib parser) and 50 ms from YAML (PyYAML), see
  ``bench/discovery.py``. YAML stays available (``--format yaml`` or a ``.yaml`` output).
- Output: :func:`oci.cdi.write.write_spec` (temporary file, fsync, mode 0644, rename).
"""

from __future__ import annotations

from collections.abc import Collection

from nvhook.constants import ALL_CAPABILITIES, CDI_CLASS, CDI_OUTPUT, CDI_VENDOR
from nvhook.devices.gpus import HostGpus, Selected, resolve
from nvhook.devices.procfs import read_driver
from nvhook.discover.nodes import dri_nodes, gpu_nodes, with_host_access
from nvhook.edits import GRAPHICS_CAPABILITIES, Host, nvml_view, plan
from nvhook.errors import DriverError, RequestError
from nvhook.requests.ids import All, NoGpus, Requests
from nvhook.requests.policy import canonical_capabilities
from oci._frozen import Frozen
from oci.cdi.edits import Edits
from oci.cdi.spec import Device, Spec
from oci.errors import CdiNameError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.discover import DriverFiles

__all__ = [
    "DEFAULT_CLASS",
    "DEFAULT_OUTPUT",
    "DEFAULT_VENDOR",
    "Generated",
    "device_names",
    "generate_spec",
    "summary",
]

DEFAULT_VENDOR = CDI_VENDOR
DEFAULT_CLASS = CDI_CLASS
#: Where ``nvhook cdi generate`` writes by default (``.yaml`` with ``--format yaml``).
DEFAULT_OUTPUT = CDI_OUTPUT


class Generated(Frozen):
    """A generated spec and what it was made from (for messages and ``info``-like reports)."""

    spec: Spec
    gpus: HostGpus
    driver_files: DriverFiles
    capabilities: tuple[str, ...]


def generate_spec(
    host: Host,
    *,
    vendor: str = DEFAULT_VENDOR,
    class_name: str = DEFAULT_CLASS,
    capabilities: Collection[str] | None = None,
) -> Generated:
    """One CDI spec for every GPU and MIG device of ``host`` (see the module docstring).

    ``capabilities`` are names of :data:`nvhook.constants.ALL_CAPABILITIES` (or ``all``;
    None: all). Raises :class:`~nvhook.errors.DriverError` when the driver is not
    loaded, NVML fails or the host has no GPU, :class:`~oci.errors.CdiNameError` for an
    invalid vendor or class.
    """
    try:
        caps = canonical_capabilities(ALL_CAPABILITIES if capabilities is None else capabilities)
    except ValueError as e:
        raise RequestError(f"capabilities: {e}") from None
    kind = f"{vendor}/{class_name}"
    from oci.cdi.names import class_name_problem, vendor_name_problem

    problem = vendor_name_problem(vendor) or class_name_problem(class_name)
    if problem is not None:  # fail before any discovery
        raise CdiNameError(f"kind {kind!r}: {problem}")
    shared = plan(Requests(NoGpus(), capabilities=caps), host)
    assert shared.driver_files is not None  # NoGpus always discovers driver files
    gpus = nvml_view(host)
    if not gpus.gpus:
        raise DriverError(
            f"{host.root}: the driver shows no GPU (NVML device count 0); nothing to generate"
        )
    majors = read_driver(host.root).majors
    graphics = bool(GRAPHICS_CAPABILITIES.intersection(caps))

    def edits(selected: tuple[Selected, ...]) -> Edits:
        out = gpu_nodes(selected, gpus, dev_root=host.dev_root, majors=majors)
        if graphics:
            out += dri_nodes(selected, gpus, dev_root=host.dev_root)
        return with_host_access(out)

    devices: list[Device] = []
    for gpu in gpus.gpus:
        devices += _named(edits((gpu,)), gpu.name, gpu.uuid)
        for mig in gpu.migs:
            devices += _named(edits((mig,)), mig.name, mig.uuid)
    devices.append(Device("all", edits(resolve(All(), gpus))))
    spec_edits = with_host_access(shared.edits)
    spec = Spec.create(kind, devices, edits=spec_edits, source=f"{kind} on {host.root}")
    return Generated(spec, gpus, shared.driver_files, caps)


def _named(edits: Edits, *names: str | None) -> list[Device]:
    return [Device(name, edits) for name in names if name]


def device_names(gpus: HostGpus) -> list[str]:
    """The device names :func:`generate_spec` gives ``gpus``, in spec order."""
    names: list[str] = []
    for gpu in gpus.gpus:
        names += [gpu.name, gpu.uuid]
        for mig in gpu.migs:
            names += [mig.name] + ([mig.uuid] if mig.uuid else [])
    return [*names, "all"]


def summary(generated: Generated, *, output: str, version: str) -> str:
    """One line about what was written, for stderr."""
    gpus = generated.gpus.gpus
    migs = sum(len(g.migs) for g in gpus)
    missing = generated.driver_files.missing
    lacking = f"; not found: {sum(len(v) for v in missing.values())} file(s)" if missing else ""
    return (
        f"{output}: {len(generated.spec.devices)} devices of {generated.spec.kind} "
        f"({len(gpus)} GPU(s), {migs} MIG device(s), all), cdiVersion {version}, "
        f"capabilities {','.join(generated.capabilities)}{lacking}"
    )
