"""The two views of the GPUs (/proc and NVML) resolve every request form alike, on every profile.

MIG UUIDs are the exception: only NVML knows them, and the /proc view says so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.devices.gpus import (
    Gpu,
    HostGpus,
    Mig,
    Selected,
    from_procfs,
    resolve,
    with_nvml_migs,
)
from nvhook.devices.nvml_ctypes import mig_ids
from nvhook.devices.procfs import read_driver, read_mig_minors
from nvhook.discover.nodes import gpu_nodes
from nvhook.errors import UnknownDeviceError
from nvhook.mock import compiled, list_profiles, load_profile
from nvhook.mock.layout import LIB_DIR
from nvhook.planner import Host, nvml_view
from nvhook.requests.ids import All, DeviceRequest, Devices, NoGpus
from nvhook.requests.values import parse_device_list

#: Profiles whose NVML loads here (gh200's aarch64 one does not on x86-64).
LOADED = [p for p in list_profiles() if load_profile(p).driver.loaded and compiled(load_profile(p))]
WITH_MIG = [p for p in LOADED if any(g.mig_devices for g in load_profile(p).gpus)]


def _forms(profile: str) -> list[str]:
    """Every request form the profile can answer, except MIG UUIDs."""
    prof = load_profile(profile)
    forms = ["all", "none"]
    for gpu in prof.gpus:
        forms += [str(gpu.index), gpu.uuid, "GPU-" + gpu.uuid[4:].upper()]
        for mig in gpu.mig_devices:
            forms += [f"{gpu.index}:{mig.index}", f"MIG-{gpu.uuid}/{mig.gi}/{mig.ci}"]
    indices = [str(g.index) for g in reversed(prof.gpus)]
    forms.append(",".join(indices))  # several, in reverse order
    return forms


def _key(device: Selected) -> tuple[object, ...]:
    """What a resolved device is, without the MIG UUID (which /proc does not have)."""
    if isinstance(device, Gpu):
        return ("gpu", device.index, device.uuid, device.minor, device.bus_id, device.model)
    assert isinstance(device, Mig)
    return (
        "mig",
        device.gpu_index,
        device.index,
        device.gi,
        device.ci,
        device.gi_caps_minor,
        device.ci_caps_minor,
    )


@pytest.fixture(scope="module")
def views(
    mock_machine: Callable[..., Path],
) -> dict[str, tuple[HostGpus, HostGpus, dict[str, int]]]:
    out = {}
    for profile in LOADED:
        root = str(mock_machine(profile))
        driver = read_driver(root)
        out[profile] = (from_procfs(driver), nvml_view(Host(root=root)), dict(driver.majors))
    return out


@pytest.mark.parametrize("profile", LOADED)
def test_both_views_see_the_same_gpus(
    profile: str, views: dict[str, tuple[HostGpus, HostGpus, dict[str, int]]]
) -> None:
    procfs, nvml, _ = views[profile]
    assert (procfs.source, nvml.source) == ("procfs", "nvml")
    assert [_key(g) for g in procfs.gpus] == [_key(g) for g in nvml.gpus]
    assert [[_key(m) for m in g.migs] for g in procfs.gpus] == [
        [_key(m) for m in g.migs] for g in nvml.gpus
    ]
    assert all(m.uuid is None for g in procfs.gpus for m in g.migs)
    assert all(m.uuid for g in nvml.gpus for m in g.migs)


@pytest.mark.parametrize(("profile", "form"), [(p, f) for p in LOADED for f in _forms(p)], ids=str)
def test_every_request_form_resolves_alike(
    profile: str, form: str, views: dict[str, tuple[HostGpus, HostGpus, dict[str, int]]]
) -> None:
    procfs, nvml, majors = views[profile]
    request: DeviceRequest = parse_device_list(form)
    by_proc = resolve(request, procfs)
    by_nvml = resolve(request, nvml)
    assert [_key(d) for d in by_proc] == [_key(d) for d in by_nvml]
    if isinstance(request, NoGpus):
        assert by_proc == ()
    elif isinstance(request, All):  # every GPU, each followed by its MIG devices
        prof = load_profile(profile)
        assert len(by_proc) == len(prof.gpus) + sum(len(g.mig_devices) for g in prof.gpus)
    else:
        assert isinstance(request, Devices)
        assert len(by_proc) == len(request.ids)
    # and the device nodes they become are the same
    nodes = [
        gpu_nodes(r, v, dev_root="/", majors=majors)
        for r, v in ((by_proc, procfs), (by_nvml, nvml))
    ]
    assert nodes[0] == nodes[1]


@pytest.mark.parametrize("profile", WITH_MIG)
def test_mig_uuids_only_through_nvml(
    profile: str, views: dict[str, tuple[HostGpus, HostGpus, dict[str, int]]]
) -> None:
    procfs, nvml, _ = views[profile]
    prof = load_profile(profile)
    for gpu, mig in [(g, m) for g in prof.gpus for m in g.mig_devices]:
        request = parse_device_list(mig.uuid)
        (found,) = resolve(request, nvml)
        assert isinstance(found, Mig)
        assert (found.gpu_index, found.index, found.uuid) == (gpu.index, mig.index, mig.uuid)
        with pytest.raises(UnknownDeviceError, match="/proc does not show MIG UUIDs"):
            resolve(request, procfs)


def test_with_nvml_migs_refuses_another_gpu_list(mock_machine: Callable[..., Path]) -> None:
    """NVML listing other GPUs than /proc: no mixed view (nvml_mig_view then asks nvml_view)."""
    root = str(mock_machine("dgx-a100"))
    found = mig_ids(Path(root) / LIB_DIR)
    view = from_procfs(read_driver(root))
    minors = read_mig_minors(root)
    mixed = with_nvml_migs(view, found, minors)
    assert mixed is not None and [m.uuid for m in mixed.gpus[0].migs] == [
        m.uuid for m in found[0].migs
    ]
    assert with_nvml_migs(view, found[1:], minors) is None
    assert with_nvml_migs(view, found[::-1], minors) is None
