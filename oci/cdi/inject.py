"""Inject CDI devices into a bundle's config.json: load, resolve, apply, save atomically."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from oci._frozen import Frozen
from oci.bundle import Bundle
from oci.cdi.apply import apply
from oci.cdi.registry import DEFAULT_SPEC_DIRS, Registry

__all__ = ["InjectResult", "inject"]


class InjectResult(Frozen):
    spec: dict[str, Any]
    written: bool


def inject(
    bundle_dir: str,
    names: Iterable[str],
    *,
    spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS,
    registry: Registry | None = None,
    dry_run: bool = False,
) -> InjectResult:
    """Apply the named CDI devices to ``bundle_dir/config.json``.

    Everything that can fail (an invalid config.json, an unresolvable name, a
    host device that cannot be stat-ed) fails before anything is written, so
    the file is then byte-identical. With ``dry_run`` nothing is written. ``registry``
    (over its own directories and trust rule) replaces one over ``spec_dirs``.
    """
    bundle = Bundle(bundle_dir)
    spec = bundle.load()
    edits = (registry if registry is not None else Registry(spec_dirs)).resolve(names)
    new_spec = apply(edits, spec)
    if dry_run:
        return InjectResult(new_spec, written=False)
    return InjectResult(new_spec, written=bundle.save(new_spec))
