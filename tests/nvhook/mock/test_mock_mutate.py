"""A live mock machine changed in place: MIG re-layout, a GPU lost and back, a driver upgrade.

Each change is checked from the files a node's readers read (procfs through nvhook's own
reader, the NVML data, ``/dev``, the ld cache through the real ``ldconfig -p``), and against a
fresh layout of the changed profile; a concurrent reader never sees a file absent or torn.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.devices.procfs import read_driver
from nvhook.errors import MockError
from nvhook.mock import create
from nvhook.mock.mutate import (
    MUTATIONS_FILE,
    add_gpu,
    current_profile,
    load_driver,
    relayout_mig,
    remove_gpu,
    set_driver,
    unload_driver,
)
from tests.support.basics import require

NVML = "etc/nvhook-mock/nvml.txt"


def _dgx(tmp_path: Path) -> Path:
    root = tmp_path / "dgx"
    create("dgx-a100", root, nodes="file")
    return root


def _mig_lines(root: Path) -> list[list[str]]:
    return [
        line.split("\t") for line in (root / NVML).read_text().splitlines() if line[:4] == "mig\t"
    ]


def _tree(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for directory, dirs, files in os.walk(root):
        for name in files + dirs:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                out[rel] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                out[rel] = Path(path).read_bytes()
            else:
                out[rel] = "dir"
    out.pop(MUTATIONS_FILE, None)
    return out


def test_relayout_to_seven_1g_makes_new_instances_with_new_uuids(tmp_path: Path) -> None:
    root = _dgx(tmp_path)
    old_uuids = {line[2] for line in _mig_lines(root)}
    relayout_mig(root, 0, ["1g.10gb"] * 7)
    gpu0 = read_driver(root).gpus[0]
    assert [gi.gi for gi in gpu0.gpu_instances] == [7, 8, 9, 10, 11, 12, 13]  # A100 numbering
    migs = _mig_lines(root)
    assert [m[-1] for m in migs] == ["1g.10gb"] * 7
    assert not old_uuids & {m[2] for m in migs}
    # the old instances' nvidia-caps nodes stay, as nvidia-modprobe's do on a node
    assert (root / "dev/nvidia-caps/nvidia-cap21").exists()
    assert not (root / "proc/driver/nvidia/capabilities/gpu0/mig/gi2").exists()
    # the same layout again is another set of devices: new UUIDs
    relayout_mig(root, 0, ["1g.10gb"] * 7)
    assert not {m[2] for m in migs} & {m[2] for m in _mig_lines(root)}
    # what is left is what a fresh layout of the changed profile has, nvidia-caps aside
    fresh = tmp_path / "fresh"
    create(current_profile(root), fresh, nodes="file")
    have = {k: v for k, v in _tree(root).items() if not k.startswith("dev/nvidia-caps/")}
    want = {k: v for k, v in _tree(fresh).items() if not k.startswith("dev/nvidia-caps/")}
    assert have == want


def test_mig_off_and_back(tmp_path: Path) -> None:
    root = _dgx(tmp_path)
    relayout_mig(root, 0, None)
    assert read_driver(root).gpus[0].gpu_instances == ()
    assert not (root / "proc/driver/nvidia/capabilities/gpu0").exists()
    gpu_line = next(line for line in (root / NVML).read_text().splitlines() if "\tGPU-" in line)
    assert gpu_line.split("\t")[18] == "0"  # NVML's MIG mode
    relayout_mig(root, 0, ["3g.40gb", "2g.20gb", "2g.20gb"])
    # 3g.40gb fits only at slice 4 beside two 2g.20gb: the profile's own ids come back
    assert [gi.gi for gi in read_driver(root).gpus[0].gpu_instances] == [2, 3, 4]


def test_remove_and_add_a_gpu(tmp_path: Path) -> None:
    root = _dgx(tmp_path)
    before = _tree(root)
    bus = read_driver(root).gpus[3].bus_id
    remove_gpu(root, 3)
    driver = read_driver(root)
    assert len(driver.gpus) == 7 and bus not in {g.bus_id for g in driver.gpus}
    assert not (root / "dev/nvidia3").exists()
    assert not (root / f"proc/driver/nvidia/gpus/{bus}").exists()
    assert sum(line.startswith("gpu\t") for line in (root / NVML).read_text().splitlines()) == 7
    with pytest.raises(MockError, match="already removed"):
        remove_gpu(root, 3)
    with pytest.raises(MockError, match="is removed: add it back first"):
        relayout_mig(root, 3, [])
    add_gpu(root, 3)
    assert _tree(root) == before


def test_driver_unloaded_and_loaded_again(tmp_path: Path) -> None:
    from nvhook.devices.nvml import open_nvml
    from nvhook.errors import DriverError
    from nvhook.planner import nvml_library_dir

    root = _dgx(tmp_path)
    before = _tree(root)
    unload_driver(root)
    assert not (root / "proc/driver/nvidia").exists()
    assert not list((root / "dev").glob("nvidia[0-9]*")) and not (root / "dev/nvidiactl").exists()
    with pytest.raises(DriverError):
        read_driver(root)
    with (
        pytest.raises(DriverError, match="Driver Not Loaded"),
        open_nvml(nvml_library_dir(str(root))),
    ):
        pass
    assert (root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").exists()  # user space stays
    assert current_profile(root).gpus == ()
    with pytest.raises(MockError, match="unloaded already"):
        unload_driver(root)
    load_driver(root)
    assert _tree(root) == before
    with pytest.raises(MockError, match="has its driver loaded: unload it first"):
        load_driver(root)


def test_driver_upgrade_replaces_libraries_links_and_cache(tmp_path: Path) -> None:
    ldconfig = require("ldconfig")
    root = _dgx(tmp_path)
    set_driver(root, "550.90.07")
    assert read_driver(root).version == "550.90.07"
    lib = root / "usr/lib/x86_64-linux-gnu"
    assert os.readlink(lib / "libcuda.so.1") == "libcuda.so.550.90.07"
    assert not list(lib.glob("*550.54.15*"))
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            assert not os.path.islink(path) or os.path.exists(path), f"{path} dangles"
    listing = subprocess.run(
        [ldconfig, "-p", "-C", str(root / "etc/ld.so.cache")], capture_output=True, text=True
    ).stdout
    assert "libcuda.so.550.90.07" not in listing  # the cache names SONAMEs
    assert "libnvidia-ml.so.1" in listing
    assert "\tdriver\t550.90.07" in "\t" + (root / NVML).read_text().replace("\n", "\t")
    with pytest.raises(MockError, match="not a driver version"):
        set_driver(root, "latest")


def test_a_concurrent_reader_never_sees_a_file_absent_or_torn(tmp_path: Path) -> None:
    root = _dgx(tmp_path)
    watched = [root / NVML, root / "proc/devices", root / "proc/driver/nvidia/version"]
    expected_ends = {p: p.read_bytes()[-1:] for p in watched}
    seen: list[str] = []
    stop = threading.Event()
    reads = 0

    def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            for p in watched:
                try:
                    data = p.read_bytes()
                except FileNotFoundError:
                    seen.append(f"{p} absent")
                    continue
                if not data or data[-1:] != expected_ends[p]:
                    seen.append(f"{p} torn ({len(data)} bytes)")
                reads += 1

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        relayout_mig(root, 0, ["1g.10gb"] * 7)
        remove_gpu(root, 5)
        relayout_mig(root, 0, None)
        add_gpu(root, 5)
    finally:
        stop.set()
        thread.join()
    assert reads > 100 and seen == []


def test_no_link_dangles_during_a_driver_upgrade(tmp_path: Path) -> None:
    """libcuda.so.1 and libnvidia-ml.so.1 always open while the driver is replaced: the new
    files are moved in before the links that name them, the old ones removed after."""
    root = _dgx(tmp_path)
    lib = root / "usr/lib/x86_64-linux-gnu"
    links = [lib / "libcuda.so.1", lib / "libnvidia-ml.so.1", lib / "libnvidia-ptxjitcompiler.so.1"]
    dangling: list[str] = []
    stop = threading.Event()
    checks = 0

    def reader() -> None:
        nonlocal checks
        while not stop.is_set():
            for link in links:
                if not link.exists():
                    dangling.append(f"{link} -> {os.readlink(link) if link.is_symlink() else '?'}")
                checks += 1

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        set_driver(root, "550.90.07")
        set_driver(root, "550.54.15")
    finally:
        stop.set()
        thread.join()
    assert checks > 100 and dangling == []


def test_cli_changes_a_live_mock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _dgx(tmp_path)
    assert main(["mock", "mig", str(root), "--gpu", "0", "--layout", "1g.10gb*3,2g.20gb"]) == 0
    out = capsys.readouterr().out
    assert "GPU slot 0 MIG 1g.10gb,1g.10gb,1g.10gb,2g.20gb; now 8 GPU(s), 4 MIG device(s)" in out
    assert main(["mock", "remove-gpu", str(root), "--gpu", "7"]) == 0
    assert "now 7 GPU(s)" in capsys.readouterr().out
    assert main(["mock", "add-gpu", str(root), "--gpu", "7"]) == 0
    assert main(["mock", "unload-driver", str(root)]) == 0
    assert "driver unloaded; now 0 GPU(s)" in capsys.readouterr().out
    assert main(["mock", "load-driver", str(root)]) == 0
    assert "driver loaded; now 8 GPU(s)" in capsys.readouterr().out
    assert main(["mock", "mig", str(root), "--gpu", "2", "--layout", "9g.1tb"]) == 6
    err = capsys.readouterr().err
    assert err.startswith("nvhook: GPU GPU-") and "has no MIG profile '9g.1tb'" in err
    assert err.count("\n") == 1
    assert main(["mock", "mig", str(root), "--gpu", "0"]) == 2  # neither --layout nor --off
