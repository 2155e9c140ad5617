"""``nvhook runtime configure --runtime crio``: a crio.conf.d drop-in, on files only.

There is no CRI-O on this machine: the files are checked by parsing them back, not by crio.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.engines import DEFAULT_CONFIGS, apply_plan, apply_unconfigure, plan_unconfigure
from nvhook.engines.crio import DEFAULT_CONFIG, RUNTIME_ROOT, plan_configure
from nvhook.errors import EngineConfigError

SHIM = "/usr/local/bin/nvhook-runtime"


def _new(path: Path, **kwargs: bool) -> str:
    change = plan_configure(str(path), name="nvidia", runtime_path=SHIM, **kwargs).changes[0]
    assert change.new is not None
    return change.new.decode()


def test_default_path_is_a_drop_in() -> None:
    assert DEFAULT_CONFIG == DEFAULT_CONFIGS["crio"] == "/etc/crio/crio.conf.d/99-nvhook.conf"


def test_new_drop_in(tmp_path: Path) -> None:
    assert _new(tmp_path / "99-nvhook.conf", set_as_default=True) == (
        "# Written by `nvhook runtime configure --runtime crio`: runtime handler 'nvidia'.\n"
        "# `nvhook runtime unconfigure --runtime crio` removes this file.\n"
        "\n"
        "[crio.runtime]\n"
        'default_runtime = "nvidia"\n'
        "\n"
        "[crio.runtime.runtimes.nvidia]\n"
        f'runtime_path = "{SHIM}"\n'
        'runtime_type = "oci"\n'
        f'runtime_root = "{RUNTIME_ROOT}"\n'
    )


def test_existing_file_keeps_its_settings(tmp_path: Path) -> None:
    path = tmp_path / "10-site.conf"
    text = (
        "# site settings\n"
        "[crio.runtime]\n"
        'default_runtime = "crun"  # fast\n'
        'cgroup_manager = "systemd"\n'
        "\n"
        "[crio.runtime.runtimes.crun]\n"
        'runtime_path = "/usr/bin/crun"\n'
        "\n"
        "[crio.image]\n"
        'pause_image = "registry.k8s.io/pause:3.9"\n'
    )
    path.write_text(text)
    new = _new(path, set_as_default=True)
    assert new == text.replace('"crun"  # fast', '"nvidia"  # fast').replace(
        "\n[crio.image]",
        f'\n[crio.runtime.runtimes.nvidia]\nruntime_path = "{SHIM}"\nruntime_type = "oci"\n'
        f'runtime_root = "{RUNTIME_ROOT}"\n\n[crio.image]',
    )
    data = tomllib.loads(new)
    assert data["crio"]["runtime"]["runtimes"]["crun"] == {"runtime_path": "/usr/bin/crun"}


def test_invalid_toml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "99-nvhook.conf"
    path.write_text("[crio.runtime\n")
    with pytest.raises(EngineConfigError, match=r"99-nvhook.conf: invalid TOML: .*line 1"):
        plan_configure(str(path), name="nvidia", runtime_path=SHIM)
    path.write_text('[crio]\nruntime = "x"\n')
    with pytest.raises(EngineConfigError, match=r"99-nvhook.conf: crio.runtime is not a table"):
        plan_configure(str(path), name="nvidia", runtime_path=SHIM)


def test_round_trip_removes_the_drop_in(tmp_path: Path) -> None:
    path = tmp_path / "crio.conf.d" / "99-nvhook.conf"
    path.parent.mkdir()
    backups = str(tmp_path / "backups")
    assert apply_plan(plan_configure(str(path), name="nvidia", runtime_path=SHIM), backups)
    assert apply_plan(plan_configure(str(path), name="nvidia", runtime_path=SHIM), backups) == []
    apply_unconfigure(plan_unconfigure("crio", str(path), backups), backups)
    assert list(path.parent.iterdir()) == []


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shim = tmp_path / "nvhook-runtime"
    shim.write_text("#!/bin/sh\n")
    shim.chmod(0o755)
    path = tmp_path / "99-nvhook.conf"
    args = ["--runtime", "crio", "--config", str(path), "--backup-dir", str(tmp_path / "b")]
    assert main(["runtime", "configure", *args, "--runtime-path", str(shim)]) == 0
    assert "reload CRI-O" in capsys.readouterr().out
    assert tomllib.loads(path.read_text())["crio"]["runtime"]["runtimes"]["nvidia"] == {
        "runtime_path": str(shim),
        "runtime_type": "oci",
        "runtime_root": RUNTIME_ROOT,
    }
    assert main(["runtime", "unconfigure", *args]) == 0
    assert not path.exists()
