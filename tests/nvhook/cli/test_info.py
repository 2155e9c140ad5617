"""``nvhook info`` and :func:`nvhook.tools.info.host_info` on every mock profile."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.constants import ALL_CAPABILITIES
from nvhook.mock import compiled, lib_dirs, list_profiles, load_profile
from nvhook.planner import Host
from nvhook.tools.info import host_info, render_text


@pytest.mark.parametrize("profile", list_profiles())
def test_info_matches_the_profile(profile: str, mock_machine: Callable[..., Path]) -> None:
    root = mock_machine(profile)
    prof = load_profile(profile)
    info = host_info(Host(root=str(root)))
    assert json.loads(json.dumps(info)) == info  # plain data
    assert info["roots"] == {"root": str(root), "driver_root": str(root), "dev_root": str(root)}
    driver = info["driver"]
    assert driver["version"] == prof.driver.version
    assert [c["name"] for c in info["capabilities"]] == list(ALL_CAPABILITIES)
    utility = info["capabilities"][1]
    lib64 = lib_dirs(prof)[0]
    assert f"/{lib64}/libnvidia-ml.so.{prof.driver.version}" in utility["libraries"]
    assert "/usr/bin/nvidia-smi" in utility["binaries"]
    assert info["searched"][0] == "/etc/ld.so.cache"
    assert len(info["searched"]) == len(set(info["searched"]))
    if not prof.driver.loaded:
        assert driver["loaded"] is False
        assert driver["problem"] == (
            f"the NVIDIA kernel module is not loaded: {root}/proc/driver/nvidia/version "
            "does not exist"
        )
        assert info["gpus"] == [] and info["nvswitches"] == [] and info["imex_channels"] == []
        assert info["error"] is not None
        return
    assert info["error"] is None
    assert info["nvswitches"] == [f"/dev/nvidia-nvswitch{i}" for i in range(prof.nvswitches)]
    assert info["imex_channels"] == [
        f"/dev/nvidia-caps-imex-channels/channel{i}" for i in range(prof.imex_channels)
    ]
    # the fabric manager and IMEX files are missing only where the hardware is
    missing = {m for c in info["capabilities"] for m in c["missing"]}
    assert ("nv-fabricmanager" in missing) is False
    assert ("nvidia-imex" in missing) is False
    nvml_here = compiled(prof)  # gh200's aarch64 NVML does not load on x86-64: GPUs from /proc
    assert driver == {
        "loaded": True,
        "version": prof.driver.version,
        "kernel_module": prof.driver.kernel_module,
        "cuda_version": prof.driver.cuda if nvml_here else None,
        "problem": None
        if nvml_here
        else (
            f"{root}: the driver is built for {prof.arch}; its NVML cannot be loaded on this"
            f" {os.uname().machine} machine (GPUs from /proc: no MIG UUIDs, no MIG mode,"
            " no CUDA version)"
        ),
    }
    expected = [
        {
            "index": g.index,
            "name": g.name,
            "uuid": g.uuid,
            "bus_id": g.bus_id,
            "minor": g.minor,
            "node": f"/dev/nvidia{g.minor}",
            "mig_enabled": g.mig_enabled if nvml_here else None,  # /proc does not say
            "nodes_missing": [],
            "migs": [
                {
                    "name": f"{g.index}:{m.index}",
                    "uuid": m.uuid,
                    "gi": m.gi,
                    "ci": m.ci,
                    "profile": m.profile.name,
                    "nodes": [
                        f"/dev/nvidia-caps/nvidia-cap{m.gi_caps_minor}",
                        f"/dev/nvidia-caps/nvidia-cap{m.ci_caps_minor}",
                    ],
                }
                for m in g.mig_devices
            ],
        }
        for g in prof.gpus
    ]
    assert info["gpus"] == expected
    assert info["firmware"] == [
        f"/lib/firmware/nvidia/{prof.driver.version}/{name}" for name in prof.driver.firmware
    ]
    assert "/run/nvidia-persistenced/socket" in info["ipc"]


def test_missing_and_searched_are_reported(mock_machine: Callable[..., Path]) -> None:
    info = host_info(Host(root=str(mock_machine("dgx-a100"))))
    caps = {c["name"]: c for c in info["capabilities"]}
    # nothing driver 550 does not ship is missing: no libnvidia-tileiras (580 on), no
    # libnvidia-ifr (470 and before), no 32-bit libnvidia-cfg (NVIDIA builds none)
    assert all(c["missing"] == [] for n, c in caps.items() if n not in ("graphics", "display"))
    # the DGX profile installs no graphics configuration and no display files
    assert "vulkan/icd.d/nvidia_icd.json" in caps["graphics"]["missing"]
    # … nor needs the display files: an A100 has no display engine
    assert caps["display"]["libraries"] == []
    assert caps["display"]["missing"] == []
    assert "/usr/lib/xorg/modules" in info["searched"]
    assert "/usr/lib/x86_64-linux-gnu/vdpau" in info["searched"]
    text = render_text(info)
    assert text.count("/usr/lib/x86_64-linux-gnu/vdpau, ") == 1  # searched: printed once
    assert text.count("Searched: /etc/ld.so.cache, ") == 1


@pytest.mark.parametrize(
    ("profile", "gone", "capability", "lacking"),
    [
        # IMEX: a Grace Blackwell tray with channels calls for the daemon; a DGX A100 not
        ("gb200-imex", "usr/bin/nvidia-imex", "utility", True),
        ("dgx-a100", "usr/bin/nvidia-imex", "utility", False),
        # the Xorg driver: an L40S has a display engine; an H100 none
        ("l40s-x4", "usr/lib/xorg/modules/drivers/nvidia_drv.so", "display", True),
        ("h100-pcie", "usr/lib/xorg/modules/drivers/nvidia_drv.so", "display", False),
        # the Vulkan ICD: lacking beside libGLX_nvidia, not on a host without it
        ("l40s-x4", "usr/share/vulkan/icd.d/nvidia_icd.json", "graphics", True),
        ("l40s-x4", "usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.*", "graphics", False),
    ],
)
def test_missing_only_what_the_hardware_and_driver_call_for(
    make_mock_machine: Callable[..., Path],
    profile: str,
    gone: str,
    capability: str,
    lacking: bool,
) -> None:
    root = make_mock_machine(profile)
    before = {c["name"]: c["missing"] for c in host_info(Host(root=str(root)))["capabilities"]}
    for path in root.glob(gone):
        path.unlink()
    after = {c["name"]: c["missing"] for c in host_info(Host(root=str(root)))["capabilities"]}
    name = os.path.basename(gone).replace(".*", ".so").removesuffix(".so.so")
    shown = gone.split("/", 2)[-1] if gone.endswith(".json") else name
    if lacking:
        assert shown not in before[capability] and shown in after[capability]
    elif "libGLX" in gone:  # its library gone: its configs are not lacking either
        assert "vulkan/icd.d/nvidia_icd.json" not in after[capability]
        assert "libGLX_nvidia.so" in after[capability]
    else:
        assert after[capability] == before[capability]


def test_nvml_failure_falls_back_to_proc(
    mock_machine: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVHOOK_MOCK_NVML_FAIL", "nvmlInitWithFlags:18")
    info = host_info(Host(root=str(mock_machine("dgx-a100"))))
    driver = info["driver"]
    assert driver["loaded"] is True and driver["cuda_version"] is None
    assert driver["problem"].startswith("NVML nvmlInitWithFlags failed")
    assert driver["problem"].endswith(
        "(GPUs from /proc: no MIG UUIDs, no MIG mode, no CUDA version)"
    )
    assert info["error"] is None
    migs = info["gpus"][0]["migs"]
    assert [(m["name"], m["uuid"], m["profile"]) for m in migs] == [
        ("0:0", None, None),
        ("0:1", None, None),
        ("0:2", None, None),
    ]
    assert "(UUID: NVML only)" in render_text(info)


@pytest.mark.parametrize("profile", list_profiles())
def test_cli_text_and_json_are_deterministic(
    profile: str, mock_machine: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    root = str(mock_machine(profile))
    prof = load_profile(profile)
    rc = 0 if prof.driver.loaded else 6
    assert main(["info", "--root", root, "--json"]) == rc
    first = capfd.readouterr().out
    assert main(["info", "--root", root, "--json"]) == rc
    assert capfd.readouterr().out == first
    assert json.loads(first) == host_info(Host(root=root))
    assert main(["info", "--root", root]) == rc
    text = capfd.readouterr().out
    assert text == render_text(json.loads(first))
    for gpu in prof.gpus:
        assert f"  {gpu.index}  {gpu.name}  {gpu.uuid}  bus {gpu.bus_id}  minor {gpu.minor}" in text
        for mig in gpu.mig_devices:
            assert f"MIG {gpu.index}:{mig.index}  {mig.uuid}  gi {mig.gi} ci {mig.ci}" in text
    assert "  utility: found " in text


def test_cli_text_example(
    mock_machine: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    root = str(mock_machine("l40s-x4"))
    assert main(["info", "--root", root]) == 0
    lines = capfd.readouterr().out.splitlines()
    assert lines[:3] == [
        f"Roots: host {root}, driver {root}, devices {root}",
        "Driver: 535.230.02 (proprietary kernel module), CUDA 12.2",
        "GPUs: 4",
    ]
    assert lines[6] == (
        "  3  NVIDIA L40S  GPU-56b69e84-e2b1-47c9-9fe9-cc93344404e7  bus 0000:c1:00.0  "
        "minor 0 (/dev/nvidia0)"
    )
    display = lines.index("  display: found 2 libraries, 1 config")
    assert lines[display + 1 : display + 4] == [
        "      /usr/lib/xorg/modules/drivers/nvidia_drv.so",
        "      /usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.535.230.02",
        "      /usr/share/X11/xorg.conf.d/10-nvidia.conf",
    ]


def test_driver_and_dev_roots_are_separate(
    mock_machine: Callable[..., Path], tmp_path: Path
) -> None:
    root = mock_machine("h100-pcie")
    empty = tmp_path / "driver"
    empty.mkdir()
    info = host_info(Host(root=str(root), driver_root=str(empty), dev_root=str(empty)))
    assert info["roots"] == {"root": str(root), "driver_root": str(empty), "dev_root": str(empty)}
    assert info["gpus"][0]["nodes_missing"] == ["/dev/nvidia0"]
    assert f"     missing under {empty}: /dev/nvidia0" in render_text(info)
    # no NVML under the empty driver root: GPUs still come from the host's /proc
    assert info["driver"]["problem"] == (
        f"{empty}/etc/ld.so.cache: cannot read ld.so.cache: No such file or directory "
        "(GPUs from /proc: no MIG UUIDs, no MIG mode, no CUDA version)"
    )
    assert info["error"] == (
        f"no usable GPU: no GPU device node under {empty} (/dev/nvidia0): create them "
        "(nvidia-modprobe -c <minor>, or udev), or pass the right --dev-root"
    )
    assert [g["uuid"] for g in info["gpus"]] == ["GPU-c8c5f2ea-115d-48d0-bcf3-fa2527591762"]
    assert all(c["libraries"] == [] for c in info["capabilities"])


def test_no_driver_exits_6_with_one_line(
    mock_machine: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    root = mock_machine("no-gpu")
    assert main(["info", "--root", str(root)]) == 6
    out, err = capfd.readouterr()
    assert "Driver: kernel module not loaded (user space 550.54.15 found)" in out
    assert err == (
        "nvhook: no usable GPU: the NVIDIA kernel module is not loaded (user space 550.54.15 "
        f"is installed), {root}/proc/driver/nvidia/version does not exist: load it (modprobe "
        "nvidia; dmesg tells why it refuses), or pass the host's root with --root\n"
    )
    # the files are still listed, and none is missing that driver 550 ships
    info = host_info(Host(root=str(root)))
    assert not any(
        m.startswith("libnvidia-tileiras") for c in info["capabilities"] for m in c["missing"]
    )


def test_nvswitches_imex_channels_and_mig_without_instances(
    mock_machine: Callable[..., Path], capfd: pytest.CaptureFixture[str]
) -> None:
    dgx = str(mock_machine("dgx-a100"))
    assert main(["info", "--root", dgx]) == 0
    lines = capfd.readouterr().out.splitlines()
    gpu1 = lines.index(next(line for line in lines if line.startswith("  1  NVIDIA A100")))
    assert lines[gpu1 + 1] == (
        "     MIG mode on, no MIG devices: not usable until instances are created "
        "(nvidia-smi mig -cgi)"
    )
    switches = ", ".join(f"/dev/nvidia-nvswitch{i}" for i in range(6))
    assert f"NVSwitches: 6 ({switches})" in lines
    assert "IMEX channels: 0" in lines
    assert "      /usr/bin/nv-fabricmanager" in lines
    assert not any("nv-fabricmanager" in line for line in lines if "missing:" in line)
    gb200 = str(mock_machine("gb200-imex"))
    assert main(["info", "--root", gb200]) == 0
    lines = capfd.readouterr().out.splitlines()
    assert "NVSwitches: 0" in lines
    channels = "/dev/nvidia-caps-imex-channels/channel0, /dev/nvidia-caps-imex-channels/channel1"
    assert f"IMEX channels: 2 ({channels})" in lines


def test_every_gpu_in_mig_mode_without_instances_is_unusable(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from importlib.resources import files

    from nvhook.mock import create

    text = files("nvhook.mock.machines").joinpath("h100-pcie.toml").read_text()
    profile = tmp_path / "h100-mig.toml"
    profile.write_text(text.replace("minor = 0\n", "minor = 0\nmig = true\n"))
    root = tmp_path / "root"
    create(load_profile(profile), root, nodes="file")
    assert main(["info", "--root", str(root)]) == 6
    out, err = capfd.readouterr()
    assert "     MIG mode on, no MIG devices" in out
    assert err == (
        "nvhook: no usable GPU: every GPU is in MIG mode without MIG devices: create instances "
        "(nvidia-smi mig -cgi <profile> -C) or disable MIG mode (nvidia-smi -mig 0)\n"
    )
