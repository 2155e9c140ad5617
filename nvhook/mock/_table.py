"""A TOML document read key by key, for the mock's data files (profiles, ``driver.toml``).

Every key must be read: what is left when a table is :meth:`Table.done` is an unknown key, and
a value of the wrong type is an error too, each a :class:`MockError` naming the file and the
key's dotted path (``gpu[2].gpu_instance[0].profile``).
"""

from __future__ import annotations

import tomllib
from typing import Any

from nvhook.errors import MockError

__all__ = ["Table", "load"]


def load(text: str, source: str) -> Table:
    """The top table of the TOML document ``text`` read from ``source``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise MockError(f"mock profile {source} is not valid TOML: {e}") from e
    return Table(data, source, "")


_REQUIRED = object()


class Table:
    """A TOML table read key by key; unknown keys and wrong types are errors naming the key."""

    def __init__(self, data: dict[str, Any], source: str, where: str) -> None:
        self._data = dict(data)
        self._source = source
        self._where = where

    def _key(self, key: str) -> str:
        return f"{self._where}.{key}" if self._where else key

    def fail(self, key: str, problem: str) -> MockError:
        return MockError(f"mock profile {self._source}: {self._key(key)}: {problem}")

    def _get(self, key: str, kind: type | tuple[type, ...], what: str, default: Any) -> Any:
        if key not in self._data:
            if default is _REQUIRED:
                raise self.fail(key, "missing")
            return default
        value = self._data.pop(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(key, f"expected {what}, got {value!r}")
        return value

    def text(self, key: str, default: Any = None) -> str:
        value: str = self._get(key, str, "a string", _REQUIRED if default is None else default)
        if "\t" in value or "\n" in value or '"' in value or "\\" in value:
            raise self.fail(key, "tabs, newlines, quotes and backslashes are not allowed")
        return value

    def opt_text(self, key: str) -> str | None:
        value: str | None = self._get(key, str, "a string", None)
        return value

    def number(self, key: str, default: Any = None) -> int:
        value: int = self._get(key, int, "an integer", _REQUIRED if default is None else default)
        if value < 0:
            raise self.fail(key, f"must not be negative, got {value}")
        return value

    def opt_number(self, key: str) -> int | None:
        value: int | None = self._get(key, int, "an integer", None)
        return value

    def flag(self, key: str, default: bool) -> bool:
        value: bool = self._get(key, bool, "true or false", default)
        return value

    def str_list(self, key: str) -> tuple[str, ...]:
        value: list[Any] = self._get(key, list, "a list of strings", [])
        if not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"expected a list of strings, got {value!r}")
        return tuple(value)

    def number_list(self, key: str) -> tuple[int, ...] | None:
        value: list[Any] | None = self._get(key, list, "a list of integers", None)
        if value is None:
            return None
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise self.fail(key, f"expected a list of non-negative integers, got {value!r}")
        return tuple(value)

    def table(self, key: str) -> Table:
        value: dict[str, Any] = self._get(key, dict, "a table", {})
        return Table(value, self._source, self._key(key))

    def tables(self, key: str) -> list[Table]:
        value: list[Any] = self._get(key, list, "an array of tables", [])
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.fail(f"{key}[{i}]", f"expected a table, got {item!r}")
            out.append(Table(item, self._source, f"{self._key(key)}[{i}]"))
        return out

    def names(self) -> list[str]:
        return list(self._data)

    def rest(self) -> dict[str, Any]:
        rest, self._data = self._data, {}
        return rest

    def done(self) -> None:
        if self._data:
            raise self.fail(next(iter(self._data)), "unknown key")
