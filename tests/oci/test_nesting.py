"""The nesting limits of oci.nesting: the walk, the TOML bracket count, the YAML loader."""

from __future__ import annotations

import sys
import tomllib

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from oci.nesting import (
    TOML_MAX_DEPTH,
    YAML_MAX_DEPTH,
    NestingError,
    check_toml_brackets,
    deeper_than,
    yaml_loader,
)

Loader = yaml_loader(yaml.SafeLoader, 4)


def nested(depth: int, inner: object = 1) -> object:
    """``inner`` inside ``depth`` lists (depth 0: ``inner`` itself)."""
    value = inner
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "depth"),
    [(1, 0), ([], 0), ({}, 0), ([1], 1), ([[]], 1), ({"a": [1]}, 2), ([1, {"a": {}}], 2)],
)
def test_depth_counts_the_containers_around_a_value(value: object, depth: int) -> None:
    assert not deeper_than(value, depth)
    assert deeper_than(value, depth - 1) is (depth > 0)


def test_the_walk_takes_no_stack() -> None:
    deep: dict[str, object] = {}
    node = deep
    for _ in range(sys.getrecursionlimit() * 20):
        node["a"] = node = {}
    node["a"] = 1
    assert deeper_than(deep, 64)


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("a = [[[[]]]]", False),  # 4 brackets, within 4
        ("a = [[[[[]]]]]", True),
        ("a = {b = {c = {d = {e = 1}}}}", False),
        ("a = {b = {c = {d = {e = {}}}}}", True),
        ('a = "[[[[[[[["', False),
        ("a = '{{{{{{{{'", False),
        ('a = """\n[[[[[[\\"""[[[[\n"""', False),  # an escaped quote inside
        ("a = '''[[[[[[\n[[[['''", False),
        ('a = """x""""  # [[[[[[', False),  # a quote before the closing three, then a comment
        ("# [[[[[[[[\na = 1", False),
        ('"[[[[[[" = [[[1]]]', False),  # a quoted key
        ("[[t]]\n[[t]]\n[[t]]\na = [[[1]]]", False),  # headers close their brackets
    ],
)
def test_toml_brackets(text: str, refused: bool) -> None:
    tomllib.loads(text)  # every case is TOML
    if refused:
        with pytest.raises(NestingError, match="deeper than 4 levels"):
            check_toml_brackets(text, 4)
    else:
        check_toml_brackets(text, 4)


_TOML_STRINGS = st.text(alphabet="[]{}\"'\\#\n ab", max_size=12)
_TOML_VALUES = st.recursive(
    st.integers(0, 9) | _TOML_STRINGS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TOML_STRINGS, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TOML_STRINGS, _TOML_VALUES, max_size=4))
def test_toml_brackets_are_counted_as_toml_reads_them(doc: dict[str, object]) -> None:
    """Whatever the strings and keys hold (brackets, quotes, escapes, comment signs), no
    more brackets are counted open than the document nests (tomlkit writes a dict as a
    table or an inline table: the count is at most the depth)."""
    import tomlkit

    text = tomlkit.dumps(doc)
    assert tomllib.loads(text) == doc
    depth = next(d for d in range(64) if not deeper_than(doc, d))
    check_toml_brackets(text, max(depth, 1))


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("[[[[1]]]]", False),
        ("[[[[[]]]]]", False),  # the fifth holds nothing
        ("[[[[[1]]]]]", True),
        ("- - - - 1\n", False),
        ("- - - - - 1\n", True),
        ("a: {b: {c: {d: 1}}}", False),
        ("a: {b: {c: {d: {e: 1}}}}", True),
        ("a: &a [[1]]\nb: [*a]\n", False),
        ("a: &a [[1]]\nb: [[*a]]\n", True),  # 4 + 1: through the alias
        ("a: &a [*a]\n", True),  # an anchor inside itself
    ],
)
def test_yaml_loader(text: str, refused: bool) -> None:
    if refused:
        with pytest.raises(NestingError, match="deeper than 4 levels"):
            yaml.load(text, Loader=Loader)
    else:
        yaml.load(text, Loader=Loader)


def test_yaml_is_refused_before_pyyaml_recurses() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(NestingError, match=f"deeper than {YAML_MAX_DEPTH} levels \\(line 1\\)"):
        yaml.load(deep, Loader=yaml_loader(yaml.SafeLoader))
    block = "".join("  " * i + "-\n" for i in range(2000))
    with pytest.raises(NestingError, match=f"(line {YAML_MAX_DEPTH + 2})"):
        yaml.load(block, Loader=yaml_loader(yaml.SafeLoader))


def test_aliases_are_walked_once_each() -> None:
    """Shared nodes (a billion laughs) cost their number, not their expansion."""
    lines = ["a0: &a0 [1, 1]"] + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 60)]
    data = yaml.load("\n".join(lines), Loader=yaml_loader(yaml.SafeLoader))
    assert data["a59"][0][1] is data["a57"]  # shared, as composed: 2**59 leaves in all


def test_limits() -> None:
    assert TOML_MAX_DEPTH == YAML_MAX_DEPTH == 64
