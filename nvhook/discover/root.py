"""Looking at files under a root directory as if it were ``/`` (docs/architecture.md D6).

A driver root such as ``/run/nvidia/driver`` holds absolute symlinks
(``/usr/lib/x86_64-linux-gnu/libcuda.so.1 -> /usr/lib/.../libcuda.so.550.54.15``,
or ``/lib -> usr/lib`` on merged-/usr systems) that mean paths under that root,
not on this machine. :class:`Root` resolves them the way ``chroot`` would: an
absolute target restarts at the root and ``..`` stops at it, so a lookup never
leaves the root.

Paths "in" the root are absolute strings (``/usr/bin/nvidia-smi``); the same
path on this machine is :meth:`Root.host`. Lookups are cached for the life of
the object (one discovery), so resolving twenty libraries in one directory
walks that directory once.

``os.path`` rather than ``pathlib``: ``pathlib`` pulls ``re``, ``fnmatch`` and
``urllib`` into the runtime shim's start (docs/architecture.md D5).
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["MAX_SYMLINKS", "Root"]

#: Symlinks followed in one lookup before it counts as a loop (Linux's own limit).
MAX_SYMLINKS = 40


class Root:
    """A directory seen as ``/``: join, resolve, stat and list paths inside it."""

    __slots__ = ("_listings", "_resolved", "path", "prefix")

    def __init__(self, path: str) -> None:
        path = os.path.normpath(path) if path else "/"
        self.path = "/" if path.strip("/") == "" else path
        #: What to put before a path in the root to get it on this machine ("" for "/").
        self.prefix = "" if self.path == "/" else self.path
        self._resolved: dict[str, str | None] = {}
        self._listings: dict[str, tuple[str, ...]] = {}

    def __repr__(self) -> str:
        return f"Root({self.path!r})"

    def host(self, path: str) -> str:
        """The path on this machine of ``path`` (absolute, in the root)."""
        return self.prefix + path if path != "/" else self.path

    def resolve(self, path: str) -> str | None:
        """``path`` with every symlink followed inside the root, or None if it does not exist.

        A symlink loop, a component that is not a directory, or an unreadable
        directory also give None: for discovery all of these mean "not there".
        """
        if not path.startswith("/"):
            path = "/" + path
        return self._resolve(path, 0)

    def _resolve(self, path: str, depth: int) -> str | None:
        cached = self._resolved.get(path, _MISSING)
        if cached is not _MISSING:
            return cached  # type: ignore[return-value]
        if depth > MAX_SYMLINKS:
            return None
        parent, _, name = path.rstrip("/").rpartition("/")
        if not name:  # the root itself
            return "/"
        base = self._resolve(parent or "/", depth) if parent else "/"
        result: str | None
        if base is None:
            result = None
        elif name == ".":
            result = base
        elif name == "..":
            result = base.rpartition("/")[0] or "/"
        else:
            candidate = (base if base != "/" else "") + "/" + name
            try:
                mode = os.lstat(self.prefix + candidate).st_mode
            except OSError:
                result = None
            else:
                if stat.S_ISLNK(mode):
                    try:
                        target = os.readlink(self.prefix + candidate)
                    except OSError:
                        target = ""
                    if not target:
                        result = None
                    elif target.startswith("/"):
                        result = self._resolve(target, depth + 1)
                    else:
                        result = self._resolve(
                            (base if base != "/" else "") + "/" + target, depth + 1
                        )
                else:
                    result = candidate
        if result is not None or depth == 0:  # a None deeper down may be the link limit
            self._resolved[path] = result
        return result

    def stat(self, path: str) -> os.stat_result | None:
        """``stat`` of the resolved ``path``, or None if it does not exist."""
        real = self.resolve(path)
        if real is None:
            return None
        try:
            return os.stat(self.prefix + real, follow_symlinks=False)
        except OSError:
            return None

    def regular_file(self, path: str) -> str | None:
        """The resolved ``path`` if it is a regular file, else None."""
        return self._of_type(path, stat.S_ISREG)

    def directory(self, path: str) -> str | None:
        """The resolved ``path`` if it is a directory, else None."""
        return self._of_type(path, stat.S_ISDIR)

    def _of_type(self, path: str, is_type: Callable[[int], bool]) -> str | None:
        real = self.resolve(path)
        if real is None:
            return None
        try:
            mode = os.lstat(self.prefix + real).st_mode
        except OSError:
            return None
        return real if is_type(mode) else None

    def listdir(self, path: str) -> tuple[str, ...]:
        """Sorted names in the directory ``path`` (resolved); empty if it is not one."""
        real = self.directory(path)
        if real is None:
            return ()
        cached = self._listings.get(real)
        if cached is None:
            try:
                cached = tuple(sorted(os.listdir(self.prefix + real)))
            except OSError:
                cached = ()
            self._listings[real] = cached
        return cached


_MISSING = object()
