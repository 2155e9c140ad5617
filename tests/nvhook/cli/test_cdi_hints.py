"""`nvhook cdi list` without any spec and `nvhook cdi inject` with an unknown name: what to do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nvhook.cli import main
from oci.errors import ExitCode

SPECS = Path(__file__).parents[2] / "data" / "specs"


def _gpu_spec(directory: Path, *names: str) -> None:
    directory.mkdir(exist_ok=True)
    devices = [
        {"name": n, "containerEdits": {"env": [f"NVIDIA_VISIBLE_DEVICES={n}"]}} for n in names
    ]
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices}
    (directory / "nvidia.json").write_text(json.dumps(spec))


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    b = tmp_path / "bundle"
    b.mkdir()
    shutil.copy(SPECS / "runc-spec.json", b / "config.json")
    return b


def test_list_without_any_spec_says_so_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dirs = [str(tmp_path / "etc-cdi"), str(tmp_path / "run-cdi")]
    assert main(["cdi", "list", "--spec-dir", dirs[0], "--spec-dir", dirs[1]]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"no CDI spec in {dirs[0]}, {dirs[1]}; run: nvhook cdi generate\n"
    _gpu_spec(tmp_path / "run-cdi", "0")
    assert main(["cdi", "list", "--spec-dir", dirs[0], "--spec-dir", dirs[1]]) == 0
    out, err = capsys.readouterr()
    assert out == f"nvidia.com/gpu=0\t{dirs[1]}/nvidia.json\n" and err == ""


def test_inject_suggests_the_closest_known_name(
    tmp_path: Path, bundle: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _gpu_spec(tmp_path / "cdi", "0", "1", "all")
    args = ["cdi", "inject", "-b", str(bundle), "--spec-dir", str(tmp_path / "cdi")]
    assert main([*args, "nvidia.com/gpus=0"]) == ExitCode.UNRESOLVED
    assert capsys.readouterr().err == (
        "nvhook: unresolvable CDI device 'nvidia.com/gpus=0': not defined in any spec in "
        f"{tmp_path}/cdi (did you mean 'nvidia.com/gpu=0'?)\n"
    )
    # several names: each guess says what it stands for; an index past the last has none
    assert main([*args, "nvidia.com/gpu=al", "nvidia.com/gpu=7"]) == ExitCode.UNRESOLVED
    assert capsys.readouterr().err.endswith(
        "(did you mean 'nvidia.com/gpu=all' for 'nvidia.com/gpu=al'?)\n"
    )
    assert main([*args, "nvidia.com/gpu=7"]) == ExitCode.UNRESOLVED
    assert "did you mean" not in capsys.readouterr().err


def test_inject_without_any_spec_names_generate(
    tmp_path: Path, bundle: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["cdi", "inject", "-b", str(bundle), "--spec-dir", str(tmp_path / "none")]
    assert main([*args, "nvidia.com/gpu=0"]) == ExitCode.UNRESOLVED
    assert capsys.readouterr().err == (
        f"nvhook: unresolvable CDI device 'nvidia.com/gpu=0': no CDI spec in {tmp_path}/none; "
        "run: nvhook cdi generate\n"
    )
    # another vendor's name: nvhook's generator would not write it
    assert main([*args, "example.com/x=0"]) == ExitCode.UNRESOLVED
    assert "generate" not in capsys.readouterr().err
