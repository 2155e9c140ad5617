"""Find the driver's other files under a root: binaries, configuration, firmware, IPC, modules.

Each function returns paths inside the root (resolved, so a symlinked
``/lib`` or ``/var/run`` gives the real location) and, where a missing file
is worth reporting, the names it did not find. Nothing here raises for a
missing file: what is optional on one host is absent on another.
"""

from __future__ import annotations

import stat

from nvhook.discover.catalog import WINE_DIR, XorgModule
from nvhook.discover.libraries import version_key, version_of
from nvhook.discover.root import Root

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "find_binaries",
    "find_configs",
    "find_firmware",
    "find_ipc",
    "find_wine_dlls",
    "find_xorg_modules",
]


def _join(directory: str, name: str) -> str:
    return ("" if directory == "/" else directory) + "/" + name


def find_binaries(
    root: Root, names: Sequence[str], dirs: Sequence[str]
) -> tuple[list[str], list[str]]:
    """``(found, missing)``: for each name, the first regular file of that name in ``dirs``."""
    found: list[str] = []
    missing: list[str] = []
    for name in names:
        for d in dirs:
            real = root.regular_file(_join(d, name))
            if real is not None:
                found.append(real)
                break
        else:
            missing.append(name)
    return found, missing


def find_configs(
    root: Root, relative: Sequence[str], bases: Sequence[str]
) -> tuple[list[str], list[str]]:
    """``(found, missing)``: for each relative path, the first base holding it as a file."""
    return find_binaries(root, relative, bases)


def find_firmware(root: Root, directory: str, version: str | None) -> list[str]:
    """The GSP firmware files ``<directory>/<version>/gsp_*.bin``."""
    if version is None:
        return []
    fw = _join(directory, version)
    out = []
    for name in root.listdir(fw):
        if name.startswith("gsp_") and name.endswith(".bin"):
            real = root.regular_file(_join(fw, name))
            if real is not None:
                out.append(real)
    return out


def find_ipc(root: Root, sockets: Sequence[str]) -> list[str]:
    """The IPC endpoints among ``sockets`` that exist (anything but a directory)."""
    out = []
    for path in sockets:
        st = root.stat(path)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            real = root.resolve(path)
            if real is not None:
                out.append(real)
    return out


def find_xorg_modules(
    root: Root, modules: Sequence[XorgModule], dirs: Sequence[str], version: str | None
) -> tuple[list[tuple[XorgModule, str]], list[str]]:
    """``(found, missing)``: each module's file in the first modules dir that has it.

    A versioned module is ``<name>.<version>``; without a version, the highest
    ``<name>.<numbers>`` there.
    """
    found: list[tuple[XorgModule, str]] = []
    missing: list[str] = []
    for module in modules:
        for d in dirs:
            sub = _join(d, module.subdir)
            if not module.versioned:
                names = [module.name]
            elif version is not None:
                names = [f"{module.name}.{version}"]
            else:
                versions = [(v, n) for n in root.listdir(sub) if (v := version_of(module.name, n))]
                versions.sort(key=lambda vn: version_key(vn[0]), reverse=True)
                names = [n for _, n in versions]
            real = next(
                (r for n in names if (r := root.regular_file(_join(sub, n))) is not None), None
            )
            if real is not None:
                found.append((module, real))
                break
        else:
            missing.append(module.name)
    return found, missing


def find_wine_dlls(root: Root, library_dirs: Sequence[str]) -> list[str]:
    """NGX's ``*.dll`` files in ``<library dir>/nvidia/wine/`` of the first dir that has any."""
    for d in library_dirs:
        wine = _join(d, WINE_DIR)
        out = []
        for name in root.listdir(wine):
            if name.endswith(".dll"):
                real = root.regular_file(_join(wine, name))
                if real is not None:
                    out.append(real)
        if out:
            return out
    return []
