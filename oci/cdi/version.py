"""CDI spec versions as data: the ``(version, predicate)`` table and :func:`minimum_version`.

The table and each predicate follow ``specs-go/version.go`` of
tags.cncf.io/container-device-interface at spec version 1.1.0 (where the version
checks live since 1.0.0): a predicate says whether a spec uses a feature of its
version. Ours return *where* (the field path of the first such feature, or
None), so an error can name the field that needs a newer ``cdiVersion``.

==========  ====================================================================
version     features (container edits at spec or device level)
==========  ====================================================================
0.3.0       the earliest version still supported
0.4.0       a mount with ``type``
0.5.0       a device name starting with a digit; a device node with ``hostPath``
0.6.0       annotations on the spec or on a device; a ``.`` in the class of kind
0.7.0       ``intelRdt``; ``additionalGids``
0.8.0       none (the bump removed Go API only)
1.0.0       none (the bump moved the version checks in the Go library)
1.1.0       ``netDevices``; ``intelRdt.schemata`` or ``intelRdt.enableMonitoring``
==========  ====================================================================

0.1.0 and 0.2.0 are known to the reference library but below the earliest
supported version, so a spec declaring them always fails its version check.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import TypeAlias

    from oci.cdi.edits import Edits
    from oci.cdi.spec import Spec

    Predicate: TypeAlias = Callable[[Spec], str | None]

__all__ = [
    "CURRENT",
    "EARLIEST",
    "KNOWN_VERSIONS",
    "VERSION_TABLE",
    "is_known_version",
    "minimum_version",
    "normalize_version",
    "required_version",
    "version_key",
]

#: Every version the reference library knows, oldest first.
KNOWN_VERSIONS: tuple[str, ...] = (
    "0.1.0",
    "0.2.0",
    "0.3.0",
    "0.4.0",
    "0.5.0",
    "0.6.0",
    "0.7.0",
    "0.8.0",
    "1.0.0",
    "1.1.0",
)
EARLIEST = "0.3.0"
CURRENT = "1.1.0"

#: Where a spec uses a feature of a version: a field path, or None.


def _all_edits(spec: Spec) -> Iterator[tuple[str, Edits]]:
    """The spec's own edits, then each device's, with their field paths."""
    yield "containerEdits", spec.edits
    for i, device in enumerate(spec.devices):
        yield f"devices[{i}].containerEdits", device.edits


def _device_edits_then_spec(spec: Spec) -> Iterator[tuple[str, Edits]]:
    """The order the reference's 0.4.0 and 0.5.0 predicates look in: devices first."""
    for i, device in enumerate(spec.devices):
        yield f"devices[{i}].containerEdits", device.edits
    yield "containerEdits", spec.edits


def requires_v110(spec: Spec) -> str | None:
    """1.1.0: ``netDevices``; ``intelRdt`` with ``schemata`` or ``enableMonitoring``."""
    for path, edits in _all_edits(spec):
        rdt = edits.intel_rdt
        if rdt is not None:
            if rdt.schemata:
                return f"{path}.intelRdt.schemata"
            if rdt.enable_monitoring:
                return f"{path}.intelRdt.enableMonitoring"
        if edits.net_devices:
            return f"{path}.netDevices"
    return None


def requires_nothing(spec: Spec) -> str | None:
    """0.8.0 and 1.0.0 changed the Go API only: no spec feature needs them."""
    return None


def requires_v070(spec: Spec) -> str | None:
    """0.7.0: ``intelRdt``; ``additionalGids``."""
    for path, edits in _all_edits(spec):
        if edits.intel_rdt is not None:
            return f"{path}.intelRdt"
        if edits.additional_gids:
            return f"{path}.additionalGids"
    return None


def requires_v060(spec: Spec) -> str | None:
    """0.6.0: annotations (spec or device); a ``.`` in the class part of ``kind``."""
    if spec.annotations:
        return "annotations"
    for i, device in enumerate(spec.devices):
        if device.annotations:
            return f"devices[{i}].annotations"
    _, sep, class_name = spec.kind.partition("/")
    if sep and "." in class_name:
        return "kind"
    return None


def requires_v050(spec: Spec) -> str | None:
    """0.5.0: a device name starting with a digit; a device node with ``hostPath``."""
    for i, device in enumerate(spec.devices):
        if device.name[:1].isdigit() and device.name[0].isascii():
            return f"devices[{i}].name"
    for path, edits in _device_edits_then_spec(spec):
        for j, node in enumerate(edits.device_nodes):
            if node.host_path:
                return f"{path}.deviceNodes[{j}].hostPath"
    return None


def requires_v040(spec: Spec) -> str | None:
    """0.4.0: a mount with ``type``."""
    for path, edits in _device_edits_then_spec(spec):
        for j, mount in enumerate(edits.mounts):
            if mount.type:
                return f"{path}.mounts[{j}].type"
    return None


#: Newest first: the first version whose predicate finds a feature is the minimum.
VERSION_TABLE: tuple[tuple[str, Predicate], ...] = (
    ("1.1.0", requires_v110),
    ("1.0.0", requires_nothing),
    ("0.8.0", requires_nothing),
    ("0.7.0", requires_v070),
    ("0.6.0", requires_v060),
    ("0.5.0", requires_v050),
    ("0.4.0", requires_v040),
)


def required_version(spec: Spec) -> tuple[str, str | None]:
    """The minimum version ``spec`` needs and the field that needs it (None for the earliest)."""
    for version, predicate in VERSION_TABLE:
        where = predicate(spec)
        if where is not None:
            return version, where
    return EARLIEST, None


def minimum_version(spec: Spec) -> str:
    """The lowest ``cdiVersion`` whose features cover everything ``spec`` uses."""
    return required_version(spec)[0]


def normalize_version(version: str) -> str:
    """The reference accepts an optional leading ``v`` (``v0.6.0`` is ``0.6.0``)."""
    return version[1:] if version.startswith("v") else version


def is_known_version(version: str) -> bool:
    """Whether ``version`` (``v`` prefix allowed) is a released CDI spec version."""
    return normalize_version(version) in KNOWN_VERSIONS


def version_key(version: str) -> int:
    """A sort key for a known version (``ValueError`` for an unknown one)."""
    return KNOWN_VERSIONS.index(normalize_version(version))
