"""The arm64 installer image, made and run here: its bundled CPython made on an aarch64
userland (a Debian 12 arm64 root run by qemu-user), its static busybox Debian's arm64 one,
and the DaemonSet's script run as its pod runs it against a Debian 12 **arm64** node root
without Python.

The same steps as tests/packaging/test_installer_image.py on this machine's architecture,
on the other one: ``packaging/python-bundle.sh`` runs inside the arm64 builder root (with
that root's python3, ldd and patchelf, as on an arm64 build machine), ``build.sh
FORMATS=image ARCHES=arm64`` stages the image's root from it, and the pod (the image's
aarch64 busybox, the node at /host) installs nvhook on the node with the bundle: the venv's
interpreter is the bundle's, its processes map only the bundle's libraries, ``nvhook info``,
``nvhook cdi generate`` and ``nvhook-runtime`` run there on the aarch64 ``gh200`` mock, and
the pod's stop uninstalls, leaving the node path for path as it was. What emulation cannot
show: a real arm64 kernel and machine.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.packaging.conftest import PACKAGING
from tests.packaging.debianroot import (
    cache_dir,
    chroot,
    debian_root,
    ok,
    require_foreign,
    scratch_copy,
)
from tests.packaging.test_arm64 import EM_AARCH64, ROOT_PACKAGES, elf_machine
from tests.packaging.test_installer_image import (
    check_bundled_install,
    check_nvhook_runs,
    daemonset,
    pod,
    pod_env,
    running_pod,
    stage_image,
    tree,
)
from tests.support.containers import require

pytestmark = [pytest.mark.root, pytest.mark.slow]

ARCH = "arm64"
MACHINE = "aarch64"
PROFILE = "gh200"


@pytest.fixture(scope="module")
def builder() -> Path:
    """A Debian 12 arm64 root to build on: python3, patchelf, busybox-static."""
    require("mmdebstrap")
    require_foreign(ARCH)
    return debian_root("bookworm", ROOT_PACKAGES, arch=ARCH)


@pytest.fixture(scope="module")
def arm64_bundle(builder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """python-bundle.sh run in the builder root, cached by the root and the script."""
    script = (PACKAGING / "python-bundle.sh").read_bytes()
    recipe = (builder / "etc/nvhook-test-recipe").read_bytes()
    digest = hashlib.sha256(recipe + script).hexdigest()[:12]
    cache = cache_dir()
    out = cache / f"python-bundle-{ARCH}-{digest}"
    with open(cache / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "BUNDLE").is_file():
            with scratch_copy(builder, tmp_path_factory.mktemp("builder")) as root:
                shutil.copy2(PACKAGING / "python-bundle.sh", root / "tmp/python-bundle.sh")
                ok(chroot(root, "bash /tmp/python-bundle.sh /tmp/bundle", timeout=900))
                shutil.rmtree(out, ignore_errors=True)
                shutil.copytree(root / "tmp/bundle", f"{out}.tmp", symlinks=True)
                Path(f"{out}.tmp").rename(out)
    return out


@pytest.fixture
def context(
    tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path, arm64_bundle: Path, builder: Path
) -> Path:
    """build.sh FORMATS=image ARCHES=arm64: the arm64 image's root, with Debian's arm64 busybox."""
    out = tmp_path_factory.mktemp("image-arm64")
    busybox = {f"BUSYBOX_{ARCH}": str(builder / "bin/busybox")}
    return stage_image(out, ARCH, wheelhouse, arm64_bundle, **busybox)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Path]:
    """A Debian 12 arm64 minbase root: bash, coreutils, …; no Python."""
    require_foreign(ARCH)
    lower = debian_root("bookworm", (), arch=ARCH)
    assert not list((lower / "usr/bin").glob("python*"))
    with scratch_copy(lower, tmp_path / "overlay") as merged:
        yield merged


def test_the_arm64_bundle_is_aarch64_with_its_own_loader(arm64_bundle: Path) -> None:
    facts = dict(line.split("=", 1) for line in (arm64_bundle / "BUNDLE").read_text().splitlines())
    assert facts["machine"] == MACHINE and facts["prefix"] == "/opt/nvhook/python"
    binary = next((arm64_bundle / "bin").glob("python3.*"))
    assert elf_machine(binary) == EM_AARCH64
    assert (arm64_bundle / "lib/ld-linux-aarch64.so.1").is_file()


def test_arm64_daemonset_installs_on_a_node_without_python_and_uninstalls(
    context: Path, node: Path, tmp_path: Path
) -> None:
    assert elf_machine(context / "bin/busybox") == EM_AARCH64  # the pod's shell: aarch64
    before = tree(node)
    script, _ = daemonset()
    log = tmp_path / "pod.log"
    env = pod_env(NVHOOK_UNINSTALL_ON_STOP="true")
    with pod(context, node, tmp_path) as root, running_pod(root, log, script, env) as installed:
        check_bundled_install(node, installed)
        check_nvhook_runs(node, PROFILE, MACHINE)
    stopped = log.read_text()[len(installed) :]
    assert "venv: removed /opt/nvhook" in stopped and "uninstalled" in stopped
    after = tree(node)
    assert {k: v for k, v in after.items() if v != before.get(k)} == {}
    assert set(before) - set(after) == set()
