"""An OCI bundle's ``config.json``: lossless load, careful atomic save.

The spec file is precious (docs/architecture.md D4):

- :meth:`Bundle.load` returns the whole JSON value as plain dicts and lists, keeping
  every field nvhook does not model and the order of every object's keys; it checks
  the few fields nvhook edits (:func:`check_spec`) so that editing code can rely on
  their types, and keeps the file's bytes and ``stat``.
- :meth:`Bundle.save` writes nothing when the spec's value is the loaded one (the file
  stays byte-identical, same inode). Otherwise it writes a temporary file next to
  ``config.json``, with the original's mode (and owner, when running as root), and
  renames it over ``config.json``: a reader sees the old file or the new one, whole. A
  failure at any step leaves ``config.json`` as it was and removes the temporary file.
  Nothing is fsync'd: a bundle lives as long as its container's create, and no engine
  reads one back after a crash (containerd, Docker and CRI-O keep bundles on ``/run``, a
  tmpfs; podman writes the spec again at each container's init), while each fsync on a
  disk is a journal commit: 0.7 ms for the file and the directory on an idle disk here,
  5 ms for the file alone when other writers load it (bench/runtime.py ``--parts``).

Format written: compact JSON like Go's ``json.Marshal`` (what containerd and podman
write), no newline at the end; see :mod:`oci.jsoncodec` for the details. Duplicate
keys in the input: the last value wins, as in Go (so runc sees what nvhook sees).
"Unchanged" is decided on the serialised form, which tells ``1`` from ``1.0`` and
``true`` and sees a reordering of keys (Python's ``==`` does neither).

If ``config.json`` is a symlink, load reads its target (as runc does) and save
replaces the link in the bundle with a regular file: the target, which may be shared,
is never written.

Paths are ``str`` and handled with ``os.path``: ``import pathlib`` costs more than it saves
(``bench/figures.py``; docs/architecture.md D5).
"""

from __future__ import annotations

import errno
import os
import stat

from oci import jsoncodec
from oci.errors import BundleError, SpecError
from oci.jsoncodec import type_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["CONFIG_NAME", "Bundle", "check_spec", "parse_spec", "read_regular_file"]

#: The spec file's name inside a bundle.
CONFIG_NAME = "config.json"

_UINT32_MAX = 2**32 - 1


class Bundle:
    """An OCI bundle directory; ``path`` is made absolute (not normalised: ``..`` stays)."""

    __slots__ = ("_original", "_stat", "config_path", "path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        p = os.fspath(path)
        if not p:
            raise BundleError("bundle path is empty")
        if not os.path.isabs(p):
            try:
                p = os.path.join(os.getcwd(), p)
            except OSError as e:
                raise BundleError(f"{p}: cannot make the bundle path absolute: {e}") from None
        self.path: str = p
        self.config_path: str = os.path.join(self.path, CONFIG_NAME)
        self._original: bytes | None = None
        self._stat: os.stat_result | None = None

    def __repr__(self) -> str:
        return f"Bundle({self.path!r})"

    # -- load -------------------------------------------------------------------------

    def load(self) -> dict[str, Any]:
        """Read and parse ``config.json``; raise :class:`SpecError` naming the file and field."""
        cfg = self.config_path
        try:
            data, st = read_regular_file(cfg)
        except FileNotFoundError:
            if not os.path.isdir(self.path):
                raise SpecError(
                    f"{cfg}: no such file: the bundle directory does not exist"
                ) from None
            raise SpecError(f"{cfg}: no such file: the bundle has no {CONFIG_NAME}") from None
        except OSError as e:
            raise SpecError(f"{cfg}: cannot read: {e.strerror or e}") from None
        spec = parse_spec(data, source=cfg)
        self._original, self._stat = data, st
        return spec

    # -- save -------------------------------------------------------------------------

    def save(self, spec: dict[str, Any]) -> bool:
        """Write ``spec`` to ``config.json`` atomically; return whether the file was written.

        Nothing is written when ``spec`` serialises to the value that was loaded. Without
        a prior :meth:`load`, the file there (if any) is compared and its mode kept; a new
        file gets mode 0644. The owner is kept when running as root; otherwise the new
        file belongs to the caller (only root can give a file away).

        Raise :class:`BundleError` naming the file and the step that failed (including a
        spec that cannot be written as JSON or fails :func:`check_spec`, and a file
        changed on disk since it was loaded); the original file is then untouched and no
        temporary file is left behind.
        """
        cfg = self.config_path
        try:
            data = jsoncodec.dumpb(spec)
        except (TypeError, ValueError, RecursionError) as e:
            raise BundleError(f"{cfg}: cannot write the spec as JSON: {e}") from None
        if not isinstance(spec, dict):
            raise BundleError(f"{cfg}: the spec must be a JSON object, not {type_name(spec)}")
        problem = check_spec(spec)
        if problem is not None:
            raise BundleError(f"{cfg}: not writing an invalid spec: {problem}")

        loaded = self._stat is not None
        original: bytes | None
        before: os.stat_result | None
        if loaded:
            original, before = self._original, self._stat
        else:
            try:
                original, before = read_regular_file(cfg)
            except FileNotFoundError:
                original, before = None, None
            except OSError as e:
                raise BundleError(
                    f"{cfg}: cannot read the current file: {e.strerror or e}"
                ) from None
        if original is not None and _same_value(original, spec, data):
            return False

        if loaded and before is not None:
            try:
                now = os.stat(cfg)
            except OSError as e:
                raise BundleError(
                    f"{cfg}: cannot stat it before replacing it: {e.strerror or e}"
                ) from None
            if _identity(now) != _identity(before):
                raise BundleError(f"{cfg}: changed on disk since it was loaded; not overwriting it")

        self._stat = self._write(data, before)
        self._original = data
        return True

    def _write(self, data: bytes, before: os.stat_result | None) -> os.stat_result:
        cfg = self.config_path
        tmp = os.path.join(self.path, f".{CONFIG_NAME}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        mode = stat.S_IMODE(before.st_mode) if before is not None else 0o644
        step = f"create a temporary file in {self.path}"
        fd = -1
        created = False
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            created = True
            step = f"write {tmp}"
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if before is not None and os.geteuid() == 0:
                step = f"give {tmp} the owner {before.st_uid}:{before.st_gid}"
                os.fchown(fd, before.st_uid, before.st_gid)  # before fchmod: chown clears setuid
            step = f"give {tmp} the mode {mode:04o}"
            os.fchmod(fd, mode)
            after = os.fstat(fd)
            step = f"close {tmp}"
            closing, fd = fd, -1  # closed even if close() fails: never close it twice
            os.close(closing)
            step = f"rename {tmp} over it"
            os.replace(tmp, cfg)
        except BaseException as e:
            if fd >= 0:
                _quietly(os.close, fd)
            if created:
                _quietly(os.unlink, tmp)
            if isinstance(e, OSError):
                raise BundleError(f"{cfg}: cannot {step}: {e.strerror or e}") from e
            raise
        return after


def read_regular_file(path: str, *, limit: int | None = None) -> tuple[bytes, os.stat_result]:
    """The bytes and ``fstat`` of the regular file at ``path`` (a symlink is followed).

    Opened with ``O_NONBLOCK``, so that a FIFO planted there cannot hang the caller, then
    refused unless ``fstat`` says it is a regular file (``/dev/zero``, a directory, a FIFO:
    ``OSError(EINVAL, "not a regular file")``). With ``limit``, a file of more than that
    many bytes is refused (``OSError(EFBIG)``), whatever its size said when it was opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if limit is not None and st.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit // 1024} KiB")
        want = max(st.st_size + 1, 65536) if limit is None else limit + 1
        chunks = []
        size = 0
        while chunk := os.read(fd, want):
            chunks.append(chunk)
            size += len(chunk)
            if limit is not None and size > limit:  # it grew since fstat
                raise OSError(errno.EFBIG, f"larger than {limit // 1024} KiB")
    finally:
        os.close(fd)
    return b"".join(chunks), st


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _same_value(original: bytes, spec: object, data: bytes) -> bool:
    """Whether ``data`` (our serialisation of ``spec``) is the JSON value ``original`` holds.

    A value that Python's ``==`` tells from ``spec`` is another JSON value (``==`` is only
    looser: ``1 == 1.0 == True``, key order ignored), so the serialisation of what was
    read is made only for a value ``==`` cannot tell apart: not on a create that edited
    the spec (~60 us of a served call)."""
    if original == data:
        return True
    try:
        value = jsoncodec.loads(original.decode("utf-8"))
        return value == spec and jsoncodec.dumpb(value) == data
    except (UnicodeDecodeError, ValueError, TypeError, RecursionError):
        return False


def _quietly(func: Callable[[Any], object], arg: Any) -> None:
    try:
        func(arg)
    except OSError:
        return


# -- parsing and the structural check ---------------------------------------------------


def parse_spec(data: bytes | str, *, source: str) -> dict[str, Any]:
    """Parse a runtime spec (bytes or text); :class:`SpecError` messages begin with ``source``."""
    try:
        spec = jsoncodec.loadb(data)
    except jsoncodec.JSONError as e:
        raise SpecError(f"{source}: {e}") from None
    if not isinstance(spec, dict):
        raise SpecError(f"{source}: the top level must be a JSON object, not {type_name(spec)}")
    problem = check_spec(spec)
    if problem is not None:
        raise SpecError(f"{source}: {problem}")
    return spec


def check_spec(spec: Mapping[str, Any]) -> str | None:
    """Check the types of the fields nvhook edits; return the first problem, or None.

    The problem names the field path, e.g. ``process.env[3] must be a string, not
    number``. Checked: ``process`` (object), ``process.env`` (array of strings),
    ``process.user`` (object), its ``uid``/``gid`` (integers 0..2**32-1) and
    ``additionalGids`` (array of those), ``root`` (object) and ``root.path`` (string),
    ``mounts`` (array of objects, each with a string ``destination``), ``hooks`` (object
    of arrays of objects, each with a string ``path``), ``annotations`` (object of
    strings), ``linux`` (object), ``linux.devices`` (array of objects, each with a string
    ``path``), ``linux.resources`` (object) and ``linux.resources.devices`` (array of
    objects). An absent field is fine; ``null`` is not (Go's runtimes would read it as
    absent, but no runtime writes it, and editing code would trip on it).
    """
    if "process" in spec:
        process = spec["process"]
        if not isinstance(process, dict):
            return _wrong("process", "an object", process)
        if "env" in process and (p := _strings("process.env", process["env"])):
            return p
        if "user" in process:
            user = process["user"]
            if not isinstance(user, dict):
                return _wrong("process.user", "an object", user)
            for key in ("uid", "gid"):
                if key in user and (p := _uint32(f"process.user.{key}", user[key])):
                    return p
            if "additionalGids" in user:
                gids = user["additionalGids"]
                if not isinstance(gids, list):
                    return _wrong("process.user.additionalGids", "an array of integers", gids)
                for i, gid in enumerate(gids):
                    if p := _uint32(f"process.user.additionalGids[{i}]", gid):
                        return p
    if "root" in spec:
        root = spec["root"]
        if not isinstance(root, dict):
            return _wrong("root", "an object", root)
        if "path" in root and not isinstance(root["path"], str):
            return _wrong("root.path", "a string", root["path"])
    if "mounts" in spec and (p := _objects("mounts", spec["mounts"], "destination")):
        return p
    if "hooks" in spec:
        hooks = spec["hooks"]
        if not isinstance(hooks, dict):
            return _wrong("hooks", "an object", hooks)
        for name, entries in hooks.items():
            if p := _objects(f"hooks.{name}", entries, "path"):
                return p
    if "annotations" in spec:
        annotations = spec["annotations"]
        if not isinstance(annotations, dict):
            return _wrong("annotations", "an object", annotations)
        for key, value in annotations.items():
            if not isinstance(value, str):
                return _wrong(f"annotations[{_quote(key)}]", "a string", value)
    if "linux" in spec:
        linux = spec["linux"]
        if not isinstance(linux, dict):
            return _wrong("linux", "an object", linux)
        if "devices" in linux and (p := _objects("linux.devices", linux["devices"], "path")):
            return p
        if "resources" in linux:
            resources = linux["resources"]
            if not isinstance(resources, dict):
                return _wrong("linux.resources", "an object", resources)
            if "devices" in resources and (
                p := _objects("linux.resources.devices", resources["devices"], None)
            ):
                return p
    return None


def _wrong(field: str, expected: str, value: object) -> str:
    return f"{field} must be {expected}, not {type_name(value)}"


def _quote(key: str) -> str:
    return jsoncodec.dumps(key)


def _strings(field: str, value: object) -> str | None:
    if not isinstance(value, list):
        return _wrong(field, "an array of strings", value)
    for i, item in enumerate(value):
        if not isinstance(item, str):
            return _wrong(f"{field}[{i}]", "a string", item)
    return None


def _uint32(field: str, value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return _wrong(field, "an integer", value)
    if not 0 <= value <= _UINT32_MAX:
        return f"{field} must be an integer from 0 to {_UINT32_MAX}, not {value}"
    return None


def _objects(field: str, value: object, required_string: str | None) -> str | None:
    if not isinstance(value, list):
        return _wrong(field, "an array of objects", value)
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            return _wrong(f"{field}[{i}]", "an object", item)
        if required_string is not None:
            if required_string not in item:
                return f"{field}[{i}].{required_string} is missing"
            if not isinstance(item[required_string], str):
                return _wrong(f"{field}[{i}].{required_string}", "a string", item[required_string])
    return None
