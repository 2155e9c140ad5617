"""oci._frozen: what a frozen slotted dataclass gives, without importing dataclasses."""

from __future__ import annotations

import copy
import pickle

import pytest

from oci._frozen import Frozen


class Point(Frozen):
    __slots__ = ("x", "y")

    x: int
    y: tuple[int, ...]

    def __init__(self, x: int, y: tuple[int, ...] = ()) -> None:
        self._set(x=x, y=y)


class Other(Frozen):
    __slots__ = ("x", "y")

    x: int
    y: tuple[int, ...]

    def __init__(self, x: int, y: tuple[int, ...] = ()) -> None:
        self._set(x=x, y=y)


class Holder(Frozen):
    __slots__ = ("d",)

    d: dict[str, int]

    def __init__(self, d: dict[str, int]) -> None:
        self._set(d=d)


def test_equality_and_hash_by_fields() -> None:
    assert Point(1, (2,)) == Point(1, (2,))
    assert Point(1) != Point(2)
    assert hash(Point(1, (2,))) == hash(Point(1, (2,)))
    assert len({Point(1), Point(1), Point(2)}) == 2


def test_another_class_with_the_same_fields_is_not_equal() -> None:
    assert Point(1) != Other(1)
    assert Point(1) != (1, ())
    assert Point(1).__eq__(Other(1)) is NotImplemented


def test_fields_cannot_be_assigned_deleted_or_added() -> None:
    p = Point(1)
    with pytest.raises(AttributeError, match="cannot assign to field 'x' of a frozen Point"):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError, match="cannot delete field 'x' of a frozen Point"):
        del p.x
    with pytest.raises(AttributeError):
        p.z = 3  # type: ignore[attr-defined, unused-ignore]
    assert p.x == 1


def test_repr_in_slot_order() -> None:
    assert repr(Point(1, (2, 3))) == "Point(x=1, y=(2, 3))"


def test_copy_and_pickle() -> None:
    p = Point(1, (2,))
    assert copy.copy(p) == p
    assert copy.deepcopy(p) == p
    assert pickle.loads(pickle.dumps(p)) == p
    h = Holder({"a": 1})
    assert copy.deepcopy(h) == h
    assert copy.deepcopy(h).d is not h.d


def test_a_value_with_a_dict_field_is_unhashable_like_a_dataclass() -> None:
    with pytest.raises(TypeError, match="unhashable"):
        hash(Holder({"a": 1}))


def test_fields_of_a_base_class_count_in_a_subclass() -> None:
    from oci._frozen import Frozen

    class Text(Frozen):
        __slots__ = ("value",)
        value: str

        def __init__(self, value: str) -> None:
            self._set(value=value)

    class Name(Text):
        __slots__ = ()

    assert Name("a") != Name("b")
    assert Name("a") == Name("a") and hash(Name("a")) == hash(Name("a"))
    assert Name("a") != Text("a")
    assert repr(Name("a")) == "Name(value='a')"
