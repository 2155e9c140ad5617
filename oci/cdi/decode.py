"""A CDI spec file's bytes to a decoded object: JSON by the stdlib, YAML by PyYAML.

:func:`decode_spec` picks the decoder by the file's suffix and raises ``ValueError``
with a one-line reason. Both decoders record keys that repeat within one object (a
:class:`DuplicateKeyDict`, the last value kept) so that :mod:`oci.cdi.parse` can refuse
them, as the reference's ``yaml.UnmarshalStrict`` does. PyYAML is imported only for a
``.yaml``/``.yml`` file: the shim's path reads JSON specs (docs/architecture.md D5).
Nesting is bounded per format (:mod:`oci.nesting`: JSON by :data:`oci.jsoncodec.MAX_DEPTH`,
YAML by :data:`~oci.nesting.YAML_MAX_DEPTH`), refused with the ``ValueError`` of any other
problem.
"""

from __future__ import annotations

from oci.cdi.names import quote

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    import yaml

__all__ = ["DuplicateKeyDict", "decode_spec"]


class DuplicateKeyDict(dict[str, object]):
    """A decoded object in which some key appeared more than once (the last value is kept)."""

    __slots__ = ("duplicates",)

    duplicates: tuple[str, ...]


def _object_from_pairs(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """``object_pairs_hook``: a plain dict, or a :class:`DuplicateKeyDict` recording repeats."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[Any] = set()
    dups: list[str] = []
    for key, _ in pairs:
        if key in seen and key not in dups:
            dups.append(key)
        seen.add(key)
    marked = DuplicateKeyDict(obj)
    marked.duplicates = tuple(str(k) for k in dups)
    return marked


def decode_spec(raw: bytes, *, suffix: str) -> object:
    """Decode a spec file's bytes by its suffix; ``ValueError`` with a one-line reason."""
    suffix = suffix.lower()
    if suffix == ".json":
        return _decode_json(raw)
    if suffix in (".yaml", ".yml"):
        return _decode_yaml(raw)
    shown = quote(suffix) if suffix else "none"
    raise ValueError(f"unsupported file extension {shown} (a CDI spec is .json or .yaml)")


def _decode_json(raw: bytes) -> object:
    from oci.jsoncodec import JSONError, loads

    if not raw.strip():
        raise ValueError("empty file (a CDI spec needs cdiVersion, kind and devices)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text: {e.reason} at byte {e.start}") from None
    try:
        return loads(text, object_pairs_hook=_object_from_pairs)
    except JSONError as e:  # str(e) where there is no position: the phrase for any cause
        if e.lineno is None:
            raise ValueError(str(e)) from None
        raise ValueError(f"invalid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None


_yaml_loader: type[yaml.SafeLoader] | None = None


def _decode_yaml(raw: bytes) -> object:
    import yaml  # only here: PyYAML costs milliseconds to import

    global _yaml_loader
    if _yaml_loader is None:
        _yaml_loader = _make_yaml_loader()
    try:
        data = yaml.load(raw, Loader=_yaml_loader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ValueError(f"invalid YAML: {problem}{where}") from None
    if data is None:
        raise ValueError("empty file (a CDI spec needs cdiVersion, kind and devices)")
    return data


def _make_yaml_loader() -> type[yaml.SafeLoader]:
    """A SafeLoader whose mappings record duplicate keys, like the JSON hook does, and that
    refuses nesting deeper than :data:`~oci.nesting.YAML_MAX_DEPTH` (so its recursion, and
    ``construct_map``'s below, stay shallow)."""
    import yaml

    from oci.nesting import yaml_loader

    class Loader(yaml_loader(yaml.SafeLoader)):  # type: ignore[misc]  # made at run time
        pass

    def construct_map(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
        loader.flatten_mapping(node)
        pairs = []
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "found an unhashable key", key_node.start_mark
                ) from None
            pairs.append((key, loader.construct_object(value_node, deep=True)))
        return _object_from_pairs(pairs)

    Loader.add_constructor("tag:yaml.org,2002:map", construct_map)
    return Loader
