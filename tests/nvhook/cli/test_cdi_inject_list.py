"""`nvhook cdi inject` and `nvhook cdi list` through the real entry point."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from nvhook.cli import main
from oci.errors import ExitCode

SPECS = Path(__file__).parents[2] / "data" / "specs"

GPU_SPEC = {
    "cdiVersion": "0.5.0",
    "kind": "example.com/gpu",
    "devices": [
        {
            "name": "g0",
            "containerEdits": {
                "env": ["EXAMPLE_VISIBLE=g0"],
                "deviceNodes": [{"path": "/dev/examplegpu0", "hostPath": "/dev/null"}],
            },
        }
    ],
}


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    b = tmp_path / "bundle"
    b.mkdir()
    shutil.copy(SPECS / "runc-spec.json", b / "config.json")
    return b


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    d = tmp_path / "cdi"
    d.mkdir()
    (d / "gpu.json").write_text(json.dumps(GPU_SPEC))
    return d


def test_inject_writes_the_device(bundle: Path, spec_dir: Path) -> None:
    inode = (bundle / "config.json").stat().st_ino
    rc = main(
        [
            "cdi",
            "inject",
            "--bundle",
            str(bundle),
            "--spec-dir",
            str(spec_dir),
            "example.com/gpu=g0",
        ]
    )
    assert rc == 0
    spec = json.loads((bundle / "config.json").read_text())
    node = {"path": "/dev/examplegpu0", "type": "c", "major": 1, "minor": 3}
    assert {**node, "fileMode": 0o666} in spec["linux"]["devices"]  # /dev/null's, filled
    assert spec["linux"]["resources"]["devices"][-1] == {
        "allow": True,
        "type": "c",
        "major": 1,
        "minor": 3,
        "access": "rwm",
    }
    assert spec["process"]["env"][-1] == "EXAMPLE_VISIBLE=g0"
    assert (bundle / "config.json").stat().st_ino != inode  # replaced by rename
    assert sorted(os.listdir(bundle)) == ["config.json"]  # no temp file left


def test_inject_twice_leaves_the_file_alone(bundle: Path, spec_dir: Path) -> None:
    args = ["cdi", "inject", "-b", str(bundle), "--spec-dir", str(spec_dir), "example.com/gpu=g0"]
    assert main(args) == 0
    before = (bundle / "config.json").read_bytes()
    inode = (bundle / "config.json").stat().st_ino
    assert main(args) == 0
    assert (bundle / "config.json").read_bytes() == before
    assert (bundle / "config.json").stat().st_ino == inode


def test_dry_run_prints_and_writes_nothing(
    bundle: Path, spec_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (bundle / "config.json").read_bytes()
    rc = main(
        [
            "cdi",
            "inject",
            "--dry-run",
            "-b",
            str(bundle),
            "--spec-dir",
            str(spec_dir),
            "example.com/gpu=g0",
        ]
    )
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["process"]["env"][-1] == "EXAMPLE_VISIBLE=g0"
    assert (bundle / "config.json").read_bytes() == before


@pytest.mark.parametrize(
    ("names", "code", "needle"),
    [
        (["example.com/gpu=g9"], ExitCode.UNRESOLVED, "'example.com/gpu=g9'"),
        (["example.com/gpu"], ExitCode.UNRESOLVED, "example.com/gpu"),
    ],
)
def test_inject_failures_leave_the_bundle_byte_identical(
    bundle: Path,
    spec_dir: Path,
    capsys: pytest.CaptureFixture[str],
    names: list[str],
    code: ExitCode,
    needle: str,
) -> None:
    before = (bundle / "config.json").read_bytes()
    rc = main(["cdi", "inject", "-b", str(bundle), "--spec-dir", str(spec_dir), *names])
    err = capsys.readouterr().err
    assert rc == code
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    assert (bundle / "config.json").read_bytes() == before


def test_inject_into_an_invalid_config(
    bundle: Path, spec_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (bundle / "config.json").write_bytes(b'{"process": {"env": "not-a-list"}}')
    rc = main(
        ["cdi", "inject", "-b", str(bundle), "--spec-dir", str(spec_dir), "example.com/gpu=g0"]
    )
    err = capsys.readouterr().err
    assert rc == ExitCode.INVALID_SPEC
    assert "process.env" in err and "config.json" in err
    assert (bundle / "config.json").read_bytes() == b'{"process": {"env": "not-a-list"}}'


def test_inject_with_an_invalid_spec_file(
    bundle: Path, spec_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (spec_dir / "gpu.json").write_text(
        '{"cdiVersion": "0.5.0", "kind": "example.com/gpu", "devices": [], "bogus": 1}'
    )
    before = (bundle / "config.json").read_bytes()
    rc = main(
        ["cdi", "inject", "-b", str(bundle), "--spec-dir", str(spec_dir), "example.com/gpu=g0"]
    )
    err = capsys.readouterr().err
    assert rc == ExitCode.UNRESOLVED
    assert "gpu.json" in err
    assert (bundle / "config.json").read_bytes() == before


def test_list_prints_names_and_problems(spec_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (spec_dir / "broken.yaml").write_text("cdiVersion: [")
    rc = main(["cdi", "list", "--spec-dir", str(spec_dir)])
    out, err = capsys.readouterr()
    assert out == f"example.com/gpu=g0\t{spec_dir / 'gpu.json'}\n"
    assert str(spec_dir / "broken.yaml") in err
    assert rc == ExitCode.INVALID_CDI


def test_list_names_each_ignored_file_once(
    spec_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("gpu.yml", "gpu.json.bak", "README"):
        (spec_dir / name).write_text("not read")
    (spec_dir / "sub.json").mkdir()
    rc = main(["cdi", "list", "--spec-dir", str(spec_dir), "--spec-dir", str(spec_dir)])
    out, err = capsys.readouterr()
    assert rc == 0  # an ignored file is not a problem
    assert out == f"example.com/gpu=g0\t{spec_dir / 'gpu.json'}\n"
    why = "ignored: not a CDI spec file name (only *.json and *.yaml are read)"
    assert err.splitlines() == [
        f"{spec_dir / 'README'}: {why}",
        f"{spec_dir / 'gpu.json.bak'}: {why}",
        f"{spec_dir / 'gpu.yml'}: {why}",
        f"{spec_dir / 'sub.json'}: ignored: not a regular file",
    ]


def test_list_clean(spec_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cdi", "list", "--spec-dir", str(spec_dir)]) == 0
    assert capsys.readouterr().err == ""
