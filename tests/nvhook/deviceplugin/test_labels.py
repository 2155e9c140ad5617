"""``nvhook labels``: GPU Feature Discovery's labels, golden per mock machine, and the rules.

Each case under ``tests/data/labels/<case>/`` is data: ``case.toml`` (the mock ``profile``,
and a comment saying what the case shows), ``config.yaml`` (the device plugin's
configuration) and ``labels`` (what ``nvhook labels`` prints; review it by eye,
``pytest --update-golden`` rewrites it). The same text must land in the ``--output`` file.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.deviceplugin.labels import family, labels_text, node_labels, write_feature_file
from nvhook.deviceplugin.model import PluginConfig, TimeSlicedResource
from nvhook.devices.nvml import DriverInfo, GpuInfo
from nvhook.errors import WorkdirError
from oci.errors import ExitCode
from tests.nvhook.deviceplugin.conftest import gpu

DATA = Path(__file__).parents[2] / "data" / "labels"
CASES = sorted(p.name for p in DATA.iterdir() if (p / "case.toml").is_file())
DRIVER = DriverInfo(driver_version="550.54.15", cuda_version="12.4", nvml_version="12.550.54.15")


def test_the_cases_cover_every_loadable_mock_machine_each_strategy_and_time_slicing() -> None:
    assert CASES == [
        "dgx-a100-mixed",
        "dgx-a100-single",
        "gb200-imex",
        "h100-pcie",
        "l40s-x4-time-slicing",
    ]


@pytest.mark.parametrize("case_name", CASES)
def test_golden(
    case_name: str,
    mock_machine: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    case_dir = DATA / case_name
    profile = tomllib.loads((case_dir / "case.toml").read_text())["profile"]
    args = [
        "labels",
        "--root",
        str(mock_machine(profile)),
        "--config",
        str(case_dir / "config.yaml"),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    if request.config.getoption("--update-golden"):
        (case_dir / "labels").write_text(printed)
    assert printed == (case_dir / "labels").read_text()

    feature_file = tmp_path / "features.d" / "gfd"
    assert main([*args, "--output", str(feature_file)]) == 0
    assert feature_file.read_text() == printed
    assert f"{feature_file}: {printed.count(chr(10))} labels" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("capability", "expected"),
    [
        ("6.0", "pascal"),
        ("7.0", "volta"),
        ("7.5", "turing"),
        ("8.0", "ampere"),
        ("8.6", "ampere"),
        ("8.9", "ada-lovelace"),
        ("9.0", "hopper"),
        ("10.0", "blackwell"),
        ("4.0", "undefined"),
        ("x", "undefined"),
    ],
)
def test_family_follows_the_compute_capability(capability: str, expected: str) -> None:
    assert family(capability) == expected


def test_single_with_one_profile_labels_the_mig_devices_as_gpus() -> None:
    gpus = [gpu(0, mig=("1g.10gb", "1g.10gb")), gpu(1, mig=("1g.10gb",))]
    labels = node_labels(DRIVER, gpus, PluginConfig(mig_strategy="single"))
    assert labels["nvidia.com/gpu.count"] == "3"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert labels["nvidia.com/gpu.memory"] == "10240"
    assert not any(k.startswith("nvidia.com/mig-") for k in labels)


@pytest.mark.parametrize(
    "gpus",
    [
        [gpu(0, mig=("1g.10gb",)), gpu(1)],  # one GPU not in MIG mode
        [gpu(0, mig=("1g.10gb",)), gpu(1, mig=())],  # one without MIG devices
        [gpu(0, mig=("1g.10gb", "2g.20gb"))],  # two profiles
    ],
    ids=["not-all-mig", "no-devices", "two-profiles"],
)
def test_single_on_a_layout_the_plugin_refuses_is_mig_invalid(gpus: list[GpuInfo]) -> None:
    labels = node_labels(DRIVER, gpus, PluginConfig(mig_strategy="single"))
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-INVALID"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.memory"]) == ("0", "0")


def test_single_without_mig_labels_the_gpus() -> None:
    labels = node_labels(DRIVER, [gpu(0), gpu(1)], PluginConfig(mig_strategy="single"))
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/mig.strategy"] == "single"


def test_time_sliced_mig_profile_and_a_renamed_gpu_resource() -> None:
    config = PluginConfig(
        mig_strategy="mixed",
        time_slicing=(
            TimeSlicedResource("nvidia.com/mig-1g.10gb", 3),
            TimeSlicedResource("nvidia.com/gpu", 2, rename="nvidia.com/gpu.shared"),
        ),
    )
    labels = node_labels(DRIVER, [gpu(0, mig=("1g.10gb", "1g.10gb")), gpu(1)], config)
    assert labels["nvidia.com/mig-1g.10gb.count"] == "2"  # physical devices, not replicas
    assert labels["nvidia.com/mig-1g.10gb.replicas"] == "3"
    assert labels["nvidia.com/mig-1g.10gb.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED"
    assert labels["nvidia.com/gpu.count"] == "1"
    assert labels["nvidia.com/gpu.replicas"] == "2"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"  # renamed: no -SHARED


def test_one_replica_is_not_sharing() -> None:
    config = PluginConfig(time_slicing=(TimeSlicedResource("nvidia.com/gpu", 1),))
    labels = node_labels(DRIVER, [gpu(0)], config)
    assert "nvidia.com/gpu.replicas" not in labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"


def test_mixed_with_every_gpu_in_mig_mode_counts_no_whole_gpu() -> None:
    labels = node_labels(DRIVER, [gpu(0, mig=("3g.40gb",))], PluginConfig(mig_strategy="mixed"))
    assert labels["nvidia.com/gpu.count"] == "0"
    assert "nvidia.com/gpu.product" not in labels
    assert labels["nvidia.com/mig-3g.40gb.count"] == "1"


def test_a_node_without_gpus() -> None:
    driver = DriverInfo(driver_version="535.230", cuda_version="12.2", nvml_version="12.535.230")
    labels = node_labels(driver, [], PluginConfig())
    assert labels["nvidia.com/gpu.present"] == "false"
    assert labels["nvidia.com/gpu.count"] == "0"
    assert labels["nvidia.com/mig.capable"] == "false"
    assert (labels["nvidia.com/cuda.driver.minor"], labels["nvidia.com/cuda.driver.rev"]) == (
        "230",
        "",
    )
    assert "nvidia.com/gpu.family" not in labels


def test_feature_file_replaces_atomically_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    path.write_text("nvidia.com/gpu.count=99\n")
    old = os.umask(0o077)
    try:
        write_feature_file(
            str(path), {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.present": "true"}
        )
    finally:
        os.umask(old)
    assert path.read_text() == "nvidia.com/gpu.count=2\nnvidia.com/gpu.present=true\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # NFD runs as another user
    assert [p.name for p in tmp_path.iterdir()] == ["gfd"]


def test_feature_file_in_an_unwritable_place_is_one_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(WorkdirError) as err:
        write_feature_file(str(blocker / "gfd"), {"a": "b"})
    assert err.value.exit_code == ExitCode.IO
    assert str(blocker / "gfd") in str(err.value)


def test_labels_text_is_one_line_per_label() -> None:
    assert labels_text({"a/b": "1", "c/d": ""}) == "a/b=1\nc/d=\n"


def test_cli_without_a_driver_exits_device(
    make_mock_machine: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_mock_machine("no-gpu")
    assert main(["labels", "--root", str(root)]) == ExitCode.DEVICE
    err = capsys.readouterr().err
    assert err.startswith("nvhook: ") and err.count("\n") == 1


def test_cli_on_an_aarch64_driver_says_it_cannot_load_it_here(
    mock_machine: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """gh200, the one mock machine whose labels are not golden: its NVML is aarch64's."""
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("on aarch64 the gh200 mock's NVML loads")
    root = mock_machine("gh200")
    assert main(["labels", "--root", str(root)]) == ExitCode.DEVICE
    assert capsys.readouterr().err == (
        f"nvhook: {root}: the driver is built for aarch64; its NVML cannot be loaded on this "
        "x86_64 machine\n"
    )
