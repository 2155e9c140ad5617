"""Machine profiles of the mock GPU machine: what a fake host has, as data.

A profile is a TOML file, one per machine, under ``nvhook/mock/machines/`` (shipped as package
data). :func:`load_profile` reads one into frozen values and checks it: unique UUIDs,
minors and bus ids, MIG instances only on MIG-capable GPUs in MIG mode, GPU-instance ids 0-14,
compute-instance ids 0-7, at most 7 slices per GPU. A mistake is a :class:`MockError` naming
the file and the key.

The NVML index of a GPU is not in the file: like the real NVML, it is the GPU's position in
PCI bus-id order, and :attr:`Profile.gpus` is sorted that way. Device minors are the driver's
own numbering and need not follow it (``l40s-x4`` permutes them on purpose).

The driver's file list (libraries by capability, binaries) is data too: ``driver.toml`` next to
this module, read by :func:`driver_files`.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from nvhook.errors import MockError
from oci._frozen import Frozen

__all__ = [
    "ARCHITECTURES",
    "BRANDS",
    "Binary",
    "ComputeInstance",
    "DriCard",
    "Driver",
    "DriverFiles",
    "Gpu",
    "GpuInstance",
    "GpuModel",
    "Library",
    "MigDevice",
    "MigProfile",
    "Profile",
    "driver_files",
    "list_profiles",
    "load_profile",
    "mig_caps_minor",
    "parse_bus_id",
]

#: NVML's ``nvmlDeviceArchitecture_t`` values by name.
ARCHITECTURES: Mapping[str, int] = {
    "kepler": 2,
    "maxwell": 3,
    "pascal": 4,
    "volta": 5,
    "turing": 6,
    "ampere": 7,
    "ada": 8,
    "hopper": 9,
    "blackwell": 10,
}

#: NVML's ``nvmlBrandType_t`` values by name.
BRANDS: Mapping[str, int] = {
    "unknown": 0,
    "quadro": 1,
    "tesla": 2,
    "nvs": 3,
    "grid": 4,
    "geforce": 5,
    "titan": 6,
    "nvidia_rtx": 13,
    "nvidia": 14,
}

_MAX_GI_ID = 14
_MAX_CI_ID = 7
_MAX_MIG_MINOR_GPU = 31  # /proc/driver/nvidia-caps/mig-minors covers gpu0..gpu31
_SLICES = 7
_MAX_GPU_MINOR = 253  # 254 is nvidia-modeset, 255 nvidiactl


class MigProfile(Frozen):
    """A GPU-instance profile of a GPU model (``nvidia-smi mig -lgip``)."""

    name: str  # "3g.40gb"
    id: int  # NVML's profile id (9 for 3g.40gb on an A100)
    slices: int
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int


class GpuModel(Frozen):
    """What every GPU of one product has in common."""

    name: str  # "NVIDIA A100-SXM4-80GB", as NVML and /proc report it
    architecture: str  # a key of ARCHITECTURES
    compute_capability: str  # "8.0"
    memory_mib: int
    reserved_mib: int
    brand: str  # a key of BRANDS
    pci_device_id: int  # the device part; NVML's pciDeviceId is (this << 16) | 0x10de
    pci_subsystem_id: int
    vbios: str
    multiprocessors: int
    max_mig_devices: int  # 0: not MIG capable
    mig_profiles: tuple[MigProfile, ...]

    @property
    def mig_capable(self) -> bool:
        return self.max_mig_devices > 0

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)


class ComputeInstance(Frozen):
    """A compute instance inside a GPU instance: one MIG device, with its own UUID."""

    id: int
    uuid: str  # "MIG-…"


class GpuInstance(Frozen):
    id: int
    profile: MigProfile
    compute_instances: tuple[ComputeInstance, ...]


class MigDevice(Frozen):
    """A MIG device (GPU instance + compute instance) in NVML's enumeration order."""

    index: int  # nvmlDeviceGetMigDeviceHandleByIndex index under the parent
    uuid: str
    gi: int
    ci: int
    profile: MigProfile
    gi_caps_minor: int  # /dev/nvidia-caps/nvidia-cap<n> of the GPU instance
    ci_caps_minor: int  # … and of the compute instance


class Gpu(Frozen):
    index: int  # NVML index: position in PCI bus-id order
    model: GpuModel
    uuid: str
    bus_id: str  # "0000:07:00.0": domain:bus:device.function, lowercase, as /proc writes it
    minor: int  # /dev/nvidia<minor>
    irq: int
    mig_enabled: bool
    gpu_instances: tuple[GpuInstance, ...]
    dri_card: int | None  # /dev/dri/card<n>
    dri_render: int | None  # /dev/dri/renderD<n>

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def memory_bytes(self) -> int:
        return self.model.memory_mib * 1024 * 1024

    @property
    def mig_devices(self) -> tuple[MigDevice, ...]:
        """MIG devices in NVML order (GPU instance id, then compute instance id)."""
        out: list[MigDevice] = []
        for gi in sorted(self.gpu_instances, key=lambda g: g.id):
            for ci in sorted(gi.compute_instances, key=lambda c: c.id):
                gi_minor = mig_caps_minor(self.minor, gi.id)
                out.append(
                    MigDevice(
                        index=len(out),
                        uuid=ci.uuid,
                        gi=gi.id,
                        ci=ci.id,
                        profile=gi.profile,
                        gi_caps_minor=gi_minor,
                        ci_caps_minor=gi_minor + 1 + ci.id,
                    )
                )
        return tuple(out)


def mig_caps_minor(gpu_minor: int, gi: int, ci: int | None = None) -> int:
    """The nvidia-caps minor of a GPU instance (or of one of its compute instances).

    The driver numbers every possible MIG capability in advance (``mig-minors``): ``config`` 1,
    ``monitor`` 2, then per GPU minor 15 GPU-instance ids with 8 compute-instance ids each.
    """
    n = 3 + gpu_minor * (_MAX_GI_ID + 1) * (_MAX_CI_ID + 2) + gi * (_MAX_CI_ID + 2)
    return n if ci is None else n + 1 + ci


class DriCard(Frozen):
    """A DRM card that is not an NVIDIA GPU (a BMC's VGA, say): it takes a card number too."""

    bus_id: str
    card: int
    driver: str


class Driver(Frozen):
    version: str  # "550.54.15"
    cuda: str  # "12.4"
    kernel_module: Literal["proprietary", "open"]
    build: str  # what follows the version on /proc/driver/nvidia/version's first line
    gcc: str
    loaded: bool  # the kernel module is loaded (False: no /proc/driver/nvidia, no nodes)
    firmware: tuple[str, ...]  # GSP firmware file names
    vulkan_api: str
    egl_platforms: tuple[tuple[str, str], ...]  # (platform, library version), sorted
    frontend: str  # the /proc/devices name of major 195

    @property
    def branch(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def cuda_version_int(self) -> int:
        """CUDA version as the driver API reports it: 12.4 → 12040."""
        major, minor = self.cuda.split(".")
        return int(major) * 1000 + int(minor) * 10

    @property
    def nvml_version(self) -> str:
        return f"{self.cuda.split('.')[0]}.{self.version}"


class Profile(Frozen):
    name: str
    description: str
    source: str  # the file it was read from
    driver: Driver
    char_majors: tuple[tuple[str, int], ...]  # dynamic majors announced in /proc/devices
    gpus: tuple[Gpu, ...]  # in NVML index order
    nvswitches: int
    imex_channels: int
    graphics_config: bool  # Vulkan/EGL vendor files, X config snippet
    display: bool  # the Xorg driver module
    dri_cards: tuple[DriCard, ...]  # DRM cards of other vendors

    def major(self, name: str) -> int | None:
        """The major announced for a ``/proc/devices`` name (195 for the frontend)."""
        if name == self.driver.frontend and self.driver.loaded:
            return 195
        return dict(self.char_majors).get(name)

    def gpu_by_minor(self, minor: int) -> Gpu | None:
        return next((g for g in self.gpus if g.minor == minor), None)


class Library(Frozen):
    stem: str
    capability: str
    soname: str  # may contain "{version}"
    compat32: bool
    subdir: str
    since: int | None
    until: int | None
    platform: str | None


class Binary(Frozen):
    name: str
    capability: str
    when: str | None  # "nvswitch" | "imex" | None (always)


class DriverFiles(Frozen):
    libraries: tuple[Library, ...]
    binaries: tuple[Binary, ...]


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
        raise MockError(f"unknown mock profile {name!r}; known profiles: {known}")
    return _parse_profile(resource.read_text(encoding="utf-8"), f"{name}.toml")


def driver_files() -> DriverFiles:
    """The driver's libraries and binaries (``driver.toml``)."""
    source = "nvhook/mock/driver.toml"
    text = resources.files("nvhook.mock").joinpath("driver.toml").read_text(encoding="utf-8")
    doc = _Table(_toml(text, source), source, "")
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


def parse_bus_id(bus_id: str) -> tuple[int, int, int, int]:
    """``"0000:07:00.0"`` (or NVML's ``"00000000:07:00.0"``) → (domain, bus, device, function)."""
    try:
        domain, bus, devfn = bus_id.split(":")
        device, function = devfn.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        raise ValueError(f"not a PCI bus id (domain:bus:device.function): {bus_id!r}") from None


# --- parsing -------------------------------------------------------------------------------------


def _toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise MockError(f"mock profile {source} is not valid TOML: {e}") from e


class _Table:
    """A TOML table read key by key; unknown keys and wrong types are errors naming the key."""

    def __init__(self, data: dict[str, Any], source: str, where: str) -> None:
        self._data = dict(data)
        self._source = source
        self._where = where

    def _key(self, key: str) -> str:
        return f"{self._where}.{key}" if self._where else key

    def fail(self, key: str, problem: str) -> MockError:
        return MockError(f"mock profile {self._source}: {self._key(key)}: {problem}")

    def _get(self, key: str, kind: type | tuple[type, ...], what: str, default: Any) -> Any:
        if key not in self._data:
            if default is _REQUIRED:
                raise self.fail(key, "missing")
            return default
        value = self._data.pop(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(key, f"expected {what}, got {value!r}")
        return value

    def text(self, key: str, default: Any = None) -> str:
        value: str = self._get(key, str, "a string", _REQUIRED if default is None else default)
        if "\t" in value or "\n" in value or '"' in value or "\\" in value:
            raise self.fail(key, "tabs, newlines, quotes and backslashes are not allowed")
        return value

    def opt_text(self, key: str) -> str | None:
        value: str | None = self._get(key, str, "a string", None)
        return value

    def number(self, key: str, default: Any = None) -> int:
        value: int = self._get(key, int, "an integer", _REQUIRED if default is None else default)
        if value < 0:
            raise self.fail(key, f"must not be negative, got {value}")
        return value

    def opt_number(self, key: str) -> int | None:
        value: int | None = self._get(key, int, "an integer", None)
        return value

    def flag(self, key: str, default: bool) -> bool:
        value: bool = self._get(key, bool, "true or false", default)
        return value

    def str_list(self, key: str) -> tuple[str, ...]:
        value: list[Any] = self._get(key, list, "a list of strings", [])
        if not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"expected a list of strings, got {value!r}")
        return tuple(value)

    def table(self, key: str) -> _Table:
        value: dict[str, Any] = self._get(key, dict, "a table", {})
        return _Table(value, self._source, self._key(key))

    def tables(self, key: str) -> list[_Table]:
        value: list[Any] = self._get(key, list, "an array of tables", [])
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.fail(f"{key}[{i}]", f"expected a table, got {item!r}")
            out.append(_Table(item, self._source, f"{self._key(key)}[{i}]"))
        return out

    def names(self) -> list[str]:
        return list(self._data)

    def rest(self) -> dict[str, Any]:
        rest, self._data = self._data, {}
        return rest

    def done(self) -> None:
        if self._data:
            raise self.fail(next(iter(self._data)), "unknown key")


_REQUIRED = object()


def _parse_profile(text: str, source: str) -> Profile:
    doc = _Table(_toml(text, source), source, "")
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
            or value == 195
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
    )
    _check(profile)
    return profile


def _bus_id(t: _Table, key: str) -> str:
    raw = t.text(key)
    try:
        domain, bus, device, function = parse_bus_id(raw)
    except ValueError as e:
        raise t.fail(key, str(e)) from None
    canonical = f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"
    if raw != canonical:
        raise t.fail(key, f"write it as {canonical!r} (lowercase, as /proc does)")
    return raw


def _parse_model(t: _Table) -> GpuModel:
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
        profiles.append(
            MigProfile(
                name=p.text("name"),
                id=p.number("id"),
                slices=p.number("slices"),
                memory_mib=p.number("memory_mib"),
                multiprocessors=p.number("multiprocessors"),
                copy_engines=p.number("copy_engines", 0),
                decoders=p.number("decoders", 0),
                encoders=p.number("encoders", 0),
                jpegs=p.number("jpegs", 0),
                ofas=p.number("ofas", 0),
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
    )
    t.done()
    return model


def _parse_gpu(t: _Table, models: Mapping[str, GpuModel]) -> Gpu:
    model_name = t.text("model")
    model = models.get(model_name)
    if model is None:
        raise t.fail("model", f"no [[model]] named {model_name!r}")
    mig = t.flag("mig", False)
    if mig and not model.mig_capable:
        raise t.fail("mig", f"{model_name} is not MIG capable (max_mig_devices = 0)")
    instances = []
    for g in t.tables("gpu_instance"):
        if not mig:
            raise g.fail("id", "GPU instances need `mig = true` on their GPU")
        gi_id = g.number("id")
        if gi_id > _MAX_GI_ID:
            raise g.fail("id", f"GPU instance ids are 0-{_MAX_GI_ID}, got {gi_id}")
        profile_name = g.text("profile")
        profile = model.mig_profile(profile_name)
        if profile is None:
            raise g.fail("profile", f"{model_name} has no MIG profile {profile_name!r}")
        cis = []
        for c in g.tables("compute_instances"):
            ci_id = c.number("id")
            if ci_id > _MAX_CI_ID:
                raise c.fail("id", f"compute instance ids are 0-{_MAX_CI_ID}, got {ci_id}")
            uuid = c.text("uuid")
            if not _is_uuid(uuid, "MIG-"):
                raise c.fail(
                    "uuid", f"expected MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, got {uuid!r}"
                )
            cis.append(ComputeInstance(id=ci_id, uuid=uuid))
            c.done()
        instances.append(GpuInstance(id=gi_id, profile=profile, compute_instances=tuple(cis)))
        g.done()
    dri = t.table("dri")
    card = dri.opt_number("card")
    render = dri.opt_number("render")
    dri.done()
    uuid = t.text("uuid")
    if not _is_uuid(uuid, "GPU-"):
        raise t.fail("uuid", f"expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, got {uuid!r}")
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
    )
    if gpu.minor > _MAX_GPU_MINOR or (mig and gpu.minor > _MAX_MIG_MINOR_GPU):
        limit = _MAX_MIG_MINOR_GPU if mig else _MAX_GPU_MINOR
        raise t.fail("minor", f"a {'MIG ' if mig else ''}GPU minor is 0-{limit}, got {gpu.minor}")
    slices = sum(gi.profile.slices for gi in instances)
    if slices > _SLICES:
        raise t.fail("gpu_instance", f"the GPU instances use {slices} slices, a GPU has {_SLICES}")
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
