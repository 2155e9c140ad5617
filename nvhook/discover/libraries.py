"""Find the driver's libraries under a driver root: its ``ld.so.cache`` first, then directories.

For one architecture (``x86_64``, ``aarch64``, or ``i386`` for compat32), a
library stem is looked up

1. in the driver root's ``/etc/ld.so.cache`` (parsed by :mod:`nvhook.discover.ldsocache`):
   the entries of that architecture whose SONAME is ``<stem>.<n>``; the entry's
   path (usually the SONAME symlink) is resolved inside the root and taken when
   the file is ``<stem>.<driver version>``, or sits next to such a file;
2. in the directories of those cache entries and then the configured search
   paths (plus the library's subdirectory, e.g. ``vdpau/``): the file
   ``<stem>.<driver version>`` whose ELF class and machine match; its SONAME
   is read from its dynamic section.

Without a driver version (and for the EGL platform libraries, which carry
their own numbers) any ``<stem>.<numbers>`` is accepted: the cache's choice,
or in a directory the highest version.
"""

from __future__ import annotations

from nvhook.discover.catalog import LibrarySpec
from nvhook.discover.elf import ARCH_ELF, read_elf
from nvhook.discover.ldsocache import ARCH_FLAGS, LdCache
from nvhook.discover.root import Root
from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Library", "LibraryFinder", "is_version", "version_key", "version_of"]


class Library(Frozen):
    """A library found: its real file (a path in the root) and SONAME (None if unknown)."""

    stem: str
    path: str
    soname: str | None


def version_of(stem: str, name: str) -> str | None:
    """The version in the file name ``<stem>.<version>`` (digits and dots), else None."""
    if not name.startswith(stem + "."):
        return None
    version = name[len(stem) + 1 :]
    return version if is_version(version) else None


def is_version(text: str) -> bool:
    """Digits separated by dots (``550.54.15``, ``1``)."""
    return bool(text) and all(part.isdigit() and part.isascii() for part in text.split("."))


def version_key(version: str) -> tuple[int, ...]:
    """``"550.54.15"`` -> ``(550, 54, 15)``, for ordering versions."""
    return tuple(int(part) for part in version.split("."))


def _stem_of(soname: str) -> str | None:
    """``libcuda.so.1`` -> ``libcuda.so``; None when the name has no ``.so``."""
    at = soname.find(".so.")
    if at >= 0:
        return soname[: at + 3]
    return soname if soname.endswith(".so") else None


class LibraryFinder:
    """Looks libraries of one architecture up under one root; remembers what went wrong."""

    def __init__(
        self,
        root: Root,
        *,
        arch: str,
        cache: LdCache | None,
        search_paths: Sequence[str],
    ) -> None:
        self.root = root
        self.arch = arch
        self.search_paths = tuple(search_paths)
        self.problems: list[str] = []
        self._elf = ARCH_ELF[arch]
        self._entries: dict[str, list[tuple[str, str]]] = {}
        if cache is not None:
            accepted = ARCH_FLAGS[arch]
            for entry in cache.entries:
                if entry.hwcap or entry.flags not in accepted:
                    continue  # hwcap variants are optimised copies, not the driver's files
                stem = _stem_of(entry.soname)
                if stem is not None:
                    self._entries.setdefault(stem, []).append((entry.soname, entry.path))

    def find(self, spec: LibrarySpec, version: str | None) -> Library | None:
        """The file of ``spec`` for the driver ``version`` (None: any version), or None."""
        want = None if spec.own_version or version is None else f"{spec.stem}.{version}"
        dirs: list[str] = []
        for soname, path in self._entries.get(spec.stem, ()):
            real = self.root.regular_file(path)
            if real is None:
                continue  # a stale entry: the file is gone
            directory, _, name = real.rpartition("/")
            if want is None:
                if version_of(spec.stem, name) is not None:
                    return Library(spec.stem, real, soname)
            elif name == want:
                return Library(spec.stem, real, soname)
            else:
                found = version_of(spec.stem, name)
                self.problems.append(
                    f"{self.root.host(path)}: {soname} is {name}"
                    f"{f' (version {found})' if found else ''}, not driver version {version}"
                )
            for d in (path.rpartition("/")[0], directory):
                if d and d not in dirs:
                    dirs.append(d)
        for d in (*dirs, *self.search_paths):
            library = self._in_directory(spec, d + "/" + spec.subdir if spec.subdir else d, want)
            if library is not None:
                return library
        return None

    def _in_directory(self, spec: LibrarySpec, directory: str, want: str | None) -> Library | None:
        if want is not None:
            names: list[str] = [want]
        else:
            listing = self.root.listdir(directory)
            versions = [(v, n) for n in listing if (v := version_of(spec.stem, n)) is not None]
            versions.sort(key=lambda vn: version_key(vn[0]), reverse=True)
            names = [n for _, n in versions]
        base = "" if directory == "/" else directory
        for name in names:
            real = self.root.regular_file(base + "/" + name)
            if real is None:
                continue
            info = read_elf(self.root.host(real))
            if info is None or (info.elf_class, info.machine) != self._elf:
                continue  # not a library, or one of another architecture (/usr/lib on RHEL)
            return Library(spec.stem, real, info.soname)
        return None

    def infer_version(self, stems: Sequence[str]) -> str | None:
        """The driver version that the first of ``stems`` found is built for, or None."""
        for stem in stems:
            library = self.find(LibrarySpec(stem), None)
            if library is not None:
                version = version_of(stem, library.path.rpartition("/")[2])
                if version is not None:
                    return version
        return None
