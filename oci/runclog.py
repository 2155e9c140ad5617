"""Lines in runc's own log file (``--log``), so that engines show the shim's errors.

containerd reads the last ``error`` line of the runtime's ``--log`` file (it passes
``--log-format json``) and shows its ``msg`` to the user, e.g. in ``kubectl describe
pod``. runc 1.1.5 writes logrus lines; checked with ``runc --log x.json --log-format
json create --bundle '/x"<&>é' id``::

    {"level":"error","msg":"runc create failed: chdir /x\\"\\u003c\\u0026\\u003eé: no such file
    or directory","time":"2026-11-30T08:07:38Z"}

(one line)

and with the default text format::

    time="2026-11-30T08:06:26Z" level=error msg="flag provided but not defined: -bogus"

JSON: keys sorted, compact, Go's HTML-safe escaping (``<``, ``>``, ``&``, U+2028,
U+2029 as ``\\u003c``...), RFC 3339 time in seconds (runc writes local time; this
module writes UTC with ``Z``, which is the same thing on hosts set to UTC and an
equally valid RFC 3339 time elsewhere). Text: logrus' quoting (a value is quoted,
Go ``%q`` style, unless made only of letters, digits and ``-._/@^+``).
"""

from __future__ import annotations

import os
import time

from oci import jsoncodec

__all__ = ["LEVELS", "format_runc_log", "write_runc_log"]

#: logrus level names, most severe first.
LEVELS: tuple[str, ...] = ("panic", "fatal", "error", "warning", "info", "debug", "trace")

_HTML_SAFE = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)

_GO_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}

_BARE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._/@^+")


def format_runc_log(
    level: str, msg: str, *, log_format: str = "json", when: float | None = None
) -> str:
    """One log line (with its newline) as runc writes it; ``log_format`` is "json" or "text"."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
    if log_format == "text":
        return f"time={_text_value(stamp)} level={_text_value(level)} msg={_text_value(msg)}\n"
    line = jsoncodec.dumpb({"level": level, "msg": msg, "time": stamp}).decode("utf-8")
    for raw, escaped in _HTML_SAFE:
        line = line.replace(raw, escaped)
    return line + "\n"


def write_runc_log(
    path: str | os.PathLike[str],
    level: str,
    msg: str,
    *,
    log_format: str = "json",
    when: float | None = None,
) -> bool:
    """Append one line to runc's log file at ``path``; never raise, return whether it worked.

    The file is created (mode 0644, like runc) if missing; the line goes out in one
    ``write`` on an ``O_APPEND`` descriptor, so concurrent writers do not interleave.
    ``when`` is a Unix time (default: now).
    """
    try:
        data = format_runc_log(level, msg, log_format=log_format, when=when).encode(
            "utf-8", "backslashreplace"
        )
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            written = os.write(fd, data)
        finally:
            os.close(fd)
    except Exception:  # a log line must never make the runtime fail
        return False
    return written == len(data)


def _text_value(value: str) -> str:
    if value and all(c in _BARE for c in value):
        return value
    return '"' + "".join(_go_quote_char(c) for c in value) + '"'


def _go_quote_char(c: str) -> str:
    escaped = _GO_ESCAPES.get(c)
    if escaped is not None:
        return escaped
    if c.isprintable():
        return c
    code = ord(c)
    if code < 0x80:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
