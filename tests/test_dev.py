"""``./dev lint`` and the commit hooks (``.pre-commit-config.yaml``) run the same checks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.support.containers import require

ROOT = Path(__file__).resolve().parents[1]


def _lint_checks() -> list[str]:
    match = re.search(r"^LINT_CHECKS=\(([^)]*)\)$", (ROOT / "dev").read_text(), re.M)
    assert match, "./dev has no LINT_CHECKS=(...) line"
    return match.group(1).split()


def test_each_lint_check_is_a_commit_hook_that_runs_dev() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    [repo] = config["repos"]
    assert repo["repo"] == "local"
    hooks = repo["hooks"]
    assert [h["entry"] for h in hooks] == [f"./dev lint {name}" for name in _lint_checks()]
    for hook in hooks:
        # the command checks the whole tree, as CI does, whatever files the commit touches
        assert hook["language"] == "system"
        assert hook["pass_filenames"] is False


def test_lint_checks_include_the_format_check() -> None:
    assert {"ruff", "format", "mypy"} <= set(_lint_checks())


def test_an_unknown_lint_check_is_refused_before_setup() -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "dev"), "lint", "ruff", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0
    assert f"unknown lint check 'nope' (known: {' '.join(_lint_checks())})" in proc.stderr
    assert "setup" not in proc.stderr


def test_dev_and_ci_scripts_pass_shellcheck() -> None:
    shellcheck = require("shellcheck")
    proc = subprocess.run(
        [shellcheck, str(ROOT / "dev"), str(ROOT / ".ci" / "run")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
