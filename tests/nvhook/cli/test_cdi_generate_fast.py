"""nvhook.cli.cdi_generate_fast: the click-free ``nvhook cdi generate`` answers as click would.

Each argv of the table runs through click (:func:`nvhook.cli.group.run_click`) and through
:func:`nvhook.cli.main` (which tries the fast path first); stdout, stderr, the exit code and the
written file must be the same bytes. Each row also says which path :func:`main` must take, so
the table cannot pass by always falling back to click.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvhook.cli import main
from nvhook.cli.cdi_generate import generate
from nvhook.cli.cdi_generate_fast import DEFAULTS, OPTIONS, parse
from nvhook.cli.cdi_generate_fast import main as fast_main
from nvhook.cli.group import run_click

FAST, CLICK = "fast", "click"

#: (argv after ``cdi generate``, the path main takes). {root}: the dgx-a100 mock, {tmp}: a
#: fresh directory (also the working directory), {file}: a regular file, {l40s}: another mock.
CASES: list[tuple[list[str], str]] = [
    (["--root", "{root}", "-o", "{tmp}/nvidia.json"], FAST),
    (["--root={root}", "--output={tmp}/nvidia.yaml"], FAST),
    (["-o", "{tmp}/sub/dir/nvidia.json", "--root", "{root}"], FAST),
    (["--root", "{root}", "-o", "-"], FAST),
    (["--root", "{root}", "-o", "-", "--format", "yaml"], FAST),
    (["--root", "{root}", "--format=yaml", "-o", "{tmp}/s.yaml"], FAST),
    (["--root", "{root}", "--format", "json", "--output", "-"], FAST),
    (["--root", "{l40s}", "--root", "{root}", "-o", "-"], FAST),  # the last one wins
    (["--root", "{root}", "-o", "{tmp}/a.json", "-o", "-"], FAST),
    (["--root", "{root}", "--kind", "management", "-o", "-"], FAST),
    (["--root", "{root}", "--kind=nvswitch", "-o", "{tmp}/n.json"], FAST),
    (["--root", "{root}", "--kind", "imex-channel", "-o", "-"], FAST),  # exit 6
    (["--root", "{root}", "--kind", "gds", "--class", "fs", "-o", "-"], FAST),  # exit 6
    (["--root", "{root}", "--device-name-strategy", "type-index", "-o", "-"], FAST),
    (
        [
            *("--root", "{root}", "--device-name-strategy=uuid"),
            *("--device-name-strategy", "index", "-o", "-"),
        ],
        FAST,
    ),
    (["--root", "{root}", "--no-all-device", "--capabilities", "compute,utility", "-o", "-"], FAST),
    (["--root", "{root}", "--capabilities= utility ,compute,", "-o", "-"], FAST),
    (["--root", "{root}", "--capabilities", "all", "-o", "{tmp}/c.json"], FAST),
    (
        [
            *("--root", "{root}", "--vendor", "example.com", "--class", "accel"),
            *("--hook-path", "/opt/nvhook/bin/nvhook-hook", "-o", "-"),
        ],
        FAST,
    ),
    (["--root", "{root}", "--driver-root", "{root}", "--dev-root={root}", "-o", "-"], FAST),
    (["--root", "{root}", "-o", "--help.json"], FAST),  # a value is taken whatever it looks like
    (["--root", "{tmp}/nothing", "-o", "{tmp}/x.json"], FAST),  # exit 6: no driver
    (["--root", "{root}", "-o", "{file}/x.json"], FAST),  # cannot write: exit code of the error
    # click's to answer: help, unknown, malformed or refused flags, failed checks
    (["--help"], CLICK),
    (["-h"], CLICK),
    (["--root", "{root}", "--help"], CLICK),
    (["--roo", "{root}"], CLICK),
    (["--root"], CLICK),
    (["--root", "{root}", "-o"], CLICK),
    (["--root", "{root}", "--no-all-device=yes"], CLICK),
    (["--root", "{root}", "--kind", "GPU"], CLICK),
    (["--root", "{root}", "--format", "xml"], CLICK),
    (["--root", "{root}", "--device-name-strategy", "serial"], CLICK),
    (["--root", "{file}"], CLICK),
    (["--root", "{root}", "--driver-root", "{file}"], CLICK),
    (["--root", "{root}", "--hook-path", "{tmp}"], CLICK),
    (["--root", "{root}", "-o{tmp}/x.json"], CLICK),
    (["--root", "{root}", "-o={tmp}/x.json"], CLICK),
    (["--root", "{root}", "--", "-o", "-"], CLICK),
    (["--root", "{root}", "-o", "-", "extra"], CLICK),
    (["--root", "{root}", "-"], CLICK),
    (["--root", "{root}", "--vendor", "9x"], CLICK),
    (["--root", "{root}", "--vendor="], CLICK),
    (["--root", "{root}", "--class", "g/pu"], CLICK),
    (["--root", "{root}", "--format", "json", "-o", "{tmp}/a.yaml"], CLICK),
    (["--root", "{root}", "-o", "{tmp}/a.yml"], CLICK),
    (["--root", "{root}", "-o", "--root"], CLICK),
    (["--root", "{root}", "--capabilities", ","], CLICK),
    (["--root", "{root}", "--capabilities", "compute,tensor"], CLICK),
    (["--root", "{root}", "--hook-path", "nvhook-hook"], CLICK),
    (["--root", "{root}", "--kind", "nvswitch", "--device-name-strategy", "uuid"], CLICK),
    (["--root", "{root}", "--kind", "management", "--no-all-device"], CLICK),
    (["--root", "{root}", "--kind", "gds", "--capabilities", "utility"], CLICK),
]


@pytest.fixture
def places(mock_machine: Callable[..., Path], tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file").write_text("not a directory\n")
    return {
        "root": str(mock_machine("dgx-a100")),
        "l40s": str(mock_machine("l40s-x4")),
        "file": str(tmp_path / "file"),
    }


def _outcome(
    run: Callable[[], int | None], tmp: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> tuple[int | None, bytes, bytes, dict[str, bytes]]:
    """The exit code, stdout, stderr and the files written under ``tmp`` (then removed)."""
    before = {p for p in tmp.rglob("*")}
    rc = run()
    out, err = capfdbinary.readouterr()
    written = {}
    for p in sorted(tmp.rglob("*"), reverse=True):
        if p not in before:
            if p.is_file():
                written[str(p.relative_to(tmp))] = p.read_bytes()
                p.unlink()
            else:
                p.rmdir()
    return rc, out, err, written


@pytest.mark.parametrize(("args", "path"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_both_paths_give_the_same_bytes(
    args: list[str],
    path: str,
    places: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = ["cdi", "generate", *(a.format(tmp=work, **places) for a in args)]
    by_click = _outcome(lambda: run_click(argv), work, capfdbinary)
    taken = _outcome(lambda: fast_main(argv[2:]), work, capfdbinary)
    if path == CLICK:
        assert taken == (None, b"", b"", {}), "the fast path must leave this argv to click"
    else:
        assert taken == by_click
    assert _outcome(lambda: main(argv), work, capfdbinary) == by_click
    assert by_click[0] is not None


#: What ``nvhook cdi generate`` does without (bench/cli.py: each was a visible part of its cost).
NOT_IMPORTED = ("click", "pynvml", "json", "re", "enum", "typing", "tempfile", "pathlib", "yaml")


def test_a_run_on_the_fast_path_imports_none_of_the_heavy_modules(
    places: dict[str, str], tmp_path: Path
) -> None:
    """The dgx-a100 mock has MIG devices, named by UUID: NVML, but through ctypes alone."""
    code = (
        "import sys\nfrom nvhook.cli import main\nrc = main(sys.argv[1:])\n"
        f"print(rc, sorted(m for m in sys.modules if m.split('.')[0] in {NOT_IMPORTED!r}))"
    )
    argv = ["cdi", "generate", "--root", places["root"], "-o", str(tmp_path / "nvidia.json")]
    prelude = f"import sys; sys.path[:0] = {sys.path!r}\n"  # -S: no site, as the launcher
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", prelude + code, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.splitlines()[-1] == "0 []", done.stderr


def test_the_option_table_is_the_click_commands() -> None:
    table: dict[str, tuple[str, str]] = {}
    for param in generate.params:
        assert isinstance(param, click.Option) and param.name is not None
        how = "flag" if param.is_flag else "multiple" if param.multiple else "value"
        table.update({opt: (param.name, how) for opt in param.opts + param.secondary_opts})
    assert table == OPTIONS
    assert parse([]) == DEFAULTS == _click_params([])


def _click_params(args: list[str]) -> dict[str, Any] | None:
    """What click's parser gives the command for ``args``; None for a usage error."""
    try:
        with generate.make_context("generate", list(args)) as ctx:
            return dict(ctx.params)
    except click.UsageError:
        return None


_VALUES = ["/", "{root}", "{file}", "-", "--root", "x.json", "json", "yaml", "gpu", "uuid", "=", ""]
_TOKENS = [*OPTIONS, "--help", "--", "--ro", "-x", *(f"{o}=" for o in OPTIONS), *_VALUES]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_TOKENS),
            st.tuples(st.sampled_from(list(OPTIONS)), st.sampled_from(_VALUES)).map(
                lambda t: f"{t[0]}={t[1]}"
            ),
        ),
        max_size=6,
    )
)
def test_the_parse_is_clicks_where_it_answers(tokens: list[str]) -> None:
    """Random argv: where :func:`parse` answers, click parses the same without an error."""
    root = os.path.dirname(os.path.abspath(__file__))
    args = [t.replace("{root}", "/").replace("{file}", os.path.abspath(__file__)) for t in tokens]
    args = [a.replace("{root}", root) for a in args]
    mine = parse(args)
    if mine is None:
        return
    assert _click_params(args) == mine, args
