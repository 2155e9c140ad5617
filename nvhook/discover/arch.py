"""Which architecture a driver root is built for.

Discovery looks for the driver's libraries of one architecture (the ``ld.so.cache`` entries
whose flags that architecture's loader accepts, files of that ELF class and machine). That
is the architecture of the *driver root*, not necessarily of the machine nvhook runs on: a
driver root may be another machine's tree (an aarch64 node's root inspected from an x86-64
one, a mock machine laid out for aarch64), and nothing would be found if this machine's own
architecture were assumed. :func:`driver_arch` decides it, in this order:

1. the architecture asked for (``discover_driver_files(arch=…)``), when given;
2. the driver root's ``ld.so.cache``: the architectures of the entries for the driver's
   anchor libraries (:data:`~nvhook.discover.catalog.VERSION_ANCHORS`: ``libnvidia-ml``,
   ``libcuda``, …) by their flags (x86-64 ``0x0303``, aarch64 ``0x0a03``). If this machine's
   architecture is among them it wins (a multi-arch root is read as the running machine
   reads it); else the first one in cache order;
3. without such entries (no cache, a broken one, a driver the cache does not list), the ELF
   header (class and ``e_machine``) of the first anchor library file found in the search
   directories;
4. else this machine's architecture (``os.uname().machine``), and discovery reports what
   it does not find as it always has.

Only the 64-bit architectures a driver is built for count (:data:`SUPPORTED`); i386 is
compat32's, looked for next to an x86-64 driver. Costs nothing extra on the runtime
shim's path when the cache lists the driver (step 2 reads entries already parsed).
"""

from __future__ import annotations

import os

from nvhook.discover.catalog import VERSION_ANCHORS
from nvhook.discover.elf import ARCH_ELF, read_elf
from nvhook.discover.ldsocache import ARCH_FLAGS
from nvhook.errors import DriverError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvhook.discover.ldsocache import LdCache
    from nvhook.discover.root import Root

__all__ = ["ALIASES", "SUPPORTED", "driver_arch", "machine_arch", "normalize_arch"]

#: The architectures the driver is built for (64-bit), in ``os.uname().machine`` spelling.
SUPPORTED: tuple[str, ...] = ("aarch64", "x86_64")
#: Other spellings (Debian's and Go's ``amd64``/``arm64``; 32-bit x86's).
ALIASES: dict[str, str] = {"amd64": "x86_64", "arm64": "aarch64", "i686": "i386", "i586": "i386"}

_BY_FLAGS = {flags: arch for arch in SUPPORTED for flags in ARCH_FLAGS[arch]}
_BY_ELF = {ARCH_ELF[arch]: arch for arch in SUPPORTED}


def normalize_arch(name: str) -> str:
    """``name`` in ``os.uname().machine`` spelling; DriverError unless it is in SUPPORTED."""
    arch = ALIASES.get(name, name)
    if arch not in SUPPORTED:
        raise DriverError(
            f"unsupported architecture {name!r} for driver discovery"
            f" (supported: {', '.join(SUPPORTED)})"
        )
    return arch


def machine_arch() -> str:
    """This machine's architecture, as ``os.uname()`` names it (aliases resolved)."""
    name = os.uname().machine
    return ALIASES.get(name, name)


def driver_arch(root: Root, cache: LdCache | None, search_paths: Sequence[str]) -> str:
    """The architecture of the driver under ``root`` (steps 2-4 of the module docstring)."""
    native = machine_arch()
    seen: list[str] = []
    if cache is not None:
        for entry in cache.entries:
            arch = _BY_FLAGS.get(entry.flags)
            if arch is None or entry.hwcap or arch in seen:
                continue
            stem, dot, number = entry.soname.rpartition(".")
            if dot and number.isdigit() and stem in VERSION_ANCHORS:
                seen.append(arch)
    if not seen:
        found = _from_elf(root, search_paths)
        if found is not None:
            seen.append(found)
    if not seen or native in seen:
        return native
    return seen[0]


def _from_elf(root: Root, search_paths: Sequence[str]) -> str | None:
    """The architecture of the first anchor library file in ``search_paths``, if any."""
    for stem in VERSION_ANCHORS:
        for directory in search_paths:
            base = "" if directory == "/" else directory
            for name in sorted(root.listdir(directory)):
                if not name.startswith(stem + "."):
                    continue
                real = root.regular_file(f"{base}/{name}")
                info = None if real is None else read_elf(root.host(real))
                if info is not None:
                    arch = _BY_ELF.get((info.elf_class, info.machine))
                    if arch is not None:
                        return arch
    return None
