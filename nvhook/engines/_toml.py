"""Format-preserving TOML edits (tomlkit) for the containerd, CRI-O and podman configurators.

An edit is a key path and a value: a scalar replaces or adds a key, a dict is merged key by
key, so tables that exist keep their comments, key order and formatting, and only what
differs is touched. A table we add takes its indentation from a sibling table (or from its
nearest ancestor) and copies the blank-line style of what precedes it.

Every edited text is checked by parsing it again with the standard library's ``tomllib``:
it must equal the original data with the edits applied, or :func:`edit` raises (tomlkit
can misplace keys in unusual layouts, e.g. tables defined out of order or dotted keys; we
would rather refuse than write a file that means something else).

Every text edited here has been through :func:`parse` first, which refuses one nested
deeper than :data:`oci.nesting.TOML_MAX_DEPTH` (tomlkit's own limit is 100 levels of keys
and of values each, and the recursive walks here and in the configurators need a bound).
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

import tomlkit
from tomlkit.container import Container
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import AoT, InlineTable, Item, Table, Whitespace
from tomlkit.toml_document import TOMLDocument

from nvhook.errors import EngineConfigError
from oci._frozen import Frozen
from oci.nesting import TOML_MAX_DEPTH, NestingError, check_toml_brackets, deeper_than

__all__ = ["Edit", "append_to_array", "dotted", "edit", "parse", "plain_get"]

#: A key path and the value to set there (a dict is merged into the table at that path).
Edit = tuple[tuple[str, ...], Any]


def dotted(path: Sequence[str]) -> str:
    """A key path as TOML writes it: ``plugins."io.containerd.grpc.v1.cri".containerd``."""
    return ".".join(k if k.replace("_", "").replace("-", "").isalnum() else f'"{k}"' for k in path)


def parse(path: str, data: bytes) -> dict[str, Any]:
    """``data`` (the bytes of ``path``) as plain data; a one-line error for invalid TOML."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EngineConfigError(f"{path}: not UTF-8 (byte {e.start}): not a TOML file") from e
    try:
        check_toml_brackets(text)  # before tomllib (then tomlkit) recurses into them
        plain = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise EngineConfigError(f"{path}: invalid TOML: {e}") from e
    except NestingError as e:
        raise EngineConfigError(f"{path}: {e}") from None
    except RecursionError:  # Python 3.14's tomllib: a key of more than 1000 parts ([a.b.c…])
        raise EngineConfigError(
            f"{path}: {NestingError('arrays and tables', TOML_MAX_DEPTH)}"
        ) from None
    if deeper_than(plain, TOML_MAX_DEPTH):  # tables: [a.b.c] nests without brackets
        raise EngineConfigError(f"{path}: {NestingError('arrays and tables', TOML_MAX_DEPTH)}")
    return plain


def plain_get(data: Mapping[str, Any], path: Sequence[str]) -> Any:
    """The value at ``path`` in plain data, or None."""
    node: Any = data
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def edit(path: str, text: str, edits: Sequence[Edit], *, header: Sequence[str] = ()) -> str:
    """``text`` (the TOML file ``path``; "" for a new one) with ``edits`` applied.

    ``header`` lines are written as comments at the top of a new file. Raises
    :class:`EngineConfigError` naming the key when an edit meets a value of the wrong kind.
    """
    expected = tomllib.loads(text) if text else {}
    for keys, value in edits:
        _plain_set(path, expected, keys, value)
    try:
        doc = tomlkit.parse(text) if text else tomlkit.document()
    except TOMLKitError as e:  # tomllib accepted it: a tomlkit limitation
        raise EngineConfigError(f"{path}: cannot edit this TOML layout: {e}") from e
    if not text:
        for line in header:
            doc.add(tomlkit.comment(line))
    ctx = _Ctx(path, doc, _uses_blank_lines(text))
    for keys, value in edits:
        _set_path(ctx, keys, value)
    out = tomlkit.dumps(doc)
    if not out.endswith("\n"):
        out += "\n"
    try:
        ok = tomllib.loads(out) == expected
    except tomllib.TOMLDecodeError:
        ok = False
    if not ok:
        raise EngineConfigError(
            f"{path}: cannot edit this file's layout faithfully (tables split or dotted keys "
            f"around {dotted(edits[0][0])}); nothing changed: add the settings by hand"
        )
    return out


def append_to_array(path: str, text: str, keys: Sequence[str], value: Any) -> str:
    """``text`` with ``value`` appended to the array at ``keys`` (which must exist)."""
    expected = tomllib.loads(text)
    array = plain_get(expected, keys)
    if not isinstance(array, list):
        raise EngineConfigError(f"{path}: {dotted(keys)} is not an array")
    array.append(value)
    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as e:
        raise EngineConfigError(f"{path}: cannot edit this TOML layout: {e}") from e
    node: Any = doc
    for key in keys:
        node = node[key]
    node.append(value)
    out = tomlkit.dumps(doc)
    if tomllib.loads(out) != expected:
        raise EngineConfigError(f"{path}: cannot append to {dotted(keys)} faithfully")
    return out


# --------------------------------------------------------------------------- plain data


def _plain_set(path: str, data: dict[str, Any], keys: Sequence[str], value: Any) -> None:
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise EngineConfigError(f"{path}: {dotted(keys[: i + 1])} is not a table")
        node = child
    _plain_merge(path, node, keys, value)


def _plain_merge(path: str, node: dict[str, Any], keys: Sequence[str], value: Any) -> None:
    key = keys[-1]
    if isinstance(value, Mapping):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise EngineConfigError(f"{path}: {dotted(keys)} is not a table")
        for k, v in value.items():
            _plain_merge(path, child, (*keys, k), v)
    else:
        if isinstance(node.get(key), dict):
            raise EngineConfigError(f"{path}: {dotted(keys)} is a table, not a value")
        node[key] = copy.deepcopy(value)


# --------------------------------------------------------------------------- tomlkit


class _Ctx(Frozen):
    path: str
    doc: TOMLDocument
    blank: bool  # the file separates tables with blank lines


def _uses_blank_lines(text: str) -> bool:
    """False for a file that has tables and not one blank line: we add none either."""
    has_table = any(line.lstrip().startswith("[") for line in text.splitlines())
    return not has_table or "\n\n" in text.replace("\r", "").replace(" ", "")


def _set_path(ctx: _Ctx, keys: Sequence[str], value: Any) -> None:
    for inner in reversed(keys[1:]):
        value = {inner: value}
    _merge(ctx, ctx.doc, keys[:1], value)


def _merge(ctx: _Ctx, node: Any, keys: Sequence[str], value: Any) -> None:
    """Merge ``value`` into ``node[keys[-1]]``."""
    key = keys[-1]
    if key not in node:
        _add(ctx, node, keys, value)
        return
    current = node[key]
    if not isinstance(value, Mapping):
        if _unwrap(current) != value:
            node[key] = _like(current, value)  # tomlkit keeps the key's indentation, comment
        return
    new_values = {k: v for k, v in value.items() if k not in current and not isinstance(v, Mapping)}
    if new_values and isinstance(current, Table) and current.is_super_table():
        # keys for a table that only has subtables so far: a header of its own after them,
        # rather than one put where the first subtable's header (and its comments) are
        _add(ctx, node, keys, new_values)
    for k, v in value.items():
        if k not in new_values or not isinstance(current, Table) or not current.is_super_table():
            _merge(ctx, current, (*keys, k), v)


def _add(ctx: _Ctx, node: Any, keys: Sequence[str], value: Any) -> None:
    """Add ``keys[-1]`` (absent from ``node``) with ``value``, formatted like its surroundings."""
    key = keys[-1]
    if isinstance(node, InlineTable):
        node[key] = _inline(value) if isinstance(value, Mapping) else value
        return
    if not isinstance(value, Mapping):
        _add_value(ctx, node, key, value)
        return
    header, unit = _indentation(ctx.doc, keys)
    before = _last_leaf(node)
    lead = ctx.blank and before is not None and not isinstance(before, Whitespace)
    table = _build_table(value, header, unit, blank=ctx.blank, lead=lead)
    if isinstance(before, Whitespace):
        # what separated the previous block from the next now separates ours from it
        _last_container(table).raw_append(None, Whitespace(before.as_string()))
    indent = table.trivia.indent
    if isinstance(node, Table):
        node.raw_append(key, table)
    elif isinstance(node, Container):
        node.append(key, table)
    else:
        node[key] = table
    table.trivia.indent = indent  # tomlkit may have put a blank line of its own


def _add_value(ctx: _Ctx, node: Any, key: str, value: Any) -> None:
    item = tomlkit.item(value)
    if not isinstance(node, (Table, TOMLDocument)):
        node[key] = item
        return
    body = node.value.body if isinstance(node, Table) else node.body
    indent = next(
        (v.trivia.indent for k, v in body if k is not None and not isinstance(v, (Table, AoT))),
        _spaces(node.trivia.indent) + _doc_step(ctx.doc) if isinstance(node, Table) else "",
    )
    item.trivia.indent = indent.replace("\n", "")
    saved = [(v, v.trivia.indent) for _, v in body if isinstance(v, (Table, AoT))]
    if isinstance(node, Table):
        node.raw_append(key, item)
    else:
        node.append(key, item)
    for table, indent_before in saved:  # tomlkit adds a blank line before the next table
        table.trivia.indent = indent_before


def _indentation(doc: TOMLDocument, keys: Sequence[str]) -> tuple[str, str]:
    """Header indentation of a new table at ``keys``, and the indentation step of the file.

    A sibling table with a header gives both directly; otherwise the nearest ancestor table
    with a header does (its keys' extra indentation is the step, applied once per level).
    """
    parent: Any = doc
    ancestors: list[tuple[int, Any]] = []
    for depth, key in enumerate(keys[:-1], start=1):
        if key not in parent:
            break
        parent = parent[key]
        ancestors.append((depth, parent))
    else:
        for _, sibling in _tables(parent):
            if not sibling.is_super_table():
                header = _spaces(sibling.trivia.indent)
                return header, _step(sibling, header)
    for depth, table in reversed(ancestors):
        if isinstance(table, Table) and not table.is_super_table():
            header = _spaces(table.trivia.indent)
            unit = _step(table, header)
            return header + unit * (len(keys) - depth), unit
    return "", _doc_step(doc)


def _doc_step(node: Any) -> str:
    """The indentation of keys under their header in the first table that has keys."""
    for _, table in _tables(node):
        if not table.is_super_table():
            for k, v in table.value.body:
                if k is not None and not isinstance(v, (Table, AoT, Whitespace)):
                    return _step(table, _spaces(table.trivia.indent))
        step = _doc_step(table)
        if step:
            return step
    return ""


def _step(table: Table, header: str) -> str:
    for k, v in table.value.body:
        if k is not None and not isinstance(v, (Table, AoT, Whitespace)):
            indent = _spaces(v.trivia.indent)
            return indent[len(header) :] if indent.startswith(header) else ""
    return ""


def _spaces(indent: str) -> str:
    return indent.rsplit("\n", 1)[-1]


def _tables(node: Any) -> list[tuple[str, Table]]:
    if isinstance(node, Table):
        body = node.value.body
    elif isinstance(node, Container):
        body = node.body
    else:
        return []
    return [(k.key, v) for k, v in body if k is not None and isinstance(v, Table)]


def _build_table(
    value: Mapping[str, Any], header: str, unit: str, *, blank: bool, lead: bool
) -> Table:
    """A new table; one holding only tables is a super table (it writes no header line).

    Headers are indented ``header``; keys and nested headers one ``unit`` more. With
    ``blank``, a blank line precedes each nested header; with ``lead``, this table's too
    (for a super table: its first nested header's).
    """
    is_super = bool(value) and all(isinstance(v, Mapping) for v in value.values())
    table = tomlkit.table(is_super_table=is_super)
    for key, v in value.items():
        if not isinstance(v, Mapping):
            item = tomlkit.item(v)
            item.trivia.indent = header + unit
            table.raw_append(key, item)
    first = True
    for key, v in value.items():
        if isinstance(v, Mapping):
            child_lead = lead if is_super and first else blank
            child = _build_table(v, header + unit, unit, blank=blank, lead=child_lead)
            indent = child.trivia.indent
            table.raw_append(key, child)
            child.trivia.indent = indent
            first = False
    table.trivia.indent = "" if is_super else ("\n" if lead else "") + header
    return table


def _inline(value: Mapping[str, Any]) -> InlineTable:
    table = tomlkit.inline_table()
    for key, v in value.items():
        table[key] = _inline(v) if isinstance(v, Mapping) else v
    return table


def _last_leaf(node: Any) -> Item | None:
    """The item rendered last inside ``node`` (recursing into its last table), or None."""
    body: list[tuple[Any, Item]]
    if isinstance(node, Table):
        body = node.value.body
    elif isinstance(node, Container):
        body = node.body
    else:
        return None
    if not body:
        return None
    last = body[-1][1]
    if isinstance(last, Table):
        return _last_leaf(last) or last
    return last


def _last_container(table: Table) -> Table:
    body = table.value.body
    if body and isinstance(body[-1][1], Table):
        return _last_container(body[-1][1])
    return table


def _like(current: Any, value: Any) -> Any:
    """``value``, as a 'literal string' when it replaces one and can be one."""
    if (
        isinstance(current, tomlkit.items.String)
        and isinstance(value, str)
        and current.type == tomlkit.items.StringType.SLL
        and "'" not in value
        and value.isprintable()
    ):
        return tomlkit.string(value, literal=True)
    return value


def _unwrap(value: Any) -> Any:
    return value.unwrap() if hasattr(value, "unwrap") else value


def config_text(config: str, data: bytes | None) -> str:
    """The text of a TOML config read as ``data`` (None: no file yet, ``""``), after
    checking that it parses (an error names ``config``)."""
    if data is None:
        return ""
    parse(config, data)
    return data.decode()
