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


__all__ = ["Frozen"]


@dataclass_transform(frozen_default=True, eq_default=True)
class Frozen:
    """Immutable value over ``__slots__``: eq, hash and repr by field, in slot order."""

    __slots__ = ()

    def _set(self, **fields: object) -> None:
        """Set fields from ``__init__`` (the only place a field is ever assigned)."""
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def _names(self) -> tuple[str, ...]:
        names: tuple[str, ...] = type(self).__slots__
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
