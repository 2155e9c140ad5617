"""Real-container test harness: rootfs, bundles, runc, podman, containerd, a capturing runtime.

This module is the pytest plugin (fixtures and the ``root`` marker) and the one import for
tests; the helpers live in :mod:`tests.support.basics` (requirements, commands, ids),
:mod:`~tests.support.bundles`, :mod:`~tests.support.runc`, :mod:`~tests.support.images`,
:mod:`~tests.support.podman`, :mod:`~tests.support.containerd`,
:mod:`~tests.support.capture` and :mod:`~tests.support.cdi`. Each states the facts of the
test machine it relies on; docs/facts.md ("This VM, for tests") lists them.

Plain functions and classes::

    require(tool) -> str                  absolute path of a tool, or skip (fail under CI=…)
    require_root() -> None                skip unless root (fail under CI=…)
    busybox_rootfs(dest) -> Path          a static-busybox rootfs (cached template, copied)
    make_bundle(dir, args, env=None, …)   rootfs + config.json from `runc spec`, edited
    char_device(path, major, minor)       a linux.devices entry
    allow_device(major, minor)            a linux.resources.devices allow rule
    Runc(root, binary="runc")             run / create / start / state / kill / delete / cleanup
    busybox_image_tar(dir) -> Path        docker-archive of localhost/busybox:latest (umoci+skopeo)
    Podman(workdir)                       private podman: load / run / cmd / cleanup
    Containerd(workdir, cri=False, env=…) private containerd: start / ctr / import_image / run
    CaptureRuntime.create(dir, real=…)    a runc wrapper that keeps each created config.json
    cdi_spec(spec, name)                  context manager: a CDI spec file in /var/run/cdi
    unique_id(prefix) -> str              unique across tests and concurrent pytest processes

Fixtures (register with ``pytest_plugins = ["tests.support.containers"]`` in a top conftest)::

    need_root                 require_root()
    runc                      Runc under tmp_path; every container it made is force-deleted after
    busybox_image  (session)  Path of the docker-archive tar
    podman         (session)  Podman with localhost/busybox:latest loaded
    containerd     (session)  started Containerd with localhost/busybox:latest imported
    capture_runtime           CaptureRuntime wrapping the real runc, under tmp_path

A test marked ``@pytest.mark.root`` is skipped (failed under CI) when not run as root.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.basics import in_ci, require, require_root, unique_id
from tests.support.bundles import allow_device, busybox_rootfs, char_device, make_bundle
from tests.support.capture import CaptureRuntime
from tests.support.cdi import cdi_spec
from tests.support.containerd import Containerd
from tests.support.images import BUSYBOX_IMAGE, busybox_image_tar
from tests.support.podman import Podman
from tests.support.runc import Runc

__all__ = [
    "BUSYBOX_IMAGE",
    "CaptureRuntime",
    "Containerd",
    "Podman",
    "Runc",
    "allow_device",
    "busybox_image",
    "busybox_image_tar",
    "busybox_rootfs",
    "capture_runtime",
    "cdi_spec",
    "char_device",
    "containerd",
    "in_ci",
    "make_bundle",
    "need_root",
    "podman",
    "pytest_runtest_setup",
    "require",
    "require_root",
    "runc",
    "unique_id",
]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``root`` is skipped (CI: failed) when not run as root."""
    if item.get_closest_marker("root") is not None:
        require_root()


@pytest.fixture
def need_root() -> None:
    require_root()


@pytest.fixture
def runc(tmp_path: Path) -> Iterator[Runc]:
    """A :class:`Runc` for real runc, state under tmp_path; its containers are deleted after."""
    require_root()
    helper = Runc(tmp_path / "runc-root")
    try:
        yield helper
    finally:
        helper.cleanup()


@pytest.fixture(scope="session")
def busybox_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docker-archive tar holding ``localhost/busybox:latest``, built once per session."""
    require_root()
    return busybox_image_tar(tmp_path_factory.mktemp("busybox-image"))


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory, busybox_image: Path) -> Iterator[Podman]:
    """A private :class:`Podman` with ``localhost/busybox:latest`` loaded (one per session)."""
    require("runc")
    helper = Podman(tmp_path_factory.mktemp("podman"))
    try:
        helper.load(busybox_image)
        yield helper
    finally:
        helper.cleanup()


@pytest.fixture(scope="session")
def containerd(
    tmp_path_factory: pytest.TempPathFactory, busybox_image: Path
) -> Iterator[Containerd]:
    """A started private :class:`Containerd` (no CRI) with ``localhost/busybox:latest``."""
    require("runc")
    helper = Containerd(tmp_path_factory.mktemp("containerd"))
    with helper:
        helper.import_image(busybox_image)
        yield helper


@pytest.fixture
def capture_runtime(tmp_path: Path) -> CaptureRuntime:
    """A :class:`CaptureRuntime` around the real runc, under tmp_path."""
    return CaptureRuntime.create(tmp_path / "capture")
