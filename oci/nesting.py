"""How deeply a decoded document may nest: one limit per format, and the checks that hold it.

Every configuration nvhook reads is decoded by a parser that recurses once per level
(``tomllib``, PyYAML's composer and constructor, CPython's ``_json`` scanner, and the code
that walks what they return), so a file nested a few thousand levels deep would end in a
``RecursionError``. Real files nest a few levels (a containerd config about eight, a CDI
spec six); each format's limit leaves a wide margin and is refused with one line naming
the limit (docs/architecture.md D9):

- JSON: :data:`oci.jsoncodec.MAX_DEPTH` (256, the native hook's limit too: the two
  programs refuse the same documents), checked by :func:`oci.jsoncodec.loads` after the
  C scanner, whose own recursion guard it words as the same refusal;
- YAML: :data:`YAML_MAX_DEPTH`, enforced while PyYAML composes (:func:`yaml_loader`), so
  its recursion never goes deeper, and through aliases after;
- TOML: :data:`TOML_MAX_DEPTH`, brackets counted before ``tomllib`` or ``tomlkit`` decodes
  (:func:`check_toml_brackets`), tables (dotted keys, ``[a.b.c]``) after
  (:func:`deeper_than`); :func:`load_toml` is ``tomllib.loads`` with both.

Depth counts the arrays and objects (tables, mappings, sequences) around a value, the
document's top-level one included: ``{"a": 1}`` has depth 1, ``[[]]`` too (the inner array
holds nothing). A document whose values are at most ``limit`` deep is accepted.

Imports nothing; PyYAML only inside :func:`yaml_loader`, ``tomllib`` inside :func:`load_toml`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import yaml

__all__ = [
    "TOML_MAX_DEPTH",
    "YAML_MAX_DEPTH",
    "NestingError",
    "check_toml_brackets",
    "deeper_than",
    "load_toml",
    "yaml_loader",
]

#: The deepest YAML document nvhook reads (CDI specs, the device plugin's configuration).
YAML_MAX_DEPTH = 64
#: The deepest TOML document nvhook reads (its settings, containerd's and CRI-O's configs).
TOML_MAX_DEPTH = 64


class NestingError(ValueError):
    """A document nested deeper than its format's limit; ``str(e)`` is a phrase for a
    message that names the file first (``<file>: <str(e)>``)."""

    def __init__(self, what: str, limit: int, line: int | None = None) -> None:
        where = f" (line {line})" if line is not None else ""
        super().__init__(
            f"{what} nested deeper than {limit} levels{where}, the most nvhook reads: "
            "a real file nests a few; check what wrote this one"
        )
        self.limit = limit
        self.line = line


def deeper_than(value: object, limit: int) -> bool:
    """Whether some value inside ``value`` is inside more than ``limit`` dicts and lists
    (``value`` itself counting as one). Iterative: any depth costs no stack."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[dict[object, object] | list[object], int]] = [(value, 1)]
    while stack:  # each entry: a container, and the depth of the values inside it
        node, depth = stack.pop()
        if not node:
            continue
        if depth > limit:
            return True
        for item in node.values() if isinstance(node, dict) else node:
            if isinstance(item, dict | list):
                stack.append((item, depth + 1))
    return False


def load_toml(text: str, limit: int = TOML_MAX_DEPTH) -> dict[str, object]:
    """``tomllib.loads(text)`` bounded to ``limit`` levels: :class:`NestingError` for a
    document nested deeper (brackets counted before decoding, tables after, and Python
    3.14's ``RecursionError`` on a key of over 1,000 parts worded the same), and
    ``tomllib.TOMLDecodeError`` as ``tomllib`` raises it."""
    import tomllib

    check_toml_brackets(text, limit)  # before tomllib recurses into them
    try:
        data = tomllib.loads(text)
    except RecursionError:  # 3.14's tomllib: a key of more than 1000 parts ([a.b.c…])
        raise NestingError("arrays and tables", limit) from None
    if deeper_than(data, limit):  # tables: [a.b.c] nests without brackets
        raise NestingError("arrays and tables", limit)
    return data


def check_toml_brackets(text: str, limit: int = TOML_MAX_DEPTH) -> None:
    """Raise :class:`NestingError` when arrays and inline tables in the TOML ``text`` nest
    deeper than ``limit`` (the document's table counting as one), before a decoder recurses
    into them. Strings and comments are skipped as TOML reads them; for text that is not
    TOML the count is approximate and the decoder reports the syntax error."""
    if text.count("[") + text.count("{") <= limit:  # too few brackets to nest that deep
        return
    depth = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c == '"' or c == "'":
            i = _toml_string_end(text, i, c)
        elif c == "[" or c == "{":
            depth += 1
            if depth > limit:  # enough for the decoder; deeper_than then counts exactly
                raise NestingError("arrays and tables", limit, text.count("\n", 0, i) + 1)
        elif (c == "]" or c == "}") and depth:
            depth -= 1
        i += 1


def _toml_string_end(text: str, i: int, quote: str) -> int:
    """The index of the last character of the TOML string starting at ``i``."""
    triple = quote * 3
    if text.startswith(triple, i):
        j = i + 3
        while True:
            end = text.find(triple, j)
            if end < 0:
                return len(text)
            if quote == '"':
                backslashes = 0
                while end - 1 - backslashes > i + 2 and text[end - 1 - backslashes] == "\\":
                    backslashes += 1
                if backslashes % 2:  # an escaped quote: the string goes on after it
                    j = end + 1
                    continue
            end += 3
            for _ in range(2):  # up to two quotes before the closing three are the string's
                if end < len(text) and text[end] == quote:
                    end += 1
            return end - 1
    j = i + 1
    n = len(text)
    while j < n:
        c = text[j]
        if c == quote or c == "\n":
            return j
        if c == "\\" and quote == '"':
            j += 1
        j += 1
    return n


def yaml_loader(base: type[yaml.SafeLoader], limit: int = YAML_MAX_DEPTH) -> type[yaml.SafeLoader]:
    """A subclass of the PyYAML loader ``base`` that raises :class:`NestingError` for a
    document nested deeper than ``limit``: while composing (before its recursion goes any
    deeper), and through aliases once composed (an alias repeats its anchor's nesting; an
    anchor inside itself nests without end)."""
    from yaml.events import AliasEvent
    from yaml.nodes import MappingNode, Node, SequenceNode

    class Loader(base):  # type: ignore[valid-type,misc]  # a class made at run time
        _nvhook_depth = 0
        _nvhook_aliased = False

        def compose_node(self, parent: Node | None, index: object) -> Node:
            depth = self._nvhook_depth  # the collections around this node
            if depth > limit:
                line = self.peek_event().start_mark.line + 1
                raise NestingError("sequences and mappings", limit, line)
            if self.check_event(AliasEvent):
                self._nvhook_aliased = True
            self._nvhook_depth = depth + 1
            try:
                node: Node = super().compose_node(parent, index)
            finally:
                self._nvhook_depth = depth
            return node

        def compose_document(self) -> Node:
            node: Node = super().compose_document()
            if self._nvhook_aliased and _node_height(node) > limit:
                raise NestingError("sequences and mappings, through aliases,", limit)
            return node

    def _node_height(root: Node) -> float:
        """The depth of the deepest value under ``root`` (a node graph: aliases share
        nodes), infinite for a node inside itself. Iterative, each node once."""
        heights: dict[int, float] = {}
        open_nodes: set[int] = set()
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            key = id(node)
            if isinstance(node, SequenceNode):
                children: list[Node] = node.value
            elif isinstance(node, MappingNode):
                children = [part for pair in node.value for part in pair]
            else:
                heights[key] = 0
                continue
            if done:
                open_nodes.discard(key)
                heights[key] = 1 + max((heights[id(c)] for c in children), default=-1)
                continue
            if key in heights:
                continue
            if key in open_nodes:  # reached again from inside itself
                return float("inf")
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in children)
        return heights[id(root)]

    return Loader
