"""The driver-file catalogue: which branches ship a library, and the mock kept in step."""

from __future__ import annotations

import pytest

from nvhook.discover import catalog
from nvhook.discover.catalog import LibrarySpec, driver_branch, expected
from nvhook.mock.profiles import driver_files


def _spec(stem: str) -> LibrarySpec:
    return next(s for specs in catalog.LIBRARIES.values() for s in specs if s.stem == stem)


def test_the_mock_installs_what_the_catalogue_says() -> None:
    """nvhook/mock/driver.toml and the catalogue agree on every library's capability,
    subdirectory, branches and 32-bit build, and on the binaries."""
    mock = {lib.stem: lib for lib in driver_files().libraries}
    ours = {s.stem: (cap, s) for cap, specs in catalog.LIBRARIES.items() for s in specs}
    assert set(mock) == set(ours)
    for stem, (cap, spec) in ours.items():
        lib = mock[stem]
        assert (lib.capability, lib.subdir, lib.since, lib.until, lib.compat32) == (
            cap,
            spec.subdir,
            spec.since,
            spec.until,
            spec.compat32,
        ), stem
        assert (lib.platform is not None) == spec.own_version, stem
    binaries = {b.name: b for b in driver_files().binaries}
    assert binaries.keys() == {n for names in catalog.BINARIES.values() for n in names}
    for name, binary in binaries.items():
        assert catalog.HOST_SPECIFIC.get(name) == binary.when, name


def test_32_bit_copies_are_only_of_the_compat32_capabilities() -> None:
    for cap, specs in catalog.LIBRARIES.items():
        if cap not in catalog.COMPAT32_CAPABILITIES:
            assert not any(s.compat32 for s in specs), cap


@pytest.mark.parametrize(
    ("version", "branch"),
    [("550.54.15", 550), ("470.256.02", 470), ("1", 1), (None, None), ("x.1", None)],
)
def test_driver_branch(version: str | None, branch: int | None) -> None:
    assert driver_branch(version) == branch


@pytest.mark.parametrize(
    ("stem", "version", "bits", "shipped"),
    [
        ("libnvidia-fatbinaryloader.so", "440.118.02", 64, True),
        ("libnvidia-fatbinaryloader.so", "450.51.05", 64, False),
        ("libnvidia-ifr.so", "470.256.02", 32, True),
        ("libnvidia-ifr.so", "535.230.02", 64, False),
        ("libnvidia-tileiras.so", "550.54.15", 64, False),
        ("libnvidia-tileiras.so", "580.65.06", 32, True),
        ("libnvidia-vulkan-producer.so", "550.54.15", 64, True),
        ("libnvidia-vulkan-producer.so", "570.133.20", 64, False),
        ("libnvidia-cfg.so", "550.54.15", 32, False),  # NVIDIA builds no 32-bit copy
        ("libnvidia-cfg.so", None, 32, False),
        ("libcuda.so", "550.54.15", 32, True),
        ("libnvidia-tileiras.so", None, 64, True),  # unknown version: expect everything
    ],
)
def test_expected(stem: str, version: str | None, bits: int, shipped: bool) -> None:
    assert expected(_spec(stem), version, bits=bits) is shipped
