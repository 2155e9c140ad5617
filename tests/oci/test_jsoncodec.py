"""oci.jsoncodec: CPython's _json driven directly; Go's rules where Python's json differs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oci import jsoncodec
from oci.jsoncodec import JSONError
from oci.nesting import NestingError

ROOT = Path(__file__).resolve().parents[2]
SPECS_DIR = ROOT / "tests" / "data" / "specs"


def run_fresh(code: str) -> str:
    """Run ``code`` in a fresh ``python -I -S`` (no site: only what the code imports loads)."""
    prelude = f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_loads_keeps_order_and_types() -> None:
    value = jsoncodec.loads(' \t\r\n{"b": 1, "a": [1.0, true, null, "\\u00e9\\n", -7]} \n')
    assert list(value) == ["b", "a"]
    assert value["a"] == [1.0, True, None, "é\n", -7]
    assert [type(v) for v in value["a"]] == [float, bool, type(None), str, int]


def test_duplicate_keys_last_value_wins_at_first_position() -> None:
    value = jsoncodec.loads('{"a": 1, "b": 2, "a": 3}')
    assert list(value.items()) == [("a", 3), ("b", 2)]


def test_big_and_negative_integers_are_exact() -> None:
    text = "[18446744073709551616, -9223372036854775809, 0, -0, 1e2, -0.0]"
    assert jsoncodec.loads(text) == [2**64, -(2**63) - 1, 0, 0, 100.0, 0.0]
    assert jsoncodec.dumps(jsoncodec.loads(text)) == (
        "[18446744073709551616,-9223372036854775809,0,0,100.0,-0.0]"
    )


@pytest.mark.parametrize(
    ("text", "msg", "line", "column"),
    [
        ("", "no value: the text is empty or only whitespace", None, None),
        ("  \n ", "no value: the text is empty or only whitespace", None, None),
        ("{", "unexpected end of the text", 1, 2),
        ('{"a": }', "expecting a value", 1, 7),
        ("[1,]", "expecting a value", 1, 4),
        # a trailing comma: CPython 3.13 words it differently, at the comma; read alike on each
        ("[1, ]", "expecting a value", 1, 5),
        ('{"a": 1,}', "expecting a key in double quotes", 1, 9),
        ("[1 2]", "expecting ',' or a closing bracket", 1, 4),
        ('{"a" 1}', "expecting ':' after a key", 1, 6),
        ("{'a': 1}", "expecting a key in double quotes", 1, 2),
        ('"abc', "unterminated string", 1, 1),
        ('"a\x01"', "control character in a string (it must be escaped)", 1, 3),
        ('"\\q"', "invalid backslash escape in a string", 1, 2),
        ('"\\u12"', "invalid \\uXXXX escape in a string", 1, 3),
        ('{"a": 1}\n{"b": 2}', "unexpected data after the JSON value", 2, 1),
        ('{\n  "a": [\n    1,\n    x\n  ]\n}', "expecting a value", 4, 5),
        ("NaN", "NaN is not a JSON value", None, None),
        ('{"a": -Infinity}', "-Infinity is not a JSON value", None, None),
        ("[1e400]", "the number 1e400 is out of the range of a 64-bit float", None, None),
        ("1" * 5000, "an integer longer than Python's limit of 4300 digits", None, None),
    ],
)
def test_invalid_json_is_reported_with_its_position(
    text: str, msg: str, line: int | None, column: int | None
) -> None:
    with pytest.raises(JSONError) as info:
        jsoncodec.loads(text)
    assert info.value.msg == msg
    assert (info.value.lineno, info.value.colno) == (line, column)
    where = f" at line {line} column {column}" if line is not None else ""
    assert str(info.value) == f"invalid JSON{where}: {msg}"


def test_loadb_reports_the_byte_offset_of_bad_utf8() -> None:
    with pytest.raises(JSONError, match=r"^invalid UTF-8 at byte offset 7 \(byte 0xff\)$") as info:
        jsoncodec.loadb(b'{"a": "\xff"}')
    assert info.value.pos == 7


def test_loadb_refuses_a_byte_order_mark() -> None:
    with pytest.raises(JSONError, match="byte order mark"):
        jsoncodec.loadb(b'\xef\xbb\xbf{"a": 1}')


def test_dumps_is_compact_utf8_in_key_order() -> None:
    value: dict[str, Any] = {"z": [1, 2.5, 'é\n"<&>\\'], "a": None, "t": True, "e": {}}
    assert jsoncodec.dumps(value) == '{"z":[1,2.5,"é\\n\\"<&>\\\\"],"a":null,"t":true,"e":{}}'
    assert jsoncodec.dumpb(value) == jsoncodec.dumps(value).encode()
    assert jsoncodec.dumps(value, ensure_ascii=True) == json.dumps(value, separators=(",", ":"))


def test_dumpb_escapes_everything_when_a_lone_surrogate_is_present() -> None:
    value = {"x": "\ud800é"}
    assert jsoncodec.dumpb(value) == b'{"x":"\\ud800\\u00e9"}'
    assert jsoncodec.loadb(jsoncodec.dumpb(value)) == value


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ({"a": {1, 2}}, TypeError, "a value of type set cannot be written as JSON"),
        ([object()], TypeError, "a value of type object cannot be written as JSON"),
        ({"a": float("nan")}, ValueError, "Out of range float"),
        ([float("-inf")], ValueError, "Out of range float"),
        ({("a",): 1}, TypeError, "keys must be"),
    ],
)
def test_dumps_refuses_what_is_not_json(value: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        jsoncodec.dumps(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": float("nan")}, "Out of range float values are not JSON compliant"),
        ([1, float("inf")], "Out of range float values are not JSON compliant"),
        ({"a": [{1, 2}]}, "a value of type set cannot be written as JSON"),
        ({"a": {("k",): 1}}, "keys must be str, int, float, bool or None, not tuple"),
    ],
)
def test_dumps_errors_read_as_on_python_3_11(value: Any, message: str) -> None:
    """CPython 3.13 names the float (``...compliant: nan``) and 3.14 adds notes (``when
    serializing dict item 'a'``): the errors are 3.11's on each (run on 3.13 and 3.14 by
    tests/packaging/test_pythons.py)."""
    for dump in (jsoncodec.dumps, jsoncodec.dumpb):
        with pytest.raises((TypeError, ValueError)) as info:
            dump(value)
        assert str(info.value) == message
        assert getattr(info.value, "__notes__", None) is None
    cycle: list[Any] = [1]
    cycle.append({"a": cycle})
    with pytest.raises(ValueError) as cycled:
        jsoncodec.dumps(cycle)
    assert (str(cycled.value), getattr(cycled.value, "__notes__", None)) == (
        "Circular reference detected",
        None,
    )


def test_dumps_refuses_a_cycle_and_recovers() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        jsoncodec.dumps(cycle)
    shared = [1]
    assert jsoncodec.dumps([shared, shared]) == "[[1],[1]]"  # the same list twice is no cycle


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (None, "null"),
        (True, "boolean"),
        (1, "number"),
        (1.5, "number"),
        ("", "string"),
        ([], "array"),
        ((), "array"),
        ({}, "object"),
        ({1}, "set"),
    ],
)
def test_type_name(value: object, name: str) -> None:
    assert jsoncodec.type_name(value) == name


def test_hot_path_modules_import_neither_json_nor_re_nor_dataclasses() -> None:
    out = run_fresh(
        "import oci.argv, oci.bundle, oci.state, oci.runclog, oci.jsoncodec\n"
        "oci.argv.RuntimeArgs.parse(['create', '--bundle', '/b', 'id'])\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    loaded = set(out.split())
    assert "_json" in loaded
    heavy = {"json", "json.decoder", "re", "dataclasses", "typing", "pathlib", "inspect"}
    assert not heavy & loaded, sorted(heavy & loaded)


def test_loading_a_spec_in_a_fresh_interpreter_imports_no_json_module(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_bytes((SPECS_DIR / "podman-4.3-run.json").read_bytes())
    out = run_fresh(
        "from oci.bundle import Bundle\n"
        f"b = Bundle({str(tmp_path)!r}); spec = b.load(); spec['x'] = 1; b.save(spec)\n"
        "print('json' in sys.modules, 're' in sys.modules, len(spec))"
    )
    assert out.split() == ["False", "False", str(len(json.loads(config.read_bytes())))]


def test_syntax_errors_in_a_fresh_interpreter_have_positions() -> None:
    # CPython 3.11's C scanner needs json.decoder in sys.modules to report a syntax error
    # (otherwise: SystemError); the codec imports it on that error path only.
    out = run_fresh(
        "from oci import jsoncodec\n"
        "try:\n"
        "    jsoncodec.loads('{\"a\" 1}')\n"
        "except jsoncodec.JSONError as e:\n"
        "    print(e)\n"
    )
    assert out.strip() == "invalid JSON at line 1 column 6: expecting ':' after a key"


def test_fallback_without_the_accelerator_behaves_the_same() -> None:
    # Where _json is missing (not CPython), the stdlib json module serves instead.
    out = run_fresh(
        "sys.modules['_json'] = None  # makes `import _json` fail\n"
        "from oci import jsoncodec\n"
        "import json, glob\n"
        f"for path in sorted(glob.glob({str(SPECS_DIR)!r} + '/*.json')):\n"
        "    raw = open(path, 'rb').read()\n"
        "    value = jsoncodec.loadb(raw)\n"
        "    assert jsoncodec.dumpb(value) == json.dumps(\n"
        "        json.loads(raw), ensure_ascii=False, separators=(',', ':')).encode(), path\n"
        "for bad in ['{\"a\" 1}', 'NaN', '[1e400]', '[1] x']:\n"
        "    try:\n"
        "        jsoncodec.loads(bad)\n"
        "    except jsoncodec.JSONError as e:\n"
        "        print(e)\n"
        "print(jsoncodec.dumpb({'x': '\\ud800'}))\n"
        "print(jsoncodec._scan.__qualname__)\n"
    )
    assert out.splitlines() == [
        "invalid JSON at line 1 column 6: expecting ':' after a key",
        "invalid JSON: NaN is not a JSON value",
        "invalid JSON: the number 1e400 is out of the range of a 64-bit float",
        "invalid JSON at line 1 column 5: unexpected data after the JSON value",
        'b\'{"x":"\\\\ud800"}\'',
        "JSONDecoder.raw_decode",
    ]


# --- dumps_indented and dumps_canonical: json.dumps's text without importing json -------------

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
_KEYS = st.text() | st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(), inner, max_size=4)
        | st.dictionaries(_KEYS, inner, max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_dumps_indented_is_json_dumps_indent_2(value: Any) -> None:
    assert jsoncodec.dumps_indented(value) == json.dumps(value, indent=2, ensure_ascii=False)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_dumps_canonical_is_json_dumps_sorted(value: Any) -> None:
    try:
        expected = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    except TypeError as e:  # keys of types sort cannot compare
        with pytest.raises(TypeError) as mine:
            jsoncodec.dumps_canonical(value)
        assert str(mine.value) == str(e)
    else:
        assert jsoncodec.dumps_canonical(value) == expected


def test_dumps_indented_and_canonical_edge_cases() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    for value in ({}, [], (), 'ä\u2028\x00"', {"a": {}, "b": []}, 10**30, True, {1: "x"}, 1.5):
        assert jsoncodec.dumps_indented(value) == json.dumps(value, indent=2, ensure_ascii=False)
    for value in ({"set": {1}}, object()):
        assert jsoncodec.dumps_canonical(value) == json.dumps(
            value, sort_keys=True, separators=(",", ":"), default=repr
        )
    with pytest.raises(ValueError, match="Circular reference"):
        jsoncodec.dumps_indented(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        jsoncodec.dumps_canonical(cycle)
    with pytest.raises(TypeError, match="not JSON serializable"):
        jsoncodec.dumps_indented({"set": {1}})


def test_dumps_indented_and_canonical_import_no_json() -> None:
    out = run_fresh(
        "from oci import jsoncodec\n"
        "jsoncodec.dumps_indented({'a': [1, 'b', None, {'c': True}]})\n"
        "jsoncodec.dumps_canonical({'b': 1, 'a': [2]})\n"
        "print(sorted(m for m in sys.modules if m in ('json', 're', 'enum')))"
    )
    assert out.strip() == "[]"


@pytest.mark.parametrize("hook", [None, dict])
def test_nesting_is_refused_beyond_max_depth(hook: Any) -> None:
    """256 levels read (the native hook's limit too), 257 not, whether the walk after the
    scanner or the scanner's own recursion guard (far deeper) finds it."""
    limit = jsoncodec.MAX_DEPTH
    at_limit = "[" * (limit - 1) + '{"a":1}' + "]" * (limit - 1)
    assert jsoncodec.loads(at_limit, object_pairs_hook=hook) is not None
    assert (
        jsoncodec.loads("[" * (limit + 1) + "]" * (limit + 1)) is not None
    )  # the last holds nothing
    for depth in (limit + 1, 2_000, 100_000):
        text = "[" * depth + "1" + "]" * depth
        with pytest.raises(JSONError) as info:
            jsoncodec.loads(text, object_pairs_hook=hook)
        assert str(info.value) == info.value.msg == str(NestingError("arrays and objects", limit))
        assert "256 levels" in str(info.value)
