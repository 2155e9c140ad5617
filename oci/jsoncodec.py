"""JSON for the runtime's hot path: CPython's ``_json`` accelerator, driven directly.

Why not ``import json``: its ``json.decoder`` and ``json.scanner`` import ``re`` and
compile regular expressions at import. Measured on the CI machine (2 cores, CPython
3.11.7, 200 interleaved runs, medians; ``python -I -S -c pass`` = 13.0 ms):
``import json`` +15.5 ms, ``import _json`` +0.4 ms; in the dev venv, whose editable
install already imports ``re`` at start-up, +2.3 ms against +0.5 ms. The C scanner and
encoder below are the very ones ``json.loads``/``json.dumps`` use, so parsing and
formatting are the same code at the same speed; only the Python wrapper is replaced.
Where ``_json`` is missing (not CPython) the stdlib ``json`` module is the fallback,
with the same behaviour.

Reading (:func:`loads`), like Go's ``encoding/json`` where runtimes differ from Python:

- JSON whitespace (space, tab, CR, LF) around the value is allowed, nothing else;
- objects keep their key order; a duplicate key keeps the *last* value (Go and Python
  agree) at the position of its first occurrence;
- ``NaN``, ``Infinity`` and ``-Infinity`` (which Python's ``json`` accepts) are refused:
  they are not JSON and Go refuses them;
- control characters inside strings are refused (``strict``), as in Go;
- numbers become ``int`` (any size, up to Python's 4300-digit limit) or ``float``; a
  float beyond the 64-bit range (``1e400``) is refused, as in Go;
- a value inside more than :data:`MAX_DEPTH` arrays and objects is refused (Go's limit is
  10,000; the C scanner's own recursion guard ends in the same refusal: from about 1,000
  levels under CPython 3.11's default recursion limit, far deeper under 3.12 and 3.13's C
  recursion limit and 3.14's stack check): the native hook reads no deeper, and whatever
  walks a decoded document may recurse once per level (:mod:`oci.nesting`).

Writing (:func:`dumps`, :func:`dumpb`): compact like Go's ``json.Marshal`` (``,`` and
``:`` without spaces, no newline at the end), keys in the mapping's order, non-ASCII
as UTF-8, floats as Python's shortest round-trip repr, ``NaN``/``Infinity`` refused.
Two differences from Go, both read back identically by every JSON reader: ``<``, ``>``
and ``&`` are not written as ``\\u003c``-style escapes, and a string holding a lone
UTF-16 surrogate (only reachable from a ``\\ud800``-style escape in the input) makes
:func:`dumpb` escape all non-ASCII characters, so that the output stays valid UTF-8
and reads back to the same value. Tuples are written as arrays; ``int``, ``float``,
``bool`` and ``None`` keys as their JSON text (Python's rule); any other type is a
``TypeError``. Errors read the same on CPython 3.11 to 3.14, which word some of them
differently (checked in Debian 13 and unstable roots: tests/packaging/test_pythons.py).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = [
    "MAX_DEPTH",
    "JSONError",
    "dumpb",
    "dumps",
    "dumps_canonical",
    "dumps_indented",
    "loadb",
    "loads",
    "type_name",
]

_WHITESPACE = " \t\n\r"

#: The deepest JSON nvhook reads: no value inside more than this many arrays and objects
#: (the top-level one included). The native hook's limit too (``nvhook-contract.h``).
MAX_DEPTH = 256


class JSONError(ValueError):
    """Input that is not JSON. ``str(e)`` is a complete phrase for a message
    (``invalid JSON at line 3 column 7: expecting ':' after a key``); ``msg`` is the
    bare reason, ``pos`` the character offset (None where unknown), ``lineno`` and
    ``colno`` count from 1. For bytes that are not UTF-8, ``pos`` is the byte offset.
    """

    def __init__(
        self, message: str, *, msg: str, pos: int | None, lineno: int | None, colno: int | None
    ) -> None:
        super().__init__(message)
        self.msg = msg
        self.pos = pos
        self.lineno = lineno
        self.colno = colno


def _syntax_error(msg: str, text: str, pos: int | None) -> JSONError:
    if pos is None:
        return JSONError(f"invalid JSON: {msg}", msg=msg, pos=None, lineno=None, colno=None)
    lineno = text.count("\n", 0, pos) + 1
    colno = pos - text.rfind("\n", 0, pos)
    return JSONError(
        f"invalid JSON at line {lineno} column {colno}: {msg}",
        msg=msg,
        pos=pos,
        lineno=lineno,
        colno=colno,
    )


class _NotJSON(ValueError):
    """Raised from inside the scanner for input that Python accepts and Go refuses."""


def _refuse_constant(name: str) -> Any:
    raise _NotJSON(f"{name} is not a JSON value")


_INFINITY = float("inf")


def _parse_float(literal: str) -> float:
    value = float(literal)
    if value == _INFINITY or value == -_INFINITY:
        raise _NotJSON(f"the number {literal} is out of the range of a 64-bit float")
    return value


def _refuse_type(value: object) -> Any:
    raise TypeError(f"a value of type {type(value).__name__} cannot be written as JSON")


class _ScannerContext:
    """The attributes that ``_json.make_scanner`` reads (as ``json.JSONDecoder`` has them)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = staticmethod(_parse_float)  # floats are rare in specs: the check is cheap
    parse_int = int  # exactly int: the C scanner then converts without a call
    parse_constant = staticmethod(_refuse_constant)


_scan: Callable[[str, int], tuple[Any, int]]
_encode: Callable[[object, bool], str]

try:
    import _json
except ImportError:  # pragma: no cover - not CPython; tests run this branch in a subprocess
    import json as _stdjson

    _decoder = _stdjson.JSONDecoder(
        parse_float=_parse_float, parse_constant=_refuse_constant, strict=True
    )
    _scan = _decoder.raw_decode

    def _encode(value: object, ensure_ascii: bool) -> str:
        return _stdjson.dumps(
            value,
            ensure_ascii=ensure_ascii,
            allow_nan=False,
            separators=(",", ":"),
            default=_refuse_type,
        )

else:
    _scan = _json.make_scanner(_ScannerContext())  # type: ignore[arg-type]  # a duck-typed context

    def _encode(value: object, ensure_ascii: bool) -> str:
        # A new encoder per call: its `markers` dict (cycle detection) must start empty.
        encoder = _json.make_encoder(
            {},  # markers
            _refuse_type,  # default
            _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring,
            None,  # indent: compact
            ":",  # key separator
            ",",  # item separator
            False,  # sort_keys
            False,  # skipkeys
            False,  # allow_nan
        )
        try:
            return "".join(encoder(value, 0))
        except (TypeError, ValueError) as e:
            raise _as_on_3_11(e) from None


#: The C encoder's refusal of NaN and the infinities, as CPython 3.11 words it (3.13 adds the
#: value: ``...compliant: nan``).
_OUT_OF_RANGE = "Out of range float values are not JSON compliant"


def _as_on_3_11(error: TypeError | ValueError) -> TypeError | ValueError:
    """The C encoder's error as CPython 3.11 raises it, the same on every version: its text
    without what 3.13 adds to the float refusal, and without the notes 3.14 adds to every
    error (``when serializing dict item 'a'``)."""
    message = str(error)
    if message.startswith(_OUT_OF_RANGE):
        message = _OUT_OF_RANGE
    return type(error)(message)


#: The C scanner's messages (json.JSONDecodeError.msg), as this module words them.
_MESSAGES = {
    "Expecting value": "expecting a value",
    "Expecting property name enclosed in double quotes": "expecting a key in double quotes",
    "Expecting ':' delimiter": "expecting ':' after a key",
    "Expecting ',' delimiter": "expecting ',' or a closing bracket",
    "Unterminated string starting at": "unterminated string",
    "Invalid control character at": "control character in a string (it must be escaped)",
    "Invalid \\escape": "invalid backslash escape in a string",
    "Invalid \\uXXXX escape": "invalid \\uXXXX escape in a string",
}


_KEY_EXPECTED = "Expecting property name enclosed in double quotes"

_pairs_scanners: dict[object, Callable[[str, int], tuple[Any, int]]] = {}


def _scanner_for(hook: Callable[[list[tuple[str, Any]]], Any] | None) -> Any:
    """The scanner, or one whose objects are built by ``hook`` from their (key, value) pairs."""
    if hook is None:
        return _scan
    scanner = _pairs_scanners.get(hook)
    if scanner is None:
        context = _ScannerContext()
        context.object_pairs_hook = hook  # type: ignore[assignment]
        try:
            import _json as c_json
        except ImportError:  # pragma: no cover - not CPython
            import json as _stdjson

            scanner = _stdjson.JSONDecoder(
                parse_float=_parse_float,
                parse_constant=_refuse_constant,
                strict=True,
                object_pairs_hook=hook,
            ).raw_decode
        else:
            scanner = c_json.make_scanner(context)  # type: ignore[arg-type]
        _pairs_scanners[hook] = scanner
    return scanner


def _scan_reporting(text: str, pos: int, scan: Any = None) -> tuple[Any, int]:
    _scan_now = scan or _scan
    try:
        return _scan_now(text, pos)
    except SystemError:
        # CPython 3.11's C scanner reports a syntax error with json.decoder.JSONDecodeError,
        # which it looks up in sys.modules without importing it: when `json` has not been
        # imported, the error comes out as a SystemError. Import it (on this error path
        # only) and scan again to get the message and position.
        import json.decoder  # noqa: F401

        return _scan_now(text, pos)


def loads(
    text: str, *, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None
) -> Any:
    """Parse one JSON value from ``text``; raise :class:`JSONError` (with the position).

    ``object_pairs_hook`` builds each object from its (key, value) pairs, as in ``json``.
    """
    pos = len(text) - len(text.lstrip(_WHITESPACE))
    if pos == len(text):
        raise _syntax_error("no value: the text is empty or only whitespace", text, None)
    try:
        value, end = _scan_reporting(text, pos, _scanner_for(object_pairs_hook))
    except StopIteration as e:  # the C scanner: no value starts at this index
        where = e.value
        msg = "unexpected end of the text" if where >= len(text) else "expecting a value"
        raise _syntax_error(msg, text, where) from None
    except _NotJSON as e:
        raise _syntax_error(str(e), text, None) from None
    except RecursionError:  # the C scanner's guard, at several hundred levels or more
        raise _too_deep() from None
    except ValueError as e:  # json.JSONDecodeError (has msg and pos), or a too-long integer
        where = getattr(e, "pos", None)
        msg = getattr(e, "msg", None) or str(e)
        if where is not None and where >= len(text):
            msg = "unexpected end of the text"
        elif "Exceeds the limit" in msg:
            msg = "an integer longer than Python's limit of 4300 digits"
        elif msg.startswith("Illegal trailing comma") and where is not None:
            # CPython 3.13+ names a trailing comma, at the comma; 3.11 and 3.12 say what was
            # expected, at the closing bracket: the same error reads the same on each
            msg = "expecting a value" if msg.endswith("array") else _MESSAGES[_KEY_EXPECTED]
            after = text[where + 1 :]
            where += 1 + len(after) - len(after.lstrip(_WHITESPACE))
        else:
            msg = _MESSAGES.get(msg, msg)
        raise _syntax_error(msg, text, where) from None
    rest = text[end:]
    if rest.strip(_WHITESPACE):
        where = end + len(rest) - len(rest.lstrip(_WHITESPACE))
        raise _syntax_error("unexpected data after the JSON value", text, where)
    if text.count("[") + text.count("{") > MAX_DEPTH:  # else too few to nest that deep
        from oci.nesting import deeper_than

        if deeper_than(value, MAX_DEPTH):
            raise _too_deep()
    return value


def _too_deep() -> JSONError:
    from oci.nesting import NestingError

    msg = str(NestingError("arrays and objects", MAX_DEPTH))
    return JSONError(msg, msg=msg, pos=None, lineno=None, colno=None)


def loadb(data: bytes | str) -> Any:
    """:func:`loads` for UTF-8 bytes (or text); a byte order mark is refused, as in Go."""
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            msg = f"invalid UTF-8 at byte offset {e.start} (byte 0x{e.object[e.start]:02x})"
            raise JSONError(msg, msg=msg, pos=e.start, lineno=None, colno=None) from None
    else:
        text = data
    if text.startswith("\ufeff"):
        raise _syntax_error("a byte order mark (U+FEFF) before the value", text, 0)
    return loads(text)


def type_name(value: object) -> str:
    """The JSON name of a value's type (``object``, ``array``, ``string``, ``number``,
    ``boolean``, ``null``), or the Python type's name for anything else; for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def dumps(value: object, *, ensure_ascii: bool = False) -> str:
    """Write ``value`` as compact JSON (see the module docstring for the exact format).

    Raise ``TypeError`` for a value of another type than dict, list, tuple, str, int,
    float, bool or None, ``ValueError`` for NaN, infinities or a reference cycle.
    """
    return _encode(value, ensure_ascii)


def dumpb(value: object) -> bytes:
    """:func:`dumps` as UTF-8 bytes; all non-ASCII is escaped if a lone surrogate is present."""
    text = _encode(value, False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _encode(value, True).encode("ascii")


class _Unusual(Exception):
    """A value :func:`dumps_indented` leaves to the stdlib (a float, a key that is not a str)."""


def dumps_indented(value: object) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False)``, the same text, without ``json``.

    For a CDI spec file. CPython 3.11's C encoder cannot indent, so ``json`` indents in Python
    too; this writes dicts, lists, tuples, str, int, bool and None itself (strings through the
    C ``encode_basestring``) and hands anything else (floats, keys that are not str, cycles,
    other types) to ``json.dumps``, with its result or error.
    """
    try:
        from _json import encode_basestring
    except ImportError:  # pragma: no cover - not CPython
        pass
    else:
        out: list[str] = []
        try:
            _indent(value, encode_basestring, "\n", out)
            return "".join(out)
        except (_Unusual, RecursionError):
            pass
    import json

    return json.dumps(value, indent=2, ensure_ascii=False)


def _indent(value: object, encode: Callable[[str], str], newline: str, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(encode(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, list | tuple):
        if not value:
            out.append("[]")
            return
        inner = newline + "  "
        out.append("[")
        separator = inner
        for item in value:
            out.append(separator)
            separator = "," + inner
            _indent(item, encode, inner, out)
        out.append(newline + "]")
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = newline + "  "
        out.append("{")
        separator = inner
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Unusual
            out.append(separator)
            separator = "," + inner
            out.append(encode(key))
            out.append(": ")
            _indent(item, encode, inner, out)
        out.append(newline + "}")
    else:
        raise _Unusual


def dumps_canonical(value: object) -> str:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)`` without
    ``json``: a key under which equal JSON values compare equal (object keys sorted).

    The same C encoder ``json.dumps`` drives for these arguments, with its errors.
    """
    try:
        import _json
    except ImportError:  # pragma: no cover - not CPython
        import json

        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    if isinstance(value, str):
        return _json.encode_basestring_ascii(value)
    encoder = _json.make_encoder(
        {},  # markers: cycles are a ValueError
        repr,  # default
        _json.encode_basestring_ascii,
        None,  # indent
        ":",  # key separator
        ",",  # item separator
        True,  # sort_keys
        False,  # skipkeys
        True,  # allow_nan
    )
    return "".join(encoder(value, 0))
