"""Validation of CDI spec files for ``nvhook cdi validate``: schema, reference rules, spec text.

Three layers, one list of :class:`Problem` (one line each, ``FILE: field.path: message``):

1. the official JSON schema (``oci/cdi/schema/``, draft-07, loaded through a
   ``referencing.Registry`` holding ``schema.json`` and ``defs.json``);
2. the reference library's rules, in code (:func:`oci.cdi.parse.check_spec`):
   the schema is looser (unknown fields, any env item, any hook name, versions);
3. what the CDI spec text requires but the reference library does not enforce:
   absolute hook paths, absolute container paths of device nodes and mounts,
   hook timeouts above zero, Kubernetes rules for annotation keys. These are
   warnings, errors with ``strict=True``.

A schema problem at a field where the code rules already found one is left
out: the code's message is the more precise. ``jsonschema`` and
``referencing`` are imported only here; without them the schema layer is
skipped with a warning (an error with ``strict=True``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from functools import cache
from typing import Any, Literal

from oci._frozen import Frozen
from oci.cdi.decode import decode_spec
from oci.cdi.names import quote
from oci.cdi.parse import check_spec
from oci.cdi.spec import Issue

__all__ = [
    "Problem",
    "Severity",
    "format_path",
    "schema_issues",
    "validate_data",
    "validate_file",
]

Severity = Literal["error", "warning"]

_MAX_MESSAGE = 240  # jsonschema quotes whole instances; keep one readable line


class Problem(Frozen):
    """One problem of one file: ``FILE: path: [warning: ]message``."""

    file: str
    path: str
    message: str
    severity: Severity = "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def __str__(self) -> str:
        where = f"{self.file}: {self.path}: " if self.path else f"{self.file}: "
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{where}{prefix}{self.message}"


def format_path(parts: Iterable[str | int]) -> str:
    """A JSON path as ``devices[0].containerEdits``; map keys of annotations as ``["key"]``."""
    out = ""
    in_annotations = False
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif in_annotations:
            out += f"[{quote(part)}]"
        else:
            out = f"{out}.{part}" if out else part
        in_annotations = part == "annotations" and not in_annotations
    return out


@cache
def _schema_validator() -> Any:
    """The draft-07 validator over the packaged schema (raises ImportError without jsonschema)."""
    from importlib.resources import files

    import jsonschema
    from referencing import Registry
    from referencing.jsonschema import DRAFT7

    base = files("oci.cdi.schema")
    schema = json.loads(base.joinpath("schema.json").read_text(encoding="utf-8"))
    defs = json.loads(base.joinpath("defs.json").read_text(encoding="utf-8"))
    registry: Registry[Any] = Registry().with_resources(
        [
            ("schema.json", DRAFT7.create_resource(schema)),
            ("defs.json", DRAFT7.create_resource(defs)),
        ]
    )
    return jsonschema.Draft7Validator(schema, registry=registry)


def schema_issues(data: object) -> list[Issue]:
    """Every place where ``data`` breaks the official CDI JSON schema, in document order."""
    validator = _schema_validator()
    issues = []
    for err in validator.iter_errors(data):
        parts = list(err.absolute_path)
        if err.validator == "required" and isinstance(err.instance, dict):
            # "'kind' is a required property" belongs to the missing field itself.
            missing = [
                p
                for p in err.validator_value
                if p not in err.instance and err.message.startswith(repr(p))
            ]
            if missing:
                parts.append(missing[0])
        message = err.message
        if len(message) > _MAX_MESSAGE:
            message = message[: _MAX_MESSAGE - 3] + "..."
        issues.append(Issue(format_path(parts), f"schema: {message}"))
    issues.sort(key=lambda i: i.path)
    return issues


def validate_data(
    data: object, *, source: str, strict: bool = False, schema: bool = True
) -> list[Problem]:
    """Validate a decoded spec; see the module docstring for the three layers."""
    problems: list[Problem] = []
    checked = check_spec(data, source=source, warnings=True)
    code_paths = {issue.path for issue in checked.errors}
    if schema:
        try:
            for issue in schema_issues(data):
                if issue.path not in code_paths:
                    problems.append(Problem(source, issue.path, issue.message))
        except ImportError as e:
            problems.append(
                Problem(
                    source,
                    "",
                    f"schema check skipped: {e.name or 'jsonschema'} is not installed "
                    "(pip install 'jsonschema>=4.18' 'referencing>=0.30')",
                    "error" if strict else "warning",
                )
            )
    problems.extend(Problem(source, i.path, i.message) for i in checked.errors)
    severity: Severity = "error" if strict else "warning"
    problems.extend(Problem(source, i.path, i.message, severity) for i in checked.warnings)
    return problems


def validate_file(path: str | os.PathLike[str], *, strict: bool = False) -> list[Problem]:
    """Validate one spec file (``.json``, ``.yaml`` or ``.yml``); no problems means valid.

    A name a spec directory would ignore (``.yml``, ``.JSON``: registries read only
    ``*.json`` and ``*.yaml``) is a warning (an error when ``strict``): its content may be
    valid, but put where it belongs it would not be read."""
    from oci.cdi.registry import SPEC_SUFFIXES

    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            raw = f.read()
    except OSError as e:
        return [Problem(source, "", f"cannot read: {e.strerror or e}")]
    try:
        data = decode_spec(raw, suffix=os.path.splitext(source)[1])
    except ValueError as e:
        return [Problem(source, "", str(e))]
    problems = validate_data(data, source=source, strict=strict)
    if not source.endswith(SPEC_SUFFIXES):
        message = (
            "a CDI spec directory ignores this name (registries read only *.json and "
            f"*.yaml): rename it to {os.path.splitext(os.path.basename(source))[0]}.yaml"
        )
        problems.append(Problem(source, "", message, "error" if strict else "warning"))
    return problems
