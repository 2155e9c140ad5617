"""Golden cases: data under tests/golden/<case>/, one parametrized test.

Each case folder holds ``case.toml`` (``kind``, ``description`` and the kind's
inputs), the input spec (``config.in.json``, or ``base`` naming a file in
tests/data/specs/) and the expectation: ``expected.json`` (the resulting
config.json) or ``expected.err`` (the one-line error, with the case folder
written as ``<case>``). ``pytest --update-golden`` rewrites the expectations;
review the diff before committing it.

Kinds:
- ``cdi``: ``devices`` resolved through a registry over the case's spec
  directories (``spec_dirs``, default ``["cdi"]``), then applied.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oci.cdi.apply import apply
from oci.cdi.registry import Registry
from oci.errors import OciError

GOLDEN = Path(__file__).parent / "golden"
SPECS = Path(__file__).parent / "data" / "specs"

Runner = Callable[[Path, dict[str, Any], dict[str, Any]], dict[str, Any]]


def _run_cdi(case_dir: Path, case: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    dirs = [str(case_dir / d) for d in case.get("spec_dirs", ["cdi"])]
    edits = Registry(dirs).resolve(case["devices"])
    return apply(edits, base)


RUNNERS: dict[str, Runner] = {"cdi": _run_cdi}


def _cases() -> list[Path]:
    return sorted(p for p in GOLDEN.iterdir() if (p / "case.toml").is_file())


def _load_base(case_dir: Path, case: dict[str, Any]) -> dict[str, Any]:
    path = case_dir / "config.in.json" if "base" not in case else SPECS / case["base"]
    value = json.loads(path.read_text())
    assert isinstance(value, dict)
    return value


@pytest.mark.parametrize("case_dir", _cases(), ids=lambda p: p.name)
def test_golden(case_dir: Path, request: pytest.FixtureRequest) -> None:
    case = tomllib.loads((case_dir / "case.toml").read_text())
    assert case.get("description"), f"{case_dir.name}: case.toml needs a description"
    runner = RUNNERS[case["kind"]]
    base = _load_base(case_dir, case)
    try:
        result: dict[str, Any] | None = runner(case_dir, case, base)
        actual = json.dumps(result, indent=2, ensure_ascii=False) + "\n"
        name, other = "expected.json", "expected.err"
    except OciError as e:
        result = None
        actual = str(e).replace(str(case_dir), "<case>") + "\n"
        name, other = "expected.err", "expected.json"
    expected_path = case_dir / name
    if request.config.getoption("--update-golden"):
        expected_path.write_text(actual)
        (case_dir / other).unlink(missing_ok=True)
        return
    assert not (case_dir / other).exists(), f"{case_dir.name}: expected {other}, got {name}"
    assert expected_path.exists(), f"{case_dir.name}: no {name}; run pytest --update-golden"
    assert actual == expected_path.read_text()
    if result is not None:
        # the engine is idempotent: applying the same request again changes nothing
        assert runner(case_dir, case, result) == result


def test_every_case_folder_is_a_case() -> None:
    strays = [p.name for p in GOLDEN.iterdir() if p.is_dir() and not (p / "case.toml").is_file()]
    assert strays == []
