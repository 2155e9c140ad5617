"""CDI qualified device names: ``vendor/class=name``, with the reference parser's rules.

Follows ``pkg/parser/parser.go`` of tags.cncf.io/container-device-interface:

- vendor and class: ASCII letters, digits, ``_``, ``-`` and ``.``; the first
  character a letter, the last a letter or digit (a ``.`` in the class needs
  cdiVersion 0.6.0, see :mod:`oci.cdi.version`);
- device name: ASCII letters, digits, ``_``, ``-``, ``.`` and ``:``; the first
  and the last character a letter or digit.

Plain string checks, no ``re``: the runtime shim imports this on its start path.
"""

from __future__ import annotations

from oci._frozen import Frozen
from oci.errors import CdiNameError

__all__ = [
    "QualifiedName",
    "class_name_problem",
    "device_name_problem",
    "is_qualified_name",
    "parse_kind",
    "parse_qualified_name",
    "qualified_name",
    "quote",
    "vendor_name_problem",
]

_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_ALNUM = _LETTERS | frozenset("0123456789")
_KIND_INNER = _ALNUM | frozenset("_-.")
_NAME_INNER = _KIND_INNER | frozenset(":")


class QualifiedName(Frozen):
    """A parsed ``vendor/class=name``."""

    vendor: str
    class_name: str
    name: str

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{self.class_name}"

    def __str__(self) -> str:
        return qualified_name(self.vendor, self.class_name, self.name)


def qualified_name(vendor: str, class_name: str, name: str) -> str:
    """Join the three parts (no validation)."""
    return f"{vendor}/{class_name}={name}"


def _vendor_or_class_problem(name: str) -> str | None:
    if not name:
        return "empty name"
    if name[0] not in _LETTERS:
        return f"{quote(name)}, should start with letter"
    for c in name[1:-1]:
        if c not in _KIND_INNER:
            return f"invalid character {c!r} in name {quote(name)}"
    if name[-1] not in _ALNUM:
        return f"{quote(name)}, should end with a letter or digit"
    return None


def vendor_name_problem(vendor: str) -> str | None:
    """Why ``vendor`` is not a valid vendor name, or None."""
    problem = _vendor_or_class_problem(vendor)
    return None if problem is None else f"invalid vendor. {problem}"


def class_name_problem(class_name: str) -> str | None:
    """Why ``class_name`` is not a valid class name, or None."""
    problem = _vendor_or_class_problem(class_name)
    return None if problem is None else f"invalid class. {problem}"


def device_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid (unqualified) device name, or None."""
    if not name:
        return "invalid (empty) device name"
    if name[0] not in _ALNUM:
        return f"invalid device name {quote(name)}, should start with a letter or digit"
    for c in name[1:-1]:
        if c not in _NAME_INNER:
            return f"invalid character {c!r} in device name {quote(name)}"
    if name[-1] not in _ALNUM:
        return f"invalid device name {quote(name)}, should end with a letter or digit"
    return None


def parse_kind(kind: str) -> tuple[str, str]:
    """Split ``vendor/class`` (reference ``ParseQualifier``): ``("", kind)`` when it does not split.

    Only the first ``/`` separates; nothing is validated here.
    """
    vendor, sep, class_name = kind.partition("/")
    if not sep or not vendor or not class_name:
        return "", kind
    return vendor, class_name


def parse_qualified_name(device: str) -> QualifiedName:
    """Parse and validate ``vendor/class=name``; raise :class:`CdiNameError` naming the problem."""
    vendor = class_name = name = ""
    if device and device[0] != "/":
        qualifier, sep, name = device.partition("=")
        if sep and qualifier and name:
            vendor, class_name = parse_kind(qualifier)
    if not vendor:
        if not device or device[0] == "/":
            why = "a device name cannot be empty or start with '/'"
        elif "=" not in device:
            why = "no '=name' part"
        elif not name:
            why = "empty name after '='"
        else:
            why = "no 'vendor/class' before '='"
        raise CdiNameError(
            f"unqualified device {quote(device)}: expected vendor/class=name ({why})"
        )
    for problem in (
        vendor_name_problem(vendor),
        class_name_problem(class_name),
        device_name_problem(name),
    ):
        if problem is not None:
            raise CdiNameError(f"invalid device {quote(device)}: {problem}")
    return QualifiedName(vendor, class_name, name)


def is_qualified_name(device: str) -> bool:
    """Whether ``device`` parses as a valid qualified name."""
    try:
        parse_qualified_name(device)
    except CdiNameError:
        return False
    return True


def quote(s: str) -> str:
    """A string in double quotes, escaped so that a message stays on one line (like Go's %q)."""
    out = s.replace("\\", "\\\\").replace('"', '\\"')
    if not out.isprintable():
        out = "".join(
            c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in out
        )
    return f'"{out}"'
