"""A parsed CDI spec as plain data, and back: what the registry keeps of a spec file.

:func:`spec_data` turns the strict parser's value (:class:`~oci.cdi.spec.Spec`) into
tuples, dicts, strings, ints, bools and None, which :mod:`marshal` writes;
:func:`spec_from_data` makes an equal value of them again, each value object restored from
its fields' values as ``pickle`` restores a :class:`~oci._frozen.Frozen` (its
``__setstate__``; ``__init__`` and ``__post_init__`` are not run again: the values are the
ones they made). :mod:`oci.cdi.index` keeps a file's value this way, keyed by the file's
identity (its module docstring), so that a call finding it kept reads neither the file nor
imports the parser (``oci.cdi.parse``, ``oci.cdi.decode``).

Nothing here validates a spec: data of the right shape is believed, so it must come from
where only :func:`spec_data` could have put it (:mod:`oci._cache`: this user's directory
and 0600 files), written by classes of the same :data:`LAYOUT` (every class's fields, in
order; the index keeps it beside the data). Data of another shape makes
:func:`spec_from_data` return None. Imports only the value classes.
"""

from __future__ import annotations

from oci._frozen import EMPTY_MAPPING, Frozen
from oci.cdi.edits import DeviceNode, Edits, Hook, IntelRdt, Mount, NetDevice
from oci.cdi.spec import Device, Spec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Container, Mapping
    from typing import Any, TypeVar

    F = TypeVar("F", bound=Frozen)

__all__ = ["LAYOUT", "spec_data", "spec_from_data"]

_CLASSES: tuple[type[Frozen], ...] = (
    Spec, Device, Edits, DeviceNode, Mount, Hook, NetDevice, IntelRdt
)  # fmt: skip
#: The fields of every class a kept spec is made of, in order: kept data is used only by
#: classes of this very layout.
LAYOUT: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (cls.__name__, cls.__frozen_fields__) for cls in _CLASSES
)
if TYPE_CHECKING:
    from types import MappingProxyType as _MAPPING
else:  # the same type, as the parser makes annotations, without importing ``types``
    _MAPPING = type(EMPTY_MAPPING)


def spec_data(spec: Spec) -> tuple[Any, ...]:
    """``spec`` (but its ``source``) as plain data."""
    return (
        spec.version,
        spec.kind,
        spec.vendor,
        spec.class_name,
        tuple((d.name, _edits_data(d.edits), dict(d.annotations)) for d in spec.devices),
        _edits_data(spec.edits),
        dict(spec.annotations),
    )


def spec_from_data(
    data: object, source: str, wanted: Mapping[str, Container[str]] | None = None
) -> tuple[Spec, tuple[str, ...]] | None:
    """The spec :func:`spec_data` made ``data`` of, read from ``source``, and the names of
    all its devices; None if ``data`` does not have that shape.

    ``wanted``: the device names asked for, by kind; the spec then holds only its devices of
    those names for its kind (in the file's order), the others are not made at all: a create
    asking for one GPU of the mock ``dgx-a100``'s spec makes 1 device of its 23 (GPUs, MIG
    devices, by index and UUID, ``all``), where making them all was ~2 M of the Python
    shim's 45 M instructions (``bench/instructions.py``). Such a spec is for the edits of
    the devices asked for; the names returned are all of its devices'."""
    try:
        version, kind, vendor, class_name, devices, edits, annotations = _tuple(data)
        only = None if wanted is None else wanted.get(kind, ())
        listed = tuple(map(_tuple, _tuple(devices)))
        names = _strings(tuple(device[0] for device in listed))
        return _restore(
            Spec,
            (
                version,
                kind,
                vendor,
                class_name,
                tuple(
                    _restore(Device, (name, _edits(device_edits), _annotations(notes)))
                    for name, device_edits, notes in listed
                    if only is None or name in only
                ),
                _edits(edits),
                _annotations(annotations),
                source,
            ),
        ), names
    except (TypeError, ValueError, IndexError):
        return None


def _edits_data(edits: Edits) -> tuple[Any, ...]:
    rdt = edits.intel_rdt
    return (
        edits.env,
        tuple(n._values() for n in edits.device_nodes),
        tuple(m._values() for m in edits.mounts),
        tuple(h._values() for h in edits.hooks),
        edits.additional_gids,
        tuple(n._values() for n in edits.net_devices),
        None if rdt is None else rdt._values(),
    )


def _edits(data: Any) -> Edits:
    env, nodes, mounts, hooks, gids, net_devices, rdt = _tuple(data)
    return _restore(
        Edits,
        (
            _strings(env),
            tuple(_restore(DeviceNode, n) for n in _tuple(nodes)),
            tuple(_restore(Mount, m) for m in _tuple(mounts)),
            tuple(_restore(Hook, h) for h in _tuple(hooks)),
            _tuple(gids),
            tuple(_restore(NetDevice, n) for n in _tuple(net_devices)),
            None if rdt is None else _restore(IntelRdt, rdt),
        ),
    )


def _restore(cls: type[F], values: tuple[Any, ...]) -> F:
    """An instance of ``cls`` with these field values (``ValueError``: not one per field)."""
    if type(values) is not tuple:
        raise TypeError(f"{cls.__name__}: {type(values).__name__}, not a tuple of fields")
    obj = cls.__new__(cls)
    obj.__setstate__(values)
    return obj


def _annotations(data: object) -> Mapping[str, str]:
    if type(data) is not dict:
        raise TypeError("annotations: not a dict")
    return _MAPPING(data) if data else EMPTY_MAPPING


def _strings(data: object) -> tuple[str, ...]:
    items = _tuple(data)
    for item in items:
        if type(item) is not str:
            raise TypeError("not a string")
    return items


def _tuple(data: object) -> tuple[Any, ...]:
    if type(data) is not tuple:
        raise TypeError("not a tuple")
    return data
