"""Lossless load and save of config.json: the real corpus, and generated specs (hypothesis).

"The same JSON value" is checked with :func:`tagged`, which keeps what ``==`` on dicts
ignores: the order of keys, and the difference between ``1``, ``1.0`` and ``true``.
The stdlib ``json`` module is the independent oracle.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oci import jsoncodec
from oci.bundle import Bundle

SPECS_DIR = Path(__file__).resolve().parents[1] / "data" / "specs"
CORPUS = {p.name: p.read_bytes() for p in sorted(SPECS_DIR.glob("*.json"))}

# Names that check_spec types at some level: generated unknown fields avoid them.
CHECKED_NAMES = frozenset(
    [
        "process",
        "env",
        "user",
        "uid",
        "gid",
        "additionalGids",
        "root",
        "path",
        "mounts",
        "destination",
        "hooks",
        "annotations",
        "linux",
        "devices",
        "resources",
    ]
)


def tagged(value: Any) -> Any:
    """A form of a JSON value whose ``==`` also compares key order and exact types."""
    if isinstance(value, dict):
        return ("object", [(k, tagged(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("array", [tagged(v) for v in value])
    if isinstance(value, float):
        return ("float", repr(value))  # repr: -0.0 differs from 0.0
    return (type(value).__name__, value)


def oracle(data: bytes | str) -> Any:
    return json.loads(data)


def test_corpus_is_there() -> None:
    # The README lists 13 files; a corpus that vanished must not make the tests vacuous.
    assert len(CORPUS) >= 13, sorted(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_loads_as_the_stdlib_reads_it(name: str, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(CORPUS[name])
    spec = Bundle(tmp_path).load()
    assert tagged(spec) == tagged(oracle(CORPUS[name]))


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_dumps_to_the_same_value(name: str) -> None:
    value = jsoncodec.loads(CORPUS[name].decode())
    out = jsoncodec.dumpb(value)
    assert tagged(oracle(out)) == tagged(oracle(CORPUS[name]))
    # compact like Go's json.Marshal: exactly what `json.dumps` writes with these options
    assert out == json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    assert jsoncodec.dumpb(jsoncodec.loads(out.decode())) == out  # a fixed point


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_unchanged_save_keeps_the_file(name: str, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(CORPUS[name])
    inode = config.stat().st_ino
    bundle = Bundle(tmp_path)
    assert bundle.save(bundle.load()) is False
    assert config.read_bytes() == CORPUS[name]
    assert config.stat().st_ino == inode


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_edit_keeps_everything_else(name: str, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(CORPUS[name])
    bundle = Bundle(tmp_path)
    spec = bundle.load()
    spec["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=void")
    assert bundle.save(spec) is True
    expected = oracle(CORPUS[name])
    expected["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=void")
    assert tagged(oracle(config.read_bytes())) == tagged(expected)
    assert tagged(Bundle(tmp_path).load()) == tagged(expected)


def _insert_everywhere(value: Any, extra: Any) -> Any:
    """``value`` with an unknown field in the middle of every object, at every depth."""
    if isinstance(value, list):
        return [_insert_everywhere(v, extra) for v in value]
    if not isinstance(value, dict):
        return value
    items = [(k, _insert_everywhere(v, extra)) for k, v in value.items()]
    items.insert(len(items) // 2, ("x-vendor.example/unknown", extra))
    return dict(items)


UNKNOWN: dict[str, Any] = {
    "nested": [1, -2, 2**70, -(2**70), 3.5, -0.0, 1e-300, None, True, False, [], {}],
    "text": 'é \u0000 " \\ / \u2028 \U0001f600 <&> \t\n',
    "empty": "",
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_with_unknown_fields_at_every_level(name: str, tmp_path: Path) -> None:
    base = oracle(CORPUS[name])
    spec = _insert_everywhere(base, UNKNOWN)
    # annotations must stay strings: put a string there instead
    if "annotations" in spec:
        spec["annotations"] = _insert_everywhere(base["annotations"], "a string")
    assert Bundle(tmp_path).save(spec) is True
    assert tagged(Bundle(tmp_path).load()) == tagged(spec)
    assert tagged(oracle((tmp_path / "config.json").read_bytes())) == tagged(spec)


# -- generated values --------------------------------------------------------------------

_SPECIAL_CHARS = st.sampled_from(
    ["\\", '"', "/", "\x00", "\x1f", "\x7f", "é", "\u2028", "\ufeff", "\U0001f600", "<", "&"]
)
_TEXT = st.text(st.characters() | _SPECIAL_CHARS, max_size=12)
_TEXT_WITH_SURROGATES = st.text(
    st.characters() | _SPECIAL_CHARS | st.sampled_from(["\ud800", "\udc00", "\udfff"]),
    max_size=12,
)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT
)
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_TEXT, children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=150, deadline=None)
@given(JSON_VALUES)
def test_values_round_trip(value: Any) -> None:
    text = jsoncodec.dumps(value)
    assert text == json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    assert tagged(jsoncodec.loads(text)) == tagged(value)
    assert tagged(oracle(jsoncodec.dumpb(value))) == tagged(value)


@settings(max_examples=60, deadline=None)
@given(st.recursive(_TEXT_WITH_SURROGATES, lambda c: st.lists(c, max_size=3), max_leaves=6))
def test_lone_surrogates_round_trip_as_valid_utf8(value: Any) -> None:
    data = jsoncodec.dumpb(value)
    text = data.decode("utf-8")  # valid UTF-8 whatever the strings hold
    assert tagged(jsoncodec.loads(text)) == tagged(value)


def _dict_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every object in ``value`` where an unknown field may go."""
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        if path[-1:] not in (("annotations",), ("hooks",)):  # their values are typed
            out.append(path)
        for k, v in value.items():
            out.extend(_dict_paths(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_dict_paths(v, (*path, i)))
    return out


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    if isinstance(value, list):
        out = list(value)
        out[path[0]] = _replace(value[path[0]], path[1:], new)
        return out
    return {k: (_replace(v, path[1:], new) if k == path[0] else v) for k, v in value.items()}


def _not_in(taken: set[str] | frozenset[str]) -> Callable[[str], bool]:
    return lambda key: key not in taken


@st.composite
def specs_with_unknown_fields(draw: st.DrawFn) -> Any:
    spec = oracle(CORPUS[draw(st.sampled_from(sorted(CORPUS)))])
    paths = _dict_paths(spec)
    for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=6)):
        obj = _at(spec, path)
        key = draw(_TEXT.filter(_not_in(set(obj) | CHECKED_NAMES)))
        items = list(obj.items())
        items.insert(draw(st.integers(0, len(items))), (key, draw(JSON_VALUES)))
        spec = _replace(spec, path, dict(items))
    return spec


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs_with_unknown_fields())
def test_generated_specs_round_trip_through_a_bundle(spec: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.json")
        assert Bundle(tmp).save(spec) is True
        with open(config, "rb") as f:
            written = f.read()
        assert tagged(oracle(written)) == tagged(spec)
        bundle = Bundle(tmp)
        loaded = bundle.load()
        assert tagged(loaded) == tagged(spec)
        inode = os.stat(config).st_ino
        assert bundle.save(loaded) is False  # unchanged: not rewritten
        assert os.stat(config).st_ino == inode
