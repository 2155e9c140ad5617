"""The shipped machine profiles, and what the profile loader refuses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nvhook.errors import MockError
from nvhook.mock import list_profiles, load_profile
from nvhook.mock.model import mig_caps_minor
from nvhook.mock.profiles import driver_files

UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MIG_UUID = re.compile(r"MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def test_the_required_profiles_ship() -> None:
    assert {"dgx-a100", "gb200-imex", "gh200", "h100-pcie", "l40s-x4", "no-gpu"} <= set(
        list_profiles()
    )


@pytest.mark.parametrize("name", list_profiles())
def test_every_profile_is_realistic(name: str) -> None:
    p = load_profile(name)
    assert p.name == name
    assert re.fullmatch(r"\d{3}\.\d+\.\d+", p.driver.version)
    assert re.fullmatch(r"1[0-9]\.\d", p.driver.cuda)
    for g in p.gpus:
        assert UUID.fullmatch(g.uuid)
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", g.bus_id)
        assert g.name.startswith("NVIDIA ")
        assert re.fullmatch(r"\d+\.\d", g.model.compute_capability)
        assert g.model.memory_mib > 16 * 1024
        for d in g.mig_devices:
            assert MIG_UUID.fullmatch(d.uuid)
    indices = [g.index for g in p.gpus]
    assert indices == list(range(len(p.gpus)))
    buses = [tuple(int(x, 16) for x in re.split(r"[:.]", g.bus_id)) for g in p.gpus]
    assert buses == sorted(buses), "NVML index follows PCI bus order"


def test_dgx_a100() -> None:
    p = load_profile("dgx-a100")
    assert p.driver.version.startswith("550.") and p.driver.cuda == "12.4"
    assert [g.name for g in p.gpus] == ["NVIDIA A100-SXM4-80GB"] * 8
    gpu0, gpu1, *plain = p.gpus
    assert gpu0.mig_enabled and sorted(gi.profile.name for gi in gpu0.gpu_instances) == [
        "2g.20gb",
        "2g.20gb",
        "3g.40gb",
    ]
    assert all(len(gi.compute_instances) == 1 for gi in gpu0.gpu_instances)
    assert gpu1.mig_enabled and gpu1.gpu_instances == ()
    assert not any(g.mig_enabled for g in plain)
    assert p.nvswitches > 0


def test_other_profiles() -> None:
    h100 = load_profile("h100-pcie")
    assert len(h100.gpus) == 1 and "H100" in h100.gpus[0].name
    assert h100.driver.version.startswith("580.") and h100.driver.cuda == "13.0"
    l40s = load_profile("l40s-x4")
    assert [g.name for g in l40s.gpus] == ["NVIDIA L40S"] * 4
    assert all(g.dri_card is not None and g.dri_render is not None for g in l40s.gpus)
    assert l40s.graphics_config and l40s.display
    assert load_profile("gb200-imex").imex_channels > 0
    no_gpu = load_profile("no-gpu")
    assert no_gpu.gpus == () and not no_gpu.driver.loaded
    gh200 = load_profile("gh200")
    assert gh200.arch == "aarch64" and gh200.driver.version.startswith("550.")
    assert [(g.name, g.model.memory_mib // 1024) for g in gh200.gpus] == [
        ("NVIDIA GH200 480GB", 95)
    ]
    assert gh200.driver.kernel_module == "open"  # Grace Hopper needs the open module
    assert [p.arch for p in map(load_profile, list_profiles()) if p.arch is not None] == ["aarch64"]


def test_some_profile_permutes_minors() -> None:
    permuted = [n for n in list_profiles() if any(g.minor != g.index for g in load_profile(n).gpus)]
    assert "l40s-x4" in permuted


def test_mig_caps_minors_follow_the_drivers_table() -> None:
    assert mig_caps_minor(0, 0) == 3
    assert mig_caps_minor(3, 3, 3) == 439
    assert mig_caps_minor(31, 14, 7) == 4322


def test_driver_files_cover_every_capability() -> None:
    files = driver_files()
    caps = {lib.capability for lib in files.libraries}
    assert caps == {"utility", "compute", "video", "graphics", "ngx"}
    stems = {lib.stem for lib in files.libraries}
    assert {"libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"} <= stems
    names = {b.name for b in files.binaries}
    assert {"nvidia-smi", "nvidia-persistenced", "nvidia-cuda-mps-control"} <= names


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(
        MockError, match=r"unknown mock profile 'dgx-z'; known profiles: .*dgx-a100"
    ):
        load_profile("dgx-z")


BASE = """
name = "t"
description = "test"
[driver]
version = "550.54.15"
cuda = "12.4"
kernel_module = "proprietary"
build = "x"
gcc = "gcc"
vulkan_api = "1.3.277"
[char_majors]
nvidia-uvm = 234
nvidia-caps = 506
[[model]]
name = "NVIDIA A100-SXM4-80GB"
architecture = "ampere"
compute_capability = "8.0"
memory_mib = 81920
brand = "nvidia"
pci_device_id = 0x20b2
pci_subsystem_id = 0x147f10de
vbios = "92.00.45.00.03"
multiprocessors = 108
max_mig_devices = 7
[[model.mig_profile]]
name = "7g.80gb"
id = 0
slices = 7
memory_mib = 80896
multiprocessors = 98
[[gpu]]
model = "NVIDIA A100-SXM4-80GB"
uuid = "GPU-ac376f35-2448-4461-a104-b174eb2df7b3"
bus_id = "0000:07:00.0"
minor = 0
irq = 47
"""

SECOND_GPU = """
[[gpu]]
model = "NVIDIA A100-SXM4-80GB"
uuid = "GPU-ac376f35-2448-4461-a104-b174eb2df7b3"
bus_id = "0000:0f:00.0"
minor = 1
irq = 48
"""


OTHER_GPU = SECOND_GPU.replace(
    "ac376f35-2448-4461-a104-b174eb2df7b3", "91263f39-f322-4b13-abbc-1b055deec8c9"
)

FOUR_SLICES = """
[[model.mig_profile]]
name = "4g.40gb"
id = 5
slices = 4
placement_size = 4
placements = [0, 4]
memory_mib = 40192
multiprocessors = 56
"""

NUMA = """
[[host.numa_node]]
id = 0
socket = 0
cpus = "0-3"
[[host.numa_node]]
id = 1
socket = 1
cpus = "4-7"
"""


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda s: s.replace("irq = 47", 'irq = 47\ncolour = "red"'),
            r"gpu\[0\]\.colour: unknown key",
        ),
        (
            lambda s: s.replace('"0000:07:00.0"', '"0000:07:00"'),
            r"gpu\[0\]\.bus_id: not a PCI bus id",
        ),
        (
            lambda s: s.replace('"0000:07:00.0"', '"0000:0F:00.0"'),
            r"write it as '0000:0f:00\.0'",
        ),
        (lambda s: s.replace("minor = 0", "minor = -1"), r"gpu\[0\]\.minor: must not be negative"),
        (lambda s: s.replace("GPU-ac37", "GPU-zz37"), r"gpu\[0\]\.uuid: expected GPU-"),
        (
            lambda s: s + SECOND_GPU,
            r"UUID 'GPU-ac376f35-2448-4461-a104-b174eb2df7b3' is used twice",
        ),
        (
            lambda s: s.replace("max_mig_devices = 7", "max_mig_devices = 0") + "mig = true\n",
            r"not MIG capable",
        ),
        (
            lambda s: s + '[[gpu.gpu_instance]]\nid = 0\nprofile = "7g.80gb"\n',
            r"gpu_instance\[0\]\.id: GPU instances need `mig = true`",
        ),
        (
            lambda s: s + 'mig = true\n[[gpu.gpu_instance]]\nid = 15\nprofile = "7g.80gb"\n',
            r"GPU instance ids are 0-14",
        ),
        (
            lambda s: s + 'mig = true\n[[gpu.gpu_instance]]\nid = 0\nprofile = "1g.10gb"\n',
            r"has no MIG profile '1g\.10gb'",
        ),
        (
            lambda s: (
                s
                + 'mig = true\n[[gpu.gpu_instance]]\nid = 0\nprofile = "7g.80gb"\n'
                + '[[gpu.gpu_instance]]\nid = 1\nprofile = "7g.80gb"\n'
            ),
            r"gpu_instance\[1\]\.profile: no placement of 7g\.80gb is free",
        ),
        (
            lambda s: (
                s.replace("[[gpu]]", FOUR_SLICES + "[[gpu]]")
                + 'mig = true\n[[gpu.gpu_instance]]\nid = 1\nprofile = "4g.40gb"\n'
                + '[[gpu.gpu_instance]]\nid = 2\nprofile = "4g.40gb"\n'
            ),
            r"use 8 slices, a GPU has 7",
        ),
        (
            lambda s: (
                s + 'mig = true\n[[gpu.gpu_instance]]\nid = 0\nprofile = "7g.80gb"\nplacement = 1\n'
            ),
            r"gpu_instance\[0\]\.placement: 7g\.80gb starts at one of \[0\]",
        ),
        (
            lambda s: (
                s.replace("[[gpu]]", FOUR_SLICES + "[[gpu]]")
                + 'mig = true\n[[gpu.gpu_instance]]\nid = 1\nprofile = "4g.40gb"\nplacement = 4\n'
                + '[[gpu.gpu_instance]]\nid = 2\nprofile = "7g.80gb"\n'
            ),
            r"gpu_instance\[1\]\.profile: no placement of 7g\.80gb is free",
        ),
        (
            lambda s: s.replace("slices = 7\n", "slices = 7\nplacements = [2]\n"),
            r"mig_profile\[0\]\.placements: an instance ends past memory slice 8",
        ),
        (lambda s: s.replace("slices = 7\n", "slices = 5\n"), r"slices: a GPU-instance profile"),
        (lambda s: s + "numa_node = 0\n", r"names NUMA node 0, and the profile declares no"),
        (
            lambda s: s.replace("[char_majors]", NUMA + "[char_majors]") + "numa_node = 2\n",
            r"GPU 0 \(0000:07:00\.0\): numa_node is one of the \[\[host\.numa_node\]\] ids",
        ),
        (
            lambda s: (
                s.replace("[char_majors]", NUMA + "[char_majors]") + "numa_node = 0\n" + OTHER_GPU
            ),
            r"GPU 1 \(0000:0f:00\.0\): numa_node is one of .* got None",
        ),
        (
            lambda s: (
                (s.replace("[char_majors]", NUMA + "[char_majors]") + OTHER_GPU)
                .replace("irq = 47\n", "irq = 47\nnuma_node = 0\npcie_switch = 0\n")
                .replace("irq = 48\n", "irq = 48\nnuma_node = 1\npcie_switch = 0\n")
            ),
            r"GPUs 0 and 1 share PCIe switch 0 but not a NUMA node",
        ),
        (
            lambda s: s.replace("[char_majors]", NUMA.replace("4-7", "3-7") + "[char_majors]"),
            r"CPU 3 is used twice",
        ),
        (
            lambda s: s.replace("[char_majors]", NUMA.replace('"0-3"', '"3-0"') + "[char_majors]"),
            r"host\.numa_node\[0\]\.cpus: expected a CPU list like",
        ),
        (
            lambda s: s.replace("[char_majors]", "[host.nvlink]\nlinks = 12\n[char_majors]"),
            r"host\.nvlink\.switch_bus_ids: NVLinks go to the NVSwitches: one bus id per switch",
        ),
        (
            lambda s: s.replace("[char_majors]", '[host]\nswitch_level = "node"\n[char_majors]'),
            r"host\.switch_level: expected 'single' or 'multiple'",
        ),
        (
            lambda s: s.replace("[char_majors]", '[host]\narch = "arm64"\n[char_majors]'),
            r"host\.arch: expected one of aarch64, x86_64, got 'arm64'",
        ),
        (
            lambda s: s + 'mig = true\nprocess = [{ pid = 1, name = "x", used_mib = 1 }]\n',
            r"gpu\[0\]\.process\[0\]\.pid: processes are listed on GPUs that are not in MIG",
        ),
        (
            lambda s: s + 'process = [{ pid = 1, name = "x", used_mib = 81921 }]\n',
            r"gpu\[0\]\.process: the processes use more than the 81920 MiB",
        ),
        (lambda s: s + "utilization = 101\n", r"gpu\[0\]\.utilization: a percentage is 0-100"),
        (
            lambda s: s.replace("nvidia-caps = 506", "nvidia-caps = 195"),
            r"char_majors\.nvidia-caps",
        ),
        (lambda s: s.replace("nvidia-caps = 506\n", ""), r"char_majors\.nvidia-caps is needed"),
        (
            lambda s: s.replace('architecture = "ampere"', 'architecture = "fermi2"'),
            r"unknown architecture",
        ),
        (lambda s: s.replace('cuda = "12.4"', "cuda = 12.4"), r"driver\.cuda: expected a string"),
        (lambda s: s + "[[", r"not valid TOML"),
    ],
)
def test_profile_mistakes_name_the_key(edit: object, message: str, tmp_path: Path) -> None:
    assert callable(edit)
    path = tmp_path / "t.toml"
    path.write_text(edit(BASE))
    with pytest.raises(MockError, match=message) as e:
        load_profile(path)
    assert str(path) in str(e.value)


def test_the_base_of_those_cases_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(BASE)
    assert load_profile(path).gpus[0].uuid == "GPU-ac376f35-2448-4461-a104-b174eb2df7b3"
