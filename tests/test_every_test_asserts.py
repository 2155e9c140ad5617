"""Every test asserts something: a test that passes because nothing raised cannot be fooled
into failing by a wrong answer, so each one must contain an ``assert`` or a
``pytest.raises``/``warns``/``fail``. Helpers may assert too, but not instead of the test."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
CHECKS = {"pytest.raises", "pytest.warns", "pytest.fail", "pytest.deprecated_call"}


def _asserts(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Assert):
            return True
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and f"{ast.unparse(func.value)}.{func.attr}" in CHECKS:
            return True
    return False


def unchecked_tests(source: str, name: str) -> list[str]:
    tree = ast.parse(source, name)
    return [
        f"{name}:{node.lineno} {node.name}"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test")
        and not _asserts(node)
    ]


def test_every_test_function_checks_its_outcome() -> None:
    files = sorted(TESTS.rglob("test_*.py"))
    assert len(files) > 50  # the scan sees the suite
    found = [
        line
        for path in files
        for line in unchecked_tests(path.read_text(), str(path.relative_to(TESTS)))
    ]
    assert found == []


def test_the_scan_tells_a_check_from_none() -> None:
    source = """
import pytest
def test_nothing_raised(): run()
def test_assert(): assert run() == 1
def test_raises():
    with pytest.raises(ValueError):
        run()
def test_fail_in_a_branch():
    if run():
        pytest.fail("no")
class TestGroup:
    def test_method(self): run()
def helper(): run()
"""
    assert unchecked_tests(source, "t.py") == [
        "t.py:3 test_nothing_raised",
        "t.py:12 test_method",
    ]
