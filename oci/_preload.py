"""The start path's modules run from one file, ahead of the imports that ask for them.

A fresh interpreter pays Python's import machinery for every module (finding it on the path,
a spec, a loader, the ``.pyc`` read and checked): ~0.25 M instructions a module in the
shim, more than most of the modules' own code. The launchers (``nvhook install-entrypoints``)
call :func:`install` with the *start image* written beside them
(:mod:`nvhook.tools.startimage`): every module of the start path's static closure, each with
its compiled code, the identity of the source it was compiled from, and what it imports at
module level. :class:`StartImage`, first on ``sys.meta_path``, answers the first import of
one of those modules by running its package (as the import system would, first), then, in
order, the not yet imported modules it imports at module level, then itself, straight into
``sys.modules``: their own import statements then find them there, and only the module
asked for goes through the machinery. What runs is the same code in the same order as
without it: a module's dependencies finish before its body starts, as they would (the start
path has no import cycles but through a package importing its own modules, which the import
system is left to resolve as ever: ``tests/test_layers.py``).

- A module whose source changed since the image was made (size or mtime, as a ``.pyc`` is
  judged) is not run from it: its import reads the source as always, and so do the imports
  of anything the image cannot run.
- The image is code run as root: it is used only if it is a regular file (not followed if
  a link) owned by root or by this user and writable by no one else, made for this
  interpreter (``sys.implementation.cache_tag`` and the bytecode's magic number). Anything
  else, or an unreadable or malformed image, is ignored: the imports run as without it.
- Nothing here raises: a failure to use the image leaves the imports as they were. A
  module's own error while it runs propagates as its import's would.

Imports only what the interpreter has loaded before any import of ours (``os``, ``sys``,
``marshal`` and the import system's own modules).
"""

from __future__ import annotations

import marshal
import os
import sys
from _frozen_importlib import ModuleSpec
from _frozen_importlib_external import MAGIC_NUMBER
from stat import S_ISREG

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.abc import Loader as _LoaderBase
    from types import ModuleType
    from typing import TypeAlias

    #: ``(source path under the image's root, is a package, (size, mtime_ns) of the source,
    #: imports, where its marshalled code is: (offset from the end of the table, size))``
    Entry: TypeAlias = tuple[str, bool, tuple[int, int], tuple[str, ...], tuple[int, int]]
else:  # `importlib.abc`'s import would be a cost: the protocol is all the import system uses
    _LoaderBase = object

__all__ = ["FORMAT", "StartImage", "image_name", "install"]

#: The image's layout: the size of its table (8 bytes, little-endian), the table
#: (marshal: ``(FORMAT, cache tag, magic number, root, {module name: entry})``), then each
#: module's code (marshal, at its offset from the end of the table), read only when the
#: module runs.
FORMAT = 2
HEADER = 8
_MODULE = type(sys)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO: no wait


def image_name() -> str:
    """The file name of this interpreter's start image (beside the launchers)."""
    return f"nvhook-start.{sys.implementation.cache_tag}.marshal"


def install(path: str) -> StartImage | None:
    """Put the start image at ``path`` first on ``sys.meta_path``; None (and nothing
    changed) where it cannot be used (the module docstring)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    found = _table(fd)
    if found is None:
        os.close(fd)
        return None
    image = StartImage(fd, *found)  # keeps fd (close-on-exec) to read the modules it runs
    sys.meta_path.insert(0, image)
    return image


def _table(fd: int) -> tuple[str, dict[str, Entry], int, int] | None:
    try:
        st = os.fstat(fd)
        if not S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
            return None
        size = int.from_bytes(os.pread(fd, HEADER, 0), "little")
        if size > st.st_size - HEADER:
            return None
        raw = os.pread(fd, size, HEADER)
        data = marshal.loads(raw) if len(raw) == size else None
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if (
        type(data) is not tuple
        or len(data) != 5
        or data[:3] != (FORMAT, sys.implementation.cache_tag, MAGIC_NUMBER)
        or type(data[3]) is not str
        or type(data[4]) is not dict
    ):
        return None
    table: dict[str, Entry] = data[4]
    return data[3], table, HEADER + size, st.st_size


class StartImage(_LoaderBase):
    """The meta path finder and loader of the start image's modules."""

    def __init__(self, fd: int, root: str, table: dict[str, Entry], base: int, size: int) -> None:
        self._fd = fd
        self._base = base  # where the modules' code starts in the file
        self._size = size  # of the file: no module's code reaches past it
        self._root = root
        self._table = table
        self._running: set[str] = set()
        #: The modules run from the image, in the order they ran (tests read it).
        self.ran: list[str] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if name not in self._table:
            return None
        module = self._run(name)
        return None if module is None else module.__spec__

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return sys.modules[spec.name]  # run by find_spec already

    def exec_module(self, module: ModuleType) -> None:
        pass

    def _run(self, name: str) -> ModuleType | None:
        """``name``, run from the image after its package and what it imports; None if the
        image cannot run it (then its import reads the source).

        Its package runs first, as the import system runs it, and its body may import this
        very module (a package importing its submodules): then that import has run it. A
        module already running (that again, or a cycle through a package) is left to the
        import system, which finds it in ``sys.modules`` as it would."""
        module = sys.modules.get(name)
        if module is not None:
            return module
        entry = self._table.get(name)
        if type(entry) is not tuple or len(entry) != 5 or name in self._running:
            return None
        parent, _, child = name.rpartition(".")
        if parent and parent not in sys.modules:
            self._run(parent)
            if parent not in sys.modules:
                return None  # the import system imports it, then asks again
            if name in sys.modules:
                return sys.modules[name]
        relative, package, key, imports, (offset, size) = entry
        try:
            origin = self._root + relative
            st = os.stat(origin)
            if (st.st_size, st.st_mtime_ns) != key:
                return None  # changed since the image was made
            start = self._base + offset
            if not self._base <= start <= start + size <= self._size:
                return None
            code = marshal.loads(os.pread(self._fd, size, start))
        except (OSError, TypeError, ValueError, EOFError):
            return None
        self._running.add(name)
        try:
            for dependency in imports:  # what it imports at module level, in order
                if dependency not in sys.modules and dependency in self._table:
                    self._run(dependency)  # one it cannot run is imported by the body, as ever
        finally:
            self._running.discard(name)
        if name in sys.modules:
            return sys.modules[name]
        module = _MODULE(name)
        spec = ModuleSpec(name, self, origin=origin, is_package=package)
        spec.has_location = True
        module.__spec__ = spec
        module.__loader__ = self
        module.__file__ = origin
        module.__package__ = name if package else parent
        if package:
            module.__path__ = [os.path.dirname(origin)]
            spec.submodule_search_locations = module.__path__
        sys.modules[name] = module
        try:
            exec(code, module.__dict__)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        if parent:
            setattr(sys.modules[parent], child, module)
        self.ran.append(name)
        return module
