"""What ``nvhook runtime configure`` writes, and how ``unconfigure`` takes it back.

A configurator (one module per engine) only computes a :class:`Plan`: for each file it
would touch, the bytes there now (``None``: no file) and the bytes it wants there. This
module shows a plan as a unified diff (``--dry-run``), applies it, and undoes it.

Backups live under a backup directory (default ``/var/lib/nvhook/backups``), never beside
the config: containerd's ``imports`` globs and CRI-O's ``crio.conf.d`` read every file of
their directory and would load a backup as config. Per engine and main config file there
is one record, ``<engine>-<hash of the path>.json``, naming each file nvhook changed, a copy
of its original bytes (or the fact that there was no file), its mode and owner, and the
SHA-256 of what nvhook last wrote there. The first configure makes the record; a later one
keeps the originals (the true ones) and only updates what it wrote; one that changes
nothing writes nothing at all.

``unconfigure`` writes the original bytes back, removes the files nvhook created (and the
directories it created, when empty) and deletes the record. It refuses when a file changed
since nvhook last wrote it (a person's later edits would be lost) unless ``force``.

Writes are atomic (a temp file in the same directory, fsync, rename over) and keep the
mode and owner; a symlink or a non-regular file is refused, never followed. Everything
that can fail comes before the first rename: the backup record, then every temp file; if a
rename still fails, the files already renamed get their previous bytes back.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

from nvhook.errors import EngineConfigError, EngineWriteError
from oci._frozen import Frozen

__all__ = [
    "DEFAULT_BACKUP_DIR",
    "FileChange",
    "Plan",
    "apply_plan",
    "apply_unconfigure",
    "plan_unconfigure",
    "read_file",
    "record_path",
    "unified_diff",
]

DEFAULT_BACKUP_DIR = "/var/lib/nvhook/backups"
_RECORD_FORMAT = 1
_NEW_FILE_MODE = 0o644


class FileChange(Frozen):
    """One file: its bytes now (None: absent) and after (None: to be removed)."""

    path: str
    old: bytes | None
    new: bytes | None

    @property
    def changed(self) -> bool:
        return self.old != self.new


class Plan(Frozen):
    """Every file change of one configure (or unconfigure) of one engine's config."""

    engine: str
    config: str  # the main config file: names the backup record
    changes: tuple[FileChange, ...]
    notes: tuple[str, ...] = ()
    #: directories to create first (configure) or to remove when empty (unconfigure)
    dirs: tuple[str, ...] = ()
    #: unconfigure: the backup record that the plan restores from
    record: str | None = None

    @property
    def changed(self) -> tuple[FileChange, ...]:
        return tuple(c for c in self.changes if c.changed)


def read_file(path: str) -> bytes | None:
    """The bytes of ``path``, or None when there is no such file.

    A symlink or anything but a regular file is an :class:`EngineConfigError`: replacing a
    link with a file (or writing through it) would surprise whoever made it.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise EngineConfigError(f"{path}: cannot read: {e.strerror}") from e
    if stat.S_ISLNK(st.st_mode):
        raise EngineConfigError(
            f"{path} is a symbolic link (to {os.readlink(path)}): nvhook edits only regular "
            "files; pass the file it points to with --config"
        )
    if not stat.S_ISREG(st.st_mode):
        raise EngineConfigError(f"{path} is not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            return f.read()
    except OSError as e:
        raise EngineConfigError(f"{path}: cannot read: {e.strerror}") from e


def unified_diff(changes: Iterable[FileChange]) -> str:
    """A unified diff of every changed file (``/dev/null`` for a created or removed one)."""
    out: list[str] = []
    for c in changes:
        if not c.changed:
            continue
        lines = difflib.unified_diff(
            _lines(c.old),
            _lines(c.new),
            fromfile=c.path if c.old is not None else "/dev/null",
            tofile=c.path if c.new is not None else "/dev/null",
        )
        for line in lines:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _lines(data: bytes | None) -> list[str]:
    return [] if data is None else data.decode("utf-8", "replace").splitlines(keepends=True)


def record_path(backup_dir: str, engine: str, config: str) -> str:
    """The backup record of ``engine``'s config file ``config``."""
    digest = hashlib.sha256(os.path.abspath(config).encode()).hexdigest()[:16]
    return os.path.join(backup_dir, f"{engine}-{digest}.json")


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- configure


def apply_plan(plan: Plan, backup_dir: str) -> list[str]:
    """Write ``plan``'s changed files, backing up each original first; returns their paths.

    A plan that changes nothing writes nothing (not even the record).
    """
    changes = plan.changed
    if not changes:
        return []
    for c in changes:  # the files are still what the plan was made from
        if read_file(c.path) != c.old:
            raise EngineConfigError(f"{c.path} changed while nvhook was reading it; run it again")
    path = record_path(backup_dir, plan.engine, plan.config)
    old_record_bytes = read_file(path)
    record = _load_record(path, old_record_bytes) or {
        "format": _RECORD_FORMAT,
        "engine": plan.engine,
        "config": os.path.abspath(plan.config),
        "files": [],
        "dirs": [],
    }
    entries = {e["path"]: e for e in record["files"]}
    new_originals: list[str] = []
    new_dirs = [d for d in plan.dirs if not os.path.isdir(d)]
    try:
        os.makedirs(backup_dir, mode=0o700, exist_ok=True)  # copies of configs: keep them private
        for c in changes:
            entry = entries.get(c.path)
            if entry is None:
                entry = {"path": c.path, "original": None, "mode": None, "uid": None, "gid": None}
                if c.old is not None:
                    st = os.stat(c.path)
                    name = f"{os.path.basename(path)[:-5]}.{len(record['files'])}.orig"
                    _write_atomic(os.path.join(backup_dir, name), c.old, mode=0o600)
                    new_originals.append(os.path.join(backup_dir, name))
                    entry.update(original=name, mode=stat.S_IMODE(st.st_mode))
                    entry.update(uid=st.st_uid, gid=st.st_gid)
                record["files"].append(entry)
                entries[c.path] = entry
            entry["written_sha256"] = _sha(c.new)
        record["dirs"] = [*record["dirs"], *(d for d in new_dirs if d not in record["dirs"])]
        _write_atomic(path, (json.dumps(record, indent=2) + "\n").encode(), mode=0o600)
    except OSError as e:
        for orig in new_originals:
            with contextlib.suppress(OSError):
                os.unlink(orig)
        raise EngineWriteError(
            f"cannot write the backup of {changes[0].path} to {backup_dir}: {e.strerror}"
        ) from e
    try:
        for d in new_dirs:
            try:
                _makedirs(d)
            except OSError as e:
                raise EngineWriteError(f"cannot create {d}: {e.strerror}") from e
        _commit(changes, modes={c.path: None for c in changes})
    except EngineWriteError:
        _undo_record(path, old_record_bytes, new_originals)
        for d in reversed(new_dirs):
            with contextlib.suppress(OSError):
                os.rmdir(d)
        raise
    return [c.path for c in changes]


def _undo_record(path: str, old: bytes | None, originals: Sequence[str]) -> None:
    with contextlib.suppress(OSError):
        if old is None:
            os.unlink(path)
        else:
            _write_atomic(path, old, mode=0o600)
    for orig in originals:
        with contextlib.suppress(OSError):
            os.unlink(orig)


def _load_record(path: str, data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        record = json.loads(data)
    except ValueError as e:
        raise EngineConfigError(f"{path}: invalid backup record: {e}") from e
    if not isinstance(record, dict) or record.get("format") != _RECORD_FORMAT:
        raise EngineConfigError(f"{path}: not an nvhook backup record of format {_RECORD_FORMAT}")
    return record


# --------------------------------------------------------------------------- unconfigure


def plan_unconfigure(engine: str, config: str, backup_dir: str, *, force: bool = False) -> Plan:
    """The changes that put back every file nvhook changed in ``engine``'s ``config``.

    Raises :class:`EngineConfigError` when a file changed since nvhook wrote it (unless
    ``force``). With no record, the plan is empty and says so in its notes.
    """
    path = record_path(backup_dir, engine, config)
    record = _load_record(path, read_file(path))
    if record is None:
        note = f"no change by nvhook to {config} is recorded in {backup_dir}: nothing to undo"
        return Plan(engine, config, (), notes=(note,))
    changes = []
    for entry in record["files"]:
        current = read_file(entry["path"])
        if _sha(current) != entry["written_sha256"] and not force:
            where = (
                f"its original is {os.path.join(backup_dir, entry['original'])}"
                if entry["original"]
                else "nvhook created it"
            )
            raise EngineConfigError(
                f"{entry['path']} changed since nvhook wrote it ({where}); "
                "restore it by hand, or use --force to overwrite the changes"
            )
        original = None
        if entry["original"] is not None:
            original = read_file(os.path.join(backup_dir, entry["original"]))
            if original is None:
                raise EngineConfigError(
                    f"the backup {os.path.join(backup_dir, entry['original'])} of "
                    f"{entry['path']} is missing"
                )
        changes.append(FileChange(entry["path"], current, original))
    return Plan(engine, config, tuple(changes), dirs=tuple(record["dirs"]), record=path)


def apply_unconfigure(plan: Plan, backup_dir: str) -> list[str]:
    """Restore the files of a :func:`plan_unconfigure` plan; then drop the record."""
    if plan.record is None:
        return []
    record_file = plan.record
    record = _load_record(record_file, read_file(record_file)) or {"files": []}
    modes: dict[str, tuple[int, int, int] | None] = {
        e["path"]: (e["mode"], e["uid"], e["gid"]) for e in record["files"] if e["mode"] is not None
    }
    changes = plan.changed
    _commit(changes, modes=modes)
    for d in reversed(plan.dirs):
        with contextlib.suppress(OSError):
            os.rmdir(d)
    for entry in record["files"]:
        if entry["original"]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(backup_dir, entry["original"]))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(record_file)
    return [c.path for c in changes]


# --------------------------------------------------------------------------- file writes


def _commit(
    changes: Sequence[FileChange], *, modes: dict[str, tuple[int, int, int] | None]
) -> None:
    """Write (or remove) every file, all or nothing as far as the filesystem allows."""
    temps: list[tuple[FileChange, str | None]] = []
    try:
        for c in changes:
            tmp = None if c.new is None else _temp_like(c.path, c.new, modes.get(c.path))
            temps.append((c, tmp))
    except OSError as e:
        for _, tmp in temps:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        failed = changes[len(temps)].path
        raise EngineWriteError(f"cannot write {failed}: {e.strerror}; nothing changed") from e
    done: list[FileChange] = []
    try:
        for c, tmp in temps:
            if tmp is None:
                os.unlink(c.path)
            else:
                os.replace(tmp, c.path)
                _fsync_dir(os.path.dirname(c.path))
            done.append(c)
    except OSError as e:
        for _, tmp in temps[len(done) :]:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        for c in reversed(done):  # put back what was there
            with contextlib.suppress(OSError):
                if c.old is None:
                    os.unlink(c.path)
                else:
                    _write_atomic(c.path, c.old, mode=None)
        failed = changes[len(done)].path
        raise EngineWriteError(f"cannot write {failed}: {e.strerror}; nothing changed") from e


def _temp_like(path: str, data: bytes, owner: tuple[int, int, int] | None) -> str:
    """A temp file beside ``path`` holding ``data``, with the mode and owner of ``path``.

    ``owner`` (mode, uid, gid) is used when ``path`` does not exist (a restored file).
    """
    try:
        st = os.stat(path)
        mode, uid, gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
    except FileNotFoundError:
        mode, uid, gid = owner if owner is not None else (_NEW_FILE_MODE, -1, -1)
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(
        prefix=f".{os.path.basename(path)}.", suffix=".nvhook-tmp", dir=directory
    )
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            if os.geteuid() == 0 and (uid, gid) != (-1, -1):
                os.fchown(f.fileno(), uid, gid)
            os.fsync(f.fileno())
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _write_atomic(path: str, data: bytes, *, mode: int | None) -> None:
    tmp = _temp_like(path, data, None if mode is None else (mode, -1, -1))
    try:
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _makedirs(directory: str) -> None:
    os.makedirs(directory, mode=0o755, exist_ok=True)


def _fsync_dir(directory: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
