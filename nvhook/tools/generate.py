"""``nvhook cdi generate``: the host's GPUs as one CDI spec file (docs/architecture.md D1, D10).

:func:`generate_spec` discovers the host the way the shim's jit mode does and
returns a :class:`~oci.cdi.spec.Spec`. What it describes is its ``kind`` (:data:`KINDS`),
one CDI kind and spec file each; ``gpu`` (the default) is ``<vendor>/<class>``:

- **devices**, in this order: per GPU (index order) its names, then each of its MIG
  devices' names; last ``all`` (unless ``all_device=False``). The names are those of the
  chosen strategies (:data:`NAME_STRATEGIES`), always in this order: ``index`` (``0``,
  ``0:1`` for MIG device 1 of GPU 0), ``uuid`` (``GPU-…``, ``MIG-…``), ``type-index``
  (``gpu0``, ``mig0:1``); the default is ``index`` and ``uuid``, the names the shim's cdi
  mode asks for. MIG UUIDs only NVML knows, so generate resolves through NVML (loaded from
  the driver root) when a GPU has MIG devices and ``uuid`` names are asked for
  (:func:`nvhook.planner.nvml_mig_view`: the few calls that name them, without ``pynvml``), or
  through :func:`nvhook.planner.nvml_view` when ``host.resolver`` is ``nvml``; otherwise ``/proc``
  gives the same GPUs (indices, UUIDs, minors, MIG access nodes) without loading NVML;
- **per-device edits** are the device's nodes and nothing else: ``/dev/nvidia<minor>``
  (the driver's minor, not the index), for a MIG device also its parent's node and
  the ``nvidia-caps`` nodes of its GPU and compute instance, and, when graphics or
  display is among the capabilities, the GPU's ``/dev/dri`` card and render nodes;
  ``all`` has the nodes of every GPU and of every MIG device (the ``nvidia-caps``
  access nodes of each GPU and compute instance), as jit's ``all`` gives them;
- **spec-level edits** (added once whichever devices are asked for): the control
  nodes, the driver files of the chosen capabilities, the ``create-container`` hook
  (links, then the ld cache), and ``NVIDIA_VISIBLE_DEVICES=void`` (a second injector then
  adds nothing): exactly what jit mode injects for ``NVIDIA_VISIBLE_DEVICES=none``
  (:func:`nvhook.planner.plan` computes them, so the two modes cannot drift apart); with
  graphics or display the hook carries the DRI ``by-path`` links of every GPU as
  ``--device-link``s, and makes only those whose node the container has, so the links
  follow the devices without a second hook process per device (NVIDIA puts a
  ``create-symlinks`` hook in each device instead);
- **every device node records the host node's access** (:func:`with_host_access`): its
  ``fileMode``, and for a node only its owner or group may open (``nvidia-cap1``, a DRM
  card of group ``video``) its ``uid`` and ``gid``, so the node in the container is
  opened by whom the host's is, whichever CDI consumer applies the spec. jit mode writes
  nodes without a ``stat`` of ``/dev``, so it leaves both to the runtime's defaults;

Decisions:

- **Capabilities: every one but compat32 by default** (:data:`DEFAULT_CAPABILITIES`).
  A CDI consumer (podman ``--device``, containerd, a DRA driver) can only choose
  devices, not driver capabilities, so the spec carries the files of every 64-bit
  capability; a capability the host lacks adds nothing (its files are simply not
  found). The 32-bit libraries (``compat32``: 23 more bind mounts on a 580 driver, each
  paid by every container start) come only when asked for, ``--capabilities
  ...,compat32`` or ``all``, as NVIDIA's CDI specs, which leave them out, and its
  runtime's ``NVIDIA_DRIVER_CAPABILITIES=all``, which includes them, do.
  ``capabilities`` narrows it (e.g. ``compute,utility`` for a smaller mount list); the
  graphics/display DRI nodes follow the same choice.
- **IMEX channels, NVSwitches, GDS, MOFED and GDRCopy are kinds of their own**, not
  part of ``gpu``: in jit mode they come with ``NVIDIA_IMEX_CHANNELS``,
  ``NVIDIA_NVSWITCH``, ``NVIDIA_GDS``, ``NVIDIA_MOFED``, ``NVIDIA_GDRCOPY``, features of a
  container asked for besides its GPUs. ``imex-channel`` (``<vendor>/imex-channel``, as
  NVIDIA names it) has a device per channel the host has (``0``, ``1``, …, the
  ``nvidia-caps-imex-channels`` nodes under the major ``/proc/devices`` announces) and
  ``all``; ``nvswitch``, ``gds``, ``mofed`` and ``gdrcopy`` (``<vendor>/<kind>``) have the
  one device ``all`` with the nodes jit mode injects for the feature
  (:mod:`nvhook.discover.nodes`). These specs have no spec-level edits: a container takes
  them with a GPU, whose spec brings the driver. A kind whose nodes the host lacks is an
  error (nothing to generate).
- **``management``** (``management.<vendor>/gpu``, device ``all``, as NVIDIA names it) is
  for privileged monitoring containers (DCGM, nvidia-smi): the ``gpu`` spec's spec-level
  edits (control nodes, driver files, hooks) and one device with every other node the
  driver has: every GPU, every ``nvidia-caps`` node (MIG configuration and monitoring
  included), every IMEX channel and NVSwitch, and the DRI nodes with graphics/display.
- **A driver that restricts its nodes to a group** (``NVreg_DeviceFileGID=44
  NVreg_DeviceFileMode=0660``: ``root:video 0660``) gets spec-level ``additionalGids``
  with that group (:func:`nvhook.discover.nodes.with_node_groups`, as jit mode does): a
  container process of another user (``podman run --user 1000``) then holds the group of
  the nodes the spec creates with it. Rootless
  podman cannot use it: there the nodes are the host's, bind-mounted, and a group id inside
  the user namespace is not the host's ``video``; the user's own groups reach the container
  with ``--group-add keep-groups`` (crun), which ``nvhook doctor`` checks.
- **Version.** The content needs ``cdiVersion`` 0.5.0 (device names starting with a
  digit; ``hostPath`` in device nodes) and nothing newer: no annotations (0.6.0),
  no ``intelRdt`` (0.7.0), no ``netDevices`` (1.1.0), ``additionalGids`` (0.7.0) only for
  a group-restricted driver. So Debian's podman 4.3 and containerd 1.7.0-1.7.11 read it.
  :func:`oci.cdi.write.dump_spec` computes the version from the content, deduplicates and
  validates.
- **Format: JSON by default** (``/var/run/cdi/nvidia.json``). In mode cdi the shim reads
  the spec on container starts: this spec (8 GPUs, every capability) resolves in about
  2 ms from JSON (the stdlib parser) and many times that from YAML (PyYAML's import is a
  row of ``bench/figures.py``), see ``bench/discovery.py``; the registry keeps the decoded
  document by the file's identity (:mod:`oci.cdi.registry`), so YAML costs that only the
  first time after a change.
  YAML stays available (``--format yaml`` or a ``.yaml`` output).
- Output: :func:`oci.cdi.write.write_spec` (temporary file, fsync, mode 0644, rename).
"""

from __future__ import annotations

import os
from collections.abc import Collection

from nvhook.constants import ALL_CAPABILITIES, CDI_CLASS, CDI_OUTPUT, CDI_VENDOR
from nvhook.devices.gpus import Gpu, HostGpus, Selected, from_procfs, resolve
from nvhook.devices.miglayout import layout_edits
from nvhook.devices.procfs import read_driver
from nvhook.discover.nodes import (
    caps_nodes,
    dri_nodes,
    feature_nodes,
    gpu_nodes,
    imex_nodes,
    node_groups,
    nvswitch_nodes,
    with_host_access,
)
from nvhook.errors import DriverError, RequestError
from nvhook.planner import GRAPHICS_CAPABILITIES, Host, nvml_mig_view, nvml_view, plan
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
    "DEFAULT_CAPABILITIES",
    "DEFAULT_CLASS",
    "DEFAULT_NAME_STRATEGIES",
    "DEFAULT_OUTPUT",
    "DEFAULT_VENDOR",
    "KINDS",
    "NAME_STRATEGIES",
    "Generated",
    "default_output",
    "device_names",
    "generate_spec",
    "summary",
]

DEFAULT_VENDOR = CDI_VENDOR
DEFAULT_CLASS = CDI_CLASS
#: Where ``nvhook cdi generate`` writes by default (``.yaml`` with ``--format yaml``).
DEFAULT_OUTPUT = CDI_OUTPUT
#: What a spec can describe, one CDI kind each (module docstring).
KINDS = ("gpu", "imex-channel", "management", "nvswitch", "gds", "mofed", "gdrcopy")
#: How the ``gpu`` kind names GPUs and MIG devices, in the order the names are written.
NAME_STRATEGIES = ("index", "uuid", "type-index")
DEFAULT_NAME_STRATEGIES = ("index", "uuid")
_FEATURES = ("gds", "mofed", "gdrcopy")
#: The capabilities a spec mounts unless told otherwise: every one but ``compat32``.
DEFAULT_CAPABILITIES: tuple[str, ...] = tuple(c for c in ALL_CAPABILITIES if c != "compat32")


class Generated(Frozen):
    """A generated spec and what it was made from (for messages and ``info``-like reports).

    ``gpus`` is empty and ``driver_files`` None for the kinds without GPUs or driver files.
    """

    spec: Spec
    gpus: HostGpus
    driver_files: DriverFiles | None
    capabilities: tuple[str, ...]
    kind: str = "gpu"  # of KINDS


def default_output(kind: str = "gpu", fmt: str = "json") -> str:
    """The default file of a kind: ``/var/run/cdi/nvidia.json``, ``nvidia-<kind>.json``."""
    base, _ = os.path.splitext(DEFAULT_OUTPUT)
    return f"{base}.{fmt}" if kind == "gpu" else f"{base}-{kind}.{fmt}"


def generate_spec(
    host: Host,
    *,
    vendor: str = DEFAULT_VENDOR,
    class_name: str | None = None,
    capabilities: Collection[str] | None = None,
    kind: str = "gpu",
    name_strategies: Collection[str] | None = None,
    all_device: bool = True,
) -> Generated:
    """One CDI spec of ``kind`` for ``host`` (see the module docstring).

    ``capabilities`` are names of :data:`nvhook.constants.ALL_CAPABILITIES` (or ``all``,
    which includes ``compat32``; None: :data:`DEFAULT_CAPABILITIES`); they apply to the
    kinds with driver files (``gpu``, ``management``).
    ``class_name`` defaults to the kind's (``gpu`` for ``gpu`` and ``management``, else
    the kind); ``management`` prefixes the vendor with ``management.``.
    ``name_strategies`` (None: :data:`DEFAULT_NAME_STRATEGIES`) apply to ``gpu`` only;
    ``all_device=False`` leaves out ``all`` (``gpu``, ``imex-channel``).
    Raises :class:`~nvhook.errors.RequestError` for a choice that does not apply,
    :class:`~nvhook.errors.DriverError` when the driver is not loaded, NVML fails or the
    host has nothing of the kind, :class:`~oci.errors.CdiNameError` for an invalid vendor
    or class.
    """
    strategies = _strategies(kind, name_strategies)
    if not all_device and kind not in ("gpu", "imex-channel"):
        raise RequestError(f"kind {kind}: its only device is all (all_device=False)")
    if capabilities is not None and kind not in ("gpu", "management"):
        raise RequestError(f"kind {kind}: capabilities apply to kinds gpu and management only")
    try:
        caps = canonical_capabilities(
            DEFAULT_CAPABILITIES if capabilities is None else capabilities
        )
    except ValueError as e:
        raise RequestError(f"capabilities: {e}") from None
    cdi_kind = _cdi_kind(kind, vendor, class_name)
    if kind == "gpu":
        devices, edits, gpus, files = _gpu(host, caps, strategies, all_device)
    elif kind == "management":
        devices, edits, gpus, files = _management(host, caps)
    else:
        devices = _feature_devices(kind, host, all_device)
        edits, gpus, files, caps = Edits(), HostGpus((), "procfs"), None, ()
    edits = _with_device_groups(edits, devices)
    spec = Spec.create(cdi_kind, devices, edits=edits, source=f"{cdi_kind} on {host.root}")
    return Generated(spec, gpus, files, caps, kind)


def _with_device_groups(edits: Edits, devices: Collection[Device]) -> Edits:
    """The spec-level ``edits`` with the groups of every device's nodes too
    (:func:`nvhook.discover.nodes.node_groups`; the control nodes' come from the planner)."""
    gids = node_groups(n for d in devices for n in d.edits.device_nodes)
    if not gids - set(edits.additional_gids):
        return edits
    return edits._replace(additional_gids=tuple(sorted(gids.union(edits.additional_gids))))


def _strategies(kind: str, chosen: Collection[str] | None) -> tuple[str, ...]:
    if kind not in KINDS:
        raise RequestError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")
    if chosen is None:
        return DEFAULT_NAME_STRATEGIES
    if kind != "gpu":
        raise RequestError(f"kind {kind}: device name strategies apply to kind gpu only")
    unknown = [s for s in chosen if s not in NAME_STRATEGIES]
    if unknown:
        raise RequestError(
            f"unknown device name strategy {unknown[0]!r} (one of {', '.join(NAME_STRATEGIES)})"
        )
    if not chosen:
        raise RequestError("no device name strategy")
    return tuple(s for s in NAME_STRATEGIES if s in chosen)


def _cdi_kind(kind: str, vendor: str, class_name: str | None) -> str:
    """``<vendor>/<class>`` of ``kind``, checked before any discovery."""
    from oci.cdi.names import class_name_problem, vendor_name_problem

    if class_name is None:
        class_name = DEFAULT_CLASS if kind in ("gpu", "management") else kind
    if kind == "management":
        vendor = f"management.{vendor}"
    cdi_kind = f"{vendor}/{class_name}"
    problem = vendor_name_problem(vendor) or class_name_problem(class_name)
    if problem is not None:
        raise CdiNameError(f"kind {cdi_kind!r}: {problem}")
    return cdi_kind


def _shared(host: Host, caps: tuple[str, ...]) -> tuple[Edits, DriverFiles]:
    """The spec-level edits: what jit mode injects for ``NVIDIA_VISIBLE_DEVICES=none``."""
    shared = plan(Requests(NoGpus(), capabilities=caps), host)
    assert shared.driver_files is not None  # NoGpus always discovers driver files
    return with_host_access(shared.edits), shared.driver_files


def _gpu(
    host: Host, caps: tuple[str, ...], strategies: tuple[str, ...], all_device: bool
) -> tuple[list[Device], Edits, HostGpus, DriverFiles]:
    spec_edits, files = _shared(host, caps)
    driver = read_driver(host.root)
    gpus = from_procfs(driver)
    if host.resolver == "nvml":
        gpus = nvml_view(host)
    elif "uuid" in strategies and any(g.migs for g in gpus.gpus):
        gpus = nvml_mig_view(host, gpus)  # the same view without pynvml's import
    if not gpus.gpus:
        raise DriverError(
            f"{host.root}: the driver shows no GPU ({gpus.source}); nothing to generate"
        )
    graphics = bool(GRAPHICS_CAPABILITIES.intersection(caps))

    def edits(selected: tuple[Selected, ...]) -> Edits:
        out = gpu_nodes(selected, gpus, dev_root=host.dev_root, majors=driver.majors)
        if graphics:
            out += dri_nodes(selected, gpus, dev_root=host.dev_root)
        out += layout_edits(selected, gpus, root=host.root)  # docs/cdi.md: the MIG layout
        return with_host_access(out)

    devices: list[Device] = []
    for gpu in gpus.gpus:
        devices += _named(edits((gpu,)), _gpu_names(gpu, strategies))
        for mig in gpu.migs:
            names = {"index": mig.name, "uuid": mig.uuid, "type-index": f"mig{mig.name}"}
            devices += _named(edits((mig,)), [names[s] for s in strategies])
    if all_device:
        devices.append(Device("all", edits(resolve(All(), gpus))))
    return devices, spec_edits, gpus, files


def _gpu_names(gpu: Gpu, strategies: tuple[str, ...]) -> list[str | None]:
    names = {"index": gpu.name, "uuid": gpu.uuid, "type-index": f"gpu{gpu.name}"}
    return [names[s] for s in strategies]


def _named(edits: Edits, names: list[str | None]) -> list[Device]:
    return [Device(name, edits) for name in names if name]


def _management(
    host: Host, caps: tuple[str, ...]
) -> tuple[list[Device], Edits, HostGpus, DriverFiles]:
    """The ``gpu`` spec's spec-level edits, and ``all`` with every other node of the driver."""
    spec_edits, files = _shared(host, caps)
    driver = read_driver(host.root)
    gpus = from_procfs(driver)
    if not gpus.gpus:
        raise DriverError(f"{host.root}: the driver shows no GPU (procfs); nothing to generate")
    dev_root, majors = host.dev_root, driver.majors
    nodes = gpu_nodes(gpus.gpus, gpus, dev_root=dev_root, majors=majors)
    nodes += caps_nodes(dev_root=dev_root, majors=majors)
    if majors.get("nvidia-caps-imex-channels") is not None:
        nodes += imex_nodes(None, dev_root=dev_root, majors=majors)
    if majors.get("nvidia-nvswitch") is not None:
        nodes += nvswitch_nodes(dev_root=dev_root, majors=majors)
    if GRAPHICS_CAPABILITIES.intersection(caps):
        nodes += dri_nodes(gpus.gpus, gpus, dev_root=dev_root)
    return [Device("all", with_host_access(nodes))], spec_edits, gpus, files


def _feature_devices(kind: str, host: Host, all_device: bool) -> list[Device]:
    """``imex-channel``: a device per channel and ``all``; the others: ``all``."""
    dev_root = host.dev_root
    if kind == "imex-channel":
        majors = read_driver(host.root).majors
        every = with_host_access(imex_nodes(None, dev_root=dev_root, majors=majors))
        devices = [
            Device(str(node.minor), Edits(device_nodes=(node,))) for node in every.device_nodes
        ]
        nodes = every
    elif kind == "nvswitch":
        majors = read_driver(host.root).majors
        nodes = with_host_access(nvswitch_nodes(dev_root=dev_root, majors=majors))
        devices = []
    else:
        nodes = with_host_access(feature_nodes([kind], dev_root=dev_root))
        devices = []
    if not nodes.device_nodes:
        raise DriverError(f"{host.root}: the host has no {_WHAT[kind]}; nothing to generate")
    if all_device:
        devices.append(Device("all", nodes))
    return devices


_WHAT = {
    "imex-channel": "IMEX channel (/dev/nvidia-caps-imex-channels)",
    "nvswitch": "NVSwitch node (/dev/nvidia-nvswitch*)",
    "gds": "GPUDirect Storage node (/dev/nvidia-fs*)",
    "mofed": "MOFED/InfiniBand node (/dev/infiniband)",
    "gdrcopy": "GDRCopy node (/dev/gdrdrv)",
}
assert set(_WHAT) | {"gpu", "management"} == set(KINDS)


def device_names(
    gpus: HostGpus, strategies: Collection[str] = DEFAULT_NAME_STRATEGIES
) -> list[str]:
    """The device names :func:`generate_spec` gives ``gpus`` in a ``gpu`` spec, in order."""
    chosen = tuple(s for s in NAME_STRATEGIES if s in strategies)
    names: list[str] = []
    for gpu in gpus.gpus:
        names += [n for n in _gpu_names(gpu, chosen) if n]
        for mig in gpu.migs:
            by = {"index": mig.name, "uuid": mig.uuid, "type-index": f"mig{mig.name}"}
            names += [n for n in (by[s] for s in chosen) if n]
    return [*names, "all"]


def summary(generated: Generated, *, output: str, version: str) -> str:
    """One line about what was written, for stderr."""
    spec = generated.spec
    gpus = generated.gpus.gpus
    what = ""
    if generated.kind == "gpu":
        migs = sum(len(g.migs) for g in gpus)
        has_all = ", all" if spec.device("all") is not None else ""
        what = f" ({len(gpus)} GPU(s), {migs} MIG device(s){has_all})"
    files = generated.driver_files
    lacking = ""
    if files is not None and files.missing:
        lacking = f"; not found: {sum(len(v) for v in files.missing.values())} file(s)"
    caps = f", capabilities {','.join(generated.capabilities)}" if generated.capabilities else ""
    return (
        f"{output}: {len(spec.devices)} devices of {spec.kind}{what}, "
        f"cdiVersion {version}{caps}{lacking}"
    )
