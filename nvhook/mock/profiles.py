"""Machine profiles of the mock GPU machine: read from data files and checked.

A profile is a TOML file, one per machine, under ``nvhook/mock/machines/`` (shipped as package
data). :func:`load_profile` reads one into the frozen values of :mod:`nvhook.mock.model` and
checks it: unique UUIDs, minors and bus ids, MIG instances only on MIG-capable GPUs in MIG
mode, GPU-instance ids 0-14, compute-instance ids 0-7, at most 7 slices per GPU, instances at
placements of their profile that do not overlap (the first free one when not given), a declared
NUMA node for every GPU once any is declared, PCIe-switch peers on one NUMA node, one bus id
per NVSwitch for NVLinks. A mistake is a :class:`MockError` naming the file and the key.

The NVML index of a GPU is not in the file: like the real NVML, it is the GPU's position in
PCI bus-id order, and :attr:`Profile.gpus` is sorted that way. Device minors are the driver's
own numbering and need not follow it (``l40s-x4`` permutes them on purpose).

The driver's file list (libraries by capability, binaries) is data too: ``driver.toml`` next to
this module, read by :func:`driver_files`.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from nvhook.errors import MockError, UnknownProfileError
from nvhook.mock import _table
from nvhook.mock._table import Table
from nvhook.mock.model import (
    ARCHITECTURES,
    BRANDS,
    MAX_CI_ID,
    MAX_GI_ID,
    MAX_GPU_MINOR,
    MAX_MIG_MINOR_GPU,
    MEMORY_SLICES,
    MOCK_ARCHES,
    NVIDIA_MAJOR,
    SLICES,
    Binary,
    ComputeInstance,
    DriCard,
    Driver,
    DriverFiles,
    Gpu,
    GpuInstance,
    GpuModel,
    Library,
    MigProfile,
    NumaNode,
    NvLink,
    Process,
    Profile,
    parse_bus_id,
)

__all__ = ["driver_files", "list_profiles", "load_profile"]


def list_profiles() -> tuple[str, ...]:
    """The names of the shipped profiles, sorted."""
    folder = resources.files("nvhook.mock.machines")
    return tuple(
        sorted(e.name[: -len(".toml")] for e in folder.iterdir() if e.name.endswith(".toml"))
    )


def load_profile(name: str | Path) -> Profile:
    """Load a shipped profile by name, or a profile file by path (``….toml``)."""
    if isinstance(name, Path) or name.endswith(".toml") or "/" in name:
        path = Path(name)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise MockError(f"cannot read mock profile {path}: {e.strerror}") from e
        return _parse_profile(text, str(path))
    resource = resources.files("nvhook.mock.machines").joinpath(f"{name}.toml")
    if not resource.is_file():
        known = ", ".join(list_profiles())
        raise UnknownProfileError(f"unknown mock profile {name!r}; known profiles: {known}")
    return _parse_profile(resource.read_text(encoding="utf-8"), f"{name}.toml")


def driver_files() -> DriverFiles:
    """The driver's libraries and binaries (``driver.toml``)."""
    source = "nvhook/mock/driver.toml"
    text = resources.files("nvhook.mock").joinpath("driver.toml").read_text(encoding="utf-8")
    doc = _table.load(text, source)
    libraries = []
    for t in doc.tables("library"):
        libraries.append(
            Library(
                stem=t.text("stem"),
                capability=t.text("capability"),
                soname=t.text("soname"),
                compat32=t.flag("compat32", False),
                subdir=t.text("subdir", ""),
                since=t.opt_number("since"),
                until=t.opt_number("until"),
                platform=t.opt_text("platform"),
            )
        )
        t.done()
    binaries = []
    for t in doc.tables("binary"):
        binaries.append(
            Binary(name=t.text("name"), capability=t.text("capability"), when=t.opt_text("when"))
        )
        t.done()
    doc.done()
    return DriverFiles(tuple(libraries), tuple(binaries))


def _parse_profile(text: str, source: str) -> Profile:
    doc = _table.load(text, source)
    name = doc.text("name")
    description = " ".join(doc.text("description").split())

    d = doc.table("driver")
    version = d.text("version")
    if not all(p.isdigit() for p in version.split(".")) or version.count(".") not in (1, 2):
        raise d.fail("version", f"expected a driver version like 550.54.15, got {version!r}")
    cuda = d.text("cuda")
    if cuda.count(".") != 1 or not cuda.replace(".", "").isdigit():
        raise d.fail("cuda", f"expected a CUDA version like 12.4, got {cuda!r}")
    module = d.text("kernel_module")
    if module not in ("proprietary", "open"):
        raise d.fail("kernel_module", f"expected 'proprietary' or 'open', got {module!r}")
    platforms = d.table("egl_platforms")
    egl = tuple(sorted((k, platforms.text(k)) for k in platforms.names()))
    driver = Driver(
        version=version,
        cuda=cuda,
        kernel_module="open" if module == "open" else "proprietary",
        build=d.text("build"),
        gcc=d.text("gcc"),
        loaded=d.flag("loaded", True),
        firmware=d.str_list("firmware"),
        vulkan_api=d.text("vulkan_api"),
        egl_platforms=egl,
        frontend=d.text("frontend", "nvidia-frontend"),
    )
    d.done()

    char_majors = []
    for key, value in sorted(doc.table("char_majors").rest().items()):
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or not 1 <= value <= 511
            or value == NVIDIA_MAJOR
        ):
            raise MockError(
                f"mock profile {source}: char_majors.{key}: expected a dynamic major "
                f"(1-511, not 195), got {value!r}"
            )
        char_majors.append((key, value))

    h = doc.table("host")
    nvswitches = h.number("nvswitches", 0)
    imex_channels = h.number("imex_channels", 0)
    graphics_config = h.flag("graphics_config", False)
    display = h.flag("display", False)
    switch_level = h.text("switch_level", "single")
    arch = h.opt_text("arch")
    if arch is not None and arch not in MOCK_ARCHES:
        raise h.fail("arch", f"expected one of {', '.join(MOCK_ARCHES)}, got {arch!r}")
    if switch_level not in ("single", "multiple"):
        raise h.fail("switch_level", f"expected 'single' or 'multiple', got {switch_level!r}")
    numa_nodes = []
    for t in h.tables("numa_node"):
        numa_nodes.append(
            NumaNode(id=t.number("id"), socket=t.number("socket"), cpus=_cpu_list(t, "cpus"))
        )
        t.done()
    nvlink = _parse_nvlink(h.table("nvlink"), nvswitches)
    dri_cards = []
    for t in h.tables("dri_card"):
        dri_cards.append(
            DriCard(bus_id=_bus_id(t, "bus_id"), card=t.number("card"), driver=t.text("driver"))
        )
        t.done()
    h.done()

    models = {}
    for t in doc.tables("model"):
        model = _parse_model(t)
        if model.name in models:
            raise t.fail("name", f"model {model.name!r} is defined twice")
        models[model.name] = model

    gpus = [_parse_gpu(t, models) for t in doc.tables("gpu")]
    doc.done()

    gpus.sort(key=lambda g: parse_bus_id(g.bus_id))
    gpus = [g._replace(index=i) for i, g in enumerate(gpus)]
    profile = Profile(
        name=name,
        description=description,
        source=source,
        driver=driver,
        char_majors=tuple(char_majors),
        gpus=tuple(gpus),
        nvswitches=nvswitches,
        imex_channels=imex_channels,
        graphics_config=graphics_config,
        display=display,
        dri_cards=tuple(dri_cards),
        numa_nodes=tuple(numa_nodes),
        switch_level=switch_level,
        nvlink=nvlink,
        arch=arch,
    )
    _check(profile)
    return profile


def _cpu_list(t: Table, key: str) -> tuple[int, ...]:
    """``"48-63,176-191"`` (the kernel's cpulist format) → the CPU numbers."""
    raw = t.text(key)
    cpus: set[int] = set()
    try:
        for part in raw.split(","):
            first, _, last = part.partition("-")
            lo, hi = int(first), int(last or first)
            if lo > hi:
                raise ValueError(part)
            cpus.update(range(lo, hi + 1))
    except ValueError:
        raise t.fail(key, f"expected a CPU list like '0-15,128-143', got {raw!r}") from None
    if max(cpus) >= 1024:
        raise t.fail(key, "CPU numbers are 0-1023")
    return tuple(sorted(cpus))


def _parse_nvlink(t: Table, nvswitches: int) -> NvLink | None:
    links = t.opt_number("links")
    if links is None:
        t.done()
        return None
    if not 1 <= links <= 18:
        raise t.fail("links", f"a GPU has 1-18 NVLinks, got {links}")
    bus_ids = t.str_list("switch_bus_ids")
    if nvswitches == 0 or len(bus_ids) != nvswitches:
        raise t.fail(
            "switch_bus_ids",
            f"NVLinks go to the NVSwitches: one bus id per switch ({nvswitches}), "
            f"got {len(bus_ids)}",
        )
    for i, bus_id in enumerate(bus_ids):
        try:
            parse_bus_id(bus_id)
        except ValueError as e:
            raise t.fail(f"switch_bus_ids[{i}]", str(e)) from None
    nvlink = NvLink(
        links=links,
        version=t.number("version"),
        switch_pci_device_id=t.number("switch_pci_device_id"),
        switch_bus_ids=bus_ids,
    )
    t.done()
    return nvlink


def _bus_id(t: Table, key: str) -> str:
    raw = t.text(key)
    try:
        domain, bus, device, function = parse_bus_id(raw)
    except ValueError as e:
        raise t.fail(key, str(e)) from None
    canonical = f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"
    if raw != canonical:
        raise t.fail(key, f"write it as {canonical!r} (lowercase, as /proc does)")
    return raw


def _parse_model(t: Table) -> GpuModel:
    arch = t.text("architecture")
    if arch not in ARCHITECTURES:
        raise t.fail("architecture", f"unknown architecture {arch!r}")
    brand = t.text("brand")
    if brand not in BRANDS:
        raise t.fail("brand", f"unknown brand {brand!r}; known: {', '.join(BRANDS)}")
    cc = t.text("compute_capability")
    if cc.count(".") != 1 or not cc.replace(".", "").isdigit():
        raise t.fail("compute_capability", f"expected major.minor, got {cc!r}")
    profiles = []
    for p in t.tables("mig_profile"):
        slices = p.number("slices")
        if slices not in (1, 2, 3, 4, 7):
            raise p.fail(
                "slices", f"a GPU-instance profile has 1, 2, 3, 4 or 7 slices, got {slices}"
            )
        size = p.number("placement_size", slices)
        starts = p.number_list("placements") or tuple(range(0, SLICES - slices + 1, slices))
        if any(start + size > MEMORY_SLICES for start in starts):
            raise p.fail("placements", f"an instance ends past memory slice {MEMORY_SLICES}")
        profiles.append(
            MigProfile(
                name=p.text("name"),
                id=p.number("id"),
                slices=slices,
                memory_mib=p.number("memory_mib"),
                multiprocessors=p.number("multiprocessors"),
                copy_engines=p.number("copy_engines", 0),
                decoders=p.number("decoders", 0),
                encoders=p.number("encoders", 0),
                jpegs=p.number("jpegs", 0),
                ofas=p.number("ofas", 0),
                placement_size=size,
                placements=starts,
            )
        )
        p.done()
    model = GpuModel(
        name=t.text("name"),
        architecture=arch,
        compute_capability=cc,
        memory_mib=t.number("memory_mib"),
        reserved_mib=t.number("reserved_mib", 0),
        brand=brand,
        pci_device_id=t.number("pci_device_id"),
        pci_subsystem_id=t.number("pci_subsystem_id"),
        vbios=t.text("vbios"),
        multiprocessors=t.number("multiprocessors"),
        max_mig_devices=t.number("max_mig_devices", 0),
        mig_profiles=tuple(profiles),
        idle_temperature_c=t.number("idle_temperature_c", 30),
        idle_power_w=t.number("idle_power_w", 50),
        power_limit_w=t.number("power_limit_w", 300),
        cuda_cores=t.number("cuda_cores", 0),
    )
    t.done()
    return model


def _parse_gpu(t: Table, models: Mapping[str, GpuModel]) -> Gpu:
    model_name = t.text("model")
    model = models.get(model_name)
    if model is None:
        raise t.fail("model", f"no [[model]] named {model_name!r}")
    mig = t.flag("mig", False)
    if mig and not model.mig_capable:
        raise t.fail("mig", f"{model_name} is not MIG capable (max_mig_devices = 0)")
    instances: list[GpuInstance] = []
    used: set[int] = set()  # memory slices taken by the instances so far
    for g in t.tables("gpu_instance"):
        if not mig:
            raise g.fail("id", "GPU instances need `mig = true` on their GPU")
        gi_id = g.number("id")
        if gi_id > MAX_GI_ID:
            raise g.fail("id", f"GPU instance ids are 0-{MAX_GI_ID}, got {gi_id}")
        profile_name = g.text("profile")
        profile = model.mig_profile(profile_name)
        if profile is None:
            raise g.fail("profile", f"{model_name} has no MIG profile {profile_name!r}")
        cis = []
        for c in g.tables("compute_instances"):
            ci_id = c.number("id")
            if ci_id > MAX_CI_ID:
                raise c.fail("id", f"compute instance ids are 0-{MAX_CI_ID}, got {ci_id}")
            uuid = c.text("uuid")
            if not _is_uuid(uuid, "MIG-"):
                raise c.fail(
                    "uuid", f"expected MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, got {uuid!r}"
                )
            cis.append(ComputeInstance(id=ci_id, uuid=uuid))
            c.done()

        def span(start: int, size: int = profile.placement_size) -> set[int]:
            return set(range(start, start + size))

        free = [s for s in profile.placements if not span(s) & used]
        placement = g.opt_number("placement")
        if placement is None and not free:
            raise g.fail("profile", f"no placement of {profile_name} is free on this GPU")
        placement = free[0] if placement is None else placement
        if placement not in profile.placements:
            raise g.fail("placement", f"{profile_name} starts at one of {list(profile.placements)}")
        if span(placement) & used:
            raise g.fail("placement", f"memory slice {min(span(placement) & used)} is taken")
        used |= span(placement)
        instances.append(
            GpuInstance(
                id=gi_id, profile=profile, compute_instances=tuple(cis), placement=placement
            )
        )
        g.done()
    dri = t.table("dri")
    card = dri.opt_number("card")
    render = dri.opt_number("render")
    dri.done()
    uuid = t.text("uuid")
    if not _is_uuid(uuid, "GPU-"):
        raise t.fail("uuid", f"expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, got {uuid!r}")
    processes = []
    for p in t.tables("process"):
        if mig:
            raise p.fail("pid", "processes are listed on GPUs that are not in MIG mode")
        processes.append(
            Process(pid=p.number("pid"), name=p.text("name"), used_mib=p.number("used_mib"))
        )
        p.done()
    if sum(p.used_mib for p in processes) + model.reserved_mib > model.memory_mib:
        raise t.fail("process", f"the processes use more than the {model.memory_mib} MiB there are")
    utilization = t.number("utilization", 0)
    memory_utilization = t.number("memory_utilization", 0)
    for key, value in (("utilization", utilization), ("memory_utilization", memory_utilization)):
        if value > 100:
            raise t.fail(key, f"a percentage is 0-100, got {value}")
    gpu = Gpu(
        index=-1,
        model=model,
        uuid=uuid,
        bus_id=_bus_id(t, "bus_id"),
        minor=t.number("minor"),
        irq=t.number("irq"),
        mig_enabled=mig,
        gpu_instances=tuple(instances),
        dri_card=card,
        dri_render=render,
        numa_node=t.opt_number("numa_node"),
        pcie_switch=t.opt_number("pcie_switch"),
        processes=tuple(processes),
        utilization=utilization,
        memory_utilization=memory_utilization,
    )
    if gpu.minor > MAX_GPU_MINOR or (mig and gpu.minor > MAX_MIG_MINOR_GPU):
        limit = MAX_MIG_MINOR_GPU if mig else MAX_GPU_MINOR
        raise t.fail("minor", f"a {'MIG ' if mig else ''}GPU minor is 0-{limit}, got {gpu.minor}")
    slices = sum(gi.profile.slices for gi in instances)
    if slices > SLICES:
        raise t.fail("gpu_instance", f"the GPU instances use {slices} slices, a GPU has {SLICES}")
    t.done()
    return gpu


def _is_uuid(value: str, prefix: str) -> bool:
    if not value.startswith(prefix):
        return False
    parts = value[len(prefix) :].split("-")
    return [len(p) for p in parts] == [8, 4, 4, 4, 12] and all(
        c in "0123456789abcdef" for p in parts for c in p
    )


def _check(p: Profile) -> None:
    """Cross-field rules: uniqueness, and what a driver that is not loaded cannot have."""

    def dup(values: list[Any], what: str) -> None:
        seen = set()
        for v in values:
            if v in seen:
                raise MockError(f"mock profile {p.source}: {what} {v!r} is used twice")
            seen.add(v)

    dup([g.uuid for g in p.gpus] + [m.uuid for g in p.gpus for m in g.mig_devices], "UUID")
    dup([g.minor for g in p.gpus], "minor")
    dup([g.bus_id for g in p.gpus] + [c.bus_id for c in p.dri_cards], "bus_id")
    dup(
        [g.dri_card for g in p.gpus if g.dri_card is not None] + [c.card for c in p.dri_cards],
        "DRM card",
    )
    dup([g.dri_render for g in p.gpus if g.dri_render is not None], "DRM render node")
    for g in p.gpus:
        dup([gi.id for gi in g.gpu_instances], f"GPU {g.index}: GPU instance id")
        for gi in g.gpu_instances:
            dup([ci.id for ci in gi.compute_instances], f"GPU {g.index} GI {gi.id}: CI id")
    dup([n.id for n in p.numa_nodes], "NUMA node")
    dup([c for n in p.numa_nodes for c in n.cpus], "CPU")
    dup([proc.pid for g in p.gpus for proc in g.processes], "pid")
    for g in p.gpus:
        if p.numa_nodes and p.numa_node(g.numa_node) is None:
            known = ", ".join(str(n.id) for n in p.numa_nodes)
            raise MockError(
                f"mock profile {p.source}: GPU {g.index} ({g.bus_id}): numa_node is one of "
                f"the [[host.numa_node]] ids ({known}), got {g.numa_node}"
            )
        if not p.numa_nodes and g.numa_node is not None:
            raise MockError(
                f"mock profile {p.source}: GPU {g.index} ({g.bus_id}) names NUMA node "
                f"{g.numa_node}, and the profile declares no [[host.numa_node]]"
            )
        for peer in p.gpus:
            shared = g.pcie_switch is not None and g.pcie_switch == peer.pcie_switch
            if shared and g.numa_node != peer.numa_node:
                raise MockError(
                    f"mock profile {p.source}: GPUs {g.index} and {peer.index} share PCIe "
                    f"switch {g.pcie_switch} but not a NUMA node"
                )
    if not p.driver.loaded and (p.gpus or p.nvswitches or p.imex_channels or p.char_majors):
        raise MockError(
            f"mock profile {p.source}: a driver that is not loaded (driver.loaded = false) "
            "cannot have GPUs, NVSwitches, IMEX channels or char_majors"
        )
    majors = dict(p.char_majors)
    needs = {
        "nvidia-uvm": p.driver.loaded,
        "nvidia-caps": p.driver.loaded,
        "nvidia-nvswitch": p.nvswitches > 0,
        "nvidia-caps-imex-channels": p.imex_channels > 0,
    }
    for name, needed in needs.items():
        if needed and name not in majors:
            raise MockError(f"mock profile {p.source}: char_majors.{name} is needed")
