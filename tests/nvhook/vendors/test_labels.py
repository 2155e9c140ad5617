"""The vendors' own labels and the vendor-neutral set, on the mocks (and `nvhook labels`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvhook.cli.labels import labels as labels_command
from nvhook.mock.vendors import create
from nvhook.vendors.labels import facts_of_nvidia, neutral_labels, node_labels
from nvhook.vendors.model import Host
from nvhook.vendors.registry import discover_all


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    top = tmp_path_factory.mktemp("labels")
    names = ("mi300x-8", "max-1550", "ascend-910b", "mixed-h100-mi300x")
    return {n: create(n, top / n, nodes="file").root for n in names}


def _labels(root: Path) -> dict[str, str]:
    return node_labels(discover_all(Host(str(root), str(root))))


def test_amd_labels_are_the_labellers(roots: dict[str, Path]) -> None:
    found = _labels(roots["mi300x-8"])
    assert found["amd.com/gpu.vram"] == "24G"  # a CPX partition's share of 192 GB
    assert found["amd.com/gpu.cu-count"] == "38"
    assert found["amd.com/gpu.device-id"] == "74a1"
    assert found["beta.amd.com/gpu.cu-count.38"] == "64"
    assert found["accelerator.nvhook.io/class"] == "fp8"


def test_intel_labels_sum_as_its_labeler_does(roots: dict[str, Path]) -> None:
    found = _labels(roots["max-1550"])
    assert found["gpu.intel.com/memory.max"] == str(4 * 128 << 30)
    assert found["gpu.intel.com/tiles"] == "8"
    assert found["gpu.intel.com/cards"] == "card0.card1.card2.card3"
    assert found["gpu.intel.com/gpu-numbers"] == "0.1.2.3"
    assert found["gpu.intel.com/millicores"] == "4000"
    assert found["accelerator.nvhook.io/class"] == "bf16"
    assert "accelerator.nvhook.io/dtype.fp8" not in found


def test_neutral_set_matches_across_vendors(roots: dict[str, Path]) -> None:
    ascend = _labels(roots["ascend-910b"])
    assert ascend["accelerator.nvhook.io/vendor"] == "ascend"
    assert ascend["accelerator.nvhook.io/memory-mib"] == "65536"
    assert ascend["accelerator.nvhook.io/compute-units"] == "20"
    assert ascend["accelerator.nvhook.io/product"] == "Ascend-910B3"
    mixed = neutral_labels(
        [
            facts_of_nvidia("NVIDIA H100 PCIe", 81559 << 20, "9.0"),
            facts_of_nvidia("NVIDIA A100-SXM4-40GB", 40 << 30, "8.0"),
        ]
    )
    assert mixed["accelerator.nvhook.io/memory-mib"] == "40960"  # every one has at least it
    assert mixed["accelerator.nvhook.io/memory-mib.max"] == "81559"
    assert mixed["accelerator.nvhook.io/class"] == "bf16"  # the A100 has no fp8
    assert mixed["accelerator.nvhook.io/product"] == "mixed"
    assert "accelerator.nvhook.io/compute-units" not in mixed  # no SM count given


def test_labels_all_vendors_on_a_mixed_node(roots: dict[str, Path]) -> None:
    done = CliRunner().invoke(
        labels_command, ["--all-vendors", "--root", str(roots["mixed-h100-mi300x"])]
    )
    assert done.exit_code == 0, done.output
    found = dict(line.split("=", 1) for line in done.output.splitlines())
    assert found["nvidia.com/gpu.product"] == "NVIDIA-H100-PCIe"  # GFD's, from the mock NVML
    assert found["amd.com/gpu.vram"] == "192G"
    assert found["accelerator.nvhook.io/vendors"] == "amd.nvidia"
    assert found["accelerator.nvhook.io/count"] == "3"
    assert found["accelerator.nvhook.io/memory-mib"] == "81559"
    assert found["accelerator.nvhook.io/compute-units"] == "114"  # the H100 PCIe's SMs < 304 CUs


def test_labels_all_vendors_count_mig_devices(mock_machine: Callable[..., Path]) -> None:
    # dgx-a100: GPU 0 in MIG mode with 3g.40gb + 2x 2g.20gb, GPU 1 in MIG mode without
    # any, six whole A100s; the MIG devices are what a pod gets, so the least is a 2g.20gb's
    done = CliRunner().invoke(
        labels_command, ["--all-vendors", "--root", str(mock_machine("dgx-a100"))]
    )
    assert done.exit_code == 0, done.output
    found = dict(line.split("=", 1) for line in done.output.splitlines())
    assert found["accelerator.nvhook.io/compute-units"] == "28"
    assert found["accelerator.nvhook.io/memory-mib"] == "19968"
    assert found["accelerator.nvhook.io/count"] == "9"  # GPU 1 in MIG mode has nothing to give


def test_labels_all_vendors_without_nvidias_driver(roots: dict[str, Path]) -> None:
    done = CliRunner().invoke(
        labels_command, ["--all-vendors", "--root", str(roots["ascend-910b"])]
    )
    assert done.exit_code == 0, done.output
    assert "nvidia.com/" not in done.output
    assert "accelerator.nvhook.io/ascend.count=8" in done.output.splitlines()


def test_ascend_labels_are_its_device_plugins(roots: dict[str, Path]) -> None:
    # Ascend/mind-cluster 22bb3d9 pkg/server/manager.go getNewNodeLabel, on an Atlas 800T A2
    found = _labels(roots["ascend-910b"])
    assert found["node.kubernetes.io/npu.chip.name"] == "910B3"
    assert found["servertype"] == "Ascend910B-20"
    assert found["accelerator"] == "huawei-Ascend910"
    assert found["mind-cluster/npu-chip-memory"] == "64G"
    assert "accelerator-type" not in found  # an Atlas 300I A2's label, by DCMI's board id
    assert "servertype" not in _labels(roots["mi300x-8"])
