"""The values a container's env and annotations hold, each parsed alone: device ids and
lists, capabilities, IMEX channels, feature flags, booleans, the env itself.

:func:`nvhook.requests.parse.parse_requests` combines them by the rules of precedence and
policy; these functions know nothing of either. Every value is bounded
(:data:`nvhook.constants.MAX_ENV_VALUE_CHARS`) and every error names the variable.
"""

from __future__ import annotations

from nvhook.constants import (
    DEVICE_ALL,
    DEVICE_NONE,
    DEVICE_VOID,
    ENV_DRIVER_CAPABILITIES,
    ENV_IMEX_CHANNELS,
    ENV_VISIBLE_DEVICES,
    FEATURE_DISABLED,
    FEATURE_ENABLED,
    MAX_ENV_VALUE_CHARS,
)
from nvhook.errors import RequestError
from nvhook.requests.ids import (
    All,
    CdiName,
    DeviceId,
    DeviceRequest,
    Devices,
    Index,
    LegacyMig,
    MigIndex,
    MigUuid,
    NoGpus,
    Uuid,
    Void,
)
from nvhook.requests.policy import canonical_capabilities

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "BLANKS",
    "FALSE_WORDS",
    "TRUE_WORDS",
    "check_value",
    "combine_ids",
    "cut",
    "parse_capabilities",
    "parse_cdi_name",
    "parse_device_id",
    "parse_device_list",
    "parse_env",
    "parse_feature",
    "parse_imex",
    "show",
    "split_items",
]

_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_UUID_DASHES = (8, 13, 18, 23)
#: Largest index or channel number we accept: a Linux device minor has 20 bits.
_MAX_NUMBER = (1 << 20) - 1
BLANKS = " \t"
TRUE_WORDS = ("1", "t", "T", "TRUE", "true", "True")
FALSE_WORDS = ("0", "f", "F", "FALSE", "false", "False")
_DEVICE_FORMS = (
    "expected all, none, void, an index (0), a UUID (GPU-…), "
    "a MIG device (0:1, MIG-…, MIG-GPU-…/gi/ci) or a CDI name (nvidia.com/gpu=0)"
)


def show(text: str, limit: int = 80) -> str:
    """``text`` quoted for a one-line message, cut to about ``limit`` characters."""
    if len(text) > limit:
        return repr(text[: limit - 3] + "...") + f" ({len(text)} characters)"
    return repr(text)


# --- parsing helpers -----------------------------------------------------------------------


def _decimal(text: str) -> int | None:
    """A small non-negative decimal number, or None."""
    if not text or len(text) > 7 or not _DIGITS.issuperset(text):
        return None
    n = int(text)
    return n if n <= _MAX_NUMBER else None


def _is_uuid(text: str) -> bool:
    """``8-4-4-4-12`` hexadecimal digits."""
    if len(text) != 36:
        return False
    return all((c == "-") if i in _UUID_DASHES else (c in _HEX) for i, c in enumerate(text))


def check_value(value: str, where: str) -> None:
    """Refuse values too long to be real and control characters (a tab counts as a blank)."""
    if len(value) > MAX_ENV_VALUE_CHARS:
        raise RequestError(
            f"{where} is {len(value)} characters long, more than {MAX_ENV_VALUE_CHARS}: "
            f"{show(value)}"
        )
    if not value.replace("\t", " ").isprintable():
        bad = next(c for c in value if c != "\t" and not c.isprintable())
        raise RequestError(f"{where} contains the control character {bad!r}: {show(value)}")


def split_items(value: str, where: str) -> list[str]:
    """Comma-separated items, blanks trimmed, empty ones skipped."""
    check_value(value.strip(BLANKS), where)
    return [s for s in (item.strip(BLANKS) for item in value.split(",")) if s]


def parse_cdi_name(text: str, where: str) -> CdiName:
    """A qualified CDI device name (``vendor/class=name``), or a :class:`RequestError`."""
    # Imported here: only a CDI request needs oci.cdi.
    from oci.cdi.names import parse_qualified_name
    from oci.errors import CdiNameError

    try:
        parse_qualified_name(text)
    except CdiNameError as e:
        raise RequestError(f"{where}: {e.message}") from None
    return CdiName(text)


def parse_device_id(item: str, *, where: str = ENV_VISIBLE_DEVICES) -> DeviceId:
    """One device item (blanks already trimmed); ``where`` names its origin in messages."""
    bad = f"{where}: invalid device {show(item)}"
    if item.startswith("MIG-GPU-"):
        parts = item[4:].split("/")
        if len(parts) == 3 and _is_uuid(parts[0][4:]):
            gi, ci = _decimal(parts[1]), _decimal(parts[2])
            if gi is not None and ci is not None:
                return LegacyMig(parts[0], gi, ci)
        raise RequestError(f"{bad}: expected MIG-GPU-<uuid>/<gi>/<ci>")
    if item.startswith("GPU-"):
        if _is_uuid(item[4:]):
            return Uuid(item)
        raise RequestError(f"{bad}: expected GPU-<8-4-4-4-12 hex digits>")
    if item.startswith("MIG-"):
        if _is_uuid(item[4:]):
            return MigUuid(item)
        raise RequestError(f"{bad}: expected MIG-<8-4-4-4-12 hex digits>")
    if "=" in item:
        return parse_cdi_name(item, where)
    if ":" in item:
        gpu, _, mig = item.partition(":")
        gpu_n, mig_n = _decimal(gpu), _decimal(mig)
        if gpu_n is not None and mig_n is not None:
            return MigIndex(gpu_n, mig_n)
        raise RequestError(f"{bad}: expected <gpu index>:<mig index>, e.g. 0:1")
    n = _decimal(item)
    if n is not None:
        return Index(n)
    raise RequestError(f"{bad}: {_DEVICE_FORMS}")


def combine_ids(items: Iterable[str], where: str) -> DeviceRequest:
    """The request a list of items makes (specials stand alone, duplicates dropped)."""
    unique = list(dict.fromkeys(items))
    if not unique:
        return Void()
    specials: dict[str, DeviceRequest] = {
        DEVICE_ALL: All(),
        DEVICE_NONE: NoGpus(),
        DEVICE_VOID: Void(),
    }
    for item in unique:
        if item in specials:
            if len(unique) > 1:
                others = ",".join(unique)
                raise RequestError(
                    f"{where}: {item!r} cannot be combined with other devices: {show(others)}"
                )
            return specials[item]
    ids = dict.fromkeys(parse_device_id(item, where=where) for item in unique)
    return Devices(tuple(ids))


def parse_device_list(value: str, *, where: str = ENV_VISIBLE_DEVICES) -> DeviceRequest:
    """Parse an ``NVIDIA_VISIBLE_DEVICES``-style value: empty means :class:`Void`."""
    return combine_ids(split_items(value, where), where)


def parse_capabilities(value: str | None, *, default: tuple[str, ...]) -> tuple[str, ...]:
    """``NVIDIA_DRIVER_CAPABILITIES``: canonical order, ``all`` expanded; unset/empty -> default."""
    if value is None:
        return default
    items = split_items(value, ENV_DRIVER_CAPABILITIES)
    if not items:
        return default
    try:
        return canonical_capabilities(items)
    except ValueError as e:
        raise RequestError(f"{ENV_DRIVER_CAPABILITIES}: {e}") from None


def parse_imex(value: str) -> All | tuple[int, ...]:
    """``NVIDIA_IMEX_CHANNELS``: ``all``, or the channel numbers (none, void, empty: none)."""
    items = split_items(value, ENV_IMEX_CHANNELS)
    unique = list(dict.fromkeys(items))
    if not unique or unique in ([DEVICE_VOID], [DEVICE_NONE]):
        return ()
    if unique == [DEVICE_ALL]:
        return All()
    channels: list[int] = []
    for item in unique:
        n = _decimal(item)
        if n is None:
            raise RequestError(
                f"{ENV_IMEX_CHANNELS}: invalid channel {show(item)}: "
                "expected all or a comma list of channel numbers"
            )
        channels.append(n)
    return tuple(dict.fromkeys(channels))


def parse_feature(name: str, value: str) -> bool:
    """A feature variable's ``enabled`` or ``disabled`` (blanks trimmed)."""
    flag = value.strip(BLANKS)
    if flag == FEATURE_ENABLED:
        return True
    if flag in ("", FEATURE_DISABLED):
        return False
    raise RequestError(
        f"{name} must be {FEATURE_ENABLED!r} or {FEATURE_DISABLED!r}, not {show(flag)}"
    )


def parse_env(env: object) -> tuple[dict[str, str], tuple[str, ...]]:
    """``process.env`` as a dict (the last entry of a name wins), and warnings.

    Raise :class:`RequestError` for what runc would refuse: a non-list, a non-string
    entry, an entry without ``=``, an empty name, a NUL.
    """
    if env is None:
        return {}, ()
    if not isinstance(env, list):
        raise RequestError(f"process.env must be a list of strings, not {type(env).__name__}")
    out: dict[str, str] = {}
    duplicated: dict[str, None] = {}
    for i, entry in enumerate(env):
        if not isinstance(entry, str):
            raise RequestError(
                f"process.env[{i}] must be a string NAME=value, not {type(entry).__name__}"
            )
        name, sep, value = entry.partition("=")
        if not sep or not name or "\0" in entry:
            problem = "has no '='" if not sep else "has an empty name" if not name else "has a NUL"
            raise RequestError(f"process.env[{i}] {problem}: {show(entry)}")
        if name.startswith("NVIDIA_") and name in out and out[name] != value:
            duplicated[name] = None
        out[name] = value
    warnings = tuple(
        f"{name} is set more than once in process.env; the last value, {show(out[name])}, "
        "counts (as runc does)"
        for name in duplicated
    )
    return out, warnings


def cut(value: str, limit: int = 200) -> str:
    """``value`` as kept in a request's provenance: at most ``limit`` characters."""
    return value if len(value) <= limit else value[: limit - 3] + "..."


# --- the sources ---------------------------------------------------------------------------
