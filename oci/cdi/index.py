"""Resolving CDI names without parsing every spec file: the registry's index.

:func:`resolve` gives the same answers as ``Registry(dirs).resolve(names)``
without parsing every file (docs/architecture.md D5: nodes with DRA drivers hold a spec per
claim). It lists the directories and stats each spec file, and keeps an *index*
of what each file defines, keyed by the file's identity ``(st_dev, st_ino,
st_size, st_mtime_ns, st_ctime_ns)``: ``("ok", kind, device names)`` or
``("error", message, ())``. Only new or changed files are parsed, plus the files
whose definitions win for the requested names: edits come from the file itself (or the
parser's value of it kept at the same identity, below), never from the index, which only
decides which files to read.

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
- The spec files of the requested kinds are kept *parsed* beside it: the strict parser's
  value (:func:`~oci.cdi.parse.parse_spec`) as plain data (:mod:`oci.cdi.kept`), one cache
  file per spec path (``cdi-parsed-…``): ``(stamp, path, identity, value)``, JSON and YAML
  alike. A call whose listing finds the file trusted with that identity takes the value and
  neither reads the file nor imports the parser (in a fresh shim the strict parse of the
  40 KB ``dgx-a100`` spec and its modules were 11% of a cdi create's instructions, a YAML
  one's PyYAML more: ``bench/instructions.py``). The rules are the index's and those of the
  values parsed ahead below: written only for a settled file whose identity held still while
  it was read, believed only through :mod:`oci._cache` (this user's directory and 0600
  files), and only when made by this very parser: the stamp (:func:`parser_stamp`) holds
  the value classes' layout and the size, mtime and ctime of the parser's source files, so a
  value kept before an upgrade or an edit of them is parsed again. A stale, corrupt or
  foreign value can only mean that the file is read.
- A long-lived process can parse spec files *ahead* (:func:`parse_ahead`:
  ``nvhook-shim-server``'s parent, while idle; its forked children inherit the values):
  each trusted, settled file of the given directories (at most :data:`AHEAD_FILES`
  files and :data:`AHEAD_BYTES` bytes, the oldest first), read through
  :func:`~oci.cdi.registry.read_checked_stat` and kept with the identity of the bytes
  read (the same before and after). A call uses such a value in place of reading and
  parsing the file only when its own listing finds the file trusted (its directory's
  ``fstat``, the entry's type, owner and mode: judged on every call as ever) with that
  very identity; any other file, any mismatch, is read and parsed in the call. The
  identity stands for the bytes and the owner and mode as it does for the kept parsed
  values: a write moves mtime and ctime, chown and chmod move ctime, which no user can
  set, a replacement renamed over the file is another inode, and a file is parsed ahead
  only once it has settled (:data:`RACY_NS`), so a change within one timestamp tick
  cannot keep the key. The one parser makes the value (:func:`~oci.cdi.parse.parse_spec`);
  this only keeps its result.
"""

from __future__ import annotations

import os
import sys
import time

from oci import _cache
from oci.cdi.edits import Edits
from oci.cdi.kept import LAYOUT, spec_data, spec_from_data
from oci.cdi.registry import (
    checked_loader,
    checked_names,
    list_spec_files,
    read_checked,
    read_checked_stat,
    read_unchecked,
    refused_line,
    refuses,
    unresolved_message,
    untrusted_line,
)
from oci.cdi.trust import REFUSE
from oci.errors import CdiError, CdiResolveError, CdiTrustError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import TypeAlias

    from oci.cdi.registry import SpecLoader
    from oci.cdi.spec import Spec

    #: ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)``
    Ident: TypeAlias = tuple[int, int, int, int, int]
    #: ``("ok", kind, device names)`` or ``("error", message, ())``
    Entry: TypeAlias = tuple[str, str, tuple[str, ...]]
    #: ident and entry in one flat tuple, as the index file keeps it
    Record: TypeAlias = tuple[int, int, int, int, int, str, str, tuple[str, ...]]
    #: ``{directory: {file name: record}}``
    Index: TypeAlias = dict[str, dict[str, Record]]

__all__ = ["AHEAD_BYTES", "AHEAD_FILES", "RACY_NS", "parse_ahead", "resolve", "touch_ahead"]

RACY_NS = 2_000_000_000
_INDEX_FORMAT = 1


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
    requested = checked_names(names)
    refuse = refuses(untrusted)
    if not requested:
        return Edits()
    index_file = _index_name(dirs)
    old = _read_index(cache_dir, index_file, dirs, warnings) if cache_dir else {}
    wanted: dict[str, set[str]] = {}
    for name in requested:
        kind, _, device_name = name.partition("=")
        wanted.setdefault(kind, set()).add(device_name)
    kinds = set(wanted)
    read = read_checked if refuse else read_unchecked
    kept = _KeptSpecs(cache_dir, wanted, warnings, read) if cache_dir and loader is None else None
    chosen = checked_loader(refuse) if loader is None else loader
    ahead = _AHEAD if loader is None and _AHEAD else None
    scan = _IndexedScan(dirs, old, kinds, chosen, kept, refuse=refuse, ahead=ahead)
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
        message = unresolved_message(unresolved, dirs, scan.problems(), none, refused)
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
        assert device is not None  # the entry was made from this very spec (its kept value
        # holds every device of its kind asked for)
        edits = edits + device.edits
    return edits


#: How many spec files :func:`parse_ahead` keeps parsed at most, and how many bytes of them.
AHEAD_FILES = 16
AHEAD_BYTES = 4 << 20
#: The specs :func:`parse_ahead` parsed, by path as listed: the identity of the bytes read
#: (trusted as read) and the strict parser's value of them. Empty but in a process that
#: parses ahead (``nvhook-shim-server``'s parent; its children inherit it by ``fork``).
_AHEAD: dict[str, tuple[Ident, Spec]] = {}


def parse_ahead(
    spec_dirs: Iterable[str], *, files: int = AHEAD_FILES, size: int = AHEAD_BYTES
) -> int:
    """Parse the trusted, settled spec files of ``spec_dirs`` ahead of the calls (the module
    docstring); how many are kept. At most ``files`` files, ``size`` bytes in all, the
    oldest first (a node's device specs stay, a DRA driver's per-claim specs come and go);
    a file unchanged since the last call is not read again, one that fails to parse is not
    kept (a call reads it, and says why, as ever). Whatever it raises, nothing is kept."""
    try:
        kept = _parsed_ahead(spec_dirs, files, size)
    except BaseException:
        _AHEAD.clear()
        raise
    _AHEAD.clear()
    _AHEAD.update(kept)
    return len(kept)


def _parsed_ahead(spec_dirs: Iterable[str], files: int, size: int) -> dict[str, tuple[Ident, Spec]]:
    settled_before = time.time_ns() - RACY_NS
    candidates: list[tuple[int, str, Ident]] = []
    seen: set[str] = set()
    for directory in spec_dirs:
        for path, _, st, verdict in list_spec_files(directory)[0]:
            if verdict is not None or path in seen:  # untrusted as listed: never parsed ahead
                continue
            seen.add(path)
            changed = max(st.st_mtime_ns, st.st_ctime_ns)
            if changed < settled_before:
                ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                candidates.append((changed, path, ident))
    candidates.sort()
    kept: dict[str, tuple[Ident, Spec]] = {}
    total = 0
    for _, path, ident in candidates:
        if len(kept) >= files:
            break
        if total + ident[2] > size:
            continue
        old = _AHEAD.get(path)
        if old is None or old[0] != ident:
            spec = _parse_held(path, ident)
            if spec is None:
                continue
            old = (ident, spec)
        kept[path] = old
        total += ident[2]
    return kept


def touch_ahead() -> int:
    """Write to every object of the values parsed ahead (their reference counts), so that a
    forked child takes its copy-on-write faults on their pages now rather than in a call
    (``nvhook-shim-server``'s spare child, while it warms up: in a forked child of a process
    holding the dgx-a100 spec, a resolve's ~180 faults more than in one that had done this,
    ~0.35 ms); how many objects."""
    import gc  # only here: a server's spare child

    stack: list[object] = list(_AHEAD.values())
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if id(item) not in seen:
            seen.add(id(item))
            stack.extend(gc.get_referents(item))
    return len(seen)


def _parse_held(path: str, ident: Ident) -> Spec | None:
    """The spec at ``path`` when the file read is trusted as opened (``O_NOFOLLOW``, its
    ``fstat``) and has the identity ``ident`` it was listed with, before and after it is
    read; else None."""
    from oci.cdi.parse import parse_spec

    try:
        data, st = read_checked_stat(path)
        spec = parse_spec(data, source=path)
    except CdiError:
        return None
    read = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if read != ident or _ident(path) != ident:
        return None
    return spec


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
        ahead: dict[str, tuple[Ident, Spec]] | None = None,
    ) -> None:
        self._kinds = kinds
        self._loader = loader
        self._kept = kept
        self._ahead = ahead
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
            listed, problem = list_spec_files(directory)
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
                        self.entries[path] = ("error", refused_line(verdict), ())
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
        ahead = None
        names: tuple[str, ...] | None = None  # all its devices' (a kept spec holds fewer)
        if self._ahead is not None and path not in self.untrusted:  # trusted as listed now
            ahead = self._ahead.get(path)
        try:
            if ahead is not None and ahead[0] == ident:  # parsed ahead from these very bytes
                spec = ahead[1]
            elif self._kept is not None:
                spec, names = self._kept.load(path, ident, self.settled(ident))
            else:
                spec = self._loader(path)
        except CdiTrustError as e:  # changed since it was listed: judged again when read
            self.untrusted[path] = str(e)
            self.entries[path] = ("error", refused_line(str(e)), ())
            remembered.pop(name, None)
            return
        except CdiError as e:
            entry = ("error", str(e), ())
        else:
            if names is None:
                names = tuple(d.name for d in spec.devices)
            entry = ("ok", sys.intern(spec.kind), names)
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
    """Reads spec files through their kept parsed values (the module docstring); keeps those
    of the requested kinds (not a DRA driver's thousand claim specs of another)."""

    def __init__(
        self,
        cache_dir: str,
        wanted: dict[str, set[str]],
        warnings: list[str] | None,
        read: Callable[[str], object] = read_checked,
    ) -> None:
        self._cache_dir = cache_dir
        self._wanted = wanted  # kind -> the device names asked for
        self._warnings = warnings
        self._read = read

    def load(self, path: str, ident: Ident, settled: bool) -> tuple[Spec, tuple[str, ...]]:
        """The spec at ``path``, listed with identity ``ident`` (``settled``: old enough), and
        the names of all its devices. A kept spec holds only the devices asked for of its
        kind (:func:`~oci.cdi.kept.spec_from_data`): what :func:`resolve` takes of it."""
        stamp = parser_stamp()
        name = _cache.cache_name("cdi-parsed", path)
        if stamp is not None:
            kept = _cache.load(self._cache_dir, name, self._warnings)
            if (
                type(kept) is tuple
                and len(kept) == 4
                and kept[0] == stamp
                and kept[1] == path
                and kept[2] == ident
            ):
                made = spec_from_data(kept[3], path, self._wanted)
                if made is not None:
                    return made
        from oci.cdi.parse import parse_spec  # only here: a kept value needs no parser

        spec = parse_spec(self._read(path), source=path)
        if stamp is not None and settled and spec.kind in self._wanted and _ident(path) == ident:
            _cache.store(
                self._cache_dir, name, (stamp, path, ident, spec_data(spec)), self._warnings
            )
        return spec, tuple(d.name for d in spec.devices)


#: What a kept value was made by (:func:`parser_stamp`): this format, the value classes'
#: :data:`~oci.cdi.kept.LAYOUT`, and the source files whose code decides the strict parser's
#: value, beside this module.
_KEPT_FORMAT = 2
_PARSER_SOURCES = (
    "cdi/parse.py", "cdi/decode.py", "cdi/names.py", "cdi/version.py", "cdi/edits.py",
    "cdi/spec.py", "cdi/kept.py", "_frozen.py", "jsoncodec.py", "errors.py", "nesting.py",
)  # fmt: skip
_STAMP: list[tuple[object, ...] | None] = []


def parser_stamp() -> tuple[object, ...] | None:
    """``(format, layout, (size, mtime_ns, ctime_ns) of each parser source)``, as this
    process found them first: a value kept by other code (an upgrade, an edit) is not used.
    None where a source cannot be stat'ed (say, loaded from a zip): nothing is kept."""
    if not _STAMP:
        base = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        files: list[tuple[int, int, int]] = []
        for name in _PARSER_SOURCES:
            try:
                st = os.stat(os.path.join(base, name))
            except OSError:
                _STAMP.append(None)
                break
            files.append((st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        else:
            _STAMP.append((_KEPT_FORMAT, LAYOUT, tuple(files)))
    return _STAMP[0]


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
