"""The installer DaemonSet on a node without Python: packaging/python-bundle.sh's CPython, the
image's context that build.sh stages (FORMATS=image), the image built with podman, and the
DaemonSet's own script run as its pod runs it.

The node is a Debian 12 minbase root from the Debian archive (mmdebstrap, cached:
tests/packaging/debianroot.py) with no Python at all; each test works on an overlay of it. The
pod is the image's root (the staged context, which the Dockerfile copies as it is) with the
node's root bind-mounted at /host, entered with chroot: the script runs in the image's busybox
sh, checks the node with /nvhook/preflight, copies the stage and runs install.sh in the node's
bash, in a chroot, exactly as in a cluster. The bundle is made once per interpreter and
script (cached beside the Debian roots).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from nvhook.constants import VERSION
from nvhook.mock import create, load_profile
from tests.packaging.conftest import ARCHES, PACKAGING, run_script
from tests.packaging.debianroot import (
    cache_dir,
    check_native_hook,
    chroot,
    debian_root,
    ok,
    scratch_copy,
)
from tests.support.containers import require
from tests.support.podman import Podman

pytestmark = [pytest.mark.root, pytest.mark.slow]

MACHINE = platform.machine()
ARCH = {m: a for a, m in ARCHES.items()}.get(MACHINE, MACHINE)
#: the interpreter bundled: Debian 12's (CI's machine)
BASE_PYTHON = Path("/usr/bin/python3")
PROFILE = "h100-pcie"
#: the image's PATH (its Dockerfile's ENV)
POD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STAND_IN = """#!/bin/sh
# a stand-in for runc: records its arguments
echo "$*" >>/tmp/nvhook-test/stand-in.argv
case "$1" in --version) echo "stand-in runtime 1.0" ;; esac
"""


@pytest.fixture(scope="session")
def python_bundle() -> Path:
    """packaging/python-bundle.sh's output for BASE_PYTHON, made once per interpreter binary and
    script and cached like the Debian roots."""
    require("patchelf")
    binary = BASE_PYTHON.resolve()
    digest = hashlib.sha256(
        binary.read_bytes() + (PACKAGING / "python-bundle.sh").read_bytes()
    ).hexdigest()[:12]
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"python-bundle-{binary.name}-{digest}"
    with open(cache / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "BUNDLE").is_file():
            shutil.rmtree(out, ignore_errors=True)
            run_script("python-bundle.sh", str(out), env={"PYTHON": str(BASE_PYTHON)})
    return out


def stage_image(out: Path, arch: str, wheelhouse: Path, bundle: Path, **env: str) -> Path:
    """build.sh FORMATS=image ARCHES=``arch`` into ``out`` with ``bundle`` (and ``env``, e.g.
    another architecture's busybox): the image's root it prints."""
    env = {"FORMATS": "image", "ARCHES": arch, "WHEELS": str(wheelhouse),
           f"PYTHON_BUNDLE_{arch}": str(bundle), **env}  # fmt: skip
    printed = run_script("build.sh", str(out), env=env)
    assert printed == f"{out}/installer-{arch}\n"
    return out / f"installer-{arch}"


@pytest.fixture(scope="module")
def context(
    tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path, python_bundle: Path
) -> Path:
    """build.sh FORMATS=image for this machine: the image's root."""
    return stage_image(tmp_path_factory.mktemp("image"), ARCH, wheelhouse, python_bundle)


@pytest.fixture(scope="module")
def bookworm() -> Path:
    """Debian 12 minbase: bash, coreutils, sed, grep, findutils, diffutils; no Python."""
    require("mmdebstrap")
    root = debian_root("bookworm", ())
    assert not list((root / "usr/bin").glob("python*"))
    return root


@pytest.fixture
def node(bookworm: Path, tmp_path: Path) -> Iterator[Path]:
    with scratch_copy(bookworm, tmp_path / "overlay") as merged:
        yield merged


def tree(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every path under ``root`` (its /proc and /dev left out): mode, size of files, link."""
    found: dict[str, tuple[int, int, str]] = {}
    for top, dirs, files in os.walk(root):
        if top == str(root):
            dirs[:] = [d for d in dirs if d not in ("proc", "dev")]
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            link = os.readlink(path) if os.path.islink(path) else ""
            size = 0 if os.path.isdir(path) and not link else st.st_size
            found[os.path.relpath(path, root)] = (st.st_mode, size, link)
    return found


def daemonset() -> tuple[str, dict[str, str]]:
    """The installer DaemonSet's script and environment."""
    doc = yaml.safe_load((PACKAGING / "kubernetes/installer-daemonset.yaml").read_text())
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    (script,) = container["args"]
    return script, {e["name"]: e["value"] for e in container["env"]}


def _mount(*argv: str) -> None:
    subprocess.run([require("mount"), *argv], capture_output=True, text=True, check=True)


@contextmanager
def pod(context: Path, node: Path, work: Path, *, bundle: bool = True) -> Iterator[Path]:
    """The pod's root: the image's (hard links to the context; without the bundle when asked),
    with the host's /dev and ``node`` at /host."""
    root = work / "pod"
    skip = shutil.ignore_patterns() if bundle else shutil.ignore_patterns("python-*")
    shutil.copytree(context, root, symlinks=True, copy_function=os.link, ignore=skip)
    (root / "dev").mkdir()
    (root / "host").mkdir()
    mounted: list[Path] = []
    try:
        for source, target in (("/dev", root / "dev"), (str(node), root / "host")):
            _mount("--rbind", source, str(target))
            mounted.append(target)
            _mount("--make-rslave", str(target))
        yield root
    finally:
        for path in reversed(mounted):
            subprocess.run([require("umount"), "--lazy", str(path)], check=False)


def pod_env(**overrides: str) -> dict[str, str]:
    """The DaemonSet's environment, with what a test root needs: no engine, no systemd."""
    return {"PATH": POD_PATH, **daemonset()[1], "ENGINE": "none", "SYSTEMD": "no", **overrides}


def test_the_bundle_runs_from_its_prefix_with_its_own_libraries(python_bundle: Path) -> None:
    patchelf = require("patchelf")
    info = dict(line.split("=", 1) for line in (python_bundle / "BUNDLE").read_text().splitlines())
    assert info["machine"] == MACHINE and info["prefix"] == "/opt/nvhook/python"
    version = ".".join(info["python"].split(".")[:2])
    binary = python_bundle / f"bin/python{version}"
    interp = subprocess.run([patchelf, "--print-interpreter", str(binary)], capture_output=True,
                            text=True, check=True).stdout.strip()  # fmt: skip
    assert interp.startswith("/opt/nvhook/python/lib/ld-linux")
    assert (python_bundle / "lib" / Path(interp).name).is_file()
    # a forced DT_RPATH ($ORIGIN-relative) on the binary and every library but glibc's own
    elves = [binary, *(python_bundle / "lib").glob("*.so*"),
             *(python_bundle / f"lib/python{version}/lib-dynload").glob("*.so")]  # fmt: skip
    for elf in elves:
        if elf.name.startswith(("ld-linux", "libc.so")):
            continue
        dynamic = subprocess.run(["readelf", "-d", str(elf)], capture_output=True, text=True,
                                 check=True).stdout  # fmt: skip
        assert "(RPATH)" in dynamic and "Library rpath: [$ORIGIN" in dynamic, elf
    for gone in (
        "test",
        "idlelib",
        "tkinter",
        "ensurepip",
        f"config-{version}-{MACHINE}-linux-gnu",
    ):
        assert not (python_bundle / f"lib/python{version}" / gone).exists(), gone
    assert (python_bundle / "licenses/CPython-LICENSE.txt").is_file()
    size = sum(p.stat().st_size for p in python_bundle.rglob("*") if p.is_file())
    assert size < 60 * 2**20, size


def test_the_image_builds_and_its_preflight_picks_the_bundle(
    context: Path, bookworm: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """podman builds the Dockerfile from the staged context (FROM scratch: nothing pulled);
    in the image, the preflight finds no Python on the node and takes the bundle."""
    # a short directory, as the other podman fixtures: under tmp_path each `run --rm` took 20 s
    podman = Podman(tmp_path_factory.mktemp("podman"))
    tag = "localhost/nvhook-installer:test"
    try:
        built = podman.cmd("build", "-q", "-f", str(PACKAGING / "kubernetes/Dockerfile"),
                           "-t", tag, str(context), timeout=300)  # fmt: skip
        assert built.returncode == 0, built.stderr
        run = podman.run(["/nvhook/preflight", "/host"], image=tag,
                         options=["--privileged", "-v", f"{bookworm}:/host:ro"])  # fmt: skip
        assert (run.returncode, run.stdout) == (0, f"bundle /nvhook/python-{MACHINE}\n"), run.stderr
        listed = podman.run(["ls", "/", "/nvhook"], image=tag)
        assert listed.returncode == 0, listed.stderr
        for name in ("bin", "licenses", "nvhook", "install.sh", "preflight", f"python-{MACHINE}"):
            assert f"{name}\n" in listed.stdout, listed.stdout
    finally:
        podman.cleanup()


#: Imported by the bundle's venv on the node: the standard library's modules with libraries
#: (OpenSSL, libffi) and the wheels' compiled ones (libgcc_s, libpthread).
MAPS = (
    "import ssl, ctypes, yaml, rpds, pydantic_core, grpc, sys; "
    "print(sys.base_prefix); print(open('/proc/self/maps').read())"
)


@contextmanager
def running_pod(root: Path, log: Path, script: str, env: dict[str, str]) -> Iterator[str]:
    """The DaemonSet's script in the pod ``root``, until it sleeps; its output so far. On exit,
    SIGTERM (the pod stopping) and its exit status checked; its process group killed after
    (its ``sleep``)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [require("chroot"), str(root), "/bin/sh", "-c", script],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "nvhook-installer: installed; sleeping" not in log.read_text():
            assert proc.poll() is None, f"the pod exited {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield log.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def check_nvhook_runs(node: Path, profile_name: str = PROFILE, machine: str = MACHINE) -> None:
    """``nvhook info``, ``nvhook cdi generate`` and ``nvhook-runtime`` in front of a stand-in
    runtime, in ``node`` on the mock machine ``profile_name`` (its libraries in ``machine``'s
    folder); what it made there removed after."""
    create(profile_name, node / "mock", nodes="char")
    profile = load_profile(profile_name)
    work = node / "tmp/nvhook-test"
    work.mkdir()
    env = {"NVHOOK_CACHE_DIR": "/tmp/nvhook-test/cache"}
    info = json.loads(ok(chroot(node, "/opt/nvhook/bin/nvhook info --root /mock --json", env)))
    assert info["driver"]["version"] == profile.driver.version
    assert len(info["gpus"]) == len(profile.gpus)
    generate = "/opt/nvhook/bin/nvhook cdi generate --root /mock --output -"
    spec = json.loads(ok(chroot(node, generate, env)))
    assert spec["kind"] == "nvidia.com/gpu"
    mounts = [m["hostPath"] for m in spec["containerEdits"]["mounts"]]
    assert f"/mock/usr/lib/{machine}-linux-gnu/libcuda.so.{profile.driver.version}" in mounts
    (work / "stand-in").write_text(STAND_IN)
    (work / "stand-in").chmod(0o755)
    (work / "nvhook.toml").write_text(
        '[runtime]\nruntimes = ["/tmp/nvhook-test/stand-in"]\n'
        'log_file = "/tmp/nvhook-test/shim.log"\n'
    )
    env["NVHOOK_CONFIG"] = "/tmp/nvhook-test/nvhook.toml"
    version = ok(chroot(node, "/opt/nvhook/bin/nvhook-runtime --version", env))
    assert version == f"nvhook-runtime version {VERSION}\nstand-in runtime 1.0\n"
    ok(chroot(node, "/opt/nvhook/bin/nvhook-runtime --root /run/x state ctr-1", env))
    argv = (work / "stand-in.argv").read_text().splitlines()
    assert argv == ["--version", "--root /run/x state ctr-1"]
    shutil.rmtree(node / "mock")
    shutil.rmtree(work)
    # the image's native front-end (it answered the state call above) and hook, in front of
    # their Python launchers (under qemu-user, without openat2, the hook hands over)
    assert (node / "opt/nvhook/bin/nvhook-runtime").read_bytes()[:4] == b"\x7fELF"
    native = machine == os.uname().machine
    check_native_hook(node, f"/usr/lib/{machine}-linux-gnu", openat2=native)


def check_bundled_install(node: Path, log: str) -> None:
    """The pod (its output ``log``) installed with the bundle: the venv is the bundle's, and
    its processes map no library of the node's."""
    assert "python: the node has no supported Python: copying the bundled" in log
    cfg = (node / "opt/nvhook/pyvenv.cfg").read_text().splitlines()
    assert "home = /opt/nvhook/python/bin" in cfg
    base, _, maps = ok(chroot(node, f'/opt/nvhook/bin/python -c "{MAPS}"')).partition("\n")
    assert base == "/opt/nvhook/python"
    libs = {line.split()[-1] for line in maps.splitlines() if ".so" in line}
    assert libs and {x for x in libs if not x.startswith("/opt/nvhook/")} == set()


def test_daemonset_installs_on_a_node_without_python_and_uninstalls(
    context: Path, node: Path, tmp_path: Path
) -> None:
    """The pod installs with the bundled Python; nvhook runs on the node; the pod stops with
    NVHOOK_UNINSTALL_ON_STOP=true and the node is back as it was, path for path."""
    before = tree(node)
    script, _ = daemonset()
    log = tmp_path / "pod.log"
    env = pod_env(NVHOOK_UNINSTALL_ON_STOP="true")
    with pod(context, node, tmp_path) as root, running_pod(root, log, script, env) as installed:
        check_bundled_install(node, installed)
        check_nvhook_runs(node)
        # the next pod (a restart, a rolling update) installs again: nothing changes
        installed_tree = tree(node)
        again = chroot(node, "bash /var/lib/nvhook/installer/install.sh install",
                       {"ENGINE": "none", "SYSTEMD": "no"})  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert "making it again" not in again.stderr and "copying the bundled" not in again.stderr
        assert tree(node) == installed_tree
    stopped = log.read_text()[len(installed) :]
    assert "venv: removed /opt/nvhook" in stopped and "uninstalled" in stopped
    after = tree(node)
    assert {k: v for k, v in after.items() if v != before.get(k)} == {}
    assert set(before) - set(after) == set()


def test_without_python_or_bundle_the_pod_refuses_and_changes_nothing(
    context: Path, node: Path, tmp_path: Path
) -> None:
    """An image without a bundle for the node's architecture (the arm64 one, unless built on
    an arm64 machine) on a node without Python: one line, exit 1, the node as it was."""
    before = tree(node)
    script, _ = daemonset()
    with pod(context, node, tmp_path, bundle=False) as root:
        assert not list((root / "nvhook").glob("python-*"))
        proc = subprocess.run([require("chroot"), str(root), "/bin/sh", "-c", script],
                              env=pod_env(), capture_output=True, text=True, timeout=60,
                              check=False)  # fmt: skip
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(
        "nvhook preflight: no supported Python (3.11, 3.12, 3.13 or 3.14) in /usr/bin"
    )
    assert "apt-get install python3 on Debian 12+" in line and "dnf install python3.12" in line
    assert f"the bundled Python for {MACHINE}" in line and line.endswith("nothing was changed")
    assert tree(node) == before


@pytest.mark.parametrize("missing", ["bash", "cmp"])
def test_a_node_without_what_install_sh_runs_is_refused(
    context: Path, node: Path, tmp_path: Path, missing: str
) -> None:
    """bash, or a command install.sh runs (cmp, from diffutils), missing: one line naming the
    package, the node unchanged."""
    for directory in ("usr/bin", "bin"):
        path = node / directory / missing
        if path.exists() and not path.is_symlink():
            path.unlink()
    before = tree(node)
    script, _ = daemonset()
    with pod(context, node, tmp_path) as root:
        proc = subprocess.run([require("chroot"), str(root), "/bin/sh", "-c", script],
                              env=pod_env(), capture_output=True, text=True, timeout=60,
                              check=False)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    package = {"bash": "bash", "cmp": "diffutils"}[missing]
    assert proc.stderr.splitlines() == [
        f"nvhook preflight: the node lacks {missing}, which install.sh runs: install {package} "
        "(apt-get install or dnf install; the same names on Debian, Ubuntu, RHEL and Fedora); "
        "nothing was changed"
    ]
    assert tree(node) == before


def test_the_bundle_refuses_another_prefix(context: Path, node: Path, tmp_path: Path) -> None:
    """The bundled Python runs from /opt/nvhook/python only: another PREFIX on a node without
    Python is refused in one line, before anything is copied."""
    before = tree(node)
    script, _ = daemonset()
    with pod(context, node, tmp_path) as root:
        proc = subprocess.run([require("chroot"), str(root), "/bin/sh", "-c", script],
                              env=pod_env(PREFIX="/srv/nvhook"), capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        f"nvhook preflight: the node has no supported Python and the bundled one "
        f"(/nvhook/python-{MACHINE}) runs from /opt/nvhook/python only: set PREFIX=/opt/nvhook, "
        "or install Python on the node; nothing was changed"
    ]
    assert tree(node) == before


def test_the_presence_labeller_runs_the_image_s_own_nvhook(
    context: Path, tmp_path: Path, make_mock_machine: Callable[..., Path]
) -> None:
    """presence-labeller.yaml's script in the image as its pod runs it: the root read-only,
    an emptyDir at /opt/nvhook, the node's /sys (a fresh H100 node's PCI bus: no driver, no
    nvhook), user 65534; the image's bundled CPython runs nvhook from its wheel and sets
    nvidia.com/gpu.present on the stand-in API server's Node (its extra arguments, which the
    manifest leaves empty, point it there and make it one turn)."""
    from tests.support.kubeapi import KubeApiServer

    docs = yaml.safe_load_all((PACKAGING / "kubernetes/presence-labeller.yaml").read_text())
    doc = next(d for d in docs if d["kind"] == "DaemonSet")
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    (script,) = container["args"]
    machine = make_mock_machine("h100-pcie")
    for gone in ("proc/driver/nvidia", "usr/lib", "dev"):
        shutil.rmtree(machine / gone)
    root = tmp_path / "pod"
    shutil.copytree(context, root, symlinks=True, copy_function=os.link)
    for mountpoint in ("sys", "opt/nvhook", "dev", "proc"):
        (root / mountpoint).mkdir(parents=True)
    mounted: list[Path] = []
    try:
        for argv in (
            ["--bind", str(root), str(root)],
            ["-o", "remount,bind,ro", str(root)],  # readOnlyRootFilesystem
            ["-t", "tmpfs", "-o", "size=1m,mode=1777", "tmpfs", str(root / "opt/nvhook")],
            ["--rbind", "-o", "ro", str(machine / "sys"), str(root / "sys")],
            ["--rbind", "/dev", str(root / "dev")],
            ["-t", "proc", "proc", str(root / "proc")],  # ld.so's $ORIGIN: /proc/self/exe
        ):
            _mount(*argv)
            if argv[0] != "-o":
                mounted.append(Path(argv[-1]))
        with KubeApiServer() as api:
            api.put("nodes", {"metadata": {"name": "gpu-1", "labels": {"a/b": "c"}}})
            env = {"PATH": POD_PATH, "NODE_NAME": "gpu-1"}
            proc = subprocess.run(
                [require("chroot"), "--userspec=65534:65534", str(root), "/bin/sh", "-c", script,
                 "sh", "--api-server", api.url, "--interval", "0"],
                env=env, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            assert api.get("nodes", "gpu-1")["metadata"]["labels"] == {
                "a/b": "c",
                "nvidia.com/gpu.present": "true",
            }
        assert proc.stderr.splitlines() == ["node gpu-1: nvidia.com/gpu.present set"]
    finally:
        for path in reversed(mounted):
            subprocess.run([require("umount"), "--lazy", str(path)], check=False)
