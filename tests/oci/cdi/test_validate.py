"""validate_file: the official schema, the reference rules in code, the spec text's warnings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import oci.cdi.validate as validate_module
from oci.cdi.validate import Problem, format_path, schema_issues, validate_data, validate_file

EXAMPLES = Path(__file__).parents[2] / "data" / "cdi" / "schema-testdata"

VALID: dict[str, Any] = {
    "cdiVersion": "0.3.0",
    "kind": "vendor.com/device",
    "devices": [{"name": "d", "containerEdits": {"deviceNodes": [{"path": "/dev/d"}]}}],
}


def write(tmp_path: Path, data: object, name: str = "spec.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("path", sorted((EXAMPLES / "good").iterdir()), ids=lambda p: p.name)
def test_the_schema_good_examples_are_valid(path: Path) -> None:
    assert validate_file(path) == []
    assert validate_file(path, strict=True) == []


@pytest.mark.parametrize("path", sorted((EXAMPLES / "bad").iterdir()), ids=lambda p: p.name)
def test_the_schema_bad_examples_are_invalid(path: Path) -> None:
    problems = validate_file(path)
    assert problems
    assert all(p.is_error for p in problems)


def test_a_name_spec_directories_ignore_is_a_warning(tmp_path: Path) -> None:
    """A valid spec named ``.yml`` or ``.JSON`` is reported: a registry would not read it."""
    import yaml

    (tmp_path / "a.yml").write_text(yaml.safe_dump(VALID))
    (tmp_path / "b.JSON").write_text(json.dumps(VALID))
    for name, stem in (("a.yml", "a"), ("b.JSON", "b")):
        path = tmp_path / name
        why = (
            "a CDI spec directory ignores this name (registries read only *.json and *.yaml): "
            f"rename it to {stem}.yaml"
        )
        (problem,) = validate_file(path)
        assert str(problem) == f"{path}: warning: {why}" and not problem.is_error
        (strict,) = validate_file(path, strict=True)
        assert strict.is_error
    assert validate_file(write(tmp_path, VALID, "c.yaml")) == []


def test_empty_file_gives_one_clear_line() -> None:
    path = EXAMPLES / "bad" / "empty.json"
    assert [str(p) for p in validate_file(path)] == [
        f"{path}: empty file (a CDI spec needs cdiVersion, kind and devices)"
    ]


def test_explicit_empty_object() -> None:
    path = EXAMPLES / "bad" / "explicit-empty.json"
    # the schema's "required" errors land on the same fields as the code's: reported once
    assert [str(p) for p in validate_file(path)] == [
        f"{path}: cdiVersion: missing required field",
        f"{path}: kind: missing required field",
        f"{path}: devices: missing required field",
    ]


def test_schema_issues_directly() -> None:
    assert schema_issues(VALID) == []
    issues = schema_issues(
        {"kind": 1, "devices": [{"name": "d", "containerEdits": {"hooks": [{}]}}]}
    )
    assert [(i.path, i.message) for i in issues] == [
        ("cdiVersion", "schema: 'cdiVersion' is a required property"),
        (
            "devices[0].containerEdits.hooks[0].hookName",
            "schema: 'hookName' is a required property",
        ),
        ("devices[0].containerEdits.hooks[0].path", "schema: 'path' is a required property"),
        ("kind", "schema: 1 is not of type 'string'"),
    ]


def test_what_only_the_schema_catches_is_reported(tmp_path: Path) -> None:
    # The reference's Go types accept a negative hook timeout; the schema says uint32.
    data = json.loads(json.dumps(VALID))
    data["devices"][0]["containerEdits"]["hooks"] = [
        {"hookName": "prestart", "path": "/bin/h", "timeout": -1}
    ]
    path = write(tmp_path, data)
    problems = validate_file(path)
    assert [str(p) for p in problems] == [
        f"{path}: devices[0].containerEdits.hooks[0].timeout: "
        "schema: -1 is less than the minimum of 0",
        f"{path}: devices[0].containerEdits.hooks[0].timeout: warning: "
        "hook timeout -1 is not greater than zero",
    ]


def test_what_only_the_code_catches_is_reported(tmp_path: Path) -> None:
    data = json.loads(json.dumps(VALID))
    edits = data["devices"][0]["containerEdits"]
    edits["env"] = ["NOEQUALS"]
    edits["hooks"] = [{"hookName": "preStart", "path": "/bin/h"}]
    edits["deviceNodes"][0]["permissions"] = "none"
    edits["vendorExtension"] = True
    path = write(tmp_path, data, "x.json")
    assert schema_issues(json.loads(path.read_text())) == []  # the schema is loose
    assert [str(p) for p in validate_file(path)] == [
        f"{path}: devices[0].containerEdits.vendorExtension: unknown field",
        f'{path}: devices[0].containerEdits.env[0]: invalid environment variable "NOEQUALS"',
        f"{path}: devices[0].containerEdits.deviceNodes[0].permissions: "
        'invalid permissions "none" (letters r, w, m)',
        f'{path}: devices[0].containerEdits.hooks[0].hookName: invalid hook name "preStart" '
        "(one of prestart, createRuntime, createContainer, startContainer, poststart, poststop)",
    ]


def test_warnings_and_strict(tmp_path: Path) -> None:
    data = json.loads(json.dumps(VALID))
    data["devices"][0]["containerEdits"]["mounts"] = [{"hostPath": "/a", "containerPath": "a"}]
    path = write(tmp_path, data)
    lenient = validate_file(path)
    assert [str(p) for p in lenient] == [
        f"{path}: devices[0].containerEdits.mounts[0].containerPath: "
        'warning: container path "a" is not absolute'
    ]
    assert not any(p.is_error for p in lenient)
    strict = validate_file(path, strict=True)
    assert [str(p) for p in strict] == [
        f"{path}: devices[0].containerEdits.mounts[0].containerPath: "
        'container path "a" is not absolute'
    ]
    assert all(p.is_error for p in strict)


def test_yaml_files_are_validated(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(
        "cdiVersion: 0.3.0\nkind: vendor.com/device\ndevices:\n"
        "- name: d\n  containerEdits:\n    deviceNodes: [{path: /dev/d, major: x}]\n"
    )
    assert [str(p) for p in validate_file(path)] == [
        f"{path}: devices[0].containerEdits.deviceNodes[0].major: expected an integer, got string"
    ]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.json", None, "cannot read: No such file or directory"),
        ("a.json", "{", "invalid JSON: unexpected end of the text"),
        ("a.yaml", "a: [", "invalid YAML:"),
        ("a.txt", "{}", 'unsupported file extension ".txt"'),
    ],
)
def test_unreadable_or_undecodable_files_are_one_problem(
    tmp_path: Path, name: str, content: str | None, message: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    problems = validate_file(path)
    assert len(problems) == 1
    assert str(problems[0]).startswith(f"{path}: {message}")
    assert problems[0].is_error


def test_without_jsonschema_the_schema_layer_is_skipped_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing() -> None:
        raise ImportError("No module named 'jsonschema'", name="jsonschema")

    monkeypatch.setattr(validate_module, "_schema_validator", missing)
    problems = validate_data(VALID, source="s.json")
    assert [str(p) for p in problems] == [
        "s.json: warning: schema check skipped: jsonschema is not installed "
        "(pip install 'jsonschema>=4.18' 'referencing>=0.30')"
    ]
    assert [p.severity for p in validate_data(VALID, source="s.json", strict=True)] == ["error"]


def test_long_schema_messages_are_cut() -> None:
    issues = schema_issues({**VALID, "devices": {"x" * 1000: 1}})
    assert len(issues) == 1
    assert len(issues[0].message) <= len("schema: ") + 240
    assert issues[0].message.endswith("...")


def test_format_path() -> None:
    assert format_path([]) == ""
    assert (
        format_path(["devices", 0, "containerEdits", "env", 2])
        == "devices[0].containerEdits.env[2]"
    )
    assert format_path(["annotations", "a.b/c"]) == 'annotations["a.b/c"]'
    assert format_path(["devices", 1, "annotations", "k"]) == 'devices[1].annotations["k"]'


def test_problem_rendering() -> None:
    assert str(Problem("f", "a.b", "bad")) == "f: a.b: bad"
    assert str(Problem("f", "", "bad")) == "f: bad"
    assert str(Problem("f", "x", "hmm", "warning")) == "f: x: warning: hmm"
