"""Private caches of derived data (the settings, the CDI index) as marshal files.

One directory (``$NVHOOK_CACHE_DIR``, default ``/run/nvhook``) holds them. The
runtime shim reads them on container starts as root, so nothing in them is believed
unless only this user could have written it (issue 11):

- the directory is used only if it is owned by the effective uid and not writable by
  group or others (else it is refused: nothing is read from or written to it, and the
  caller is told, for its log); a missing one is created with mode 0700;
- a cache file is read only if it is a regular file (not followed if a link), owned by
  the effective uid, with mode 0600; otherwise it is ignored (and replaced on the
  next write);
- a file is written under an unpredictable temporary name opened with
  ``O_CREAT|O_EXCL|O_NOFOLLOW`` and mode 0600, fsynced, and renamed over the old one:
  a link planted at the temporary name is never followed, and a reader sees either the
  old file or the new one;
- names carry the Python version (:func:`cache_name`): marshal's format is specific
  to it, so a cache written by another Python is never read.

What a cache holds is the caller's to validate (a file may be stale or corrupt);
:func:`load` only guarantees that it came from this user. Nothing here raises: a
cache that cannot be read or written is simply not used. Imports only ``os``,
``sys`` and ``marshal`` (the shim's start path, docs/architecture.md D5).
"""

from __future__ import annotations

import marshal
import os
import sys
from stat import S_ISREG

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["PY_TAG", "cache_name", "fnv1a64", "load", "store", "store_bytes"]

#: In every cache file's name: marshal data is read only by the Python that wrote it.
PY_TAG = f"py{sys.version_info[0]}{sys.version_info[1]}"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def fnv1a64(text: str) -> int:
    """A stable (not per-process randomised, unlike ``hash``) 64-bit FNV-1a hash."""
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def cache_name(stem: str, key: str) -> str:
    """The file name of the cache ``stem`` for ``key`` (a path, a list of directories)."""
    return f"{stem}-{fnv1a64(key):016x}.{PY_TAG}.marshal"


def load(directory: str, name: str, warnings: list[str] | None = None) -> object:
    """The value cached as ``directory/name``, or None (missing, not ours, unreadable).

    A refused directory is reported in ``warnings`` (once).
    """
    dir_fd = _open_dir(directory, warnings, create=False)
    if dir_fd is None:
        return None
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o777 != 0o600:
            return None
        data = os.read(fd, st.st_size)
        if len(data) != st.st_size:
            return None
        return marshal.loads(data)  # 25x faster than marshal.load(f) on a file object
    except Exception:  # unreadable or corrupt (marshal's errors vary): simply not used
        return None
    finally:
        os.close(fd)


def store(directory: str, name: str, value: Any, warnings: list[str] | None = None) -> bool:
    """Write ``value`` as ``directory/name`` atomically; whether it was written.

    The directory is created (0700) if missing; a refused one is reported in
    ``warnings`` (once). Any other failure is silent: a cache is never needed.
    """
    try:
        data = marshal.dumps(value)
    except ValueError:  # not marshallable: a caller's bug, but never a failed start
        return False
    return store_bytes(directory, name, data, warnings)


def store_bytes(directory: str, name: str, data: bytes, warnings: list[str] | None = None) -> bool:
    """:func:`store` for bytes as they are (the runtime front-end's data file)."""
    dir_fd = _open_dir(directory, warnings, create=True)
    if dir_fd is None:
        return False
    tmp = _temp_name(name)
    fd = -1
    created = False
    try:
        fd = os.open(tmp, _WRITE_FLAGS, 0o600, dir_fd=dir_fd)
        created = True
        os.fchmod(fd, 0o600)  # whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        closing, fd = fd, -1  # closed even if close() fails: never twice
        os.close(closing)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return True
    except Exception:  # OSError, or anything else: a cache must never fail the caller
        if fd >= 0:
            _quietly(lambda: os.close(fd))
        if created:
            _quietly(lambda: os.unlink(tmp, dir_fd=dir_fd))
        return False
    finally:
        os.close(dir_fd)


def _temp_name(name: str) -> str:
    return f".{name}.{os.urandom(8).hex()}.tmp"


def _open_dir(directory: str, warnings: list[str] | None, *, create: bool) -> int | None:
    """An fd of ``directory`` if this user alone can write it; else None (refused: said)."""
    try:
        fd = os.open(directory, _DIR_FLAGS)
    except FileNotFoundError:
        if not create:
            return None
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd = os.open(directory, _DIR_FLAGS)
        except OSError:
            return None
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    euid = os.geteuid()
    if st.st_uid != euid or st.st_mode & 0o022:
        os.close(fd)
        if warnings is not None:
            if st.st_uid != euid:
                problem = f"is owned by uid {st.st_uid}, not {euid}: remove it (it is re-made 0700)"
            else:
                mode = st.st_mode & 0o7777
                problem = f"is writable by group or others (mode {mode:04o}): chmod go-w it"
            message = f"cache directory {directory} {problem}; not using it till then"
            if message not in warnings:
                warnings.append(message)
        return None
    return fd


def _quietly(action: Callable[[], object]) -> None:
    try:  # noqa: SIM105 - contextlib is an import the shim's path does without
        action()
    except OSError:
        pass
