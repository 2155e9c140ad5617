"""nvhook.devices.procfs over the mock machine's /proc, checked against NVML and the profile."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.devices.nvml import open_nvml
from nvhook.devices.procfs import (
    listdir,
    normalize_bus_id,
    read_driver,
    read_majors,
    read_mig_minors,
)
from nvhook.errors import DriverError
from nvhook.mock import compiled, list_profiles, load_profile
from nvhook.mock.layout import LIB_DIR

LOADED = [p for p in list_profiles() if load_profile(p).driver.loaded]
#: Those whose NVML loads here (gh200's aarch64 one does not on x86-64).
NVML_HERE = [p for p in LOADED if compiled(load_profile(p))]


@pytest.mark.parametrize("profile", NVML_HERE)
def test_procfs_agrees_with_nvml(profile: str, mock_machine: Callable[..., Path]) -> None:
    root = mock_machine(profile)
    proc = read_driver(root)
    with open_nvml(root / LIB_DIR) as nvml:
        version = nvml.driver().driver_version
        gpus = nvml.gpus()
    assert proc.version == version
    assert [(g.index, g.uuid, g.bus_id, g.minor, g.model) for g in proc.gpus] == [
        (g.index, g.uuid, g.bus_id, g.minor, g.name) for g in gpus
    ]
    for p, n in zip(proc.gpus, gpus, strict=True):
        proc_migs = [(gi.gi, ci.ci) for gi in p.gpu_instances for ci in gi.compute_instances]
        assert proc_migs == [(m.gi, m.ci) for m in n.migs]


@pytest.mark.parametrize("profile", LOADED)
def test_procfs_matches_the_profile(profile: str, mock_machine: Callable[..., Path]) -> None:
    prof = load_profile(profile)
    proc = read_driver(mock_machine(profile))
    assert proc.open_module == (prof.driver.kernel_module == "open")
    assert proc.majors["nvidia-frontend"] == 195
    for name, major in prof.char_majors:
        assert proc.majors[name] == major
    assert (proc.mig_config_minor, proc.mig_monitor_minor) == (1, 2)
    assert proc.params["ModifyDeviceFiles"] == "1"
    for g in prof.gpus:
        p = proc.gpus[g.index]
        assert proc.gpu_by_minor(g.minor) is p and proc.gpu_by_uuid(g.uuid) is p
        assert p.info["Video BIOS"] == g.model.vbios and p.info["GPU Excluded"] == "No"
        caps = [
            (gi.caps_minor, ci.caps_minor) for gi in p.gpu_instances for ci in gi.compute_instances
        ]
        assert caps == [(d.gi_caps_minor, d.ci_caps_minor) for d in g.mig_devices]


def test_index_is_pci_bus_order_not_minor(mock_machine: Callable[..., Path]) -> None:
    proc = read_driver(mock_machine("l40s-x4"))
    assert [(g.bus_id, g.minor) for g in proc.gpus] == [
        ("0000:01:00.0", 1),
        ("0000:25:00.0", 2),
        ("0000:41:00.0", 3),
        ("0000:c1:00.0", 0),
    ]
    gb200 = read_driver(mock_machine("gb200-imex"))
    assert [g.bus_id for g in gb200.gpus] == [
        "0008:01:00.0",
        "0009:01:00.0",
        "0018:01:00.0",
        "0019:01:00.0",
    ]


def test_mig_minors_table(mock_machine: Callable[..., Path]) -> None:
    minors = read_mig_minors(mock_machine("dgx-a100"))
    assert minors["config"] == 1 and minors["monitor"] == 2
    assert minors["gpu0/gi0/access"] == 3
    assert minors["gpu3/gi3/ci3/access"] == 439
    assert minors["gpu31/gi14/ci7/access"] == 4322
    assert len(minors) == 2 + 32 * 15 * 9
    proc = read_driver(mock_machine("dgx-a100"))
    for gi in proc.gpus[0].gpu_instances:
        assert minors[f"gpu0/gi{gi.gi}/access"] == gi.caps_minor
        for ci in gi.compute_instances:
            assert minors[f"gpu0/gi{gi.gi}/ci{ci.ci}/access"] == ci.caps_minor


def test_driver_not_loaded(mock_machine: Callable[..., Path]) -> None:
    root = mock_machine("no-gpu")
    with pytest.raises(
        DriverError, match=r"not loaded: .*proc/driver/nvidia/version does not exist"
    ):
        read_driver(root)
    majors = read_majors(root)
    assert "nvidia-frontend" not in majors and majors["mem"] == 1


def test_a_broken_information_file_names_the_file(make_mock_machine: Callable[..., Path]) -> None:
    root = make_mock_machine("h100-pcie")
    info = root / "proc/driver/nvidia/gpus/0000:62:00.0/information"
    info.chmod(0o644)
    info.write_text("Model: \t\t NVIDIA H100 PCIe\nGPU UUID: \t GPU-x\n")
    with pytest.raises(DriverError, match=r"0000:62:00\.0/information: no Device Minor"):
        read_driver(root)
    shutil.rmtree(root / "proc/driver/nvidia/gpus")
    assert read_driver(root).gpus == ()


def test_open_and_proprietary_version_lines(make_mock_machine: Callable[..., Path]) -> None:
    root = make_mock_machine("no-gpu")
    version = root / "proc/driver/nvidia/version"
    version.parent.mkdir(parents=True)
    version.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
        "(dvs-builder@U22-I3-AE18-23-3)  Wed Jul 16 06:14:01 UTC 2025\nGCC version:  gcc 12\n"
    )
    driver = read_driver(root)
    assert (driver.version, driver.open_module, driver.gpus) == ("580.65.06", True, ())
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.256.02  Thu May  2\n")
    assert (read_driver(root).version, read_driver(root).open_module) == ("470.256.02", False)
    version.write_text("something else\n")
    with pytest.raises(DriverError, match=r"version: expected 'NVRM version"):
        read_driver(root)


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("00000000:4E:00.0", "0000:4e:00.0"),
        ("0000:4e:00.0", "0000:4e:00.0"),
        ("4E:00.0", "0000:4e:00.0"),
        ("00000018:01:00.0", "0018:01:00.0"),
    ],
)
def test_normalize_bus_id(raw: str, normal: str) -> None:
    assert normalize_bus_id(raw) == normal


def test_normalize_bus_id_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a PCI bus id"):
        normalize_bus_id("GPU-0")


def test_listdir_missing_is_empty_other_failures_name_the_directory(tmp_path: Path) -> None:
    """The one helper procfs and the /dev node discovery (nvhook.discover.nodes) share."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("")
    (tmp_path / "file").write_text("")
    assert listdir(str(tmp_path / "d")) == ["x"]
    assert listdir(str(tmp_path / "missing")) == []
    with pytest.raises(DriverError) as info:
        listdir(str(tmp_path / "file"))
    assert str(info.value) == f"{tmp_path}/file: cannot list the directory: Not a directory"
