"""oci._frozen: what a frozen slotted dataclass gives, without importing dataclasses."""

from __future__ import annotations

import copy
import pickle

import pytest

from oci._frozen import EMPTY_MAPPING, Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from dataclasses import KW_ONLY


class Point(Frozen):
    x: int
    y: tuple[int, ...] = ()


class Other(Frozen):
    x: int
    y: tuple[int, ...] = ()


class Holder(Frozen):
    d: dict[str, int]


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
        value: str

    class Name(Text):
        pass

    assert Name("a") != Name("b")
    assert Name("a") == Name("a") and hash(Name("a")) == hash(Name("a"))
    assert Name("a") != Text("a")
    assert repr(Name("a")) == "Name(value='a')"


# --- classes declared by their annotations alone (the one way to declare a value) ------------


class Pair(Frozen):
    left: int
    right: tuple[int, ...] = ()


class Triple(Pair):
    label: str = "t"


class Checked(Frozen):
    count: int

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError("count must be >= 0")
        self._set(count=int(self.count))


def test_annotations_make_slots_init_and_match_args() -> None:
    assert Pair.__slots__ == ("left", "right")
    assert Pair.__match_args__ == ("left", "right")
    assert Pair(1) == Pair(left=1, right=()) == Pair(1, ())
    assert repr(Pair(1, (2,))) == "Pair(left=1, right=(2,))"
    match Pair(3, (4,)):
        case Pair(a, b):
            assert (a, b) == (3, (4,))
    with pytest.raises(AttributeError):
        Pair(1).other = 2  # type: ignore[attr-defined]


def test_subclass_fields_follow_the_bases() -> None:
    t = Triple(1)
    assert Triple.__frozen_fields__ == ("left", "right", "label")
    assert Triple.__slots__ == ("label",)
    assert (t.left, t.right, t.label) == (1, (), "t")
    assert t != Pair(1)
    assert pickle.loads(pickle.dumps(t)) == t
    assert copy.deepcopy(t) == t


def test_init_refuses_what_a_dataclass_refuses() -> None:
    with pytest.raises(TypeError, match=r"Pair\(\) is missing field 'left'"):
        Pair()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes 2 fields, 3 were given"):
        Pair(1, (), 3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="has no field 'middle'"):
        Pair(1, middle=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="got multiple values for 'left'"):
        Pair(1, left=2)  # type: ignore[misc]


def test_post_init_checks_and_normalises() -> None:
    assert Checked(True).count == 1 and type(Checked(True).count) is int
    with pytest.raises(ValueError, match="count must be"):
        Checked(-1)


def test_replace() -> None:
    assert Pair(1, (2,))._replace(left=5) == Pair(5, (2,))
    with pytest.raises(TypeError, match="has no field nope"):
        Pair(1)._replace(nope=1)


def test_declaration_errors() -> None:
    with pytest.raises(TypeError, match="mutable default"):

        class Bad(Frozen):
            items: list[int] = []

    with pytest.raises(TypeError, match="'b' without a default follows a default"):

        class Order(Frozen):
            a: int = 1
            b: int


def test_hand_written_slots_are_refused() -> None:
    with pytest.raises(TypeError, match="declares its fields as annotations, not __slots__"):

        class Slotted(Frozen):
            __slots__ = ("x",)


def test_classvar_is_not_a_field() -> None:
    from typing import ClassVar

    class WithConst(Frozen):
        LIMIT: ClassVar[int] = 3
        x: int

    assert WithConst.__frozen_fields__ == ("x",)
    assert WithConst(1).LIMIT == 3


class Options(Frozen, kw_only=True):
    name: str
    size: int = 0
    label: str  # keyword-only: may follow a default


class Request(Frozen):
    what: str
    _: KW_ONLY
    count: int = 1
    why: str


class Version(Frozen, order=True):
    major: int
    minor: int = 0


def test_kw_only_fields_are_keyword_only_and_not_matched() -> None:
    o = Options(name="a", label="b")
    assert (o.name, o.size, o.label) == ("a", 0, "b")
    assert repr(o) == "Options(name='a', size=0, label='b')"
    assert Options.__match_args__ == ()
    with pytest.raises(TypeError, match="takes 0 positional fields, 1 were given"):
        Options("a", label="b")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing field 'label'"):
        Options(name="a")  # type: ignore[call-arg]


def test_kw_only_marker_splits_positional_from_keyword_fields() -> None:
    r = Request("gpu", why="test")
    assert r == Request(what="gpu", count=1, why="test")
    assert Request.__match_args__ == ("what",)
    with pytest.raises(TypeError, match="takes 1 positional fields, 2 were given"):
        Request("gpu", 2, why="x")  # type: ignore[call-arg]
    match r:
        case Request(what):
            assert what == "gpu"


def test_positional_fields_cannot_follow_keyword_only_ones() -> None:
    with pytest.raises(TypeError, match="positional fields cannot follow keyword-only ones"):

        class More(Options):
            extra: int


def test_order_compares_fields_as_tuples_within_one_class() -> None:
    assert sorted([Version(2), Version(1, 5), Version(1)]) == [
        Version(1),
        Version(1, 5),
        Version(2),
    ]
    assert Version(1) <= Version(1) < Version(1, 1) and Version(3) >= Version(2, 9) > Version(2)
    with pytest.raises(TypeError):
        _ = Version(1) < (1, 0)  # type: ignore[operator]
    with pytest.raises(TypeError):
        _ = Pair(1) < Pair(2)  # type: ignore[operator]


def test_empty_mapping_default_is_read_only() -> None:
    assert dict(EMPTY_MAPPING) == {}
    with pytest.raises(TypeError):
        EMPTY_MAPPING["a"] = 1  # type: ignore[index]
