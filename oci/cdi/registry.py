"""A registry of CDI specs over spec directories, with the reference cache's rules.

- Directories are scanned in order (default ``/etc/cdi`` then ``/var/run/cdi``);
  a later directory has a higher priority: its definition of a device wins.
- Two definitions of one qualified name at the same priority (two files of
  one directory) drop the device and record an error against both files.
- Only ``.json``, ``.yaml`` and ``.yml`` files are read; a broken file is
  recorded as an error against its path and never hides the others; a missing
  directory is simply empty; an unreadable one is an error against it.
- :meth:`Registry.resolve` turns requested names into one :class:`Edits`: as
  the reference ``InjectDevices`` does, a spec's own edits are added once,
  before the edits of the first requested device it defines, and devices
  follow in request order. Unresolvable names fail together in one error.
"""

from __future__ import annotations

import os

from oci._frozen import Frozen
from oci.cdi.edits import Edits
from oci.cdi.names import parse_qualified_name
from oci.cdi.spec import Device, Spec, load_spec
from oci.errors import CdiError, CdiNameError, CdiResolveError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import TypeAlias

    SpecLoader: TypeAlias = Callable[[str], Spec]

__all__ = ["DEFAULT_SPEC_DIRS", "SPEC_SUFFIXES", "Definition", "Registry"]

DEFAULT_SPEC_DIRS: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
SPEC_SUFFIXES: tuple[str, ...] = (".json", ".yaml", ".yml")


class Definition(Frozen):
    """Where one qualified device name is defined."""

    __slots__ = ("name", "spec", "device", "path", "priority")  # noqa: RUF023 - field order
    name: str
    spec: Spec
    device: Device
    path: str
    priority: int

    def __init__(self, name: str, spec: Spec, device: Device, path: str, priority: int) -> None:
        self._set(name=name, spec=spec, device=device, path=path, priority=priority)


class Registry:
    """CDI specs found in ``spec_dirs`` (scanned once, at construction)."""

    def __init__(
        self, spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS, *, loader: SpecLoader = load_spec
    ) -> None:
        self.spec_dirs = tuple(spec_dirs)
        self._loader = loader
        self._devices: dict[str, Definition] = {}
        self._errors: dict[str, list[str]] = {}
        self._specs: list[Spec] = []
        self._scan()

    @property
    def devices(self) -> Mapping[str, Definition]:
        """Every resolvable qualified name and where it is defined, sorted by name."""
        return dict(sorted(self._devices.items()))

    @property
    def errors(self) -> Mapping[str, tuple[str, ...]]:
        """Problems found while scanning, by file (or directory) path."""
        return {path: tuple(msgs) for path, msgs in sorted(self._errors.items())}

    @property
    def specs(self) -> tuple[Spec, ...]:
        """The specs that loaded, in scan order."""
        return tuple(self._specs)

    def resolve(self, names: Iterable[str]) -> Edits:
        """The edits that inject ``names`` (qualified ``vendor/class=name`` each)."""
        requested = list(dict.fromkeys(names))
        malformed: list[str] = []
        for name in requested:
            try:
                parse_qualified_name(name)
            except CdiNameError as e:
                malformed.append(str(e))
        if malformed:
            raise CdiNameError("; ".join(malformed))
        unresolved = [n for n in requested if n not in self._devices]
        if unresolved:
            raise CdiResolveError(self._unresolved_message(unresolved), names=tuple(unresolved))
        edits = Edits()
        seen_specs: set[int] = set()
        for name in requested:
            definition = self._devices[name]
            if id(definition.spec) not in seen_specs:
                seen_specs.add(id(definition.spec))
                edits = edits + definition.spec.edits
            edits = edits + definition.device.edits
        return edits

    def _unresolved_message(self, unresolved: list[str]) -> str:
        quoted = ", ".join(repr(n) for n in unresolved)
        noun = "device" if len(unresolved) == 1 else "devices"
        msg = f"unresolvable CDI {noun} {quoted}: not defined in any spec in " + ", ".join(
            self.spec_dirs
        )
        if self._errors:
            bad = sorted(self._errors)
            msg += f" (problems in {len(bad)} file(s), see `nvhook cdi list`: {', '.join(bad)})"
        return msg

    def _scan(self) -> None:
        candidates: dict[str, list[Definition]] = {}
        for priority, directory in enumerate(self.spec_dirs):
            for path in self._spec_files(directory):
                try:
                    spec = self._loader(path)
                except CdiError as e:
                    self._errors.setdefault(path, []).append(str(e))
                    continue
                self._specs.append(spec)
                for device in spec.devices:
                    name = spec.qualified_name(device.name)
                    candidates.setdefault(name, []).append(
                        Definition(name, spec, device, path, priority)
                    )
        for name, defs in candidates.items():
            top = max(d.priority for d in defs)
            winners = [d for d in defs if d.priority == top]
            if len(winners) == 1:
                self._devices[name] = winners[0]
                continue
            files = [d.path for d in winners]
            for d in winners:
                others = ", ".join(p for p in files if p != d.path)
                self._errors.setdefault(d.path, []).append(
                    f"{d.path}: device {name!r} is also defined in {others} "
                    "at the same priority; it is ignored in both"
                )

    def _spec_files(self, directory: str) -> list[str]:
        try:
            with os.scandir(directory) as it:
                entries = sorted(e.name for e in it)
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            self._errors.setdefault(directory, []).append(
                f"{directory}: CDI spec directory is not a directory"
            )
            return []
        except OSError as e:
            self._errors.setdefault(directory, []).append(
                f"{directory}: cannot read CDI spec directory: {e.strerror or e}"
            )
            return []
        files = []
        for name in entries:
            if not name.endswith(SPEC_SUFFIXES):
                continue
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                files.append(path)
        return files
