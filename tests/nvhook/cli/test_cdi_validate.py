"""`nvhook cdi validate` through the real entry point (and click's own runner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvhook.cli import main
from nvhook.cli.cdi_validate import validate
from oci.errors import ExitCode

EXAMPLES = Path(__file__).parents[2] / "data" / "cdi" / "schema-testdata"
GOOD = sorted((EXAMPLES / "good").iterdir())
BAD = sorted((EXAMPLES / "bad").iterdir())


def test_good_examples_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cdi", "validate", *map(str, GOOD)])
    out, err = capsys.readouterr()
    assert code == ExitCode.OK
    assert out == ""
    assert err == "2 files checked: 2 valid, 0 invalid (0 errors, 0 warnings)\n"


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_each_bad_example_exits_12(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cdi", "validate", str(path)])
    out, err = capsys.readouterr()
    assert code == ExitCode.VALIDATION
    assert int(ExitCode.VALIDATION) == 12
    assert out
    assert all(line.startswith(f"{path}: ") for line in out.splitlines())
    assert "Traceback" not in out + err
    assert "1 file checked: 0 valid, 1 invalid" in err


def test_empty_file_message(capsys: pytest.CaptureFixture[str]) -> None:
    path = EXAMPLES / "bad" / "empty.json"
    assert main(["cdi", "validate", str(path)]) == ExitCode.VALIDATION
    out, _ = capsys.readouterr()
    assert out == f"{path}: empty file (a CDI spec needs cdiVersion, kind and devices)\n"


def test_mixed_files_one_line_per_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {
        "cdiVersion": "0.3.0",
        "kind": "vendor.com/device",
        "devices": [
            {
                "name": "d",
                "containerEdits": {
                    "deviceNodes": [{"path": "/dev/d", "permissions": "rx"}],
                    "hooks": [{"hookName": "prestart", "path": "bin/hook"}],
                },
            }
        ],
    }
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(spec))
    missing = tmp_path / "missing.yaml"
    code = main(["cdi", "validate", str(GOOD[0]), str(bad), str(missing)])
    out, err = capsys.readouterr()
    assert code == ExitCode.VALIDATION
    edits = "devices[0].containerEdits"
    assert out.splitlines() == [
        f'{bad}: {edits}.deviceNodes[0].permissions: invalid permissions "rx" (letters r, w, m)',
        f'{bad}: {edits}.hooks[0].path: warning: hook path "bin/hook" is not absolute',
        f"{missing}: cannot read: No such file or directory",
    ]
    assert "3 files checked: 1 valid, 2 invalid (2 errors, 1 warning)" in err


def test_warnings_pass_unless_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = {
        "cdiVersion": "0.3.0",
        "kind": "vendor.com/device",
        "devices": [{"name": "d", "containerEdits": {"deviceNodes": [{"path": "dev/d"}]}}],
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    field = "devices[0].containerEdits.deviceNodes[0].path"
    line = f'{path}: {field}: device path "dev/d" is not absolute'

    assert main(["cdi", "validate", str(path)]) == ExitCode.OK
    out, err = capsys.readouterr()
    assert out == line.replace("path: device", "path: warning: device") + "\n"
    assert "1 valid, 0 invalid (0 errors, 1 warning)" in err

    assert main(["cdi", "validate", "--strict", str(path)]) == ExitCode.VALIDATION
    out, err = capsys.readouterr()
    assert out == line + "\n"
    assert "0 valid, 1 invalid (1 error, 0 warnings)" in err


def test_no_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cdi", "validate"]) == ExitCode.USAGE
    assert "Missing argument" in capsys.readouterr().err


def test_click_standalone_mode_gives_the_same_exit_codes() -> None:
    runner = CliRunner()
    good = runner.invoke(validate, [str(GOOD[0])])
    assert good.exit_code == 0, good.output
    bad = runner.invoke(validate, [str(BAD[0])])
    assert bad.exit_code == ExitCode.VALIDATION
    assert f"{BAD[0]}: empty file" in bad.stdout
