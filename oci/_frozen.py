"""The one way to declare a value type in ``oci`` and ``nvhook``: :class:`Frozen`.

A value class lists its fields once, as annotations, with optional defaults::

    class Outcome(Frozen):
        mode: str | None
        devices: str
        written: bool = False

and gets what ``@dataclass(frozen=True, slots=True)`` would give it: the fields in
``__slots__``, an ``__init__`` taking them positionally or by keyword (defaults
applied), ``__match_args__``, equality, hash and repr over the fields in order,
assignment refused (``AttributeError``, the base class of
``dataclasses.FrozenInstanceError``), and copy/pickle support. Type checkers see a
dataclass (``typing.dataclass_transform``), so the ``__init__`` signature is checked.

Why not :mod:`dataclasses`: ``import dataclasses`` pulls in ``inspect``, ``ast``,
``dis``, ``tokenize`` and ``re``, several times the interpreter's own start
(``bench/figures.py``, ``import dataclasses``), and the runtime shim and hooks cannot pay that
(docs/architecture.md, D5). The metaclass here reads the annotations as written (they
are strings under ``from __future__ import annotations``; nothing is evaluated) and
builds everything without compiling code, so declaring a class costs microseconds.

Rules, checked when the class is created (``TypeError``):

- a field without a default cannot follow one with a default;
- a default must be immutable (no ``list``, ``dict``, ``set``: use a tuple, or build the
  value in a classmethod);
- a subclass of a value class adds fields after its bases' fields;
- ``ClassVar[...]`` annotations are class attributes, not fields.

``class X(Frozen, kw_only=True)`` makes the class's own fields keyword-only (as
``@dataclass(kw_only=True)``), and so does a pseudo-field ``_: KW_ONLY`` for the fields
after it (``KW_ONLY`` imported from :mod:`dataclasses` under ``TYPE_CHECKING`` only: it
is read as text here). Keyword-only fields may come in any order, defaults or not, and
are left out of ``__match_args__``; positional fields cannot follow them in a subclass.
``class X(Frozen, order=True)`` adds ``<``, ``<=``, ``>``, ``>=`` comparing the fields in
order, as tuples (``@dataclass(order=True)``).

A class that must check or normalise its fields defines ``__post_init__(self)``; it
runs at the end of ``__init__`` and may replace a field's value with
:meth:`Frozen._set` (the only way a field is ever assigned).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Self, dataclass_transform
else:  # `typing`'s import is a row of bench/figures.py; the decorator only informs type checkers

    def dataclass_transform(**_: object) -> object:
        return lambda cls: cls


__all__ = ["EMPTY_MAPPING", "Frozen", "MappingProxyType"]

#: ``types.MappingProxyType``, taken where ``types`` itself takes it from: the start path
#: does not import ``types`` (0.7 M instructions through the import machinery).
MappingProxyType = type(type.__dict__)
#: An immutable empty mapping, the default for a mapping field that ``__post_init__``
#: copies (``MappingProxyType({})``).
EMPTY_MAPPING: Mapping[Any, Any] = MappingProxyType({})

_MUTABLE_DEFAULTS = (list, dict, set, bytearray)
_MISSING = object()


def _is_classvar(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return isinstance(text, str) and (
        text.startswith(("ClassVar", "typing.ClassVar", "Final", "typing.Final"))
    )


# The comparisons ``order=True`` adds: the fields in order, as tuples, within one class.
def _lt(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return self._values() < other._values()


def _le(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return self._values() <= other._values()


def _gt(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return self._values() > other._values()


def _ge(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return self._values() >= other._values()


_lt.__name__, _le.__name__, _gt.__name__, _ge.__name__ = "__lt__", "__le__", "__gt__", "__ge__"


class _FrozenMeta(type):
    """Builds ``__slots__``, the field table and ``__match_args__`` from the annotations."""

    def __new__(
        mcs,
        name: str,
        bases: tuple[type, ...],
        namespace: dict[str, Any],
        *,
        kw_only: bool = False,
        order: bool = False,
        **kwargs: Any,
    ) -> _FrozenMeta:
        if not any(isinstance(b, _FrozenMeta) for b in bases):  # Frozen itself
            return super().__new__(mcs, name, bases, namespace, **kwargs)
        inherited: tuple[str, ...] = ()
        positional = 0
        defaults: dict[str, object] = {}
        for base in bases:
            fields = getattr(base, "__frozen_fields__", None)
            if fields is not None:
                inherited = fields
                positional = getattr(base, "__frozen_positional__", len(fields))
                defaults.update(getattr(base, "__frozen_defaults__", {}))
        own: list[str] = []
        keyword_from = 0 if kw_only else -1  # own fields from this one on are keyword-only
        if "__slots__" in namespace:
            raise TypeError(
                f"{name}: a Frozen value declares its fields as annotations, not __slots__"
            )
        annotations = namespace.get("__annotations__", {})
        for field, annotation in annotations.items():
            if _is_classvar(annotation) or field in inherited:
                continue
            if annotation in ("KW_ONLY", "dataclasses.KW_ONLY"):
                keyword_from = len(own)
                continue
            own.append(field)
        for field in own:
            value = namespace.pop(field, _MISSING)
            if value is _MISSING:
                continue
            if isinstance(value, _MUTABLE_DEFAULTS):
                raise TypeError(
                    f"{name}.{field}: a mutable default ({type(value).__name__}) would be "
                    "shared by every instance; use a tuple or frozenset"
                )
            defaults[field] = value
        namespace["__slots__"] = tuple(own)
        fields = (*inherited, *own)
        own_positional = len(own) if keyword_from < 0 else keyword_from
        if own_positional:
            if positional < len(inherited):
                raise TypeError(f"{name}: positional fields cannot follow keyword-only ones")
            positional = len(inherited) + own_positional
        seen_default = False
        for field in fields[:positional]:
            if field in defaults:
                seen_default = True
            elif seen_default:
                raise TypeError(f"{name}: field {field!r} without a default follows a default")
        namespace["__frozen_fields__"] = fields
        namespace["__frozen_positional__"] = positional
        namespace["__frozen_defaults__"] = defaults
        namespace.setdefault("__match_args__", fields[:positional])
        if order:
            for method in (_lt, _le, _gt, _ge):
                namespace.setdefault(method.__name__, method)
        return super().__new__(mcs, name, bases, namespace, **kwargs)


@dataclass_transform(frozen_default=True, eq_default=True)
class Frozen(metaclass=_FrozenMeta):
    """Immutable value over ``__slots__``: init, eq, hash and repr by field, in order."""

    __slots__ = ()
    __frozen_fields__: tuple[str, ...] = ()
    __frozen_positional__: int = 0
    __frozen_defaults__: dict[str, object] = {}

    if not TYPE_CHECKING:  # type checkers synthesise the typed __init__ from the fields

        def __init__(self, *args, **kwargs):
            cls = type(self)
            fields = cls.__frozen_fields__
            if len(args) > cls.__frozen_positional__:
                if cls.__frozen_positional__ < len(fields):
                    raise TypeError(
                        f"{cls.__name__}() takes {cls.__frozen_positional__} positional fields,"
                        f" {len(args)} were given"
                    )
                raise TypeError(
                    f"{cls.__name__}() takes {len(fields)} fields, {len(args)} were given"
                )
            setter = object.__setattr__
            for field, value in zip(fields, args, strict=False):
                setter(self, field, value)
            if kwargs or len(args) < len(fields):
                defaults = cls.__frozen_defaults__
                for field in fields[len(args) :]:
                    value = kwargs.pop(field, _MISSING)
                    if value is _MISSING:
                        value = defaults.get(field, _MISSING)
                        if value is _MISSING:
                            raise TypeError(f"{cls.__name__}() is missing field {field!r}")
                    setter(self, field, value)
                if kwargs:
                    extra = ", ".join(repr(k) for k in kwargs)
                    known = set(fields)
                    twice = [k for k in kwargs if k in known]
                    what = "got multiple values for" if twice else "has no field"
                    raise TypeError(f"{cls.__name__}() {what} {extra}")
            post = getattr(self, "__post_init__", None)
            if post is not None:
                post()

    def _set(self, **fields: object) -> None:
        """Set fields (from ``__init__`` or ``__post_init__`` only: values are immutable)."""
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__frozen_fields__)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frozen) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__frozen_fields__)
        return f"{type(self).__name__}({fields})"

    def __getstate__(self) -> tuple[object, ...]:
        return self._values()

    def __setstate__(self, state: tuple[object, ...]) -> None:
        for name, value in zip(self.__frozen_fields__, state, strict=True):
            object.__setattr__(self, name, value)

    def _replace(self, **changes: object) -> Self:
        """A copy with some fields changed (``dataclasses.replace``)."""
        values = {name: changes.pop(name, getattr(self, name)) for name in self.__frozen_fields__}
        if changes:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(changes)}")
        return type(self)(**values)
