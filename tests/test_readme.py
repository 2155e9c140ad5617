"""The README stays true: its first lines, its generated tables, its command list."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from nvhook.settings import render_reference
from oci.errors import exit_code_table

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()


def _between(name: str) -> str:
    match = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", README, re.S)
    assert match, f"README.md has no {name} block"
    return match.group(1)


def test_first_lines_hold_the_two_commands() -> None:
    head = README.splitlines()[:6]
    assert any(line.startswith("./dev demo ") for line in head)
    assert any(line.startswith("./dev test ") for line in head)
    usage = subprocess.run(
        ["bash", str(ROOT / "dev"), "help"], capture_output=True, text=True, check=False
    )
    text = usage.stdout + usage.stderr
    assert "demo" in text and "test" in text


def test_exit_code_table_is_current() -> None:
    assert _between("exit-codes") == exit_code_table()


def test_configuration_reference_is_current() -> None:
    assert _between("config-reference") == render_reference()


def test_every_cli_command_is_documented() -> None:
    import click

    from nvhook.cli import cli

    ctx = click.Context(cli)
    names = cli.list_commands(ctx)
    assert "cdi" in names and "runtime" in names  # the lazy group lists what it has not loaded
    for name in names:
        command = cli.get_command(ctx, name)
        assert command is not None, name
        subs = command.list_commands(ctx) if isinstance(command, click.Group) else []
        for full in [f"nvhook {name} {sub}" for sub in subs] or [f"nvhook {name}"]:
            assert f"`{full}" in README, f"README.md does not document {full!r}"


def test_the_support_matrix_names_tests_that_exist() -> None:
    """Every test the support matrix cites is a test function of the file its cell names
    last before it (`file.py::test_x`, or a bare `test_y` after it), or of
    tests/e2e/engines/ where the cell has named no file yet; every file it names exists. A
    renamed or removed test would make its cell a claim: this fails then."""
    start = README.index("### Support matrix")
    section = README[start : README.index("\n## ", start)]
    engines = sorted((ROOT / "tests/e2e/engines").glob("test_*.py"))
    token = re.compile(r"`(?:((?:tests/)?[\w/]+\.py)(?:::)?)?(test_\w+)?(?:\[[^\]`]*\])?`")
    checked = 0
    for cell in (c for line in section.splitlines() for c in line.split(" | ")):
        where = engines
        for file, name in token.findall(cell):
            if file:
                where = [p for p in ROOT.glob("tests/**/*.py") if str(p).endswith("/" + file)]
                assert where, f"support matrix: {file} is not a file under tests/"
            if name:
                assert any(re.search(rf"^def {name}\(", p.read_text(), re.M) for p in where), (
                    f"support matrix: {name} is not a test of {[str(p) for p in where]}"
                )
                checked += 1
    assert checked >= 15  # the matrix is there and its cells were read
