"""The driver's files for a set of capabilities, and the container edits that mount them.

:func:`discover_driver_files` looks under a driver root (``/``, or
``/run/nvidia/driver`` under the GPU Operator) and returns a
:class:`DriverFiles`: per capability what was found, what was not, and where
it looked, plus firmware, IPC endpoints and the symlinks the container needs.
:meth:`DriverFiles.to_edits` turns it into :class:`~oci.cdi.edits.Edits`.

Decisions:

* **Same path inside.** A file at ``P`` in the driver root is mounted from
  ``<driver root>P`` to ``P`` in the container. Symlinks are resolved inside
  the root first, so the real file is mounted at its real path.
* **Real files, links listed.** The fully versioned file
  (``libcuda.so.550.54.15``) is mounted; the SONAME link (``libcuda.so.1``)
  and the development links NVIDIA's tools add (``libcuda.so``,
  ``libnvidia-ml.so``, ``libnvidia-opticalflow.so``, ``libGLX_indirect.so.0``,
  ``libglxserver_nvidia.so``) are returned as :class:`Symlink` values for the
  ``create-symlinks`` hook; mounts do not make links.
* **Options.** Libraries, binaries, Xorg modules and NGX DLLs are mapped
  executable: ``ro, nosuid, nodev, bind``. Configuration files and firmware
  add ``noexec``. IPC endpoints (the daemons' sockets, the MPS pipe
  directory) are mounted ``nosuid, nodev, noexec, bind`` but not read-only,
  as libnvidia-container mounts them: MPS clients write to pipes there.
* **Two roots.** The driver's files (libraries, binaries, configuration,
  firmware) are looked for under ``driver_root``; IPC endpoints, which the
  running daemons create, under ``host_root``. ``host_root`` defaults to the
  driver root, which is right both for a driver installed on ``/`` and for
  the GPU Operator, whose driver container runs ``nvidia-persistenced`` with
  its ``/run`` inside the driver root.
* **Values.** The values here are :class:`oci._frozen.Frozen` classes rather
  than frozen dataclasses: immutable all the same, without ``dataclasses``'
  import cost on the shim's start path.
* **Missing is data.** A file a capability may have but this host lacks is
  listed in :attr:`CapabilityFiles.missing`; only a driver or host root that
  is not a directory, an unknown capability, an invalid version or an
  unsupported architecture raise. A library the driver's version does not ship
  (:func:`nvhook.discover.catalog.expected`: removed or not yet added, or a 32-bit
  copy NVIDIA never builds) is looked for all the same but never missing.
"""

from __future__ import annotations

import os

from nvhook.constants import ALL_CAPABILITIES, CAPABILITY_ALL
from nvhook.discover import catalog
from nvhook.discover.arch import driver_arch, normalize_arch
from nvhook.discover.catalog import DEFAULT_SEARCH_PATHS
from nvhook.discover.files import (
    find_binaries,
    find_configs,
    find_firmware,
    find_ipc,
    find_wine_dlls,
    find_xorg_modules,
)
from nvhook.discover.ldsocache import LdCache, read_ld_cache
from nvhook.discover.libraries import Library, LibraryFinder, is_version
from nvhook.discover.root import Root
from nvhook.errors import DriverError, RequestError
from oci._frozen import Frozen
from oci.cdi.edits import Edits, Mount

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

__all__ = [
    "DATA_OPTIONS",
    "EXEC_OPTIONS",
    "GBM_BACKEND",
    "IPC_OPTIONS",
    "CapabilityFiles",
    "DriverFiles",
    "Symlink",
    "discover_driver_files",
]

#: Mount options of files that are executed or mapped executable (libraries, binaries).
EXEC_OPTIONS: tuple[str, ...] = ("ro", "nosuid", "nodev", "bind")
#: Mount options of data (configuration, firmware).
DATA_OPTIONS: tuple[str, ...] = ("ro", "nosuid", "nodev", "noexec", "bind")
#: Mount options of IPC endpoints (sockets, the MPS pipe directory): writable, like
#: libnvidia-container's.
IPC_OPTIONS: tuple[str, ...] = ("nosuid", "nodev", "noexec", "bind")

_COMPAT32_ARCH = {"x86_64": "i386"}
#: The SONAMEs worth decoding from a host's ld.so.cache: ``<stem>.`` of every driver library.
_CACHE_PREFIXES = tuple(
    sorted({s.stem + "." for specs in catalog.LIBRARIES.values() for s in specs})
)


#: The capabilities that bring GBM's NVIDIA backend (:func:`_gbm_backend`), once.
_GBM_CAPABILITIES = ("graphics", "display")
_ALLOCATOR = next(s for s in catalog.LIBRARIES["compute"] if s.stem == "libnvidia-allocator.so")
_ALLOCATOR_SONAME = "libnvidia-allocator.so.1"
#: The link GBM loads for ``nvidia-drm`` devices, relative to the allocator's directory.
GBM_BACKEND = "gbm/nvidia-drm_gbm.so"


class Symlink(Frozen, order=True):
    """A symlink to create in the container: ``link`` (absolute) points to ``target``."""

    target: str
    link: str


class CapabilityFiles(Frozen):
    """What one capability has on this host. Paths are in the driver root, sorted."""

    capability: str
    libraries: tuple[str, ...] = ()
    binaries: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()
    #: Library stems, binary names and configuration paths not found (sorted).
    missing: tuple[str, ...] = ()
    #: Where it looked, in order: the ld.so.cache file and directories (in the driver root).
    searched: tuple[str, ...] = ()


class DriverFiles(Frozen):
    """The driver's files for some capabilities, as found under a driver root."""

    driver_root: str
    host_root: str
    #: The version looked for: the one given, else the one the driver's libraries carry.
    driver_version: str | None
    capabilities: tuple[CapabilityFiles, ...] = ()
    firmware: tuple[str, ...] = ()
    #: IPC sockets present on the host root.
    ipc: tuple[str, ...] = ()
    mps_pipe_dir: str | None = None
    symlinks: tuple[Symlink, ...] = ()
    #: Things worth telling a person (a corrupt cache, a library of the wrong version).
    problems: tuple[str, ...] = ()
    #: The architecture whose libraries were looked for (the driver root's; None: not known).
    arch: str | None = None

    def capability(self, name: str) -> CapabilityFiles:
        """The files of capability ``name`` (KeyError if it was not asked for)."""
        for files in self.capabilities:
            if files.capability == name:
                return files
        raise KeyError(name)

    @property
    def missing(self) -> dict[str, tuple[str, ...]]:
        """Capability -> what it lacks, for those that lack something."""
        return {c.capability: c.missing for c in self.capabilities if c.missing}

    def lacking(
        self, *, models: tuple[str, ...], nvswitch: bool, imex_channels: bool
    ) -> dict[str, tuple[str, ...]]:
        """:attr:`missing` less what this host's hardware and driver flavour do not call for
        (:func:`nvhook.discover.catalog.expected_on`): the files to report missing."""
        stems = frozenset(
            base[: base.index(".so") + 3]
            for c in self.capabilities
            for path in c.libraries
            if ".so" in (base := os.path.basename(path))
        )
        out: dict[str, tuple[str, ...]] = {}
        for c in self.capabilities:
            kept = tuple(
                m
                for m in c.missing
                if catalog.expected_on(
                    m,
                    models=models,
                    nvswitch=nvswitch,
                    imex_channels=imex_channels,
                    found_stems=stems,
                )
            )
            if kept:
                out[c.capability] = kept
        return out

    def to_edits(self, *, container_root_map: Mapping[str, str] | None = None) -> Edits:
        """Read-only bind mounts of every file found, sorted by container path.

        ``container_root_map`` rewrites host paths when discovery ran somewhere
        else than the container runtime will: it maps a root as this process
        saw it to the same root as the runtime sees it, e.g.
        ``{"/driver-root": "/run/nvidia/driver"}`` for a tool running in a
        container that has the host's driver root mounted at ``/driver-root``.
        The longest matching prefix wins; container paths never change.
        """
        driver = Root(self.driver_root)
        host = Root(self.host_root)
        rewrites = sorted(
            (Root(k).path, Root(v).path) for k, v in (container_root_map or {}).items()
        )
        rewrites.sort(key=lambda kv: len(kv[0]), reverse=True)

        def source(root: Root, path: str) -> str:
            on_host = root.host(path)
            for old, new in rewrites:
                if old == "/":
                    rest = on_host
                elif on_host == old or on_host.startswith(old + "/"):
                    rest = on_host[len(old) :]
                else:
                    continue
                return ((new if new != "/" else "") + rest) or "/"
            return on_host

        mounts: dict[str, Mount] = {}

        def add(root: Root, path: str, options: tuple[str, ...]) -> None:
            mounts.setdefault(path, Mount(source(root, path), path, options=options))

        for files in self.capabilities:
            for path in (*files.libraries, *files.binaries):
                add(driver, path, EXEC_OPTIONS)
            for path in files.configs:
                add(driver, path, DATA_OPTIONS)
        for path in self.firmware:
            add(driver, path, DATA_OPTIONS)
        for path in self.ipc:
            add(host, path, IPC_OPTIONS)
        if self.mps_pipe_dir is not None:
            add(host, self.mps_pipe_dir, IPC_OPTIONS)
        return Edits(mounts=tuple(mounts[p] for p in sorted(mounts)))


def discover_driver_files(
    driver_root: str,
    capabilities: Collection[str],
    *,
    driver_version: str | None,
    search_paths: Sequence[str] = DEFAULT_SEARCH_PATHS,
    compat32: bool = False,
    host_root: str | None = None,
    arch: str | None = None,
) -> DriverFiles:
    """Find the files of ``capabilities`` under ``driver_root``.

    ``capabilities`` are names from :data:`nvhook.constants.ALL_CAPABILITIES`
    (or ``all``); ``compat32`` among them, or ``compat32=True``, adds the 32-bit
    copies of the requested capabilities' libraries. ``driver_version`` (e.g.
    ``550.54.15``, as ``/proc/driver/nvidia/version`` says) selects
    ``<stem>.<version>`` files; None takes it from the libraries the driver root
    has. ``arch`` (``x86_64``, ``aarch64``, or ``amd64``/``arm64``) is the driver root's
    architecture; None finds it from the root (:func:`nvhook.discover.arch.driver_arch`:
    its ld.so.cache flags, else its libraries' ELF headers, else this machine's). See the
    module docstring for the decisions on roots, links and options.
    """
    wanted = _capabilities(capabilities)
    want32 = compat32 or "compat32" in wanted
    explicit = None if arch is None else normalize_arch(arch)
    if driver_version is not None and not is_version(driver_version):
        raise DriverError(f"driver version {driver_version!r} is not a version (like 550.54.15)")
    root = Root(driver_root)
    host = root if host_root is None else Root(host_root)
    for what, r in (("driver root", root), ("host root", host)):
        if not os.path.isdir(r.path):
            raise DriverError(f"{r.path}: {what} is not a directory")
    problems: list[str] = []
    cache = _read_cache(root, problems)
    machine = explicit or driver_arch(root, cache, search_paths)
    finder = LibraryFinder(root, arch=machine, cache=cache, search_paths=search_paths)
    version = driver_version
    if version is None:
        version = finder.infer_version(catalog.VERSION_ANCHORS)
    symlinks: set[Symlink] = set()
    results: list[CapabilityFiles] = []
    gbm_capability = next((c for c in wanted if c in _GBM_CAPABILITIES), None)

    for cap in wanted:
        if cap != "compat32":
            results.append(
                _capability(cap, root, finder, version, search_paths, symlinks, gbm_capability)
            )

    if want32:
        results.append(
            _compat32_files(root, cache, machine, wanted, version, search_paths, symlinks, problems)
        )

    firmware: list[str] = []
    ipc: list[str] = []
    mps: str | None = None
    if wanted:
        firmware = find_firmware(root, catalog.FIRMWARE_DIR, version)
    if "utility" in wanted or "compute" in wanted:
        ipc = find_ipc(host, (catalog.PERSISTENCED_SOCKET, catalog.FABRICMANAGER_SOCKET))
    if "compute" in wanted:
        mps = host.directory(catalog.MPS_PIPE_DIR)
    problems += finder.problems
    return DriverFiles(
        driver_root=root.path,
        host_root=host.path,
        driver_version=version,
        capabilities=tuple(results),
        firmware=tuple(sorted(set(firmware))),
        ipc=tuple(sorted(set(ipc))),
        mps_pipe_dir=mps,
        symlinks=tuple(sorted(symlinks)),
        problems=tuple(sorted(set(problems))),
        arch=machine,
    )


def _capability(
    cap: str,
    root: Root,
    finder: LibraryFinder,
    version: str | None,
    search_paths: Sequence[str],
    symlinks: set[Symlink],
    gbm_capability: str | None,
) -> CapabilityFiles:
    """The files of one capability (not ``compat32``); its links are added to ``symlinks``."""
    libraries: list[str] = []
    binaries: list[str] = []
    configs: list[str] = []
    missing: list[str] = []
    searched: list[str] = []
    specs = catalog.LIBRARIES.get(cap, ())
    if specs:
        searched += (catalog.LD_CACHE, *search_paths)
        searched += _subdirs(specs, search_paths)
        _find_libraries(finder, specs, version, 64, libraries, missing, symlinks)
    names = catalog.BINARIES.get(cap, ())
    if names:
        found, lacking = find_binaries(root, names, catalog.BINARY_PATHS)
        binaries += found
        missing += lacking
        searched += catalog.BINARY_PATHS
    relative = catalog.CONFIGS.get(cap, ())
    if relative:
        found, lacking = find_configs(root, relative, catalog.CONFIG_BASES)
        configs += found
        missing += lacking
        searched += catalog.CONFIG_BASES
    if cap == "display":
        modules, lacking = find_xorg_modules(
            root, catalog.XORG_MODULES, catalog.XORG_MODULE_PATHS, version
        )
        for module, path in modules:
            libraries.append(path)
            directory, _, name = path.rpartition("/")
            if module.versioned and name != module.name:
                symlinks.add(Symlink(name, f"{directory}/{module.name}"))
        missing += lacking
        searched += catalog.XORG_MODULE_PATHS
    if cap == gbm_capability:
        _gbm_backend(finder, version, libraries, symlinks)
    if cap == "ngx":
        dlls = find_wine_dlls(root, search_paths)
        libraries += dlls
        if not dlls:
            missing.append(catalog.WINE_DIR + "/*.dll")
        searched += (_join(d, catalog.WINE_DIR) for d in search_paths)
    return _capability_files(cap, libraries, binaries, configs, missing, searched)


def _capabilities(capabilities: Collection[str]) -> tuple[str, ...]:
    """Known names in canonical order; ``all`` means every capability."""
    names = set(capabilities)
    if CAPABILITY_ALL in names:
        names = set(ALL_CAPABILITIES)
    unknown = sorted(names.difference(ALL_CAPABILITIES))
    if unknown:
        known = ", ".join(ALL_CAPABILITIES)
        raise RequestError(f"unknown driver capability {unknown[0]!r} (known: {known}, all)")
    return tuple(c for c in ALL_CAPABILITIES if c in names)


def _read_cache(root: Root, problems: list[str]) -> LdCache | None:
    """The driver root's ld.so.cache; a missing or broken one is a problem, not an error."""
    real = root.regular_file(catalog.LD_CACHE)
    if real is None:
        problems.append(f"{root.host(catalog.LD_CACHE)}: no ld.so.cache; searched directories only")
        return None
    try:
        return read_ld_cache(root.host(real), prefixes=_CACHE_PREFIXES)
    except DriverError as e:
        problems.append(f"{e.message}; searched directories only")
        return None


def _find_libraries(
    finder: LibraryFinder,
    specs: Sequence[catalog.LibrarySpec],
    version: str | None,
    bits: int,
    libraries: list[str],
    missing: list[str],
    symlinks: set[Symlink],
) -> None:
    for spec in specs:
        library = finder.find(spec, version)
        if library is None:
            if catalog.expected(spec, version, bits=bits):
                missing.append(spec.stem)
            continue
        libraries.append(library.path)
        symlinks.update(_links(library))


def _gbm_backend(
    finder: LibraryFinder, version: str | None, libraries: list[str], symlinks: set[Symlink]
) -> None:
    """GBM's NVIDIA backend: ``<libdir>/gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1``.

    Mesa's libgbm loads ``<libdir>/gbm/<drm driver>_gbm.so`` for the DRM driver of the device
    it opens (``nvidia-drm``); the driver's installer makes that link to the allocator, whose
    SONAME link (``libnvidia-allocator.so.1``) the same hook creates. NVIDIA's toolkit adds
    both with graphics or display (``internal/discover/graphics.go``: the allocator among the
    graphics mounts, the link among its ``create-symlinks``); a driver without the allocator
    (before 470) gets neither.
    """
    library = finder.find(_ALLOCATOR, version)
    if library is None:
        return
    libraries.append(library.path)
    symlinks.update(_links(library))
    directory = library.path.rpartition("/")[0]
    symlinks.add(Symlink(f"../{_ALLOCATOR_SONAME}", f"{directory}/{GBM_BACKEND}"))


def _links(library: Library) -> list[Symlink]:
    """The SONAME link and the development links a found library needs."""
    directory, _, name = library.path.rpartition("/")
    out = []
    if library.soname and library.soname != name and "/" not in library.soname:
        out.append(Symlink(name, f"{directory}/{library.soname}"))
    for dev in catalog.DEV_LINKS:
        if dev.stem != library.stem:
            continue
        target = library.soname if dev.to_soname else name
        if target and "/" not in target and dev.link != target and dev.link != name:
            out.append(Symlink(target, f"{directory}/{dev.link}"))
    return out


def _compat32_files(
    root: Root,
    cache: LdCache | None,
    machine: str,
    wanted: Sequence[str],
    version: str | None,
    search_paths: Sequence[str],
    symlinks: set[Symlink],
    problems: list[str],
) -> CapabilityFiles:
    specs = [s for c in catalog.COMPAT32_CAPABILITIES if c in wanted for s in catalog.LIBRARIES[c]]
    arch32 = _COMPAT32_ARCH.get(machine)
    if arch32 is None:
        problems.append(f"compat32: {machine} has no 32-bit driver libraries")
        lacking = [s.stem for s in specs if catalog.expected(s, version, bits=32)]
        return _capability_files("compat32", [], [], [], lacking, [])
    finder = LibraryFinder(root, arch=arch32, cache=cache, search_paths=search_paths)
    libraries: list[str] = []
    missing: list[str] = []
    _find_libraries(finder, specs, version, 32, libraries, missing, symlinks)
    problems += finder.problems
    searched = [catalog.LD_CACHE, *search_paths, *_subdirs(specs, search_paths)]
    return _capability_files("compat32", libraries, [], [], missing, searched)


def _subdirs(specs: Sequence[catalog.LibrarySpec], search_paths: Sequence[str]) -> list[str]:
    subdirs = sorted({s.subdir for s in specs if s.subdir})
    return [_join(d, sub) for sub in subdirs for d in search_paths]


def _join(directory: str, name: str) -> str:
    return ("" if directory == "/" else directory) + "/" + name


def _capability_files(
    capability: str,
    libraries: list[str],
    binaries: list[str],
    configs: list[str],
    missing: list[str],
    searched: Sequence[str],
) -> CapabilityFiles:
    return CapabilityFiles(
        capability=capability,
        libraries=tuple(sorted(set(libraries))),
        binaries=tuple(sorted(set(binaries))),
        configs=tuple(sorted(set(configs))),
        missing=tuple(sorted(set(missing))),
        searched=tuple(dict.fromkeys(searched)),
    )
