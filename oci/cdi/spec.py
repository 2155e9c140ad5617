"""CDI spec values: a :class:`Spec` of :class:`Device` items, and what checking one found.

:mod:`oci.cdi.parse` builds them from a spec file (by the reference library's rules;
:mod:`oci.cdi.decode` turns the file's bytes into objects first);
:meth:`Spec.create` builds one in code, for a producer (:mod:`oci.cdi.write` writes it).
Their edits are :class:`oci.cdi.edits.Edits`.
"""

from __future__ import annotations

from oci._frozen import EMPTY_MAPPING, Frozen
from oci.cdi.edits import Edits
from oci.cdi.names import parse_kind
from oci.cdi.version import EARLIEST

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["Device", "Issue", "Spec", "SpecCheck"]

if TYPE_CHECKING:
    from types import MappingProxyType as _MAPPING
else:  # the same type: ``types``' import is a cost on the shim's start path
    _MAPPING = type(EMPTY_MAPPING)


class Device(Frozen):
    """One device of a spec: its unqualified name, edits and annotations."""

    name: str
    edits: Edits
    annotations: Mapping[str, str] = EMPTY_MAPPING

    def __hash__(self) -> int:  # annotations (a mapping) are left out, as they are unhashable
        return hash((self.name, self.edits))


class Spec(Frozen):
    """A validated CDI spec: ``kind`` is ``vendor/class``; ``edits`` apply with any device."""

    version: str
    kind: str
    vendor: str
    class_name: str
    devices: tuple[Device, ...]
    edits: Edits = Edits()
    annotations: Mapping[str, str] = EMPTY_MAPPING
    source: str = "<memory>"

    def __hash__(self) -> int:
        return hash((self.version, self.kind, self.devices, self.edits, self.source))

    @classmethod
    def create(
        cls,
        kind: str,
        devices: Iterable[Device],
        *,
        edits: Edits | None = None,
        annotations: Mapping[str, str] | None = None,
        version: str = EARLIEST,
        source: str = "<memory>",
    ) -> Spec:
        """Build a spec in code (a producer's); :func:`oci.cdi.write.dump_spec` validates it."""
        vendor, class_name = parse_kind(kind)
        return cls(
            version=version,
            kind=kind,
            vendor=vendor,
            class_name=class_name,
            devices=tuple(devices),
            edits=edits if edits is not None else Edits(),
            annotations=_MAPPING(dict(annotations or {})),
            source=source,
        )

    def qualified_name(self, device_name: str) -> str:
        """``vendor/class=name`` for one of this spec's devices."""
        return f"{self.kind}={device_name}"

    def device(self, name: str) -> Device | None:
        """The device called ``name`` (unqualified), or None."""
        for device in self.devices:
            if device.name == name:
                return device
        return None


class Issue(Frozen):
    """One problem found in a spec: the field path (``""`` for the whole spec) and what is wrong."""

    path: str
    message: str


class SpecCheck(Frozen):
    """What :func:`check_spec` found: the spec (None when any error), errors and warnings."""

    spec: Spec | None
    errors: tuple[Issue, ...]
    warnings: tuple[Issue, ...]
