"""The twin table of docs/architecture.md names what exists, and every twin is in it.

A twin is a second implementation of one behaviour (a native program beside the Python
code, a fast path beside the library it avoids). The house prefers one implementation;
where two are kept, docs/architecture.md's "Twins" table says which files, the test that
holds them equal (the oracle), why both stay (with the measured figure) and the condition
under which one side goes. This test reads that table:

- every row names files that exist and at least one oracle test that exists
  (``tests/….py::test_name``, the function found in the file);
- every twin in the tree has a row: each C source of the package outside the mock machine
  (``nvhook/mock`` builds fake drivers, not twins), and each module named like a fast twin
  (``*_fast.py``, ``*_ctypes.py``, the house's names for them).

It is also run on planted tables, to show that it fails when a row is wrong or missing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: The columns of the table, in order.
COLUMNS = ("behaviour", "one side", "other side", "oracle", "why both", "exit")
_CODE = re.compile(r"`([^`]+)`")


def table_rows(text: str) -> list[dict[str, str]]:
    """The rows of the table under the ``## …Twins`` heading of ``text``."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"##+ .*Twins", line)), None)
    if start is None:
        raise AssertionError("docs/architecture.md has no Twins section")
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if not line.startswith("|"):
            if rows or header:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            if tuple(header) != COLUMNS:
                raise AssertionError(f"twin table columns {header}, expected {list(COLUMNS)}")
        elif not set(line.replace("|", "").strip()) <= set("-: "):
            rows.append(dict(zip(COLUMNS, cells, strict=True)))
    return rows


def _test_exists(root: Path, ref: str) -> bool:
    path, _, name = ref.partition("::")
    file = root / path
    if not file.is_file():
        return False
    tree = ast.parse(file.read_text())
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
        for node in ast.walk(tree)
    )


def twin_problems(root: Path, text: str) -> list[str]:
    """What is wrong with the twin table ``text`` for the tree under ``root``."""
    problems: list[str] = []
    named: set[str] = set()
    for row in table_rows(text):
        what = row["behaviour"]
        for column in ("one side", "other side"):
            paths = [p.split("::")[0] for p in _CODE.findall(row[column])]
            if not paths:
                problems.append(f"{what}: {column} names no file")
            for path in paths:
                named.add(path)
                if not (root / path).exists():
                    problems.append(f"{what}: {column} names {path}, which does not exist")
        oracles = [r for r in _CODE.findall(row["oracle"]) if "::" in r]
        if not oracles:
            problems.append(f"{what}: no oracle test (`tests/….py::test_name`)")
        problems += [
            f"{what}: oracle {ref} does not exist" for ref in oracles if not _test_exists(root, ref)
        ]
        for column in ("why both", "exit"):
            if not row[column]:
                problems.append(f"{what}: no {column!r}")
    twins = [p for p in (root / "nvhook").rglob("*.c") if "mock" not in p.parts]
    twins += [
        p for pattern in ("*_fast.py", "*_ctypes.py") for p in (root / "nvhook").rglob(pattern)
    ]
    for path in sorted(twins):
        rel = path.relative_to(root).as_posix()
        if rel not in named:
            problems.append(f"{rel} is a twin without a row in the twin table")
    return problems


def test_the_twin_table_is_true() -> None:
    assert twin_problems(ROOT, ARCHITECTURE.read_text()) == []


def test_the_table_has_the_known_twins() -> None:
    """Not vacuous: the table is read, and holds the native programs."""
    rows = table_rows(ARCHITECTURE.read_text())
    named = " ".join(row["one side"] + row["other side"] for row in rows)
    assert "nvhook/native/nvhook-hook.c" in named
    assert "nvhook/native/nvhook-runtime.c" in named


PLANTED = """\
# map

## 5. Twins

| behaviour | one side | other side | oracle | why both | exit |
|---|---|---|---|---|---|
| hook | `nvhook/native/hook.c` | `nvhook/hook/x.py` | `tests/test_x.py::test_same` | 2 | never |

## 6. Next
"""


def _planted_tree(tmp_path: Path) -> Path:
    for rel, text in {
        "nvhook/native/hook.c": "int main(void) { return 0; }\n",
        "nvhook/hook/x.py": "",
        "tests/test_x.py": "def test_same():\n    pass\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_a_planted_table_that_is_true_passes(tmp_path: Path) -> None:
    assert twin_problems(_planted_tree(tmp_path), PLANTED) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("nvhook/hook/x.py", "nvhook/hook/gone.py"), "names nvhook/hook/gone.py, which does not"),
        (("::test_same", "::test_other"), "oracle tests/test_x.py::test_other does not exist"),
        (("`tests/test_x.py::test_same`", "by hand"), "no oracle test"),
        (("| never |", "|  |"), "no 'exit'"),
        (("| oracle |", "| tests |"), "twin table columns"),
    ],
)
def test_a_wrong_row_fails(tmp_path: Path, change: tuple[str, str], expected: str) -> None:
    root = _planted_tree(tmp_path)
    text = PLANTED.replace(*change)
    try:
        problems = twin_problems(root, text)
    except AssertionError as e:
        problems = [str(e)]
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("new", ["nvhook/native/other.c", "nvhook/cli/list_fast.py",
                                 "nvhook/devices/x_ctypes.py"])  # fmt: skip
def test_a_new_twin_without_a_row_fails(tmp_path: Path, new: str) -> None:
    root = _planted_tree(tmp_path)
    (root / new).parent.mkdir(parents=True, exist_ok=True)
    (root / new).write_text("")
    assert twin_problems(root, PLANTED) == [f"{new} is a twin without a row in the twin table"]
