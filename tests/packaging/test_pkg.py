"""packaging/build.sh: a .deb and an .rpm per architecture, the same files, installable offline
with any supported interpreter.

Checked here without installing (dpkg-deb, rpm -qp, pip's resolver over each package's
wheelhouse); the .deb is installed on this machine by test_deb.py and in a Debian 13 root by
test_trixie.py, whose root also runs the .rpm's scriptlets.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging.conftest import ARCHES, PACKAGING, PY_VERSIONS
from tests.support.containers import require

pytestmark = pytest.mark.slow  # the wheelhouse is fetched, then pip resolves six times

#: Directories the .deb lists because they hold its files; the distribution owns them.
SYSTEM_DIRS = {
    "/etc",
    "/usr",
    "/usr/bin",
    "/usr/lib",
    "/usr/lib/systemd",
    "/usr/lib/systemd/system",
    "/usr/share",
    "/usr/share/doc",
}
SCRIPTS = {  # nfpm.yaml's scripts: rpm's scriptlet names -> the file
    "preinstall": "rpm/pre",
    "postinstall": "rpm/post",
    "preuninstall": "rpm/preun",
    "postuninstall": "rpm/postun",
}


def out(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def deb_files(deb: Path) -> set[str]:
    names = set()
    for line in out("dpkg-deb", "--contents", str(deb)).splitlines():
        name = line.split(None, 5)[5].split(" -> ")[0]
        names.add("/" + name.removeprefix("./").rstrip("/"))
    return names - {"/"}


def rpm_query(rpm: Path, *args: str) -> str:
    return out(require("rpm"), "-qp", *args, str(rpm))


def test_names_and_versions(packages: dict[str, Path], wheelhouse: Path) -> None:
    version = next(wheelhouse.glob("nvhook-*.whl")).name.split("-")[1]
    for arch, machine in ARCHES.items():
        assert packages[f"deb-{arch}"].name == f"nvhook_{version}-1_{arch}.deb"
        assert packages[f"rpm-{arch}"].name == f"nvhook-{version}-1.{machine}.rpm"
        deb = packages[f"deb-{arch}"]
        assert out("dpkg-deb", "--field", str(deb), "Architecture").strip() == arch
        assert rpm_query(packages[f"rpm-{arch}"], "--qf", "%{ARCH} %{VERSION}") == (
            f"{machine} {version}"
        )


def test_any_supported_interpreter_satisfies_the_dependencies(packages: dict[str, Path]) -> None:
    """No upper pin on one minor version: each of 3.11, 3.12, 3.13, 3.14 is an alternative."""
    for arch in ARCHES:
        depends = out("dpkg-deb", "--field", str(packages[f"deb-{arch}"]), "Depends").strip()
        assert depends == " | ".join(f"python{v}" for v in reversed(PY_VERSIONS))
        requires = rpm_query(packages[f"rpm-{arch}"], "--requires").splitlines()
        rich = " or ".join(f"/usr/bin/python{v}" for v in reversed(PY_VERSIONS))
        assert f"({rich})" in requires
        assert not [r for r in requires if "python" in r and "<" in r]


def test_the_deb_and_the_rpm_carry_the_same_files(packages: dict[str, Path]) -> None:
    for arch in ARCHES:
        deb = deb_files(packages[f"deb-{arch}"])
        rpm = set(rpm_query(packages[f"rpm-{arch}"], "--list").splitlines())
        assert rpm == deb - SYSTEM_DIRS
        assert "/usr/lib/nvhook/setup" in rpm
        assert "/usr/lib/systemd/system/nvhook-cdi-refresh.path" in rpm
        assert {"/usr/bin/nvhook", "/usr/bin/nvhook-runtime", "/usr/bin/nvhook-hook"} <= rpm
    # the config is a conffile / %config(noreplace) in both
    deb = packages["deb-amd64"]
    conffiles = subprocess.run(
        ["dpkg-deb", "--info", str(deb), "conffiles"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert conffiles == ["/etc/nvhook/config.toml"]
    flags = rpm_query(packages["rpm-amd64"], "--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]")
    assert "cn /etc/nvhook/config.toml" in flags.splitlines()


def test_the_rpm_scriptlets_are_packaging_rpm(packages: dict[str, Path]) -> None:
    scripts = rpm_query(packages["rpm-arm64"], "--scripts")
    for name, file in SCRIPTS.items():
        text = (PACKAGING / file).read_text()
        assert f"{name} scriptlet (using /bin/sh):\n{text}" in scripts, name
    for script in ("preinst", "postinst", "prerm", "postrm"):
        deb = subprocess.run(
            ["dpkg-deb", "--info", str(packages["deb-arm64"]), script],
            capture_output=True,
            check=True,
        ).stdout
        assert deb == (PACKAGING / "deb" / script).read_bytes()


@pytest.mark.parametrize("arch", list(ARCHES))
def test_the_wheelhouse_installs_offline_with_each_interpreter(
    packages: dict[str, Path], arch: str, tmp_path: Path
) -> None:
    """pip resolves nvhook from the package's wheels alone, for each interpreter on its
    architecture, and the package holds no other architecture's wheels."""
    machine = ARCHES[arch]
    subprocess.run(["dpkg-deb", "-x", str(packages[f"deb-{arch}"]), str(tmp_path)], check=True)
    wheels = tmp_path / "usr/lib/nvhook/wheels"
    names = sorted(p.name for p in wheels.iterdir())
    other = next(m for m in ARCHES.values() if m != machine)
    assert not [n for n in names if other in n]
    compiled = [n for n in names if not n.endswith("-any.whl")]
    projects = {n.split("-")[0] for n in compiled}
    assert {"pyyaml", "rpds_py"} <= projects
    for v in PY_VERSIONS:
        tag = "cp" + v.replace(".", "")
        # each compiled dependency for each interpreter: its own build, or a stable-ABI one
        built = {n.split("-")[0] for n in compiled if f"-{tag}-" in n or "-abi3-" in n}
        assert built == projects, f"{v}: no wheel of {sorted(projects - built)}"
        report = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-",
             "--no-index", "--find-links", str(wheels), "--only-binary=:all:",
             "--implementation", "cp", "--python-version", v, "--abi", tag,
             "--platform", f"manylinux2014_{machine}", "--target", str(tmp_path / "t"),
             "--isolated", "--disable-pip-version-check", "nvhook"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert report.returncode == 0, f"{v} on {machine}: {report.stderr}"
        items = json.loads(report.stdout)["install"]
        installed = [item["download_info"]["url"].rpartition("/")[2] for item in items]
        assert any(n.startswith("nvhook-") for n in installed), installed
        assert any(n.startswith("pyyaml-") and f"-{tag}-" in n for n in installed), installed
