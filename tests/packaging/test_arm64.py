"""The arm64 .deb installed and run: a Debian 12 arm64 root (Python 3.11 for aarch64), its
programs run by qemu-user through the kernel's binfmt_misc.

The packages for arm64 are built here like the amd64 ones (packaging/build.sh, the wheels of
every dependency for aarch64, the native front-end cross-compiled by gcc-aarch64-linux-gnu).
This test proves they install and work on an aarch64 userland, as far as emulation can: apt
installs the .deb offline, its setup makes /opt/nvhook with the root's aarch64 interpreter
from the carried aarch64 wheels (rpds-py's compiled extension among them), and the installed
programs run against the aarch64 ``gh200`` mock (laid out from here into the root at /mock):
`nvhook info`, `nvhook cdi generate`, and the aarch64 native front-end of `nvhook-runtime`
passing a call through to a stand-in runtime and handing a GPU create to the Python shim,
which edits config.json with the aarch64 library paths. What emulation cannot show: a real
Grace kernel, NVIDIA's aarch64 driver, real GPUs.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvhook.constants import VERSION
from nvhook.mock import create, load_profile
from tests.packaging.debianroot import (
    check_native_hook,
    chroot,
    debian_root,
    ok,
    require_foreign,
    scratch_copy,
)
from tests.packaging.test_trixie import VERSION_LINES, with_stand_in
from tests.support.containers import make_bundle, require

pytestmark = [pytest.mark.root, pytest.mark.slow]

ARCH = "arm64"
PROFILE = "gh200"
LIBDIR = "/usr/lib/aarch64-linux-gnu"
EM_AARCH64 = 183
#: The arm64 root: python3 for the .deb, and what tests/packaging/test_installer_arm64.py needs
#: to build the installer's bundle in it (one arm64 root to make, not two: ~2.5 min each)
ROOT_PACKAGES = ("python3", "patchelf", "busybox-static", "file")


@pytest.fixture(scope="module")
def arm64_root() -> Path:
    require("mmdebstrap")
    require_foreign(ARCH)
    return debian_root("bookworm", ROOT_PACKAGES, arch=ARCH)


@pytest.fixture
def root(arm64_root: Path, tmp_path: Path) -> Iterator[Path]:
    with scratch_copy(arm64_root, tmp_path / "overlay") as merged:
        yield merged


def elf_machine(path: Path) -> int:
    """``e_machine`` of an ELF file (little-endian)."""
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", path
    return int(struct.unpack_from("<H", head, 18)[0])


def test_deb_on_debian_12_arm64(root: Path, packages: dict[str, Path]) -> None:
    machine = ok(chroot(root, "python3 -c 'import platform; print(platform.machine())'"))
    assert machine == "aarch64\n"  # the root's interpreter is aarch64, run by qemu-user
    deb = packages["deb-arm64"]
    shutil.copy2(deb, root / "tmp" / deb.name)
    ok(chroot(root, f"apt-get install -y -q /tmp/{deb.name}", timeout=900))
    probe = "import platform, yaml, rpds.rpds as r; print(platform.machine(), r.__file__)"
    out = ok(chroot(root, f"/opt/nvhook/bin/python -c '{probe}'"))
    arch, extension = out.split()
    assert arch == "aarch64"
    assert elf_machine(root / extension.lstrip("/")) == EM_AARCH64  # the aarch64 wheel's .so
    assert ok(chroot(root, "nvhook --version")).startswith("nvhook, version ")
    front_end = root / "opt/nvhook/bin/nvhook-runtime"
    assert elf_machine(front_end) == EM_AARCH64  # cross-compiled, shipped in the package

    create(PROFILE, root / "mock", nodes="char")
    profile = load_profile(PROFILE)
    info = json.loads(ok(chroot(root, "nvhook info --root /mock --json")))
    assert info["driver"]["version"] == profile.driver.version
    assert [g["uuid"] for g in info["gpus"]] == [g.uuid for g in profile.gpus]
    spec = json.loads(ok(chroot(root, "nvhook cdi generate --root /mock --output -")))
    mounts = [m["hostPath"] for m in spec["containerEdits"]["mounts"]]
    libcuda = f"/mock{LIBDIR}/libcuda.so.{profile.driver.version}"
    assert libcuda in mounts
    assert not [m for m in mounts if "x86_64" in m or "/lib32/" in m or "i386" in m], mounts

    env = with_stand_in(root)
    assert ok(chroot(root, "nvhook-runtime --version", env)) == VERSION_LINES
    assert VERSION in VERSION_LINES
    ok(chroot(root, "nvhook-runtime --root /run/x state ctr-1", env))
    make_bundle(root / "tmp/bundle", ["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    original = json.loads((root / "tmp/bundle/config.json").read_text())
    ok(chroot(root, "nvhook-runtime create --bundle /tmp/bundle ctr-2", env))
    argv = (root / "tmp/stand-in.argv").read_text().splitlines()
    assert argv == ["--version", "--root /run/x state ctr-1", "create --bundle /tmp/bundle ctr-2"]
    created = json.loads((root / "tmp/created.json").read_text())
    assert created != original
    assert "/dev/nvidia0" in [d["path"] for d in created["linux"]["devices"]]
    assert libcuda in [m.get("source", "") for m in created["mounts"]]
    hooks = [h["path"] for hs in created.get("hooks", {}).values() for h in hs]
    assert hooks and all(h == "/opt/nvhook/bin/nvhook-hook" for h in hooks), hooks

    # the aarch64 native hook (qemu-user 7.2 has no openat2: it hands over to Python)
    assert elf_machine(root / "opt/nvhook/bin/nvhook-hook") == EM_AARCH64
    check_native_hook(root, LIBDIR, openat2=False)

    ok(chroot(root, "apt-get purge -y -q nvhook", timeout=600))
    assert not (root / "opt/nvhook").exists()


def test_rpm_scriptlets_on_debian_12_arm64(root: Path, packages: dict[str, Path]) -> None:
    """This machine's rpm installs and erases the aarch64 .rpm in the arm64 root: its %post
    makes the venv with the root's aarch64 Python from the aarch64 wheels it carries (the
    scriptlets run in the root, under qemu-user), %preun/%postun remove it."""
    rpm = [require("rpm"), "--root", str(root), "--dbpath", "/var/lib/rpm"]
    subprocess.run([*rpm, "--initdb"], capture_output=True, check=True)
    # --nodeps: the root's interpreter is dpkg's; --ignorearch: rpm here is x86_64's
    flags = ["--nodeps", "--force-debian", "--ignorearch"]
    install = subprocess.run([*rpm, "--install", *flags, str(packages["rpm-arm64"])],
                             capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    assert install.returncode == 0, install.stderr
    assert "nvhook: /opt/nvhook made with /usr/bin/python3 (3.11)" in install.stderr
    assert elf_machine(root / "opt/nvhook/bin/nvhook-runtime") == EM_AARCH64
    assert elf_machine(root / "opt/nvhook/bin/nvhook-hook") == EM_AARCH64
    machine = ok(
        chroot(root, "/opt/nvhook/bin/python -c 'import platform; print(platform.machine())'")
    )
    assert machine == "aarch64\n"
    assert ok(chroot(root, "nvhook --version")).startswith("nvhook, version ")
    erase = subprocess.run([*rpm, "--erase", *flags[:2], "nvhook"],
                           capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert erase.returncode == 0, erase.stderr
    assert not (root / "opt/nvhook").exists()
    assert not (root / "usr/bin/nvhook").exists()
