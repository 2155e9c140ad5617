"""A base for light immutable value classes that does not import :mod:`dataclasses`.

``import dataclasses`` pulls in ``inspect``, ``ast``, ``dis``, ``tokenize`` and ``re``:
about 30 ms under ``python -I -S`` on the CI machine (14 ms in the dev venv, where
``re`` is already loaded), twice the interpreter's own start. The values built on
every runtime call (:class:`oci.argv.RuntimeArgs`) and by every hook
(:class:`oci.state.State`) cannot pay that (DESIGN.md D5), so they derive from
:class:`Frozen`, which gives what ``@dataclass(frozen=True, slots=True)`` gives them:
fields in ``__slots__``, assignment refused (``AttributeError``, the base class of
``dataclasses.FrozenInstanceError``), equality, hash and repr over the fields in
order, and copy/pickle support.

A subclass lists its fields in ``__slots__`` (with annotations), writes a typed
``__init__`` and sets every field once through :meth:`Frozen._set`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import dataclass_transform
else:  # `typing` costs ~20 ms under `python -I -S`; the decorator only informs type checkers

    def dataclass_transform(**_: object) -> object:
        return lambda cls: cls


__all__ = ["Frozen", "Record"]


_FIELDS: dict[type, tuple[str, ...]] = {}


@dataclass_transform(frozen_default=True, eq_default=True)
class Frozen:
    """Immutable value over ``__slots__``: eq, hash and repr by field, in slot order."""

    __slots__ = ()

    def _set(self, **fields: object) -> None:
        """Set fields from ``__init__`` (the only place a field is ever assigned)."""
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def _names(self) -> tuple[str, ...]:
        """The fields: the ``__slots__`` of the class and its Frozen bases, bases first."""
        cls = type(self)
        names: tuple[str, ...] | None = _FIELDS.get(cls)
        if names is None:
            names = tuple(
                name
                for klass in reversed(cls.__mro__)
                if issubclass(klass, Frozen)
                for name in klass.__dict__.get("__slots__", ())
            )
            _FIELDS[cls] = names
        return names

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._names())

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
        fields = ", ".join(
            f"{name}={value!r}" for name, value in zip(self._names(), self._values(), strict=True)
        )
        return f"{type(self).__name__}({fields})"

    def __getstate__(self) -> tuple[object, ...]:
        return self._values()

    def __setstate__(self, state: tuple[object, ...]) -> None:
        for name, value in zip(self._names(), state, strict=True):
            object.__setattr__(self, name, value)


if TYPE_CHECKING:
    from typing import NamedTuple as Record
else:
    from operator import itemgetter

    class Record(tuple):
        """``typing.NamedTuple`` without importing ``typing`` (~5 ms with ``re``, ``functools``).

        The same class syntax (annotated fields, defaults, methods) gives a tuple subclass
        with a property per field, ``_fields``, keyword construction and a readable repr.
        Type checkers see ``typing.NamedTuple`` itself.
        """

        __slots__ = ()
        _fields: tuple[str, ...] = ()
        _field_defaults: dict[str, object] = {}

        def __init_subclass__(cls, **kwargs: object) -> None:
            super().__init_subclass__(**kwargs)
            names = tuple(cls.__dict__.get("__annotations__", {}))  # noqa: RUF063 - no inspect
            defaults = {}
            for i, name in enumerate(names):
                if name in cls.__dict__:
                    defaults[name] = cls.__dict__[name]
                elif defaults:
                    raise TypeError(
                        f"{cls.__name__}: non-default field {name!r} follows a default field"
                    )
                setattr(cls, name, property(itemgetter(i), doc=f"field {i}: {name}"))
            cls._fields = names
            cls._field_defaults = defaults

        def __new__(cls, *args, **kwargs):
            fields = cls._fields
            if len(args) > len(fields):
                raise TypeError(f"{cls.__name__} takes {len(fields)} fields, got {len(args)}")
            values = list(args)
            for name in fields[len(args) :]:
                if name in kwargs:
                    values.append(kwargs.pop(name))
                elif name in cls._field_defaults:
                    values.append(cls._field_defaults[name])
                else:
                    raise TypeError(f"{cls.__name__}: missing field {name!r}")
            if kwargs:
                raise TypeError(f"{cls.__name__}: unexpected fields {', '.join(kwargs)}")
            return tuple.__new__(cls, values)

        def __repr__(self):
            body = ", ".join(f"{n}={v!r}" for n, v in zip(self._fields, self, strict=True))
            return f"{type(self).__name__}({body})"

        def __getnewargs__(self):
            return tuple(self)

        def _replace(self, **changes):
            values = (changes.pop(n, v) for n, v in zip(self._fields, self, strict=True))
            return type(self)(*values, **changes)

        def _asdict(self):
            return dict(zip(self._fields, self, strict=True))
