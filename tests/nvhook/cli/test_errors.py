"""How the CLI reports failures: one line for expected ones, a traceback for bugs."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

import oci.cdi.registry
from nvhook.cli import main
from oci.errors import ExitCode
from tests.support.unprivileged import run_as_nobody


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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mock", "create", "--profile", "dgx-z", "{tmp}/m"], "unknown mock profile 'dgx-z'"),
        (["mock", "profiles", "dgx-z"], "unknown mock profile 'dgx-z'"),
        (["cdi", "generate", "--vendor", "9x", "-o", "-"], "invalid vendor"),
        (["mock", "create", "--nodes", "pipe", "-p", "no-gpu", "{tmp}/m"], "'pipe' is not one of"),
    ],
)
def test_a_bad_option_value_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == ExitCode.USAGE
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_demo_dir_that_cannot_be_created_is_one_io_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    workdir = tmp_path / "file" / "demo"
    assert main(["demo", "--dir", str(workdir)]) == ExitCode.IO
    err = capsys.readouterr().err
    assert err == (
        f"nvhook: cannot create --dir {workdir}: Not a directory; "
        "choose a directory you can write\n"
    )


def _shared_dir() -> Path:
    """A directory owned by root that anyone may read, as /etc is (tmp_path is 0700)."""
    top = Path(tempfile.mkdtemp(prefix="nvhook-test-", dir="/tmp"))
    top.chmod(0o755)
    return top


def test_demo_dir_that_is_not_writable_is_one_io_line(tmp_path: Path) -> None:
    top = _shared_dir()
    try:
        proc = run_as_nobody(["demo", "--dir", str(top)])
        assert proc.returncode == ExitCode.IO, proc.stderr
        assert proc.stderr == (
            f"nvhook: --dir {top} is not writable; choose a directory you can write\n"
        )
        assert os.listdir(top) == []
    finally:
        shutil.rmtree(top)


def test_runtime_configure_as_a_user_says_it_needs_root(tmp_path: Path) -> None:
    top = _shared_dir()
    try:
        config = top / "config.toml"
        config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n')
        config.chmod(0o644)
        backups = top / "backups"
        argv = ["runtime", "configure", "--runtime", "containerd", "--config", str(config)]
        argv += ["--backup-dir", str(backups), "--runtime-path", sys.executable]
        proc = run_as_nobody(argv)
        assert proc.returncode == ExitCode.IO, proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
        assert proc.stderr.startswith(
            "nvhook: runtime configure needs root (running as uid 65534): "
        )
        assert proc.stderr.endswith(
            ": Permission denied; run it with sudo, or review the change first with --dry-run\n"
        )
        assert not backups.exists()
        assert config.read_text() == 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'
        # a dry run needs no root: it only reads
        proc = run_as_nobody([*argv, "--dry-run"])
        assert proc.returncode == 0, proc.stderr
        assert "+" in proc.stdout
    finally:
        shutil.rmtree(top)
