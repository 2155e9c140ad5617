"""nvhook.devices.nvml over the mock machine's fake libnvidia-ml.so.1, loaded by the real pynvml."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest

from nvhook.devices.nvml import GpuInfo, open_nvml
from nvhook.errors import DriverError
from nvhook.mock import list_profiles, load_profile
from nvhook.mock.layout import LIB_DIR

LOADED = [p for p in list_profiles() if load_profile(p).driver.loaded]


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
        )
        for g in prof.gpus
    ]
    assert list(gpus) == expected
    for g in prof.gpus:
        got = [
            (m.index, m.uuid, m.gi, m.ci, m.profile, m.memory_bytes, m.parent_uuid)
            for m in gpus[g.index].migs
        ]
        want = [
            (d.index, d.uuid, d.gi, d.ci, d.profile.name, d.profile.memory_mib << 20, g.uuid)
            for d in g.mig_devices
        ]
        assert got == want


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
