"""How the CLI reports failures: one line for expected ones, a traceback for bugs."""

from __future__ import annotations

from pathlib import Path

import pytest

import oci.cdi.registry
from nvhook.cli import main
from oci.errors import ExitCode


def test_expected_failure_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["cdi", "inject", "-b", str(tmp_path / "nope"), "vendor.io/gpu=0"])
    err = capsys.readouterr().err
    assert rc == ExitCode.INVALID_SPEC
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("nvhook: ") and "config.json" in err


def _explode(self: object, *args: object, **kwargs: object) -> None:
    secret_local_value = "visible-with-NVHOOK_DEBUG"
    raise ZeroDivisionError(secret_local_value[:0] or "boom")


@pytest.mark.parametrize("debug", [False, True])
def test_a_bug_shows_a_traceback_and_locals_only_with_debug(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, debug: bool
) -> None:
    monkeypatch.setattr(oci.cdi.registry.Registry, "__init__", _explode)
    if debug:
        monkeypatch.setenv("NVHOOK_DEBUG", "1")
    else:
        monkeypatch.delenv("NVHOOK_DEBUG", raising=False)
    rc = main(["cdi", "list", "--spec-dir", "/nonexistent"])
    err = capsys.readouterr().err
    assert rc == ExitCode.BUG
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError: boom" in err
    assert "this is a bug" in err
    assert ("secret_local_value = 'visible-with-NVHOOK_DEBUG'" in err) is debug
