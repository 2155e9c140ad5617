"""The start image: the start path's modules compiled into one file for :mod:`oci._preload`.

``nvhook install-entrypoints`` writes it beside the launchers (:func:`image_bytes`, made by the
interpreter the launchers run), which install it before
their first import of nvhook. It holds every module of the start path's static closure:
what the launchers' entry points (:data:`ENTRIES`) import, at module level or in a
function, that executes (not ``TYPE_CHECKING``), from the tree the running nvhook was
imported from (:mod:`nvhook.tools.importgraph`, the reader ``tests/test_layers.py`` checks
the ladder with). For each: the source path, whether it is a package, the source's size and
mtime (what the image is judged by when a module runs from it), the modules of the image
it imports at module level (what must run before it; its package runs first), and its code,
compiled as the import system compiles a source.
"""

from __future__ import annotations

import marshal
import os
import sys
from _frozen_importlib_external import MAGIC_NUMBER
from collections import deque
from pathlib import Path

from nvhook.tools.importgraph import PACKAGES, discover, executed, imports_of
from oci._preload import FORMAT, HEADER

__all__ = ["ENTRIES", "image_bytes", "source_root"]

#: What the launchers import (``nvhook.tools.entrypoints.ENTRYPOINTS``), and every module
#: of the hook's package (its commands, which it imports by name).
ENTRIES = ("nvhook.shim", "nvhook.hook", "nvhook.server")


def source_root() -> Path:
    """The directory the running ``nvhook`` and ``oci`` were imported from."""
    return Path(os.path.abspath(__file__)).parents[2]


def image_bytes(root: Path | None = None, entries: tuple[str, ...] = ENTRIES) -> bytes:
    """The start image of the tree under ``root`` (default :func:`source_root`)."""
    base = (root or source_root()).absolute()
    root_text = str(base) + "/"
    modules = discover(base, PACKAGES)
    imports = {name: [i for i in imports_of(name, path, modules) if i.runtime]
               for name, path in modules.items()}  # fmt: skip
    closure: list[str] = []
    queue = deque(m for e in entries for m in executed(e, modules))
    for entry in entries:
        if modules[entry].name == "__init__.py":  # a package entry: all its modules too
            queue += [m for m in modules if m.startswith(entry + ".")]
    seen: set[str] = set()
    while queue:
        name = queue.popleft()
        if name in seen:
            continue
        seen.add(name)
        closure.append(name)
        for imp in imports[name]:
            queue += executed(imp.target, modules)
    table: dict[str, tuple[object, ...]] = {}
    codes: list[bytes] = []
    offset = 0  # of each module's code from the end of the table
    for name in closure:
        path = modules[name]
        before: list[str] = []  # what it imports at module level (its package runs first)
        for imp in imports[name]:
            if imp.module_level:
                before += [m for m in executed(imp.target, modules) if m != name]
        st = path.stat()
        code = marshal.dumps(compile(path.read_bytes(), str(path), "exec", dont_inherit=True))
        table[name] = (
            str(path.relative_to(base)),
            path.name == "__init__.py",
            (st.st_size, st.st_mtime_ns),
            tuple(dict.fromkeys(before)),
            (offset, len(code)),
        )
        codes.append(code)
        offset += len(code)
    head = marshal.dumps((FORMAT, sys.implementation.cache_tag, MAGIC_NUMBER, root_text, table))
    return len(head).to_bytes(HEADER, "little") + head + b"".join(codes)
