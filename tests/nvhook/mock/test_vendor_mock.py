"""`nvhook mock` with the other vendors' profiles: listed, laid out, and checked."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvhook.cli.mock import mock
from nvhook.errors import MockError, UnknownProfileError
from nvhook.mock.vendors import create, list_vendor_profiles, load_vendor_profile


def test_profiles_lists_both_tables() -> None:
    done = CliRunner().invoke(mock, ["profiles"])
    assert done.exit_code == 0, done.output
    assert "dgx-a100" in done.output
    for name in ("mi300x-8", "max-1550", "ascend-910b", "mixed-h100-mi300x"):
        assert f"{name} (other vendors): " in done.output
    assert set(list_vendor_profiles()) == {
        "mi300x-8",
        "max-1550",
        "ascend-910b",
        "mixed-h100-mi300x",
    }


def test_create_lays_out_a_vendor_profile(tmp_path: Path) -> None:
    done = CliRunner().invoke(
        mock, ["create", "-p", "mi300x-8", "--nodes", "file", str(tmp_path / "m")]
    )
    assert done.exit_code == 0, done.output
    assert "64 amd device(s)" in done.output
    assert (tmp_path / "m/dev/kfd").exists()
    assert (
        tmp_path / "m/sys/devices/platform/amdgpu_xcp_55/drm/renderD191/dev"
    ).read_text() == "226:191\n"


def test_smi_stand_in_lists_only_openable_nodes(tmp_path: Path) -> None:
    root = create("ascend-910b", tmp_path / "a", nodes="file").root
    done = subprocess.run(
        ["sh", str(root / "usr/local/bin/npu-smi")], capture_output=True, text=True, check=False
    )
    # on this host no /dev/davinci<N> is a character device: nothing listed, and it says so
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "npu-smi: no devices found\n"


def test_mistakes_name_the_profile(tmp_path: Path) -> None:
    with pytest.raises(UnknownProfileError, match="unknown vendor mock profile 'mi250'"):
        load_vendor_profile("mi250")
    (tmp_path / "x").mkdir()
    (tmp_path / "x/f").write_text("")
    with pytest.raises(MockError, match="exists and is not empty"):
        create("max-1550", tmp_path / "x")
