"""A second interpreter: the .deb installed in Debian 13 (trixie, Python 3.13) with apt, and
the .rpm's scriptlets run there by rpm.

The root comes from the Debian archive (mmdebstrap, cached: tests/packaging/debianroot.py); each
test works on an overlay of it and chroots in. The mock GPU machine is laid out from here (its
stub driver is compiled with this machine's gcc) into the overlay at /mock, and the packaged
programs run against it there: `nvhook info`, `nvhook cdi generate`, and `nvhook-runtime`
passing a call through to a stand-in runtime and editing a GPU container's config.json before
handing it over. The settings cache they write carries Python 3.13's tag, beside this
machine's 3.11 one in the same directory: neither reads the other's marshal data.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvhook.constants import VERSION
from nvhook.mock import create, load_profile
from tests.packaging.debianroot import chroot, debian_root, ok, scratch_copy
from tests.support.containers import make_bundle, require

pytestmark = [pytest.mark.root, pytest.mark.slow]

SUITE = "trixie"
#: nvhook-runtime --version: nvhook's version, then the (stand-in) runtime's.
VERSION_LINES = f"nvhook-runtime version {VERSION}\nstand-in runtime 1.0\n"
PYTHON = "3.13"
PROFILE = "h100-pcie"
STAND_IN = """#!/bin/sh
# a stand-in for runc: records its arguments, keeps the config.json of a create
echo "$*" >>/tmp/stand-in.argv
case "$1" in
    --version) echo "stand-in runtime 1.0" ;;
    create) cp "$3/config.json" /tmp/created.json ;;
esac
"""


def with_stand_in(root: Path) -> dict[str, str]:
    """:data:`STAND_IN` as ``root``'s runtime behind nvhook-runtime, the mock at /mock: the
    environment that points nvhook-runtime at it."""
    stand_in = root / "usr/local/bin/stand-in"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    (root / "tmp/nvhook.toml").write_text(
        '[runtime]\nruntimes = ["/usr/local/bin/stand-in"]\nlog_file = "/tmp/shim.log"\n'
        '[host]\nroot = "/mock"\n'
    )
    return {"NVHOOK_CONFIG": "/tmp/nvhook.toml", "NVHOOK_CACHE_DIR": "/tmp/cache"}


@pytest.fixture(scope="module")
def trixie() -> Path:
    require("mmdebstrap")
    return debian_root(SUITE, ("python3",))


@pytest.fixture
def root(trixie: Path, tmp_path: Path) -> Iterator[Path]:
    with scratch_copy(trixie, tmp_path / "overlay") as merged:
        yield merged


def test_the_root_has_the_second_interpreter(root: Path) -> None:
    out = ok(chroot(root, "python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'"))
    assert out == f"{PYTHON}\n"


def test_deb_on_debian_13(root: Path, packages: dict[str, Path], tmp_path: Path) -> None:
    deb = packages["deb-amd64"]
    shutil.copy2(deb, root / "tmp" / deb.name)
    # apt, offline: the dependency (python3.13) is there, the wheels are in the package
    ok(chroot(root, f"apt-get install -y -q /tmp/{deb.name}", timeout=600))
    cfg = (root / "opt/nvhook/pyvenv.cfg").read_text().splitlines()
    assert "home = /usr/bin" in cfg and any(x.startswith(f"version = {PYTHON}.") for x in cfg)
    out = ok(chroot(root, "/opt/nvhook/bin/python -c 'import sys, yaml, rpds; print(sys.version)'"))
    assert out.startswith(f"{PYTHON}.")
    assert ok(chroot(root, "nvhook --version")).startswith("nvhook, version ")
    # the package's native front-end (static) in front of the Python launcher
    for name in ("nvhook-runtime", "nvhook-hook"):
        assert (root / f"opt/nvhook/bin/{name}").read_bytes()[:4] == b"\x7fELF"
        first = (root / f"opt/nvhook/bin/{name}.py").read_text().splitlines()[0]
        assert first.startswith("#!/opt/nvhook/bin/python -I")

    # the mock machine, laid out from here into the root
    create(PROFILE, root / "mock", nodes="char")
    profile = load_profile(PROFILE)
    info = json.loads(ok(chroot(root, "nvhook info --root /mock --json")))
    assert info["driver"]["version"] == profile.driver.version
    assert len(info["gpus"]) == len(profile.gpus)
    spec = json.loads(ok(chroot(root, "nvhook cdi generate --root /mock --output -")))
    assert spec["kind"] == "nvidia.com/gpu"
    mounts = [m["hostPath"] for m in spec["containerEdits"]["mounts"]]
    assert f"/mock/usr/lib/x86_64-linux-gnu/libcuda.so.{profile.driver.version}" in mounts

    # nvhook-runtime in front of a stand-in runtime
    env = with_stand_in(root)
    assert ok(chroot(root, "nvhook-runtime --version", env)) == VERSION_LINES
    ok(chroot(root, "nvhook-runtime --root /run/x state ctr-1", env))
    make_bundle(root / "tmp/bundle", ["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    original = (root / "tmp/bundle/config.json").read_bytes()
    ok(chroot(root, "nvhook-runtime create --bundle /tmp/bundle ctr-2", env))
    argv = (root / "tmp/stand-in.argv").read_text().splitlines()
    assert argv == ["--version", "--root /run/x state ctr-1", "create --bundle /tmp/bundle ctr-2"]
    created = json.loads((root / "tmp/created.json").read_text())
    assert created != json.loads(original)
    assert [d["path"] for d in created["linux"]["devices"] if d["path"] == "/dev/nvidia0"]
    sources = [m.get("source", "") for m in created["mounts"]]
    assert f"/mock/usr/lib/x86_64-linux-gnu/libcuda.so.{profile.driver.version}" in sources
    hooks = [h["path"] for hs in created.get("hooks", {}).values() for h in hs]
    assert hooks and all(h.startswith("/opt/nvhook/bin/nvhook-hook") for h in hooks), hooks
    # its caches are 3.13's; this machine's 3.11 writes its own beside them, reading neither
    # (the front-end's data files beside them are text, the same whichever Python wrote them)
    tags = {p.name.split(".")[-2] for p in (root / "tmp/cache").glob("*.marshal")}
    assert tags == {"py313"}
    (root / "tmp/host.toml").write_text('[runtime]\nruntimes = ["/bin/true"]\n')
    shim = Path(sys.executable).parent / "nvhook-runtime"  # this checkout's, on Python 3.11
    host_env = {"NVHOOK_CONFIG": str(root / "tmp/host.toml"),
                "NVHOOK_CACHE_DIR": str(root / "tmp/cache"), "PATH": "/usr/bin:/bin"}  # fmt: skip
    subprocess.run([str(shim), "--version"], env=host_env, check=True)
    tags = sorted(p.name.split(".")[-2] for p in (root / "tmp/cache").glob("*.marshal"))
    assert tags == ["py311", "py313"], tags
    assert ok(chroot(root, "nvhook-runtime --version", env)) == VERSION_LINES

    ok(chroot(root, "apt-get purge -y -q nvhook", timeout=600))
    assert not (root / "opt/nvhook").exists()
    assert not (root / "usr/bin/nvhook").exists()


def test_rpm_scriptlets_on_debian_13(root: Path, packages: dict[str, Path]) -> None:
    """rpm installs and erases the .rpm in the root: its %pre/%post make the venv with the
    root's Python 3.13 (no systemd there: the units are left alone), %preun/%postun remove it."""
    rpm = [require("rpm"), "--root", str(root), "--dbpath", "/var/lib/rpm"]
    subprocess.run([*rpm, "--initdb"], capture_output=True, check=True)
    # --nodeps: the root's interpreter is dpkg's, which rpm's database does not know
    install = subprocess.run(
        [*rpm, "--install", "--nodeps", "--force-debian", str(packages["rpm-amd64"])],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    assert "nvhook: /opt/nvhook made with /usr/bin/python3 (3.13)" in install.stderr
    assert ok(chroot(root, "nvhook --version")).startswith("nvhook, version ")
    assert (root / "etc/nvhook/config.toml").is_file()
    erase = subprocess.run([*rpm, "--erase", "--nodeps", "--force-debian", "nvhook"],
                           capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert erase.returncode == 0, erase.stderr
    assert not (root / "opt/nvhook").exists()
    assert not (root / "usr/lib/nvhook").exists()
    assert not (root / "usr/bin/nvhook").exists()
    (root / "opt/nvhook").mkdir()  # %pre refuses to install over an /opt/nvhook not its own
    refused = subprocess.run(
        [*rpm, "--install", "--nodeps", "--force-debian", str(packages["rpm-amd64"])],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "/opt/nvhook exists and this package did not make it" in refused.stderr
    assert not (root / "usr/lib/nvhook").exists()


#: The tests of the code that drives interpreter internals: CPython's _json scanner and
#: encoder (oci/jsoncodec.py) and the marshal caches (oci/_cache.py).
INTERNALS = ["tests/oci/test_jsoncodec.py", "tests/oci/test_json_roundtrip.py",
             "tests/oci/test_cache.py"]  # fmt: skip


def test_the_internals_tests_pass_on_python_3_13(
    root: Path, wheelhouse: Path, tmp_path: Path
) -> None:
    """pytest, in the root's Python 3.13, over this checkout's tests of the code that drives
    interpreter internals; nvhook and its dependencies from the wheelhouse, pytest's from the
    package index (pip's cache keeps them)."""
    wheels = root / "tmp/wheels"
    shutil.copytree(wheelhouse, wheels)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
         "--python-version", PYTHON, "--implementation", "cp", "--dest", str(wheels),
         "--disable-pip-version-check", "pytest", "hypothesis", "packaging",
         "pytest-subprocess"],
        check=True, timeout=300,
    )  # fmt: skip
    checkout = Path(__file__).parents[2]
    (root / "checkout").mkdir()
    subprocess.run(["mount", "--bind", "-o", "ro", str(checkout), str(root / "checkout")],
                   check=True)  # fmt: skip
    try:
        ok(chroot(root, "python3 -m venv --without-pip /tmp/venv && "
                  "/tmp/venv/bin/python $(ls /tmp/wheels/pip-*.whl)/pip install --quiet --no-index "
                  "--find-links /tmp/wheels nvhook pytest hypothesis packaging pytest-subprocess",
                  timeout=600))  # fmt: skip
        env = {"PYTHONDONTWRITEBYTECODE": "1", "HYPOTHESIS_STORAGE_DIRECTORY": "/tmp/hypothesis"}
        proc = chroot(root, "cd /checkout && /tmp/venv/bin/python -m pytest -q -p no:cacheprovider "
                      f"-o addopts= {' '.join(INTERNALS)}", env, timeout=600)  # fmt: skip
    finally:
        subprocess.run(["umount", "--lazy", str(root / "checkout")], check=False)
    out = ok(proc)
    assert " passed" in out and " failed" not in out, out
