"""``nvhook cdi generate --vendor amd|intel|ascend|auto``: the vendors' own kinds and names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nvhook.cli import main
from nvhook.mock.vendors import create
from oci.cdi.parse import check_spec


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    top = tmp_path_factory.mktemp("gen")
    return {
        n: create(n, top / n, nodes="file").root for n in ("mi300x-8", "max-1550", "ascend-910b")
    }


def _spec(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    assert check_spec(data, source=str(path)).spec is not None
    return data


def test_amd_spec_is_amd_ctks_kind_and_names(roots: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "amd.json"
    argv = ["cdi", "generate", "--root", str(roots["mi300x-8"]), "--vendor", "amd", "-o", str(out)]
    assert main(argv) == 0
    spec = _spec(out)
    assert spec["kind"] == "amd.com/gpu"
    names = [d["name"] for d in spec["devices"]]
    assert names == [*(str(i) for i in range(64)), "all"]
    nine = spec["devices"][9]["containerEdits"]["deviceNodes"]
    assert [n["path"] for n in nine] == ["/dev/dri/card10", "/dev/dri/renderD137"]
    assert [n["path"] for n in spec["containerEdits"]["deviceNodes"]] == ["/dev/kfd"]
    assert len(spec["devices"][-1]["containerEdits"]["deviceNodes"]) == 128


def test_intel_and_ascend_specs(roots: dict[str, Path], tmp_path: Path) -> None:
    argv = ["cdi", "generate", "--root", str(roots["max-1550"]), "--vendor", "intel"]
    assert main([*argv, "-o", str(tmp_path / "i.json")]) == 0
    intel = _spec(tmp_path / "i.json")
    assert intel["kind"] == "intel.com/gpu"
    assert intel["devices"][0]["name"] == "0000-29-00-0-0x0bd5"
    assert "--device-link" in intel["devices"][0]["containerEdits"]["hooks"][0]["args"]
    argv = ["cdi", "generate", "--root", str(roots["ascend-910b"]), "--vendor", "ascend"]
    assert main([*argv, "-o", str(tmp_path / "a.json")]) == 0
    ascend = _spec(tmp_path / "a.json")
    assert ascend["kind"] == "huawei.com/npu"
    edits = ascend["containerEdits"]
    assert [n["path"] for n in edits["deviceNodes"]] == [
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
    ]
    assert "/usr/local/Ascend/driver/lib64" in [m["containerPath"] for m in edits["mounts"]]


def test_auto_writes_each_vendor_present(
    roots: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["cdi", "generate", "--root", str(roots["ascend-910b"]), "--vendor", "auto"]
    assert main([*argv, "-o", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ascend.json"]
    assert "8 ascend device(s) of huawei.com/npu" in capsys.readouterr().err


def test_a_vendor_the_host_lacks_is_one_line(
    roots: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["cdi", "generate", "--root", str(roots["ascend-910b"]), "--vendor", "amd"]
    assert main([*argv, "-o", str(tmp_path / "x.json")]) != 0
    err = capsys.readouterr().err
    assert "no amd device on this host" in err and "Traceback" not in err
    assert not (tmp_path / "x.json").exists()


def test_nvidia_only_flags_are_usage_errors(roots: dict[str, Path]) -> None:
    argv = ["cdi", "generate", "--root", str(roots["mi300x-8"]), "--vendor", "amd"]
    assert main([*argv, "--kind", "imex-channel"]) == 2
    assert main([*argv, "--class", "npu"]) == 2
