"""A registry of CDI specs over spec directories, with the reference cache's rules.

- Directories are scanned in order (default ``/etc/cdi`` then ``/var/run/cdi``);
  a later directory has a higher priority: its definition of a device wins.
- Two definitions of one qualified name at the same priority (two files of
  one directory) drop the device and record an error against both files.
- Only regular ``.json`` and ``.yaml`` files (links followed) are listed, as the
  reference library lists them (a link is then untrusted: :mod:`oci.cdi.trust`, and
  :func:`judged_spec_files` gives the list with each verdict); every other entry
  (``.yml``, ``.json.bak``, ``README``, a directory, a dangling link) is ignored and listed in
  :attr:`Registry.ignored` with why. A broken file is recorded as an error
  against its path and never hides the others; a missing directory is simply
  empty; an unreadable one is an error against it.
- :meth:`Registry.resolve` turns requested names into one :class:`Edits`: as
  the reference ``InjectDevices`` does, a spec's own edits are added once,
  before the edits of the first requested device it defines, and devices
  follow in request order. Unresolvable names fail together in one error.

The indexed resolution the runtime shim uses, :func:`oci.cdi.index.resolve`, gives the
same answers without parsing every file.
"""

from __future__ import annotations

import errno
import os
from stat import S_ISREG

from oci._frozen import Frozen
from oci.cdi.edits import Edits
from oci.cdi.names import parse_qualified_name
from oci.cdi.spec import Device, Spec
from oci.cdi.trust import REFUSE, WARN, directory_problem, file_problem, link_problem
from oci.errors import CdiError, CdiNameError, CdiResolveError, CdiSpecError, CdiTrustError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import TypeAlias

    SpecLoader: TypeAlias = Callable[[str], Spec]
    #: ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)``
    Ident: TypeAlias = tuple[int, int, int, int, int]
    #: ``("ok", kind, device names)`` or ``("error", message, ())``
    Entry: TypeAlias = tuple[str, str, tuple[str, ...]]
    #: ident and entry in one flat tuple, as the index file keeps it
    Record: TypeAlias = tuple[int, int, int, int, int, str, str, tuple[str, ...]]
    #: ``{directory: {file name: record}}``
    Index: TypeAlias = dict[str, dict[str, Record]]

__all__ = [
    "DEFAULT_SPEC_DIRS",
    "SPEC_SUFFIXES",
    "Definition",
    "Registry",
    "checked_loader",
    "checked_names",
    "judged_spec_files",
    "list_spec_files",
    "read_checked",
    "read_checked_stat",
    "refused_line",
    "refuses",
    "unresolved_message",
    "untrusted_line",
    "warned_line",
]

DEFAULT_SPEC_DIRS: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
#: The names the reference library reads (``filepath.Ext`` of ``.json`` or ``.yaml``, case
#: sensitive); ``.yml`` is not one of them.
SPEC_SUFFIXES: tuple[str, ...] = (".json", ".yaml")


class Definition(Frozen):
    """Where one qualified device name is defined."""

    name: str
    spec: Spec
    device: Device
    path: str
    priority: int


class Registry:
    """CDI specs found in ``spec_dirs`` (scanned once, at construction).

    ``untrusted``: what an untrusted spec file (:mod:`oci.cdi.trust`) is, :data:`REFUSE`
    (an error against it, its devices undefined) or :data:`WARN` (read and used; listed in
    :attr:`untrusted` all the same).
    """

    def __init__(
        self,
        spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS,
        *,
        loader: SpecLoader | None = None,
        untrusted: str = REFUSE,
    ) -> None:
        self.spec_dirs = tuple(spec_dirs)
        self._refuse = refuses(untrusted)
        self._loader = loader if loader is not None else checked_loader(self._refuse)
        self._devices: dict[str, Definition] = {}
        self._errors: dict[str, list[str]] = {}
        self._ignored: dict[str, str] = {}
        self._untrusted: dict[str, str] = {}
        self._specs: list[Spec] = []
        self._scan()

    @property
    def untrusted(self) -> Mapping[str, str]:
        """The spec files that are not trusted (refused or not), by path, with the line that
        says why and how to fix it."""
        return dict(sorted(self._untrusted.items()))

    @property
    def warnings(self) -> tuple[str, ...]:
        """With ``untrusted=WARN``, the line of each untrusted spec file that was used anyway
        (refused files are in :attr:`errors` instead)."""
        if self._refuse:
            return ()
        return tuple(untrusted_line(v, WARN) for v in dict.fromkeys(self.untrusted.values()))

    @property
    def devices(self) -> Mapping[str, Definition]:
        """Every resolvable qualified name and where it is defined, sorted by name."""
        return dict(sorted(self._devices.items()))

    @property
    def errors(self) -> Mapping[str, tuple[str, ...]]:
        """Problems found while scanning, by file (or directory) path."""
        return {path: tuple(msgs) for path, msgs in sorted(self._errors.items())}

    @property
    def ignored(self) -> Mapping[str, str]:
        """Entries of the spec directories that are not read, by path, with why (each once)."""
        return dict(sorted(self._ignored.items()))

    @property
    def specs(self) -> tuple[Spec, ...]:
        """The specs that loaded, in scan order."""
        return tuple(self._specs)

    def resolve(self, names: Iterable[str]) -> Edits:
        """The edits that inject ``names`` (qualified ``vendor/class=name`` each)."""
        requested = checked_names(names)
        unresolved = [n for n in requested if n not in self._devices]
        if unresolved:
            none = not self._specs and not self._errors
            refused = list(dict.fromkeys(self._untrusted.values())) if self._refuse else []
            message = unresolved_message(unresolved, self.spec_dirs, self._errors, none, refused)
            raise CdiResolveError(message, names=tuple(unresolved), no_specs=none)
        edits = Edits()
        seen_specs: set[int] = set()
        for name in requested:
            definition = self._devices[name]
            if id(definition.spec) not in seen_specs:
                seen_specs.add(id(definition.spec))
                edits = edits + definition.spec.edits
            edits = edits + definition.device.edits
        return edits

    def _scan(self) -> None:
        candidates: dict[str, list[Definition]] = {}
        for priority, directory in enumerate(self.spec_dirs):
            for path, verdict in self._spec_files(directory):
                if verdict is not None:
                    self._untrusted.setdefault(path, verdict)
                    if self._refuse:
                        self._errors.setdefault(path, []).append(refused_line(verdict))
                        continue
                try:
                    spec = self._loader(path)
                except CdiTrustError as e:  # changed since listed
                    self._untrusted.setdefault(path, str(e))
                    self._errors.setdefault(path, []).append(refused_line(str(e)))
                    continue
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

    def _spec_files(self, directory: str) -> list[tuple[str, str | None]]:
        """The spec files of ``directory``, each with why it is not trusted (or None)."""
        ignored: dict[str, str] = {}
        files, problem = list_spec_files(directory, ignored)
        for path, why in ignored.items():
            self._ignored.setdefault(path, why)
        if problem is not None:
            self._errors.setdefault(directory, []).append(problem)
        return [(path, verdict) for path, _, _, verdict in files]


def checked_names(names: Iterable[str]) -> list[str]:
    """``names`` without repeats, in order; every malformed one fails together."""
    requested = list(dict.fromkeys(names))
    malformed: list[str] = []
    for name in requested:
        try:
            parse_qualified_name(name)
        except CdiNameError as e:
            malformed.append(str(e))
    if malformed:
        raise CdiNameError("; ".join(malformed))
    return requested


def unresolved_message(
    unresolved: Sequence[str],
    spec_dirs: Sequence[str],
    problems: Iterable[str],
    no_specs: bool,
    refused: Sequence[str] = (),
) -> str:
    quoted = ", ".join(repr(n) for n in unresolved)
    noun = "device" if len(unresolved) == 1 else "devices"
    if no_specs:
        return f"unresolvable CDI {noun} {quoted}: no CDI spec in " + ", ".join(spec_dirs)
    msg = f"unresolvable CDI {noun} {quoted}: not defined in any spec in " + ", ".join(spec_dirs)
    if refused:
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        return f"{msg}; untrusted spec files are not read: {refused[0]}{more}"
    bad = sorted(set(problems))
    if bad:
        msg += f" (problems in {len(bad)} file(s), see `nvhook cdi list`: {', '.join(bad)})"
    return msg


def untrusted_line(verdict: str, untrusted: str) -> str:
    """The line that reports an untrusted spec file (``verdict``: :mod:`oci.cdi.trust`'s line)
    under ``untrusted``: not used (:data:`REFUSE`) or used anyway (:data:`WARN`)."""
    return refused_line(verdict) if refuses(untrusted) else warned_line(verdict)


def judged_spec_files(spec_dirs: Iterable[str]) -> list[tuple[str, str, str | None]]:
    """The spec files of ``spec_dirs`` as :class:`Registry` lists and judges them, in scan
    order, each once: its directory, its path, and why it is not trusted (None: it is). A
    missing or unreadable directory holds none (:attr:`Registry.errors` names it)."""
    found: dict[str, tuple[str, str, str | None]] = {}
    for directory in spec_dirs:
        for path, _, _, verdict in list_spec_files(directory)[0]:
            found.setdefault(path, (directory, path, verdict))
    return list(found.values())


def refuses(untrusted: str) -> bool:
    if untrusted not in (REFUSE, WARN):
        raise ValueError(f"untrusted must be {REFUSE!r} or {WARN!r}, not {untrusted!r}")
    return untrusted == REFUSE


def refused_line(verdict: str) -> str:
    return f"{verdict} (not used)"


def warned_line(verdict: str) -> str:
    return f"{verdict} (used anyway: untrusted spec files are only warned of)"


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_checked(path: str) -> object:
    """A spec file read and decoded as :func:`~oci.cdi.parse.read_spec_data` does, but opened
    with ``O_NOFOLLOW`` and judged by ``fstat`` of what was opened: an untrusted file (or a
    link) raises :class:`CdiTrustError` before a byte of it is read."""
    return read_checked_stat(path)[0]


def read_checked_stat(path: str) -> tuple[object, os.stat_result]:
    """:func:`read_checked`, with the ``fstat`` of the file it judged and read."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CdiTrustError(link_problem(path)) from None
        raise CdiSpecError(f"{path}: cannot read: {e.strerror or e}") from e
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not S_ISREG(st.st_mode):
            raise CdiSpecError(f"{path}: not a regular file")
        problem = file_problem(path, st)
        if problem is not None:
            raise CdiTrustError(problem)
        try:
            raw = f.read()
        except OSError as e:
            raise CdiSpecError(f"{path}: cannot read: {e.strerror or e}") from e
    from oci.cdi.parse import decode_spec_file

    return decode_spec_file(raw, path), st


def read_unchecked(path: str) -> object:
    """A spec file read and decoded (:func:`~oci.cdi.parse.read_spec_data`), judged as
    listed only (``cdi.untrusted_specs = "warn"``)."""
    from oci.cdi.parse import read_spec_data

    return read_spec_data(path)


def checked_loader(refuse: bool) -> SpecLoader:
    """The loader of spec files: judged as opened when refusing, else as listed only."""
    read = read_checked if refuse else read_unchecked

    def load(path: str) -> Spec:
        from oci.cdi.parse import parse_spec

        return parse_spec(read(path), source=path)

    return load


_NOT_A_SPEC_NAME = "ignored: not a CDI spec file name (only *.json and *.yaml are read)"


def list_spec_files(
    directory: str, ignored: dict[str, str] | None = None
) -> tuple[list[tuple[str, str, os.stat_result, str | None]], str | None]:
    """The regular ``.json``/``.yaml`` files of ``directory`` (links followed), by name:
    path, name, ``stat`` and why it is not trusted (None: it is; :mod:`oci.cdi.trust`,
    judged from ``fstat`` of the directory opened, the entry's type and the ``stat``);
    and a problem with the directory (None: missing is empty).

    ``ignored``, when given, receives every other entry's path with why it is not read
    (the indexed resolve on the start path passes none: it stats only spec names).
    """
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return [], None
    except NotADirectoryError:
        return [], f"{directory}: CDI spec directory is not a directory"
    except OSError as e:
        return [], f"{directory}: cannot read CDI spec directory: {e.strerror or e}"
    files = []
    prefix = os.path.join(directory, "")  # what os.path.join(directory, name) puts first
    try:
        dir_verdict = directory_problem(directory, os.fstat(fd))
        trusted = (0, os.geteuid())  # the owners oci.cdi.trust believes
        with os.scandir(fd) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
        for entry in entries:
            name = entry.name
            if not name.endswith(SPEC_SUFFIXES):
                if ignored is not None:
                    ignored[prefix + name] = _NOT_A_SPEC_NAME
                continue
            try:
                st = os.stat(name, dir_fd=fd)
                link = entry.is_symlink()  # the type from the listing: no system call
            except OSError:  # a dangling link, or gone since listed: not a file
                if ignored is not None:
                    ignored[prefix + name] = "ignored: a dangling link (or gone while listed)"
                continue
            if S_ISREG(st.st_mode):
                path = prefix + name
                if dir_verdict or link or st.st_uid not in trusted or st.st_mode & 0o022:
                    verdict = dir_verdict or (
                        link_problem(path) if link else file_problem(path, st)
                    )
                else:  # the common case, without a call per file (1,000 claim specs)
                    verdict = None
                files.append((path, name, st, verdict))
            elif ignored is not None:
                ignored[prefix + name] = "ignored: not a regular file"
    except OSError as e:
        return [], f"{directory}: cannot read CDI spec directory: {e.strerror or e}"
    finally:
        os.close(fd)
    return files, None


# --------------------------------------------------------------------------- indexed resolution

#: A file whose ctime (or mtime) is less than this many ns before a scan is parsed
#: but not remembered: a later change within one timestamp tick would keep its key.
#: Two seconds cover filesystems with whole-second timestamps plus a jiffy.
