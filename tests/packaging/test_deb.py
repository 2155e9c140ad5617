"""The Debian package: built with packaging/build.sh, installed on this machine with dpkg,
used (a container gets a mock GPU through /usr/bin/nvhook-runtime), removed and purged.

This changes the machine, so the test runs only where nvhook is not installed in any form
(otherwise it skips, and under CI, whose machine is fresh, fails), purges the package whatever
happens, and puts back the two files the purge deletes that may predate it (the runtime's log
and settings cache, which nvhook run from a checkout also writes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvhook.mock import load_profile
from tests.e2e.conftest import PROBE_ARGS, expected_smi_uuids, parse_probe, probe_rootfs
from tests.packaging.conftest import PACKAGING
from tests.support.containers import Runc, in_ci, make_bundle, require, require_root

pytestmark = [pytest.mark.runtime, pytest.mark.root, pytest.mark.slow]

PACKAGE = "nvhook"
PREFIX = Path("/opt/nvhook")
LINKS = [Path("/usr/bin") / name for name in ("nvhook", "nvhook-runtime", "nvhook-hook")]
#: What the package or its scripts make; none may exist before the test.
OURS = [
    PREFIX,
    *LINKS,
    Path("/etc/nvhook"),
    Path("/usr/lib/nvhook"),
    Path("/usr/share/nvhook"),
    Path("/usr/share/doc/nvhook"),
    Path("/usr/lib/systemd/system/nvhook-cdi-refresh.service"),
    Path("/usr/lib/systemd/system/nvhook-cdi-refresh.path"),
]
#: What the purge deletes that nvhook run from a checkout may have made: saved and restored.
SHARED = [Path("/var/log/nvhook-runtime.log"), Path("/run/nvhook")]
#: Where deb-systemd-helper and systemctl leave enablement and masks.
SYSTEMD_STATE = [
    Path("/etc/systemd/system"),
    Path("/var/lib/systemd/deb-systemd-helper-enabled"),
    Path("/var/lib/systemd/deb-systemd-helper-masked"),
]
PROFILE = "h100-pcie"


def dpkg_status() -> str:
    """``installed``, ``config-files``, …, or ``not-installed`` (also when dpkg never knew it)."""
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Status}", PACKAGE],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "not-installed"


def dpkg(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run dpkg, waiting (up to 5 min) while another package manager holds its lock."""
    deadline = time.monotonic() + 300
    while True:
        proc = subprocess.run(
            ["dpkg", *args], capture_output=True, text=True, timeout=600, check=False
        )
        if proc.returncode == 0 or "lock" not in proc.stderr or time.monotonic() > deadline:
            break
        time.sleep(2)
    if check and proc.returncode != 0:
        pytest.fail(
            f"dpkg {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}",
            pytrace=False,
        )
    return proc


def systemd_leftovers() -> list[str]:
    return sorted(str(p) for top in SYSTEMD_STATE if top.is_dir() for p in top.rglob("*nvhook*"))


def nothing_of_ours(what: str) -> None:
    """Skip (fail under CI) unless this machine has no trace of nvhook."""
    present = [str(p) for p in OURS if os.path.lexists(p)] + systemd_leftovers()
    status = dpkg_status()
    if status != "not-installed":
        present.append(f"dpkg status of {PACKAGE}: {status}")
    if present:
        reason = (
            f"{what}: nvhook is installed here, or an earlier run of this test was cut short "
            f"({', '.join(present)}); `dpkg --purge {PACKAGE}` and remove the rest, then rerun"
        )
        if in_ci():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


@pytest.fixture
def saved_shared(tmp_path: Path) -> Iterator[None]:
    """Put back the shared files the purge deletes, as they were."""
    backup = tmp_path / "shared-backup"
    saved: list[tuple[Path, Path]] = []
    for path in SHARED:
        if os.path.lexists(path):
            copy = backup / path.relative_to("/")
            copy.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                shutil.copytree(path, copy, symlinks=True)
            else:
                shutil.copy2(path, copy)
            saved.append((path, copy))
    try:
        yield
    finally:
        for path, copy in saved:
            if not os.path.lexists(path):
                if copy.is_dir():
                    shutil.copytree(copy, path, symlinks=True)
                else:
                    shutil.copy2(copy, path)


def field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "--field", str(deb), name], capture_output=True, text=True, check=True
    ).stdout.strip()


def run_gpu_container(tmp_path: Path, runc: str) -> str:
    """A busybox container asking for GPU 0 of a mock H100, through /usr/bin/nvhook-runtime."""
    machine = tmp_path / "machine"
    subprocess.run(
        [
            "/usr/bin/nvhook",
            "mock",
            "create",
            "--profile",
            PROFILE,
            "--nodes",
            "char",
            str(machine),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    config = tmp_path / "config.toml"
    config.write_text(
        f'[runtime]\nruntimes = ["{runc}"]\nlog_file = "{tmp_path}/shim.log"\n'
        f'[host]\nroot = "{machine}"\n'
    )
    env = {
        **os.environ,
        "NVHOOK_CONFIG": str(config),
        "NVHOOK_CACHE_DIR": str(tmp_path / "cache"),
    }
    busybox = tmp_path / "busybox"
    shutil.copy2(require("/usr/bin/busybox"), busybox)
    bundle = make_bundle(
        tmp_path / "bundle",
        PROBE_ARGS,
        ["NVIDIA_VISIBLE_DEVICES=0"],
        rootfs=probe_rootfs(tmp_path / "bundle" / "rootfs", busybox),
    )
    shim = Runc(tmp_path / "state", binary="/usr/bin/nvhook-runtime", env=env)
    try:
        result = shim.run(bundle)
    finally:
        shim.cleanup()
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_install_use_remove_purge(
    tmp_path: Path, wheelhouse: Path, packages: dict[str, Path], saved_shared: None
) -> None:
    require("dpkg-deb")
    require_root()
    runc = require("runc")
    require("gcc")  # the mock machine's stub driver is compiled
    nothing_of_ours("before installing")
    deb = packages["deb-amd64"]
    version = next(wheelhouse.glob("nvhook-*.whl")).name.split("-")[1]
    assert field(deb, "Depends") == "python3.14 | python3.13 | python3.12 | python3.11"
    foreign = PREFIX / "not-the-package's"
    try:
        # an /opt/nvhook the package did not make is refused, and left alone
        PREFIX.mkdir()
        foreign.write_text("made by hand\n")
        refused = dpkg("--install", str(deb), check=False)
        assert refused.returncode != 0
        assert "/opt/nvhook exists and this package did not make it" in refused.stderr
        assert dpkg_status() == "not-installed"
        assert foreign.read_text() == "made by hand\n"
        shutil.rmtree(PREFIX)

        dpkg("--install", str(deb))
        assert dpkg_status() == "installed"
        packaged = [
            line for line in dpkg("--listfiles", PACKAGE).stdout.splitlines() if "nvhook" in line
        ]

        # the programs, through the /usr/bin links
        for link in LINKS:
            assert os.readlink(link) == f"{PREFIX}/bin/{link.name}"
        for launcher in ("nvhook-runtime.py", "nvhook-hook.py"):
            first = (PREFIX / "bin" / launcher).read_text().splitlines()[0]
            assert first.startswith(f"#!{PREFIX}/bin/python -I"), first
        # the native front-end and hook, compiled with the package, in front of NAME.py
        for name in ("nvhook-runtime", "nvhook-hook"):
            assert f"/usr/lib/nvhook/{name}" in packaged
            front = (PREFIX / "bin" / name).read_bytes()
            assert front == Path(f"/usr/lib/nvhook/{name}").read_bytes()
            assert front[:4] == b"\x7fELF" and f"/opt/nvhook/bin/{name}.py\0".encode() in front
        assert os.path.realpath(PREFIX / "bin" / "python") == os.path.realpath("/usr/bin/python3")
        out = subprocess.run(["nvhook", "--version"], capture_output=True, text=True, check=True)
        assert out.stdout == f"nvhook, version {version}\n"
        # the runtime prints the package's version, then passes --version through to runc
        shim_version = subprocess.run(
            ["/usr/bin/nvhook-runtime", "--version"], capture_output=True, text=True, check=True
        )
        runc_version = subprocess.run([runc, "--version"], capture_output=True, text=True)
        ours = f"nvhook-runtime version {version}\n"
        assert shim_version.stdout == ours + runc_version.stdout
        assert runc_version.stdout.startswith("runc version ")
        # the conffile, the units (enabled), the manifests
        assert (
            Path("/etc/nvhook/config.toml").read_bytes() == (PACKAGING / "config.toml").read_bytes()
        )
        assert os.path.lexists(
            "/etc/systemd/system/multi-user.target.wants/nvhook-cdi-refresh.service"
        )
        assert os.path.lexists("/etc/systemd/system/paths.target.wants/nvhook-cdi-refresh.path")
        assert os.path.lexists("/etc/systemd/system/multi-user.target.wants/nvhook-watch.service")
        assert Path("/usr/share/nvhook/kubernetes/runtimeclass.yaml").is_file()

        # a container gets GPU 0 of the mock machine
        probe = parse_probe(run_gpu_container(tmp_path, runc))
        assert probe.gpu_uuids == expected_smi_uuids(load_profile(PROFILE), [0])
        assert probe.gpu_nodes == {"/dev/nvidia0"}

        dpkg("--remove", PACKAGE)
        assert dpkg_status() == "config-files"
        assert not PREFIX.exists()
        assert not [str(link) for link in LINKS if os.path.lexists(link)]
        assert Path("/etc/nvhook/config.toml").is_file()  # a conffile outlives remove

        dpkg("--purge", PACKAGE)
        assert dpkg_status() == "not-installed"
        left = [p for p in [*packaged, *map(str, OURS), *map(str, SHARED)] if os.path.lexists(p)]
        assert left == []
        assert systemd_leftovers() == []
    finally:
        if dpkg_status() != "not-installed":
            dpkg("--purge", PACKAGE, check=False)
        if foreign.exists():
            shutil.rmtree(PREFIX)
