"""``nvhook cdi generate``: flags, output, exit codes; the file passes ``nvhook cdi validate``."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

import click
import pytest
import yaml

from nvhook.cli import main
from nvhook.cli.cdi_generate import _output_and_format
from nvhook.planner import Host
from nvhook.tools.generate import generate_spec
from oci.cdi.write import dump_spec


@pytest.fixture
def dgx(mock_machine: Callable[..., Path]) -> Path:
    return mock_machine("dgx-a100")


def test_writes_a_valid_spec_file(
    dgx: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cdi" / "nvidia.yaml"
    assert main(["cdi", "generate", "--root", str(dgx), "--output", str(out)]) == 0
    err = capfd.readouterr().err
    assert err == (
        f"{out}: 23 devices of nvidia.com/gpu (8 GPU(s), 3 MIG device(s), all), cdiVersion 0.5.0,"
        " capabilities compute,utility,video,graphics,display,ngx; not found: 13 file(s)\n"
    )
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert out.read_bytes() == dump_spec(generate_spec(Host(root=str(dgx))).spec, format="yaml")
    assert main(["cdi", "validate", "--strict", str(out)]) == 0
    assert "1 valid, 0 invalid" in capfd.readouterr().err


def test_stdout_json_and_yaml_are_the_same_spec(
    dgx: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    base = ["cdi", "generate", "--root", str(dgx), "--capabilities", "utility", "-o", "-"]
    assert main(base) == 0
    as_json = json.loads(capfdbinary.readouterr().out)
    assert main([*base, "--format", "yaml"]) == 0
    as_yaml = yaml.safe_load(capfdbinary.readouterr().out)
    assert as_json == as_yaml
    assert as_json["cdiVersion"] == "0.5.0"
    assert as_json["devices"][0]["name"] == "0"
    assert as_json["devices"][-1]["name"] == "all"
    mounts = {m["containerPath"] for m in as_json["containerEdits"]["mounts"]}
    assert "/usr/bin/nvidia-smi" in mounts
    assert not any("libcuda" in m for m in mounts)


def test_vendor_class_and_hook_path(
    dgx: Path, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    argv = ["cdi", "generate", "--root", str(dgx), "--vendor", "example.com"]
    argv += ["--class", "accel", "--hook-path", "/opt/nvhook/bin/nvhook-hook", "-o", "-"]
    assert main(argv) == 0
    spec = json.loads(capfdbinary.readouterr().out)
    assert spec["kind"] == "example.com/accel"
    assert {h["path"] for h in spec["containerEdits"]["hooks"]} == {"/opt/nvhook/bin/nvhook-hook"}


def test_output_and_format() -> None:
    assert _output_and_format(None, None) == ("/var/run/cdi/nvidia.json", "json")
    assert _output_and_format(None, "yaml") == ("/var/run/cdi/nvidia.yaml", "yaml")
    assert _output_and_format("-", None) == ("-", "json")
    assert _output_and_format("-", "yaml") == ("-", "yaml")
    assert _output_and_format("x/spec.yaml", "yaml") == ("x/spec.yaml", "yaml")
    assert _output_and_format(None, None, "imex-channel") == (
        "/var/run/cdi/nvidia-imex-channel.json",
        "json",
    )
    assert _output_and_format(None, "yaml", "management") == (
        "/var/run/cdi/nvidia-management.yaml",
        "yaml",
    )
    with pytest.raises(click.BadParameter, match="does not match the extension"):
        _output_and_format("x/spec.yaml", "json")
    # what a CDI registry would never read (the reference's rule: case-sensitive, no .yml)
    for name in ("x/spec.txt", "x/spec.yml", "x/spec.JSON"):
        with pytest.raises(click.BadParameter, match=r"must end in \.json or \.yaml"):
            _output_and_format(name, None)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--format", "json", "-o", "{tmp}/a.yaml"], 2, "--format json does not match"),
        (["--capabilities", "compute,tensor"], 2, "unknown capability 'tensor'"),
        (["--capabilities", ","], 2, "empty list"),
        (["--vendor", "9x"], 2, "Invalid value for '--vendor': invalid vendor"),
        (["--class", "g/pu"], 2, "Invalid value for '--class': invalid class"),
        (["--hook-path", "nvhook-hook"], 2, "is not absolute"),
        (["--kind", "fpga"], 2, "Invalid value for '--kind': 'fpga' is not one of"),
        (["--device-name-strategy", "serial"], 2, "'serial' is not one of 'index', 'uuid'"),
        (["--kind", "nvswitch", "--device-name-strategy", "uuid"], 2, "--kind gpu only"),
        (["--kind", "management", "--no-all-device"], 2, "has the one device all"),
        (["--kind", "nvswitch", "--capabilities", "utility"], 2, "gpu and management only"),
        (["--kind", "imex-channel"], 6, "the host has no IMEX channel"),
    ],
)
def test_bad_flags(
    dgx: Path,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    args: list[str],
    code: int,
    message: str,
) -> None:
    argv = ["cdi", "generate", "--root", str(dgx), "-o", str(tmp_path / "s.yaml")]
    argv += [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert main(argv) == code
    err = capfd.readouterr().err
    assert message in err
    assert not (tmp_path / "s.yaml").exists()


def test_no_driver_is_one_line_exit_6(
    mock_machine: Callable[..., Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    root = mock_machine("no-gpu")
    out = tmp_path / "s.yaml"
    assert main(["cdi", "generate", "--root", str(root), "-o", str(out)]) == 6
    err = capfd.readouterr().err
    assert err == (
        f"nvhook: the NVIDIA kernel module is not loaded: {root}/proc/driver/nvidia/version "
        "does not exist\n"
    )
    assert not out.exists()


def test_kinds_and_name_strategies(
    mock_machine: Callable[..., Path], capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    gb200 = str(mock_machine("gb200-imex"))
    argv = ["cdi", "generate", "--root", gb200, "-o", "-"]
    assert main([*argv, "--kind", "imex-channel", "--no-all-device"]) == 0
    spec = json.loads(capfdbinary.readouterr().out)
    assert (spec["kind"], [d["name"] for d in spec["devices"]]) == (
        "nvidia.com/imex-channel",
        ["0", "1"],
    )
    assert main([*argv, "--kind", "management", "--vendor", "example.com"]) == 0
    spec = json.loads(capfdbinary.readouterr().out)
    assert (spec["kind"], [d["name"] for d in spec["devices"]]) == (
        "management.example.com/gpu",
        ["all"],
    )
    argv += ["--device-name-strategy", "type-index", "--device-name-strategy", "index"]
    assert main(argv) == 0
    names = [d["name"] for d in json.loads(capfdbinary.readouterr().out)["devices"]]
    assert names[:2] == ["0", "gpu0"] and names[-1] == "all"


def test_summary_of_a_kind(
    mock_machine: Callable[..., Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "nvidia-imex-channel.json"
    root = str(mock_machine("gb200-imex"))
    assert main(["cdi", "generate", "--root", root, "--kind", "imex-channel", "-o", str(out)]) == 0
    assert capfd.readouterr().err == (
        f"{out}: 3 devices of nvidia.com/imex-channel, cdiVersion 0.5.0\n"
    )
