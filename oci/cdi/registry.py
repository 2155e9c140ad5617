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

:func:`resolve` gives the same answers as ``Registry(dirs).resolve(names)``
without parsing every file (docs/architecture.md D5: nodes with DRA drivers hold a spec per
claim). It lists the directories and stats each spec file, and keeps an *index*
of what each file defines, keyed by the file's identity ``(st_dev, st_ino,
st_size, st_mtime_ns, st_ctime_ns)``: ``("ok", kind, device names)`` or
``("error", message, ())``. Only new or changed files are parsed, plus the files
whose definitions win for the requested names: edits always come from the file
itself, never from the index, which only decides which files to read.

- ctime is in the key because ``os.utime`` cannot set it: an in-place edit that
  keeps the size and restores the mtime still changes the key.
- A file is remembered only when its identity is the same before and after it
  is parsed, and when it last changed more than :data:`RACY_NS` before the scan
  began: a change within the same timestamp tick (a jiffy; a second on some
  filesystems) would not change the key, so recent files are parsed again.
- The index is kept in ``cache_dir`` (marshal, through :mod:`oci._cache`, which
  decides whose files and directories are believed), one file per list of spec
  directories: ``{directory: {file name: (st_dev, st_ino, st_size, st_mtime_ns,
  st_ctime_ns, "ok" or "error", kind or message, device names)}}``, written
  atomically and only when it changed. A missing, unreadable, corrupt,
  foreign-owned or stale index is ignored (a malformed record: its file is
  parsed); one that cannot be written is not an error. A refused cache directory
  is reported in ``warnings``.
- The YAML files of the requested kinds are kept decoded beside it (JSON decodes as
  fast as a kept document is read), one cache file per spec path (``cdi-spec-…``),
  keyed by the same identity: ``(format, path, identity, decoded document)``. A YAML
  spec then costs
  what a JSON one does (PyYAML: its import, a row of ``bench/figures.py``, and its parse; the strict
  parser over the decoded document: ~1 ms), with the same rules: written only for a settled file
  whose identity held still while it was read, believed only through
  :mod:`oci._cache` (this user's directory and 0600 files), and parsed again by
  :func:`~oci.cdi.parse.parse_spec` whenever it is used, so a stale or corrupt one
  can only mean that the file is read again. A document that is not plain JSON data
  (a duplicate key the parser must see) is not kept.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from stat import S_ISREG

from oci import _cache
from oci._frozen import Frozen
from oci.cdi.decode import decode_spec
from oci.cdi.edits import Edits
from oci.cdi.names import parse_qualified_name
from oci.cdi.parse import parse_spec, read_spec_data
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
    "RACY_NS",
    "SPEC_SUFFIXES",
    "Definition",
    "Registry",
    "judged_spec_files",
    "read_checked",
    "resolve",
    "untrusted_line",
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
        self._refuse = _refuses(untrusted)
        self._loader = loader if loader is not None else _checked_loader(self._refuse)
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
        requested = _checked_names(names)
        unresolved = [n for n in requested if n not in self._devices]
        if unresolved:
            none = not self._specs and not self._errors
            refused = list(dict.fromkeys(self._untrusted.values())) if self._refuse else []
            message = _unresolved_message(unresolved, self.spec_dirs, self._errors, none, refused)
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
                        self._errors.setdefault(path, []).append(_refused(verdict))
                        continue
                try:
                    spec = self._loader(path)
                except CdiTrustError as e:  # changed since listed
                    self._untrusted.setdefault(path, str(e))
                    self._errors.setdefault(path, []).append(_refused(str(e)))
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
        files, problem = _list_spec_files(directory, ignored)
        for path, why in ignored.items():
            self._ignored.setdefault(path, why)
        if problem is not None:
            self._errors.setdefault(directory, []).append(problem)
        return [(path, verdict) for path, _, _, verdict in files]


def _checked_names(names: Iterable[str]) -> list[str]:
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


def _unresolved_message(
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
    return _refused(verdict) if _refuses(untrusted) else _warned(verdict)


def judged_spec_files(spec_dirs: Iterable[str]) -> list[tuple[str, str, str | None]]:
    """The spec files of ``spec_dirs`` as :class:`Registry` lists and judges them, in scan
    order, each once: its directory, its path, and why it is not trusted (None: it is). A
    missing or unreadable directory holds none (:attr:`Registry.errors` names it)."""
    found: dict[str, tuple[str, str, str | None]] = {}
    for directory in spec_dirs:
        for path, _, _, verdict in _list_spec_files(directory)[0]:
            found.setdefault(path, (directory, path, verdict))
    return list(found.values())


def _refuses(untrusted: str) -> bool:
    if untrusted not in (REFUSE, WARN):
        raise ValueError(f"untrusted must be {REFUSE!r} or {WARN!r}, not {untrusted!r}")
    return untrusted == REFUSE


def _refused(verdict: str) -> str:
    return f"{verdict} (not used)"


def _warned(verdict: str) -> str:
    return f"{verdict} (used anyway: untrusted spec files are only warned of)"


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_checked(path: str) -> object:
    """A spec file read and decoded as :func:`~oci.cdi.parse.read_spec_data` does, but opened
    with ``O_NOFOLLOW`` and judged by ``fstat`` of what was opened: an untrusted file (or a
    link) raises :class:`CdiTrustError` before a byte of it is read."""
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
    try:
        return decode_spec(raw, suffix=os.path.splitext(path)[1])
    except ValueError as e:
        raise CdiSpecError(f"{path}: {e}") from None


def _checked_loader(refuse: bool) -> SpecLoader:
    """The loader of spec files: judged as opened when refusing, else as listed only."""
    read = read_checked if refuse else read_spec_data

    def load(path: str) -> Spec:
        return parse_spec(read(path), source=path)

    return load


_NOT_A_SPEC_NAME = "ignored: not a CDI spec file name (only *.json and *.yaml are read)"


def _list_spec_files(
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
                verdict = dir_verdict or (link_problem(path) if link else file_problem(path, st))
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
RACY_NS = 2_000_000_000
_INDEX_FORMAT = 1
_SPEC_FORMAT = 1


def resolve(
    spec_dirs: Sequence[str],
    names: Iterable[str],
    *,
    cache_dir: str | None = None,
    loader: SpecLoader | None = None,
    warnings: list[str] | None = None,
    untrusted: str = REFUSE,
) -> Edits:
    """What ``Registry(spec_dirs, untrusted=untrusted).resolve(names)`` gives, parsing only
    what it must.

    ``cache_dir`` keeps the index, and the decoded files read for their edits, between
    calls (None: nothing is kept, every file is parsed once); a cache directory refused
    as unsafe is appended to ``warnings``, and so is each untrusted spec file, refused or
    not (its line). ``loader`` reads one spec file (tests count its calls; a loader given
    keeps no decoded files). The trust of a file is judged on every call, from the listing,
    never from the index, and again as a file is opened for its edits.
    """
    dirs = tuple(spec_dirs)
    requested = _checked_names(names)
    refuse = _refuses(untrusted)
    if not requested:
        return Edits()
    index_file = _index_name(dirs)
    old = _read_index(cache_dir, index_file, dirs, warnings) if cache_dir else {}
    kinds = {name.partition("=")[0] for name in requested}
    read = read_checked if refuse else read_spec_data
    kept = _KeptSpecs(cache_dir, kinds, warnings, read) if cache_dir and loader is None else None
    chosen = _checked_loader(refuse) if loader is None else loader
    scan = _IndexedScan(dirs, old, kinds, chosen, kept, refuse=refuse)
    if warnings is not None:
        for verdict in scan.untrusted.values():
            line = untrusted_line(verdict, untrusted)
            if line not in warnings:
                warnings.append(line)
    while True:
        winners, unresolved = scan.decide(requested)
        unread = [p for p in dict.fromkeys(winners.values()) if p not in scan.parsed]
        if unresolved or not unread:
            break
        for path in unread:  # their entries may change if the files did: decide again
            scan.parse(path)
    if cache_dir and scan.index != old:
        _cache.store(cache_dir, index_file, (_INDEX_FORMAT, dirs, scan.index), warnings)
    if unresolved:
        none = not scan.files and not scan.bad_dirs
        refused = list(dict.fromkeys(scan.untrusted.values())) if refuse else []
        message = _unresolved_message(unresolved, dirs, scan.problems(), none, refused)
        raise CdiResolveError(message, names=tuple(unresolved), no_specs=none)
    edits = Edits()
    seen: set[str] = set()
    for name in requested:
        path = winners[name]
        spec = scan.specs[path]
        if path not in seen:
            seen.add(path)
            edits = edits + spec.edits
        device = spec.device(name.partition("=")[2])
        assert device is not None  # the entry was made from this very spec
        edits = edits + device.edits
    return edits


class _IndexedScan:
    """The spec files of ``dirs`` and what each defines: from the index when unchanged."""

    def __init__(
        self,
        dirs: tuple[str, ...],
        old: Index,
        kinds: set[str],
        loader: SpecLoader,
        kept: _KeptSpecs | None = None,
        *,
        refuse: bool = True,
    ) -> None:
        self._kinds = kinds
        self._loader = loader
        self._kept = kept
        self._settled_before = time.time_ns() - RACY_NS
        self.files: list[tuple[int, str]] = []  # (priority, path), in scan order
        self.entries: dict[str, Entry] = {}
        self.index: Index = {}  # what to remember: settled, unchanged while parsed
        self.specs: dict[str, Spec] = {}  # parsed in this call, of a requested kind
        self.parsed: set[str] = set()
        self.bad_dirs: list[str] = []
        self.untrusted: dict[str, str] = {}  # path -> why, judged on every call
        self._idents: dict[str, tuple[Ident, dict[str, Record], str]] = {}
        for priority, directory in enumerate(dirs):
            listed, problem = _list_spec_files(directory)
            if problem is not None:
                self.bad_dirs.append(directory)
            known = old.get(directory)
            if type(known) is not dict:
                known = {}
            remembered = self.index.setdefault(directory, {})
            for path, name, st, verdict in listed:
                self.files.append((priority, path))
                if path in self._idents:  # a directory listed twice
                    continue
                ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                self._idents[path] = (ident, remembered, name)
                if verdict is not None:
                    self.untrusted[path] = verdict
                    if refuse:  # never parsed, never remembered, never from the index
                        self.entries[path] = ("error", _refused(verdict), ())
                        self.parsed.add(path)
                        continue
                record = known.get(name)
                if type(record) is tuple and len(record) == 8 and record[:5] == ident:
                    entry = _checked_entry(record[5:])
                    if entry is not None:
                        self.entries[path] = entry
                        remembered[name] = record
                        continue
                self.parse(path)

    def settled(self, ident: Ident) -> bool:
        """Whether a file of that identity last changed before the racy window."""
        return max(ident[3], ident[4]) < self._settled_before

    def parse(self, path: str) -> None:
        """Parse one file: its entry for this call, and for the index if it held still."""
        ident, remembered, name = self._idents[path]
        self.parsed.add(path)
        self.specs.pop(path, None)
        entry: Entry
        try:
            if self._kept is not None:
                spec = self._kept.load(path, ident, self.settled(ident))
            else:
                spec = self._loader(path)
        except CdiTrustError as e:  # changed since it was listed: judged again when read
            self.untrusted[path] = str(e)
            self.entries[path] = ("error", _refused(str(e)), ())
            remembered.pop(name, None)
            return
        except CdiError as e:
            entry = ("error", str(e), ())
        else:
            entry = ("ok", sys.intern(spec.kind), tuple(d.name for d in spec.devices))
            if spec.kind in self._kinds:
                self.specs[path] = spec
        self.entries[path] = entry
        remembered.pop(name, None)
        if self.settled(ident) and _ident(path) == ident:
            remembered[name] = ident + entry

    def decide(self, requested: list[str]) -> tuple[dict[str, str], list[str]]:
        """The winning file of each requested name, and the names without one (in order)."""
        found: dict[str, list[tuple[int, str]]] = {name: [] for name in requested}
        kinds = self._kinds
        for priority, path in self.files:
            status, kind, devices = self.entries[path]
            if status == "ok" and kind in kinds:
                for device in devices:
                    defs = found.get(f"{kind}={device}")
                    if defs is not None:
                        defs.append((priority, path))
        winners: dict[str, str] = {}
        unresolved: list[str] = []
        for name, defs in found.items():
            top = max((priority for priority, _ in defs), default=-1)
            at_top = [path for priority, path in defs if priority == top]
            if len(at_top) == 1:
                winners[name] = at_top[0]
            else:  # not defined, or defined twice at the same priority
                unresolved.append(name)
        return winners, unresolved

    def problems(self) -> set[str]:
        """The paths :attr:`Registry.errors` would name: directories, broken and
        conflicting files (only needed for an error message, so done only then)."""
        bad = set(self.bad_dirs)
        found: dict[str, list[tuple[int, str]]] = {}
        for priority, path in self.files:
            status, kind, devices = self.entries[path]
            if status != "ok":
                bad.add(path)
                continue
            for device in devices:
                found.setdefault(f"{kind}={device}", []).append((priority, path))
        for defs in found.values():
            top = max(priority for priority, _ in defs)
            at_top = [path for priority, path in defs if priority == top]
            if len(at_top) > 1:
                bad.update(at_top)
        return bad


class _KeptSpecs:
    """Reads YAML spec files through their kept decoded documents (the module docstring);
    keeps those of the requested kinds (not a DRA driver's thousand claim specs of another).
    A JSON file is read directly: decoding it costs what reading a kept document does."""

    def __init__(
        self,
        cache_dir: str,
        kinds: set[str],
        warnings: list[str] | None,
        read: Callable[[str], object] = read_checked,
    ) -> None:
        self._cache_dir = cache_dir
        self._kinds = kinds
        self._warnings = warnings
        self._read = read

    def load(self, path: str, ident: Ident, settled: bool) -> Spec:
        """The spec at ``path``, listed with identity ``ident`` (``settled``: old enough)."""
        if not path.endswith(_KEPT_SUFFIXES):
            return parse_spec(self._read(path), source=path)
        name = _cache.cache_name("cdi-spec", path)
        kept = _cache.load(self._cache_dir, name, self._warnings)
        if (
            type(kept) is tuple
            and len(kept) == 4
            and kept[0] == _SPEC_FORMAT
            and kept[1] == path
            and kept[2] == ident
        ):
            try:
                return parse_spec(kept[3], source=path)
            except CdiError:  # cannot be one we wrote: read the file instead
                pass
        data = self._read(path)
        spec = parse_spec(data, source=path)
        if settled and spec.kind in self._kinds and _ident(path) == ident and _plain(data, 0):
            _cache.store(self._cache_dir, name, (_SPEC_FORMAT, path, ident, data), self._warnings)
        return spec


#: The spec files kept decoded: YAML (PyYAML's import, bench/figures.py, and parse, a start).
_KEPT_SUFFIXES = (".yaml",)
_PLAIN_SCALARS = (str, int, float, bool, type(None))


def _plain(data: object, depth: int) -> bool:
    """Whether ``data`` (at ``depth``) is plain JSON data (exact dicts with str keys, lists,
    scalars). A kept document is YAML, which the decoder refused deeper than
    :data:`~oci.nesting.YAML_MAX_DEPTH` (so neither this walk nor marshal meets more)."""
    kind = type(data)
    if kind in _PLAIN_SCALARS:
        return True
    if depth > _KEPT_DEPTH:
        return False
    if kind is list and isinstance(data, list):
        return all(_plain(item, depth + 1) for item in data)
    if kind is dict and isinstance(data, dict):
        return all(type(k) is str and _plain(v, depth + 1) for k, v in data.items())
    return False


#: How deep a kept document may be: what the YAML decoder reads (oci.nesting.YAML_MAX_DEPTH,
#: checked by tests/oci/test_nesting.py), not imported on the shim's path for one number.
_KEPT_DEPTH = 64


def _ident(path: str) -> Ident | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _index_name(dirs: tuple[str, ...]) -> str:
    return _cache.cache_name("cdi-index", "\0".join(dirs))


def _read_index(
    cache_dir: str, name: str, dirs: tuple[str, ...], warnings: list[str] | None
) -> Index:
    """The index kept for ``dirs``; empty when missing, unreadable, corrupt or not ours.

    Its records are checked as they are used (:func:`_checked_entry`): one that is
    malformed only means that its file is parsed again.
    """
    data = _cache.load(cache_dir, name, warnings)
    if (
        type(data) is not tuple
        or len(data) != 3
        or data[0] != _INDEX_FORMAT
        or data[1] != dirs
        or type(data[2]) is not dict
    ):
        return {}
    index: Index = data[2]  # each directory's table and record is checked as it is used
    return index


def _checked_entry(entry: object) -> Entry | None:
    """``entry`` if it has the shape of one (the index file may be corrupt), else None."""
    if type(entry) is not tuple or len(entry) != 3:
        return None
    status, text, devices = entry
    if type(text) is not str or type(devices) is not tuple:
        return None
    if status == "ok":
        for device in devices:
            if type(device) is not str:
                return None
        return (status, text, devices)
    if status == "error" and not devices:
        return (status, text, devices)
    return None
