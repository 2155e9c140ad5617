"""Just-in-time edits: a container's requests resolved against the host itself, no spec file.

The steps, each a module of its own (docs/architecture.md, sections 1-2):

1. the driver's view of the GPUs from ``/proc`` (:mod:`nvhook.devices.procfs`), or
   NVML when a request needs it (MIG UUIDs) or ``host.resolver = "nvml"``;
2. the request resolved to GPUs and MIG devices (:mod:`nvhook.devices.gpus`);
3. ``NVIDIA_REQUIRE_*`` checked against the host (only when the image carries
   requirements; the CUDA version, brand and architecture come from NVML);
4. edits: device nodes (:mod:`nvhook.discover.nodes`), the driver files of the
   requested capabilities (:mod:`nvhook.discover`), and the createContainer
   hooks that make the libraries usable (ld cache, symlinks);
5. ``NVIDIA_VISIBLE_DEVICES=void`` (:data:`INJECTED_ENV`) in the container's env: the
   request is served, so a second injector (a legacy ``nvidia-container-runtime-hook``, a
   nested runtime, this shim meeting the bundle again) adds nothing, as NVIDIA's runtime
   does after a CDI injection. ``nvhook cdi generate`` takes it with the spec-level edits.

:func:`plan` returns everything it found (for ``nvhook explain``) besides the edits.
"""

from __future__ import annotations

import os

from nvhook.constants import DEVICE_VOID, ENV_VISIBLE_DEVICES
from nvhook.devices.gpus import Gpu, HostGpus, Selected, from_nvml, from_procfs, needs_nvml, resolve
from nvhook.devices.miglayout import layout_edits
from nvhook.devices.procfs import read_driver, read_mig_minors
from nvhook.discover import discover_driver_files
from nvhook.discover.hooks import create_container_hook
from nvhook.discover.nodes import (
    control_nodes,
    dri_links,
    dri_nodes,
    feature_nodes,
    gpu_nodes,
    imex_nodes,
    nvswitch_nodes,
    with_host_access,
    with_node_groups,
)
from nvhook.errors import DriverError
from nvhook.requests.ids import All, Requests, Void
from oci._frozen import Frozen
from oci.cdi.edits import Edits
from oci.errors import Error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from nvhook.devices.procfs import ProcDriver
    from nvhook.discover import DriverFiles
    from nvhook.hook.cuda_compat import Compat
    from nvhook.requests.requirements import HostFacts
    from nvhook.settings import Settings

__all__ = ["INJECTED_ENV", "Host", "Plan", "cuda_compat_of", "plan"]

GRAPHICS_CAPABILITIES = frozenset({"graphics", "display"})
#: What the container's env says once its request is served (and what a generated spec sets).
INJECTED_ENV = f"{ENV_VISIBLE_DEVICES}={DEVICE_VOID}"


class Host(Frozen, kw_only=True):
    """Where the host's parts are: ``root`` (``/proc``, IPC sockets), the driver, ``/dev``.

    ``driver_root`` and ``dev_root`` default to ``root``, ``hook_path`` to the installed hook.
    """

    root: str = "/"
    driver_root: str = ""
    dev_root: str = ""
    resolver: str = "procfs"  # "procfs" | "nvml"
    hook_path: str = ""
    #: ``hook.cuda_compat``: the hook gets ``--cuda-compat`` (CUDA forward compatibility).
    cuda_compat: bool = True

    def __post_init__(self) -> None:
        from nvhook.discover.hooks import default_hook_path

        self._set(
            driver_root=self.driver_root or self.root,
            dev_root=self.dev_root or self.root,
            hook_path=self.hook_path or default_hook_path(),
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> Host:
        """The host that the settings' ``host.*`` and ``hook.path`` describe."""
        return cls(
            root=settings.host_root,
            driver_root=settings.host_driver_root,
            dev_root=settings.host_dev_root,
            resolver=settings.host_resolver,
            hook_path=settings.hook_path,
            cuda_compat=settings.hook_cuda_compat,
        )


class Plan(Frozen, kw_only=True):
    """What a request resolved to on this host, and the edits that inject it."""

    requests: Requests
    gpus: HostGpus
    selected: tuple[Selected, ...]
    driver_files: DriverFiles | None
    facts: HostFacts | None  # what the requirements were checked against (None: not checked)
    edits: Edits


def plan(
    requests: Requests,
    host: Host,
    *,
    rootfs: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Plan:
    """Resolve ``requests`` on ``host`` and build the edits (raises nvhook errors on failure).

    ``rootfs`` and ``env`` are the container's (None: not known): ``NVIDIA_REQUIRE_CUDA`` is
    checked against the CUDA version of the image's forward compatibility ``libcuda`` when
    the hook will put it first (:func:`cuda_compat_of`).

    With graphics or display, the hook carries the DRI ``by-path`` links of every GPU of the
    host as ``--device-link``s, made only where the container has the node
    (:mod:`nvhook.hook.create_symlinks`): the same hook then serves every request, so
    ``nvhook cdi generate`` puts it in its spec-level edits and cdi mode gives a container
    what jit mode does (docs/architecture.md D1), without a hook process per device.
    """
    driver = read_driver(host.root)
    if host.resolver == "nvml" or needs_nvml(requests.devices):
        gpus = nvml_view(host)
    else:
        gpus = from_procfs(driver)
    selected = resolve(requests.devices, gpus)
    facts = _check_requirements(requests, host, gpus, selected, driver, rootfs, env or {})
    if isinstance(requests.devices, Void) and not requests.imex_channels:
        return Plan(
            requests=requests,
            gpus=gpus,
            selected=(),
            driver_files=None,
            facts=facts,
            edits=Edits(),
        )
    majors = driver.majors
    edits = control_nodes(dev_root=host.dev_root, majors=majors)
    edits += gpu_nodes(selected, gpus, dev_root=host.dev_root, majors=majors)
    edits += layout_edits(selected, gpus, root=host.root)
    device_links: tuple[tuple[str, str], ...] = ()
    graphics = bool(GRAPHICS_CAPABILITIES.intersection(requests.capabilities))
    if graphics:
        edits += dri_nodes(selected, gpus, dev_root=host.dev_root)
        device_links = dri_links(gpus.gpus, gpus, dev_root=host.dev_root)
    channels = requests.imex_channels
    if channels:
        edits += imex_nodes(
            None if isinstance(channels, All) else channels,
            dev_root=host.dev_root,
            majors=majors,
        )
    if requests.features.nvswitch:
        edits += nvswitch_nodes(dev_root=host.dev_root, majors=majors)
    enabled = [f for f in ("gds", "mofed", "gdrcopy") if getattr(requests.features, f)]
    if enabled:
        edits += feature_nodes(enabled, dev_root=host.dev_root)
    # each node as the host has it (a 0660 render node stays 0660, of its group), as a
    # generated spec records it: without fileMode runc would make every node 0666; and the
    # group of a group-restricted driver's nodes for the process
    edits = with_node_groups(with_host_access(edits))
    files = discover_driver_files(
        host.driver_root,
        requests.capabilities,
        driver_version=driver.version,
        host_root=host.root,
    )
    mounts = files.to_edits()
    edits += mounts
    compute = any(c.capability == "compute" for c in files.capabilities)
    compat = driver.version if host.cuda_compat and compute and driver.version else None
    edits += _hooks(files, mounts, host, device_links, compat, graphics=graphics)
    edits += Edits(env=(INJECTED_ENV,))
    return Plan(
        requests=requests,
        gpus=gpus,
        selected=selected,
        driver_files=files,
        facts=facts,
        edits=edits,
    )


#: The driver's module parameters, under the host root (docs/hooks.md).
DRIVER_PARAMS = "proc/driver/nvidia/params"


def _hooks(
    files: DriverFiles,
    mounts: Edits,
    host: Host,
    device_links: tuple[tuple[str, str], ...],
    cuda_compat: str | None,
    *,
    graphics: bool,
) -> Edits:
    """One createContainer hook: the container's driver params with ``ModifyDeviceFiles: 0``
    (when the host has a params file), the driver's symlinks and the DRI ``by-path`` links of
    ``device_links``, with ``graphics`` (graphics or display) the application profile that
    shows EGL and Vulkan only the container's GPUs (:mod:`nvhook.hook.app_profile`; NVIDIA's
    generated specs carry it at spec level, where every capability's files are), then the ld
    cache over the folders of the mounted libraries, the image's CUDA forward compatibility
    folder first when it counts (``cuda_compat``: the host driver's version, with compute)
    (one process for all: docs/hooks.md)."""
    folders = sorted(
        {
            os.path.dirname(m.container_path)
            for m in mounts.mounts
            if ".so" in os.path.basename(m.container_path)
            and "/xorg/" not in m.container_path
            and "/vdpau/" not in m.container_path
        }
    )
    params = os.path.join(host.root, DRIVER_PARAMS)
    has_params = os.path.isfile(params)
    if not files.symlinks and not folders and not has_params and not device_links and not graphics:
        return Edits()  # no compute either, so no --cuda-compat
    links = [(s.target, s.link) for s in files.symlinks]
    from nvhook.hook.app_profile import PROFILE_PATH

    hook = create_container_hook(
        links=links,
        device_links=device_links,
        folders=folders,
        params=os.path.normpath(params) if has_params else None,
        cuda_compat=cuda_compat,
        application_profile=PROFILE_PATH if graphics else None,
        hook_path=host.hook_path,
    )
    return Edits(hooks=(hook,))


def nvml_view(host: Host) -> HostGpus:
    """The GPUs as NVML sees them (NVML loaded from the driver root), with their caps minors."""
    from nvhook.devices.nvml import open_nvml

    lib_dir = nvml_library_dir(host.driver_root)
    with open_nvml(lib_dir) as nvml:
        infos = nvml.gpus()
    return from_nvml(infos, read_mig_minors(host.root))


def nvml_mig_view(host: Host, procfs: HostGpus) -> HostGpus:
    """:func:`nvml_view`'s answer for a host whose ``/proc`` view is ``procfs``, from the few
    NVML calls that name GPUs and MIG devices (:func:`nvhook.devices.nvml.mig_ids`: no
    ``pynvml``); :func:`nvml_view` itself when NVML lists other GPUs than ``/proc``.
    """
    from nvhook.devices.gpus import with_nvml_migs
    from nvhook.devices.nvml_ctypes import mig_ids

    found = mig_ids(nvml_library_dir(host.driver_root))
    view = with_nvml_migs(procfs, found, read_mig_minors(host.root))
    return view if view is not None else nvml_view(host)


def nvml_library_dir(driver_root: str) -> str | None:
    """The directory of ``libnvidia-ml.so.1`` under ``driver_root`` (None: the loader's default)."""
    if driver_root in ("", "/"):
        return None
    from nvhook.discover.arch import driver_arch, machine_arch
    from nvhook.discover.catalog import DEFAULT_SEARCH_PATHS
    from nvhook.discover.ldsocache import read_ld_cache
    from nvhook.discover.root import Root

    cache = read_ld_cache(os.path.join(driver_root, "etc", "ld.so.cache"))
    arch = driver_arch(Root(driver_root), cache, DEFAULT_SEARCH_PATHS)
    if arch != machine_arch():
        raise DriverError(
            f"{driver_root}: the driver is built for {arch}; its NVML cannot be loaded on"
            f" this {machine_arch()} machine"
        )
    for soname, path in cache.libraries(arch):
        if soname == "libnvidia-ml.so.1":
            return os.path.dirname(os.path.join(driver_root, path.lstrip("/")))
    raise DriverError(f"{driver_root}/etc/ld.so.cache: no libnvidia-ml.so.1 (NVML) in the cache")


def cuda_compat_of(
    requests: Requests, host: Host, driver_version: str, rootfs: str | None, env: Mapping[str, str]
) -> Compat | str | None:
    """What the hook's ``--cuda-compat`` will find in the container at ``rootfs``
    (:func:`nvhook.hook.cuda_compat.find_compat`); None when it does not look (no compute,
    ``hook.cuda_compat`` off, the container opts out, no rootfs or driver version)."""
    from nvhook.hook.cuda_compat import compat_in

    compute = "compute" in requests.capabilities or "all" in requests.capabilities
    if not (host.cuda_compat and compute and rootfs and driver_version):
        return None
    try:
        return compat_in(rootfs, env, driver_version)
    except (OSError, Error) as e:
        return f"cannot look into {rootfs}: {e}"


def _check_requirements(
    requests: Requests,
    host: Host,
    gpus: HostGpus,
    selected: tuple[Selected, ...],
    driver: ProcDriver,
    rootfs: str | None,
    env: Mapping[str, str],
) -> HostFacts | None:
    if not requests.requirements or requests.disable_require:
        return None
    from nvhook.devices.nvml import open_nvml
    from nvhook.hook.cuda_compat import Compat
    from nvhook.requests.requirements import (
        GpuFacts,
        HostFacts,
        check_requirements,
        parse_version,
    )

    with open_nvml(nvml_library_dir(host.driver_root)) as nvml:
        info = nvml.driver()
        by_uuid = {g.uuid: g for g in nvml.gpus()}
    chosen = []
    for device in selected:
        parent = device if isinstance(device, Gpu) else gpus.gpus[device.gpu_index]
        gpu = by_uuid.get(parent.uuid)
        if gpu is None:
            raise DriverError(f"GPU {parent.index} ({parent.uuid}) is in /proc but not in NVML")
        chosen.append(GpuFacts(gpu.compute_capability, gpu.brand, gpu.name))
    driver_version = info.driver_version or driver.version
    facts = HostFacts(info.cuda_version, driver_version, tuple(chosen))
    compat = cuda_compat_of(requests, host, driver_version, rootfs, env)
    if isinstance(compat, Compat) and compat.used and compat.cuda_version:
        newer = not info.cuda_version or (
            parse_version(compat.cuda_version) > parse_version(info.cuda_version)
        )
        if newer:  # what the container's libcuda will be (the hook puts it first)
            facts = facts._replace(
                cuda_version=compat.cuda_version,
                cuda_from=(
                    f"CUDA forward compatibility: {compat.folder}/{compat.library} over the "
                    f"host's {info.cuda_version or 'unknown'}"
                ),
            )
    if isinstance(compat, Compat) and not facts.cuda_from:  # there, but it does not count
        why = compat.reason if not compat.used else "its CUDA version is not above the host's"
        facts = facts._replace(
            cuda_note=f"the image's {compat.folder}/{compat.library} is not used: {why}"
        )
    check_requirements(requests, facts)
    return facts
