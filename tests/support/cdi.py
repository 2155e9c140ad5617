"""CDI spec files where podman reads them, for the length of a test."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tests.support.basics import rmdir_if_empty

__all__ = ["cdi_spec"]


@contextlib.contextmanager
def cdi_spec(
    spec: Mapping[str, Any] | str, name: str, *, directory: Path = Path("/var/run/cdi")
) -> Iterator[Path]:
    """Install a CDI spec file as ``directory/<name>.json`` for the block, then remove it.

    podman 4.3 reads only /etc/cdi and /var/run/cdi, which every test and every concurrent
    pytest process on the machine share. Two files defining the same device make it
    unresolvable for all (``unresolvable CDI devices``), so give each spec a kind of its own,
    e.g. class ``unique_id("t").replace("-", "")``, and a unique ``name``.
    """
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    text = spec if isinstance(spec, str) else json.dumps(spec, indent=2)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    tmp.rename(path)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)
        if created:
            rmdir_if_empty(str(directory))
