"""nvhook.devices.nvml over the mock machine's fake libnvidia-ml.so.1, loaded by the real pynvml."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pynvml
import pytest

from nvhook.devices.nvml import GpuInfo, open_nvml
from nvhook.devices.nvml_ctypes import mig_ids
from nvhook.errors import DriverError
from nvhook.mock import compiled, list_profiles, load_profile
from nvhook.mock.layout import LIB_DIR

#: Profiles whose NVML loads here (gh200's aarch64 one does not on x86-64).
LOADED = [p for p in list_profiles() if load_profile(p).driver.loaded and compiled(load_profile(p))]


@pytest.fixture
def lib_dir(mock_machine: Callable[..., Path]) -> Callable[[str], Path]:
    return lambda profile: mock_machine(profile) / LIB_DIR


@pytest.fixture
def fail(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Set NVHOOK_MOCK_NVML_FAIL (the fake NVML reads it on every call)."""

    def set_(spec: str) -> None:
        monkeypatch.setenv("NVHOOK_MOCK_NVML_FAIL", spec)

    yield set_


@pytest.mark.parametrize("profile", LOADED)
def test_nvml_answers_from_the_profile(profile: str, lib_dir: Callable[[str], Path]) -> None:
    prof = load_profile(profile)
    with open_nvml(lib_dir(profile)) as nvml:
        driver = nvml.driver()
        gpus = nvml.gpus()
    assert driver.driver_version == prof.driver.version
    assert driver.cuda_version == prof.driver.cuda
    assert driver.nvml_version == f"{prof.driver.cuda.split('.')[0]}.{prof.driver.version}"
    expected = [
        GpuInfo(
            index=g.index,
            name=g.name,
            uuid=g.uuid,
            bus_id=g.bus_id,
            minor=g.minor,
            arch=g.model.architecture,
            compute_capability=g.model.compute_capability,
            memory_bytes=g.model.memory_mib << 20,
            brand=g.model.brand,
            mig_capable=g.model.mig_capable,
            mig_enabled=g.mig_enabled,
            migs=gpus[g.index].migs,  # compared below, field by field
            # SMs from NVML's CUDA cores (the datasheet's) must be the profile's SM count
            multiprocessors=g.model.multiprocessors if g.model.cuda_cores else 0,
        )
        for g in prof.gpus
    ]
    assert list(gpus) == expected
    for g in prof.gpus:
        got = [
            (
                m.index,
                m.uuid,
                m.gi,
                m.ci,
                m.profile,
                m.memory_bytes,
                m.parent_uuid,
                m.multiprocessors,
            )
            for m in gpus[g.index].migs
        ]
        want = [
            (
                d.index,
                d.uuid,
                d.gi,
                d.ci,
                d.profile.name,
                d.profile.memory_mib << 20,
                g.uuid,
                d.profile.multiprocessors,
            )
            for d in g.mig_devices
        ]
        assert got == want


def test_sm_counts_follow_nvmls_api(lib_dir: Callable[[str], Path]) -> None:
    # NVML's reference: nvmlDeviceGetAttributes_v2 "currently only supports MIG device
    # handles"; a whole GPU's CUDA cores come from nvmlDeviceGetNumGpuCores
    with open_nvml(lib_dir("h100-pcie")) as nvml:
        gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert (
            _err(lambda: pynvml.nvmlDeviceGetAttributes_v2(gpu)) == pynvml.NVML_ERROR_NOT_SUPPORTED
        )
        assert pynvml.nvmlDeviceGetNumGpuCores(gpu) == 14592  # H100 PCIe (whitepaper)
        assert nvml.gpus()[0].multiprocessors == 114
    with open_nvml(lib_dir("dgx-a100")) as nvml:
        gpus = nvml.gpus()
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pynvml.nvmlDeviceGetHandleByIndex(0), 0)
        assert _err(lambda: pynvml.nvmlDeviceGetNumGpuCores(mig)) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert {g.multiprocessors for g in gpus} == {108}  # 6912 cores, 64 a Ampere GA100 SM
    assert [m.multiprocessors for m in gpus[0].migs] == [42, 28, 28]


def test_multiprocessors_from_cores() -> None:
    from nvhook.devices.nvml import multiprocessors

    assert multiprocessors(6912, "8.0") == 108  # A100: 64 FP32 lanes an SM
    assert multiprocessors(7424, "8.9") == 58  # L4: 128
    assert multiprocessors(16896, "9.0") == 132  # H100 SXM5
    assert multiprocessors(5120, "7.0") == 80  # V100
    assert multiprocessors(0, "9.0") == multiprocessors(3840, "6.1") == 0  # unknown


def test_dgx_a100_mig_layout(lib_dir: Callable[[str], Path]) -> None:
    with open_nvml(lib_dir("dgx-a100")) as nvml:
        gpus = nvml.gpus()
    assert [m.profile for m in gpus[0].migs] == ["3g.40gb", "2g.20gb", "2g.20gb"]
    assert gpus[1].mig_enabled and gpus[1].migs == ()
    assert not any(g.mig_enabled for g in gpus[2:])


def test_no_gpu_profile_is_driver_not_loaded(lib_dir: Callable[[str], Path]) -> None:
    expected = r"nvmlInitWithFlags failed: Driver Not Loaded"
    with pytest.raises(DriverError, match=expected), open_nvml(lib_dir("no-gpu")):
        pass


def test_missing_library_is_a_driver_error(tmp_path: Path) -> None:
    expected = r"cannot load NVML library .*libnvidia-ml\.so\.1"
    with pytest.raises(DriverError, match=expected), open_nvml(tmp_path):
        pass


def test_fault_injection_names_the_call_and_device(
    lib_dir: Callable[[str], Path], fail: Callable[[str], None]
) -> None:
    fail("nvmlDeviceGetUUID:999")
    with open_nvml(lib_dir("h100-pcie")) as nvml:
        assert nvml.driver().driver_version == "580.65.06"
        with pytest.raises(DriverError) as e:
            nvml.gpus()
    assert "nvmlDeviceGetUUID" in str(e.value)
    assert "GPU 0" in str(e.value)
    assert "Unknown Error" in str(e.value) and "999" in str(e.value)


def test_fault_injection_of_mig_calls_names_the_mig_device(
    lib_dir: Callable[[str], Path], fail: Callable[[str], None]
) -> None:
    fail("nvmlDeviceGetGpuInstanceId:15")
    with open_nvml(lib_dir("dgx-a100")) as nvml, pytest.raises(DriverError) as e:
        nvml.gpus()
    message = str(e.value)
    assert "nvmlDeviceGetGpuInstanceId" in message and "MIG device 0" in message
    assert "GPU 0 (GPU-ac376f35-2448-4461-a104-b174eb2df7b3)" in message
    assert "GPU is lost" in message


@pytest.mark.parametrize("profile", LOADED)
def test_mig_ids_answer_what_open_nvml_does(profile: str, lib_dir: Callable[[str], Path]) -> None:
    with open_nvml(lib_dir(profile)) as nvml:
        full = nvml.gpus()
        assert mig_ids(lib_dir(profile)) == mig_ids(lib_dir(profile))  # NVML counts its inits
    lean = mig_ids(lib_dir(profile))
    assert [(g.index, g.name, g.uuid, g.minor) for g in lean] == [
        (g.index, g.name, g.uuid, g.minor) for g in full
    ]
    assert [[(m.index, m.uuid, m.gi, m.ci) for m in g.migs] for g in lean] == [
        [(m.index, m.uuid, m.gi, m.ci) for m in g.migs] for g in full
    ]
    assert any(g.migs for g in lean) == (profile == "dgx-a100")


@pytest.mark.parametrize(
    "fault",
    [
        "nvmlInitWithFlags:18",
        "nvmlDeviceGetCount_v2:999",
        "nvmlDeviceGetHandleByIndex_v2:15",
        "nvmlDeviceGetUUID:999",
        "nvmlDeviceGetMinorNumber:999",
        "nvmlDeviceGetName:999",
        "nvmlDeviceGetMigMode:999",
        "nvmlDeviceGetMaxMigDeviceCount:999",
        "nvmlDeviceGetMigDeviceHandleByIndex:15",
        "nvmlDeviceGetGpuInstanceId:15",
        "nvmlDeviceGetComputeInstanceId:999",
        "nvmlShutdown:999",
    ],
)
def test_mig_ids_fail_with_open_nvmls_messages(
    fault: str, lib_dir: Callable[[str], Path], fail: Callable[[str], None]
) -> None:
    fail(fault)
    with pytest.raises(DriverError) as by_pynvml, open_nvml(lib_dir("dgx-a100")) as nvml:
        nvml.gpus()
    with pytest.raises(DriverError) as by_ctypes:
        mig_ids(lib_dir("dgx-a100"))
    assert str(by_ctypes.value) == str(by_pynvml.value)
    assert fault.partition(":")[0] in str(by_ctypes.value)
    if fault.startswith("nvmlShutdown"):  # both left NVML initialised: shut it down
        fail("")
        library = ctypes.CDLL(str(lib_dir("dgx-a100") / "libnvidia-ml.so.1"))
        assert [library.nvmlShutdown() for _ in range(3)] == [0, 0, 1]  # 1: uninitialised


def test_mig_ids_without_the_library(tmp_path: Path) -> None:
    with pytest.raises(DriverError) as by_pynvml, open_nvml(tmp_path):
        pass
    with pytest.raises(DriverError) as by_ctypes:
        mig_ids(tmp_path)
    assert str(by_ctypes.value) == str(by_pynvml.value)


def test_fault_injection_at_init(
    lib_dir: Callable[[str], Path], fail: Callable[[str], None]
) -> None:
    fail("nvmlInitWithFlags:18")
    with pytest.raises(DriverError, match="version mismatch"), open_nvml(lib_dir("dgx-a100")):
        pass


def test_a_second_library_while_one_is_open_is_refused(lib_dir: Callable[[str], Path]) -> None:
    with open_nvml(lib_dir("dgx-a100")):
        with pytest.raises(DriverError, match="already open"), open_nvml(lib_dir("h100-pcie")):
            pass
        with open_nvml(lib_dir("dgx-a100")) as again:  # the same library nests
            assert len(again.gpus()) == 8
    with open_nvml(lib_dir("h100-pcie")) as other:
        assert len(other.gpus()) == 1


def test_pynvml_is_not_imported_with_nvhook() -> None:
    code = "import sys, nvhook, nvhook.devices.nvml, nvhook.mock; print('pynvml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the fake library's return codes, through pynvml -------------------------------------------


def _err(call: Callable[[], object]) -> int:
    with pytest.raises(pynvml.NVMLError) as e:
        call()
    value: int = e.value.value
    return value


def test_calls_before_init_are_uninitialized(lib_dir: Callable[[str], Path]) -> None:
    with open_nvml(lib_dir("dgx-a100")):
        pass  # selects the library and shuts NVML down again
    assert _err(pynvml.nvmlDeviceGetCount) == pynvml.NVML_ERROR_UNINITIALIZED
    assert _err(pynvml.nvmlSystemGetDriverVersion) == pynvml.NVML_ERROR_UNINITIALIZED
    assert _err(pynvml.nvmlShutdown) == pynvml.NVML_ERROR_UNINITIALIZED
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_NOT_FOUND) == "Not Found"


def test_lookups_and_their_errors(lib_dir: Callable[[str], Path]) -> None:
    prof = load_profile("dgx-a100")
    with open_nvml(lib_dir("dgx-a100")):
        assert (
            _err(lambda: pynvml.nvmlDeviceGetHandleByIndex(8)) == pynvml.NVML_ERROR_INVALID_ARGUMENT
        )
        unknown = "GPU-00000000-0000-0000-0000-000000000000"
        assert (
            _err(lambda: pynvml.nvmlDeviceGetHandleByUUID(unknown)) == pynvml.NVML_ERROR_NOT_FOUND
        )
        gpu3 = prof.gpus[3]
        by_uuid = pynvml.nvmlDeviceGetHandleByUUID(gpu3.uuid)
        assert pynvml.nvmlDeviceGetIndex(by_uuid) == 3
        for form in (gpu3.bus_id, "0000" + gpu3.bus_id, gpu3.bus_id.upper(), gpu3.bus_id[5:]):
            h = pynvml.nvmlDeviceGetHandleByPciBusId(form)
            assert pynvml.nvmlDeviceGetUUID(h) == gpu3.uuid
        assert _err(lambda: pynvml.nvmlDeviceGetHandleByPciBusId("0000:01:00.0")) == 6
        pci = pynvml.nvmlDeviceGetPciInfo(by_uuid)
        assert pci.busId == "00000000:4E:00.0" and pci.busIdLegacy == "0000:4E:00.0"
        assert (pci.domain, pci.bus, pci.device) == (0, 0x4E, 0)
        assert pci.pciDeviceId == 0x20B210DE
        v2 = pynvml.nvmlDeviceGetMemoryInfo(by_uuid, version=pynvml.nvmlMemory_v2)
        assert v2.total == 81920 << 20 and v2.free == v2.total - v2.reserved - v2.used
        v1 = pynvml.nvmlDeviceGetMemoryInfo(by_uuid)
        assert v1.used == v2.reserved + v2.used
        bad = pynvml.nvmlMemory_v2 + 1
        code = _err(lambda: pynvml.nvmlDeviceGetMemoryInfo(by_uuid, version=bad))
        assert code == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        assert pynvml.nvmlDeviceGetBrand(by_uuid) == pynvml.NVML_BRAND_NVIDIA
        assert pynvml.nvmlDeviceGetArchitecture(by_uuid) == pynvml.NVML_DEVICE_ARCH_AMPERE
        assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 12040


def test_mig_handles(lib_dir: Callable[[str], Path]) -> None:
    prof = load_profile("dgx-a100")
    with open_nvml(lib_dir("dgx-a100")):
        gpu0 = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlDeviceGetMigMode(gpu0) == [1, 1]
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu0) == 7
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 1)
        assert pynvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
        assert pynvml.nvmlDeviceIsMigDeviceHandle(gpu0).value == 0
        assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA A100-SXM4-80GB MIG 2g.20gb"
        assert pynvml.nvmlDeviceGetUUID(mig) == prof.gpus[0].mig_devices[1].uuid
        assert (
            pynvml.nvmlDeviceGetGpuInstanceId(mig),
            pynvml.nvmlDeviceGetComputeInstanceId(mig),
        ) == (3, 0)
        parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        assert pynvml.nvmlDeviceGetUUID(parent) == prof.gpus[0].uuid
        attrs = pynvml.nvmlDeviceGetAttributes(mig)
        assert (attrs.gpuInstanceSliceCount, attrs.multiprocessorCount, attrs.memorySizeMB) == (
            2,
            28,
            19968,
        )
        by_uuid = pynvml.nvmlDeviceGetHandleByUUID(prof.gpus[0].mig_devices[2].uuid)
        assert pynvml.nvmlDeviceGetGpuInstanceId(by_uuid) == 4
        assert _err(lambda: pynvml.nvmlDeviceGetMinorNumber(mig)) == pynvml.NVML_ERROR_NOT_SUPPORTED
        assert (
            _err(lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 3))
            == pynvml.NVML_ERROR_NOT_FOUND
        )
        assert (
            _err(lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 7))
            == pynvml.NVML_ERROR_INVALID_ARGUMENT
        )
        assert (
            _err(lambda: pynvml.nvmlDeviceGetGpuInstanceId(gpu0)) == pynvml.NVML_ERROR_NOT_SUPPORTED
        )
        assert _err(lambda: pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(gpu0)) == 2
        gpu2 = pynvml.nvmlDeviceGetHandleByIndex(2)  # MIG capable, MIG off
        assert pynvml.nvmlDeviceGetMigMode(gpu2) == [0, 0]
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu2) == 0
    with open_nvml(lib_dir("l40s-x4")):
        l40s = pynvml.nvmlDeviceGetHandleByIndex(0)  # not MIG capable
        assert _err(lambda: pynvml.nvmlDeviceGetMigMode(l40s)) == pynvml.NVML_ERROR_NOT_SUPPORTED
        assert (
            _err(lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(l40s))
            == pynvml.NVML_ERROR_NOT_SUPPORTED
        )
        code = _err(lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(l40s, 0))
        assert code == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_short_buffers_and_bad_handles(lib_dir: Callable[[str], Path]) -> None:
    with open_nvml(lib_dir("dgx-a100")):
        lib = pynvml.nvmlLib  # the fake library pynvml is using, called with raw arguments
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        small = ctypes.create_string_buffer(8)
        assert (
            lib.nvmlDeviceGetUUID(handle, small, ctypes.c_uint(8))
            == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        )
        assert (
            lib.nvmlDeviceGetName(handle, small, ctypes.c_uint(8))
            == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        )
        exact = ctypes.create_string_buffer(41)  # "GPU-" + 36 characters + NUL
        assert lib.nvmlDeviceGetUUID(handle, exact, ctypes.c_uint(41)) == pynvml.NVML_SUCCESS
        assert (
            lib.nvmlSystemGetDriverVersion(small, ctypes.c_uint(8))
            == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        )
        not_a_device = ctypes.c_int(0)
        out = ctypes.c_uint()
        code = lib.nvmlDeviceGetMinorNumber(ctypes.byref(not_a_device), ctypes.byref(out))
        assert code == pynvml.NVML_ERROR_INVALID_ARGUMENT
        assert lib.nvmlDeviceGetCount_v2(None) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_plain_pynvml_with_ld_library_path(lib_dir: Callable[[str], Path]) -> None:
    """No configuration but LD_LIBRARY_PATH: pynvml's own CDLL("libnvidia-ml.so.1") finds it."""
    code = (
        "import pynvml; pynvml.nvmlInit(); "
        "print(pynvml.nvmlDeviceGetCount(), pynvml.nvmlSystemGetDriverVersion(), "
        "pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(3)))"
    )
    env = {"LD_LIBRARY_PATH": str(lib_dir("l40s-x4")), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    assert out == ["4", "535.230.02", load_profile("l40s-x4").gpus[3].uuid]
    code = "from nvhook.devices.nvml import open_nvml\nwith open_nvml() as n: print(len(n.gpus()))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    assert out == ["4"]


def test_data_file_override(
    lib_dir: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    other = lib_dir("gb200-imex").parents[2] / "etc/nvhook-mock/nvml.txt"
    monkeypatch.setenv("NVHOOK_MOCK_NVML_DATA", str(other))
    with open_nvml(lib_dir("h100-pcie")) as nvml:
        assert [g.name for g in nvml.gpus()] == ["NVIDIA GB200"] * 4


# --- MIG: GPU and compute instances, through pynvml ---------------------------------------------


def test_get_index_on_a_mig_handle_is_its_mig_index(lib_dir: Callable[[str], Path]) -> None:
    prof = load_profile("dgx-a100")
    with open_nvml(lib_dir("dgx-a100")):
        gpu0 = pynvml.nvmlDeviceGetHandleByIndex(0)
        for mig in prof.gpus[0].mig_devices:
            by_index = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, mig.index)
            by_uuid = pynvml.nvmlDeviceGetHandleByUUID(mig.uuid)
            assert pynvml.nvmlDeviceGetIndex(by_index) == mig.index
            assert pynvml.nvmlDeviceGetIndex(by_uuid) == mig.index


def test_gpu_instance_profiles_follow_the_model(lib_dir: Callable[[str], Path]) -> None:
    model = load_profile("dgx-a100").gpus[0].model
    with open_nvml(lib_dir("dgx-a100")):
        for index in (0, 2):  # MIG mode on, and off: profiles are the model's either way
            gpu = pynvml.nvmlDeviceGetHandleByIndex(index)
            got = {}
            for i in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
                try:
                    v2 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu, i)
                except pynvml.NVMLError as e:
                    assert e.value == pynvml.NVML_ERROR_NOT_SUPPORTED
                    continue
                v1 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu, i, version=1)
                fields = ("id", "sliceCount", "instanceCount", "multiprocessorCount")
                assert [getattr(v1, f) for f in fields] == [getattr(v2, f) for f in fields]
                assert pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(gpu, v2.id).name == v2.name
                got[i] = (
                    v2.name,
                    v2.id,
                    v2.sliceCount,
                    v2.instanceCount,
                    v2.memorySizeMB,
                    v2.multiprocessorCount,
                    v2.copyEngineCount,
                    v2.decoderCount,
                    v2.jpegCount,
                    v2.ofaCount,
                )
            want = {
                p.nvml_index: (
                    f"MIG {p.name}",
                    p.id,
                    p.slices,
                    7 // p.slices,
                    p.memory_mib,
                    p.multiprocessors,
                    p.copy_engines,
                    p.decoders,
                    p.jpegs,
                    p.ofas,
                )
                for p in model.mig_profiles
            }
            assert got == want
        assert got[pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE][:4] == ("MIG 3g.40gb", 9, 3, 2)
        code = _err(lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu, 0x12))
        assert code == pynvml.NVML_ERROR_INVALID_ARGUMENT
        placements = (pynvml.c_nvmlGpuInstancePlacement_t * 4)()
        count = ctypes.c_uint(4)
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(gpu, 9, placements, ctypes.byref(count))
        assert [(p.start, p.size) for p in placements[: count.value]] == [(0, 4), (4, 4)]
    with open_nvml(lib_dir("l40s-x4")):
        l40s = pynvml.nvmlDeviceGetHandleByIndex(0)
        code = _err(lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(l40s, 0))
        assert code == pynvml.NVML_ERROR_NOT_SUPPORTED


def _gpu_instances(gpu: object, profile_id: int) -> list[object]:
    handles = (pynvml.c_nvmlGpuInstance_t * 8)()
    count = ctypes.c_uint()
    pynvml.nvmlDeviceGetGpuInstances(gpu, profile_id, handles, ctypes.byref(count))
    return list(handles[: count.value])


def test_gpu_and_compute_instances_are_the_profiles(lib_dir: Callable[[str], Path]) -> None:
    prof = load_profile("dgx-a100")
    gpu0 = prof.gpus[0]
    with open_nvml(lib_dir("dgx-a100")):
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        listed = []
        for p in gpu0.model.mig_profiles:
            for gi in _gpu_instances(handle, p.id):
                info = pynvml.nvmlGpuInstanceGetInfo(gi)
                assert pynvml.nvmlDeviceGetUUID(info.device) == gpu0.uuid
                assert info.profileId == p.id
                listed.append((info.id, p.name, info.placement.start, info.placement.size))
        want = [
            (gi.id, gi.profile.name, gi.placement, gi.profile.placement_size)
            for gi in gpu0.gpu_instances
        ]
        assert sorted(listed) == sorted(want)
        assert sorted(listed)[0] == (2, "3g.40gb", 4, 4)  # as on a real A100: GI 2 sits at 4
        for gi_want in gpu0.gpu_instances:
            gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, gi_want.id)
            assert pynvml.nvmlGpuInstanceGetInfo(gi).id == gi_want.id
            for ci_want in gi_want.compute_instances:
                ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_want.id)
                info = pynvml.nvmlComputeInstanceGetInfo(ci)
                assert (info.id, info.placement.start, info.placement.size) == (
                    ci_want.id,
                    0,
                    gi_want.profile.slices,
                )
                assert pynvml.nvmlGpuInstanceGetInfo(info.gpuInstance).id == gi_want.id
                assert pynvml.nvmlDeviceGetUUID(info.device) == gpu0.uuid
                cip = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, info.profileId, 0)
                assert cip.name == f"MIG {gi_want.profile.name}"
                assert cip.multiprocessorCount == gi_want.profile.multiprocessors
                cis = (pynvml.c_nvmlComputeInstance_t * 8)()
                count = ctypes.c_uint()
                pynvml.nvmlGpuInstanceGetComputeInstances(
                    gi, info.profileId, cis, ctypes.byref(count)
                )
                assert count.value == 1
        gi2 = pynvml.nvmlDeviceGetGpuInstanceById(handle, 2)  # the 3g.40gb
        smaller = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi2, 0, 0)
        assert (smaller.name, smaller.sliceCount, smaller.instanceCount) == ("MIG 1c.3g.40gb", 1, 3)
        code = _err(lambda: pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi2, 4, 0))
        assert code == pynvml.NVML_ERROR_NOT_SUPPORTED  # a 7-slice CI in a 3-slice GI
        code = _err(lambda: pynvml.nvmlGpuInstanceGetComputeInstanceById(gi2, 1))
        assert code == pynvml.NVML_ERROR_NOT_FOUND
        assert _err(lambda: pynvml.nvmlDeviceGetGpuInstanceById(handle, 5)) == 6
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, 19) == 0  # full
        gpu1 = pynvml.nvmlDeviceGetHandleByIndex(1)  # MIG mode, no instances
        assert _gpu_instances(gpu1, 19) == []
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu1, 19) == 7
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu1, 9) == 2
        gpu2 = pynvml.nvmlDeviceGetHandleByIndex(2)  # MIG off
        code = _err(lambda: pynvml.nvmlDeviceGetGpuInstanceById(gpu2, 2))
        assert code == pynvml.NVML_ERROR_NOT_SUPPORTED
        code = _err(lambda: pynvml.nvmlDeviceCreateGpuInstance(gpu1, 19))
        assert code == pynvml.NVML_ERROR_NOT_SUPPORTED  # instances are the profile's, read-only


def test_mig_devices_resolve_like_nvidia_ctk_does(lib_dir: Callable[[str], Path]) -> None:
    """MIG handle → GI and CI ids → instances → profiles: how go-nvml's nvlib names a device."""
    prof = load_profile("dgx-a100")
    with open_nvml(lib_dir("dgx-a100")):
        gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
        names = []
        for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, i)
            except pynvml.NVMLError_NotFound:
                continue
            parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
            gi = pynvml.nvmlDeviceGetGpuInstanceById(parent, pynvml.nvmlDeviceGetGpuInstanceId(mig))
            gi_info = pynvml.nvmlGpuInstanceGetInfo(gi)
            ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(
                gi, pynvml.nvmlDeviceGetComputeInstanceId(mig)
            )
            ci_info = pynvml.nvmlComputeInstanceGetInfo(ci)
            gip = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(parent, gi_info.profileId)
            cip = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_info.profileId, 0)
            assert cip.sliceCount == gip.sliceCount
            names.append((pynvml.nvmlDeviceGetIndex(mig), gip.name))
    assert names == [(m.index, f"MIG {m.profile.name}") for m in prof.gpus[0].mig_devices]


# --- topology -----------------------------------------------------------------------------------


def _cpus(words: Iterable[int]) -> list[int]:
    """The bit numbers set in a CPU (or NUMA node) mask of 64-bit words."""
    return [w * 64 + b for w, word in enumerate(words) for b in range(64) if word >> b & 1]


@pytest.mark.parametrize("profile", ["dgx-a100", "l40s-x4", "h100-pcie", "gb200-imex"])
def test_topology_follows_the_profile(profile: str, lib_dir: Callable[[str], Path]) -> None:
    prof = load_profile(profile)
    with open_nvml(lib_dir(profile)):
        handles = [pynvml.nvmlDeviceGetHandleByIndex(g.index) for g in prof.gpus]
        for g, h in zip(prof.gpus, handles, strict=True):
            levels = [pynvml.nvmlDeviceGetTopologyCommonAncestor(h, o) for o in handles]
            assert levels == [prof.topology_level(g, o) for o in prof.gpus]
            node = prof.numa_node(g.numa_node)
            assert node is not None
            assert _cpus(pynvml.nvmlDeviceGetCpuAffinity(h, 16)) == list(node.cpus)
            socket = [n for n in prof.numa_nodes if n.socket == node.socket]
            by_socket = pynvml.nvmlDeviceGetCpuAffinityWithinScope(
                h, 16, pynvml.NVML_AFFINITY_SCOPE_SOCKET
            )
            assert _cpus(by_socket) == sorted(c for n in socket for c in n.cpus)
            nodes = pynvml.nvmlDeviceGetMemoryAffinity(h, 1, pynvml.NVML_AFFINITY_SCOPE_NODE)
            assert _cpus(nodes) == [node.id]
            nearest = pynvml.nvmlDeviceGetTopologyNearestGpus(h, pynvml.NVML_TOPOLOGY_NODE)
            want = [o.index for o in prof.gpus if o != g and prof.topology_level(g, o) <= 40]
            assert [pynvml.nvmlDeviceGetIndex(n) for n in nearest] == want
            on_cpu = pynvml.nvmlSystemGetTopologyGpuSet(node.cpus[-1])
            assert g.index in [pynvml.nvmlDeviceGetIndex(n) for n in on_cpu]


def test_dgx_a100_topology(lib_dir: Callable[[str], Path]) -> None:
    """nvidia-smi topo -m on a DGX A100: NV12 everywhere, PXB within a pair, SYS across."""
    with open_nvml(lib_dir("dgx-a100")):
        gpus = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
        ancestor = pynvml.nvmlDeviceGetTopologyCommonAncestor
        assert ancestor(gpus[0], gpus[1]) == pynvml.NVML_TOPOLOGY_MULTIPLE
        assert ancestor(gpus[0], gpus[2]) == pynvml.NVML_TOPOLOGY_SYSTEM
        assert ancestor(gpus[3], gpus[3]) == pynvml.NVML_TOPOLOGY_INTERNAL
        switches = set()
        for gpu in gpus:
            for link in range(12):
                assert pynvml.nvmlDeviceGetNvLinkState(gpu, link) == pynvml.NVML_FEATURE_ENABLED
                assert pynvml.nvmlDeviceGetNvLinkVersion(gpu, link) == 4  # NVLink 3.0
                kind = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(gpu, link)
                assert kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
                remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(gpu, link)
                assert remote.pciDeviceId == 0x1AF110DE
                switches.add(remote.busId)
            assert _err(lambda: pynvml.nvmlDeviceGetNvLinkState(gpu, 12)) == 2  # noqa: B023
        assert len(switches) == 6  # two links to each NVSwitch, every GPU on every switch
        assert _cpus(pynvml.nvmlDeviceGetCpuAffinity(gpus[0], 4)) == [
            *range(48, 64),
            *range(176, 192),
        ]  # NUMA node 3, as on the real machine
        sockets = pynvml.nvmlDeviceGetMemoryAffinity(gpus[7], 1, pynvml.NVML_AFFINITY_SCOPE_SOCKET)
        assert _cpus(sockets) == [4, 5, 6, 7]
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpus[0], 0)
        code = _err(lambda: pynvml.nvmlDeviceGetTopologyCommonAncestor(mig, gpus[1]))
        assert code == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_l40s_topology_is_pcie_pairs(lib_dir: Callable[[str], Path]) -> None:
    with open_nvml(lib_dir("l40s-x4")):
        gpus = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
        ancestor = pynvml.nvmlDeviceGetTopologyCommonAncestor
        assert ancestor(gpus[0], gpus[1]) == pynvml.NVML_TOPOLOGY_SINGLE
        assert ancestor(gpus[2], gpus[3]) == pynvml.NVML_TOPOLOGY_SINGLE
        assert ancestor(gpus[1], gpus[2]) == pynvml.NVML_TOPOLOGY_SYSTEM
        pair = pynvml.nvmlDeviceGetTopologyNearestGpus(gpus[3], pynvml.NVML_TOPOLOGY_SINGLE)
        assert [pynvml.nvmlDeviceGetIndex(g) for g in pair] == [2]
        code = _err(lambda: pynvml.nvmlDeviceGetNvLinkState(gpus[0], 0))
        assert code == pynvml.NVML_ERROR_NOT_SUPPORTED
        node1 = pynvml.nvmlSystemGetTopologyGpuSet(40)
        assert [pynvml.nvmlDeviceGetIndex(g) for g in node1] == [2, 3]


@pytest.mark.parametrize("profile", LOADED)
def test_topology_values_follow_the_profile(profile: str, lib_dir: Callable[[str], Path]) -> None:
    """Nvml.topology(): ancestors, NUMA node and NVLinks as the profile declares them."""
    prof = load_profile(profile)
    with open_nvml(lib_dir(profile)) as nvml:
        topology = nvml.topology()
    assert [t.index for t in topology] == [g.index for g in prof.gpus]
    for g, t in zip(prof.gpus, topology, strict=True):
        assert t.ancestors == tuple(prof.topology_level(g, o) for o in prof.gpus)
        assert t.numa_node == g.numa_node
        if prof.nvlink is None:
            assert t.nvlinks == ()
            continue
        n, switches = prof.nvlink.links, prof.nvlink.switch_bus_ids
        assert [(x.link, x.remote) for x in t.nvlinks] == [(i, "switch") for i in range(n)]
        want = [switches[i * len(switches) // n] for i in range(n)]
        assert [x.remote_bus_id for x in t.nvlinks] == want


def test_dgx_a100_topology_values(lib_dir: Callable[[str], Path]) -> None:
    with open_nvml(lib_dir("dgx-a100")) as nvml:
        t0, *_, t7 = nvml.topology()
    assert t0.ancestors == (0, 20, 50, 50, 50, 50, 50, 50)  # INTERNAL, PXB to GPU 1, SYS
    assert (t0.numa_node, t7.numa_node) == (3, 5)
    assert len(t0.nvlinks) == 12
    assert {x.remote_bus_id for x in t0.nvlinks} == {f"0000:c{i}:00.0" for i in range(4, 10)}


def test_topology_not_supported_is_unknown_and_other_errors_fail(
    lib_dir: Callable[[str], Path], fail: Callable[[str], None]
) -> None:
    fail("nvmlDeviceGetTopologyCommonAncestor:3,nvmlDeviceGetMemoryAffinity:3")
    with open_nvml(lib_dir("l40s-x4")) as nvml:
        t = nvml.topology()
    assert [x.ancestors for x in t][1] == (None, 0, None, None)
    assert [x.numa_node for x in t] == [None] * 4
    fail("nvmlDeviceGetNvLinkRemoteDeviceType:3")  # an older driver: the far end unknown
    with open_nvml(lib_dir("dgx-a100")) as nvml:
        t = nvml.topology()
    assert {x.remote for x in t[0].nvlinks} == {"unknown"} and len(t[0].nvlinks) == 12
    fail("nvmlDeviceGetNvLinkState:999")
    with open_nvml(lib_dir("dgx-a100")) as nvml, pytest.raises(DriverError) as e:
        nvml.topology()
    assert "nvmlDeviceGetNvLinkState failed for GPU 0 NVLink 0" in str(e.value)
    fail("nvmlDeviceGetTopologyCommonAncestor:15")
    with open_nvml(lib_dir("l40s-x4")) as nvml, pytest.raises(DriverError) as e:
        nvml.topology()
    assert "nvmlDeviceGetTopologyCommonAncestor failed for GPUs 0 and 1" in str(e.value)
    assert "GPU is lost" in str(e.value)


# --- processes, utilization, sensors -------------------------------------------------------------


def test_processes_utilization_and_sensors(lib_dir: Callable[[str], Path]) -> None:
    prof = load_profile("dgx-a100")
    busy = prof.gpus[2]
    (job,) = busy.processes
    with open_nvml(lib_dir("dgx-a100")):
        gpu = pynvml.nvmlDeviceGetHandleByIndex(2)
        (proc,) = pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)
        assert (proc.pid, proc.usedGpuMemory) == (job.pid, job.used_mib << 20)
        assert pynvml.nvmlSystemGetProcessName(job.pid) == job.name
        assert pynvml.nvmlDeviceGetGraphicsRunningProcesses(gpu) == []
        memory = pynvml.nvmlDeviceGetMemoryInfo(gpu, version=pynvml.nvmlMemory_v2)
        assert memory.used == job.used_mib << 20
        util = pynvml.nvmlDeviceGetUtilizationRates(gpu)
        assert (util.gpu, util.memory) == (busy.utilization, busy.memory_utilization)
        hot = pynvml.nvmlDeviceGetTemperature(gpu, pynvml.NVML_TEMPERATURE_GPU)
        assert hot == pynvml.nvmlDeviceGetTemperatureV(gpu, pynvml.NVML_TEMPERATURE_GPU)
        idle = pynvml.nvmlDeviceGetHandleByIndex(3)
        cool = pynvml.nvmlDeviceGetTemperature(idle, pynvml.NVML_TEMPERATURE_GPU)
        assert cool == busy.model.idle_temperature_c < hot < 90
        limit = pynvml.nvmlDeviceGetEnforcedPowerLimit(gpu)
        assert limit == busy.model.power_limit_w * 1000
        assert busy.model.idle_power_w * 1000 == pynvml.nvmlDeviceGetPowerUsage(idle)
        assert pynvml.nvmlDeviceGetPowerUsage(idle) < pynvml.nvmlDeviceGetPowerUsage(gpu) < limit
        assert pynvml.nvmlDeviceGetComputeRunningProcesses(idle) == []
        assert pynvml.nvmlDeviceGetUtilizationRates(idle).gpu == 0
        mig_mode = pynvml.nvmlDeviceGetHandleByIndex(0)
        code = _err(lambda: pynvml.nvmlDeviceGetUtilizationRates(mig_mode))
        assert code == pynvml.NVML_ERROR_NOT_SUPPORTED  # as NVML does in MIG mode
        assert _err(lambda: pynvml.nvmlSystemGetProcessName(1)) == pynvml.NVML_ERROR_NOT_FOUND
        assert _err(lambda: pynvml.nvmlDeviceGetFanSpeed(gpu)) == pynvml.NVML_ERROR_NOT_SUPPORTED
