"""``nvhook config import FILE``: nvhook's settings for a file written for NVIDIA's toolkit.

:func:`import_toolkit_config` applies :data:`nvhook.toolkit_config.TOOLKIT_KEYS` to one
file: every key in it ends up either in :attr:`Imported.settings` (checked against
:data:`nvhook.settings.KEYS`) or in :attr:`Imported.unsupported` with the reason;
:func:`render_toml` prints the result as an nvhook config file.
"""

from __future__ import annotations

from typing import Any

from nvhook.errors import ConfigError
from nvhook.settings import KEYS
from nvhook.toolkit_config import TOOLKIT_KEYS, as_is, flatten
from oci._frozen import Frozen

__all__ = ["Imported", "import_toolkit_config", "render_toml"]


class Imported(Frozen):
    """What :func:`import_toolkit_config` made of one file."""

    path: str
    #: nvhook key -> (value, the toolkit key it came from), in :data:`KEYS` order
    settings: tuple[tuple[str, Any, str], ...]
    #: (toolkit key as written, its value, why it is not carried over)
    unsupported: tuple[tuple[str, Any, str], ...]


def _check_value(key: str, value: Any) -> str | None:
    """Why nvhook would refuse ``value`` for ``key`` (its type and allowed values), or None."""
    _default, kind, allowed, _doc = KEYS[key]
    if kind == "boolean":
        return None if isinstance(value, bool) else f"expected true or false, found {value!r}"
    if kind == "list of strings":
        ok = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
        return None if ok else f"expected a list of non-empty strings, found {value!r}"
    if not isinstance(value, str):
        return f"expected a string, found {value!r}"
    if allowed is not None and value not in allowed:
        return f"{value!r} is not one of {', '.join(allowed)}"
    if kind == "absolute path or empty" and value and not value.startswith("/"):
        return f"expected an absolute path, found {value!r}"
    return None


def import_toolkit_config(path: str) -> Imported:
    """Every key of the toolkit config ``path``: nvhook's setting for it, or why there is none.

    Raises :class:`ConfigError` when the file cannot be read or is not TOML.
    """
    import tomllib

    from oci.nesting import NestingError, load_toml

    try:
        with open(path, "rb") as f:
            data = load_toml(f.read().decode("utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from e
    except NestingError as e:
        raise ConfigError(f"{path}: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 at byte offset {e.start}: save it as UTF-8") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from e
    found: dict[str, tuple[Any, str]] = {}
    unsupported: list[tuple[str, Any, str]] = []
    for key, value in flatten(data):
        mapping = TOOLKIT_KEYS.get(key)
        if mapping is None:
            if key.startswith("features."):
                reason = "a toolkit feature flag; nvhook has no feature flags"
            else:
                reason = "not a key of nvidia-container-runtime's config.toml nor of nvhook's"
            unsupported.append((key, value, reason))
            continue
        if mapping.target is None:
            unsupported.append((key, value, mapping.reason))
            continue
        convert = mapping.convert or as_is
        try:
            converted = convert(value)
        except ValueError as e:
            unsupported.append((key, value, str(e)))
            continue
        problem = _check_value(mapping.target, converted)
        if problem is not None:
            unsupported.append((key, value, f"{mapping.target}: {problem}"))
            continue
        found[mapping.target] = (converted, key)
    settings = tuple((k, *found[k]) for k in KEYS if k in found)
    return Imported(path=path, settings=settings, unsupported=tuple(unsupported))


def _toml_value(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(json.dumps(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def render_toml(imported: Imported) -> str:
    """An nvhook config file holding ``imported``'s settings, the rest as comments."""
    lines = [
        f"# nvhook settings equivalent to {imported.path}",
        "# (made by `nvhook config import`; nvhook reads /etc/nvhook/config.toml)",
    ]
    section = None
    for key, value, source in imported.settings:
        table, _, name = key.partition(".")
        if table != section:
            lines += ["", f"[{table}]"]
            section = table
        lines.append(f"{name} = {_toml_value(value)}  # from {source}")
    if imported.unsupported:
        lines += ["", "# Not carried over:"]
        for key, value, reason in imported.unsupported:
            lines.append(f"# {key} = {_toml_value(value)}: {reason}")
    return "\n".join(lines) + "\n"
