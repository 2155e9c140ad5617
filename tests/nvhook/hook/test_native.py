"""The native ``nvhook-hook`` (nvhook/native/nvhook-hook.c) does what the Python hook does.

Every other hook test runs against both programs (the ``hook_bin`` fixture). These compare
them directly: the same call on two identical rootfs trees, one through the Python launcher
and one through the native hook (built with ASan and UBSan, handing over to a launcher that
records each handover, then runs the Python hook). The exit code, stderr and the whole tree
(every entry's kind, mode, link target and content, the ld cache included) must be equal,
and the native hook must do the common calls itself and hand the others over.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvhook.discover.hooks import HOOK_ENV
from nvhook.hook import update_ldcache
from nvhook.hook.app_profile import PROFILE_PATH, profile
from nvhook.native import REINSTALL
from nvhook.native.contract import ENV_HOOK_TRACE, trace_enabled
from oci.errors import ExitCode
from tests.support.basics import require
from tests.support.native import build_native_hook

from .conftest import LIBDIR, state_json

ENV = dict(e.split("=", 1) for e in HOOK_ENV)
SONAME = "libnvhooktest.so.1"
LIB = f"{LIBDIR}/{SONAME}.0"
RECORDER = '#!/bin/sh\necho handover >> "{record}"\nexec "{python}" "$@"\n'
#: Where :func:`compare` lays out the tree each program runs on (the same path for both).
TREE = "tree"
#: The names of the files the ld cache step writes and their folders (as the contract has them).
LD_NAMES = sorted({
    part
    for path in (update_ldcache.LD_SO_CONF, update_ldcache.CONF_PATH, update_ldcache.LD_SO_CACHE,
                 update_ldcache.LD_SO_CACHE + "~")
    for part in path.split("/") if part
})  # fmt: skip


@dataclass
class Pair:
    python: str
    native: str
    record: Path

    def handovers(self) -> int:
        return len(self.record.read_text().splitlines()) if self.record.exists() else 0


@pytest.fixture(scope="module")
def pair(python_hook_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Pair:
    work = tmp_path_factory.mktemp("native-pair")
    record = work / "handovers"
    launcher = work / "launcher"
    launcher.write_text(RECORDER.format(record=record, python=python_hook_bin))
    launcher.chmod(0o755)
    return Pair(python_hook_bin, str(build_native_hook(work, str(launcher))), record)


def tree(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root``: kind, mode and link target or content hash."""
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                what: object = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                what = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                what = (stat.S_IFMT(st.st_mode),)
            out[str(p.relative_to(root))] = (what, oct(stat.S_IMODE(st.st_mode)))
    return out


Build = Callable[[Path, Path], None]  # (rootfs, a small shared library) -> lays out the tree


def base(root: Path, library: Path) -> None:
    """A busybox-like rootfs: /etc without ld.so.conf, the driver's library in LIBDIR."""
    (root / "etc").mkdir(parents=True)
    (root / LIBDIR.lstrip("/")).mkdir(parents=True)
    shutil.copy(library, root / LIB.lstrip("/"))


def debian(root: Path, library: Path) -> None:
    base(root, library)
    (root / "etc" / "ld.so.conf").write_text("# a comment\ninclude /etc/ld.so.conf.d/*.conf\n")
    (root / "etc" / "ld.so.conf.d").mkdir()
    (root / "etc" / "ld.so.conf.d" / "x86_64-linux-gnu.conf").write_text("/lib/x86_64-linux-gnu\n")


def distroless(root: Path, library: Path) -> None:
    (root / LIBDIR.lstrip("/")).mkdir(parents=True)
    shutil.copy(library, root / LIB.lstrip("/"))


def linked(root: Path, library: Path) -> None:
    base(root, library)
    (root / LIBDIR.lstrip("/") / "libnvhooktest.so").symlink_to(SONAME)


def other_link(root: Path, library: Path) -> None:
    base(root, library)
    (root / LIBDIR.lstrip("/") / "libnvhooktest.so").symlink_to("elsewhere.so")


def no_include(root: Path, library: Path) -> None:
    base(root, library)
    (root / "etc" / "ld.so.conf").write_text("/usr/local/lib\n")


def afile(root: Path, library: Path) -> None:
    base(root, library)
    (root / "afile").write_text("a file, not a folder\n")


def compat(root: Path, library: Path, *names: str) -> None:
    base(root, library)
    folder = root / "usr/local/cuda/compat"
    folder.mkdir(parents=True)
    for name in names or ("libcuda.so.999.1.2",):
        shutil.copy(library, folder / name)
    (folder / "libcuda.so.1").symlink_to(names[0] if names else "libcuda.so.999.1.2")


def compat_older(root: Path, library: Path) -> None:
    compat(root, library, "libcuda.so.500.1")


def compat_two(root: Path, library: Path) -> None:
    compat(root, library, "libcuda.so.999.1", "libcuda.so.998.1")


def compat_linked(root: Path, library: Path) -> None:
    """/usr/local/cuda is a link to /usr/local/cuda-13.0 (as in CUDA images)."""
    compat(root, library)
    (root / "usr/local/cuda").rename(root / "usr/local/cuda-13.0")
    (root / "usr/local/cuda").symlink_to("cuda-13.0")


def compat_magic(root: Path, library: Path) -> None:
    base(root, library)
    (root / "usr/local").mkdir(parents=True)
    (root / "usr/local/cuda").symlink_to("/proc/self/root/usr/local/cuda")


def compat_same_branch(root: Path, library: Path) -> None:
    compat(root, library, "libcuda.so.550.90.07")


def compat_next_branch(root: Path, library: Path) -> None:
    compat(root, library, "libcuda.so.551.0")


def conf_loop(root: Path, library: Path) -> None:
    base(root, library)
    (root / "etc" / "ld.so.conf").symlink_to("ld.so.conf")


def proc_loop(root: Path, library: Path) -> None:
    base(root, library)
    (root / "proc").symlink_to("proc")


def conf_folder(root: Path, library: Path) -> None:
    base(root, library)
    (root / "etc" / "ld.so.conf").mkdir()


def etc_file(root: Path, library: Path) -> None:
    distroless(root, library)
    (root / "etc").write_text("not a folder\n")


def conf_dir_file(root: Path, library: Path) -> None:
    base(root, library)
    (root / "etc" / "ld.so.conf.d").write_text("not a folder\n")


def magic_etc(root: Path, library: Path) -> None:
    distroless(root, library)
    (root / "etc").symlink_to("/proc/self/root/etc")


def dri(root: Path, library: Path) -> None:
    base(root, library)
    (root / "dev" / "dri").mkdir(parents=True)
    os.mknod(root / "dev" / "dri" / "card1", 0o660 | stat.S_IFCHR, os.makedev(226, 1))
    os.mknod(root / "dev" / "sda", 0o660 | stat.S_IFBLK, os.makedev(8, 0))
    (root / "dev" / "dri" / "renderD128").write_text("not a device\n")


def gpus(root: Path, library: Path, *minors: int) -> None:
    base(root, library)
    (root / "dev").mkdir()
    nodes = [(f"nvidia{m}", m) for m in minors] or [("nvidia0", 0), ("nvidia1", 3)]
    for name, minor in [*nodes, ("nvidiactl", 255)]:
        os.mknod(root / "dev" / name, 0o666 | stat.S_IFCHR, os.makedev(195, minor))


def no_gpu(root: Path, library: Path) -> None:
    """Only nvidiactl, and nvidia64: a minor the mask cannot hold (a note, no file)."""
    gpus(root, library, 64)


def beyond(root: Path, library: Path) -> None:
    """A GPU the mask holds and 16 it cannot (each noted, in order)."""
    gpus(root, library, *range(79, 63, -1), 0)  # listed in no sorted order


PROFILE = Path(PROFILE_PATH.lstrip("/"))


def profile_there(root: Path, library: Path) -> None:
    """An image's own profile (or a previous start's), read-only to others."""
    gpus(root, library)
    (root / PROFILE).parent.mkdir(parents=True)
    (root / PROFILE).write_text("stale")
    (root / PROFILE).chmod(0o600)


def profile_linked(root: Path, library: Path) -> None:
    """A symlink at the profile, to a host file: replaced, never followed."""
    gpus(root, library)
    (root / PROFILE).parent.mkdir(parents=True)
    (root / PROFILE).symlink_to(root.parents[2] / "host-file")
    (root.parents[2] / "host-file").write_text("host\n")


def profile_folder(root: Path, library: Path) -> None:
    gpus(root, library)
    (root / PROFILE).mkdir(parents=True)


def profile_file_above(root: Path, library: Path) -> None:
    gpus(root, library)
    (root / "etc/nvidia").write_text("a file\n")


def profile_etc_linked(root: Path, library: Path) -> None:
    """etc/nvidia a link to a host folder: resolved inside, where it names nothing."""
    gpus(root, library)
    host = root.parents[2] / "host-etc"
    (host / PROFILE.parent.name).mkdir(parents=True, exist_ok=True)
    (root / "etc/nvidia").symlink_to(host)


def dev_linked(root: Path, library: Path) -> None:
    """/dev a link to a host folder with a GPU node: resolved inside, where it is not."""
    base(root, library)
    host = root.parents[2] / "host-dev"
    host.mkdir(exist_ok=True)
    if not (host / "nvidia0").exists():
        os.mknod(host / "nvidia0", 0o666 | stat.S_IFCHR, os.makedev(195, 0))
    (root / "dev").symlink_to(host)


def dev_file(root: Path, library: Path) -> None:
    base(root, library)
    (root / "dev").write_text("not a folder\n")


def gpus_distroless(root: Path, library: Path) -> None:
    """No /etc: the profile's folders (0555) come first, then the ld cache's."""
    distroless(root, library)
    (root / "dev").mkdir()
    os.mknod(root / "dev/nvidia2", 0o666 | stat.S_IFCHR, os.makedev(195, 2))


def dev_by_a_link(root: Path, library: Path) -> None:
    """No /dev, a folder with a GPU node that a --link makes /dev: Python lists it."""
    base(root, library)
    (root / "gpu-nodes").mkdir()
    os.mknod(root / "gpu-nodes/nvidia1", 0o666 | stat.S_IFCHR, os.makedev(195, 1))


def ld_so_conf_linked(root: Path, library: Path) -> None:
    """ld.so.conf a link to where the profile goes: the profile would change what it reads."""
    gpus(root, library)
    (root / "etc/ld.so.conf").symlink_to(PROFILE_PATH)


LINK = f"{SONAME}::{LIBDIR}/libnvhooktest.so"
BY_PATH = "/dev/dri/by-path"
FOLDER = ["--folder", LIBDIR]
CC = ["create-container"]
APP = ["--application-profile", PROFILE_PATH]

#: (name, build, argv, env of the container, whether the native hook does it itself)
CASES: list[tuple[str, Build, list[str], list[str], bool]] = [
    ("busybox", base, [*CC, "--link", LINK, *FOLDER, "--cuda-compat", "550.54.15"], [], True),
    ("debian", debian, [*CC, "--link", LINK, *FOLDER], ["PATH=/bin"], True),
    ("distroless: /etc made", distroless, [*CC, "--link", LINK, *FOLDER], [], True),
    ("link in place", linked, [*CC, "--link", LINK, *FOLDER], [], True),
    ("the same link twice", base, [*CC, "--link", LINK, "--link", LINK, *FOLDER, *FOLDER], [],
     True),
    ("a link in a new folder, target ..", base,
     [*CC, "--link", f"../{SONAME}::{LIBDIR}/gbm/nvidia-drm_gbm.so", *FOLDER], [], True),
    ("links only", base, ["create-symlinks", "--link", LINK], [], True),
    ("links in folders in turn, one made", base,
     [*CC, "--link", LINK, "--link", f"{SONAME}::/usr/lib/gbm/a.so", "--link",
      f"{SONAME}::{LIBDIR}/second.so", "--link", f"{SONAME}::/usr/lib/gbm/b.so", *FOLDER], [],
     True),
    ("ld cache only", debian, ["update-ldcache", *FOLDER, "--folder=/usr/lib"], [], True),
    ("no params in the container", base, [*CC, "--params", "/proc/self/status", *FOLDER], [],
     True),
    ("--ldconfig given", base, [*CC, *FOLDER, "--ldconfig", "/sbin/ldconfig"], [], True),
    # handed over, each for its reason
    ("a file above a link's folder", afile,
     [*CC, "--link", LINK, "--link", "t::/afile/sub/x", *FOLDER], [], False),
    ("a device link too long to judge here", base,
     [*CC, "--device-link", "/".join(["a" * 200] * 25) + "::/dev/x", *FOLDER], [], False),
    ("another link there", other_link, [*CC, "--link", LINK, *FOLDER], [], False),
    ("a compat folder, newer", compat, [*CC, *FOLDER, "--cuda-compat", "550.54.15"], [], True),
    ("a compat folder, a link", compat_linked, [*CC, *FOLDER, "--cuda-compat", "550.54.15"],
     [], True),
    ("a compat folder, older", compat_older, [*CC, *FOLDER, "--cuda-compat", "550.54.15"], [],
     True),
    ("a compat folder alone", compat, [*CC, "--cuda-compat", "550.54.15"], [], True),
    ("two compat libraries", compat_two, [*CC, *FOLDER, "--cuda-compat", "550.54.15"], [],
     True),
    ("a host version that is not one", compat, [*CC, *FOLDER, "--cuda-compat", "5x"], [], True),
    # no procfs in this rootfs: the link names nothing (with one, ELOOP: handed over)
    ("a compat folder via /proc", compat_magic, [*CC, *FOLDER, "--cuda-compat", "550.54.15"],
     [], True),
    ("a compat folder named", compat, [*CC, *FOLDER, "--cuda-compat", "550.54.15"],
     ["NVIDIA_CUDA_COMPAT_DIR=/usr/local/cuda/compat"], False),
    ("compat opted out", base, [*CC, *FOLDER, "--cuda-compat", "550.54.15"],
     ["NVIDIA_DISABLE_CUDA_COMPAT=1"], False),
    ("a missing folder", base, [*CC, "--folder", "/opt/none"], [], False),
    ("ld.so.conf without include", no_include, [*CC, *FOLDER], [], False),
    ("ldconfig fails", base, [*CC, *FOLDER, "--ldconfig", "/bin/false"], [], True),
    ("/etc a magic link", magic_etc, [*CC, *FOLDER], [], False),
    ("a target escaping", base, [*CC, "--link", f"../../../../../etc/passwd::{LIBDIR}/x"], [],
     False),
    ("an option unknown", base, [*CC, "--bogus", "x"], [], False),
    ("a profile, no /dev", base, [*CC, "--link", LINK, *FOLDER, *APP], [], True),
    ("a profile, a path not clean", base, [*CC, *FOLDER, "--application-profile", "//etc/x"],
     [], False),
    ("a profile twice", base, [*CC, *APP, *APP], [], False),
    ("an option twice", base, [*CC, *FOLDER, "--ldconfig", "/a", "--ldconfig", "/b"], [],
     False),
    ("no option", base, CC, [], False),
    ("another command", base, ["netdev", "--device", "a=b"], [], False),
    ("no command", base, [], [], False),
    ("a link not ASCII", base, [*CC, "--link", "libé.so::/usr/lib/libé"], [], False),
    ("a folder with a space", base, [*CC, "--folder", "/usr/lib x"], [], False),
    ("a folder with ..", base, [*CC, "--folder", f"{LIBDIR}/../x86_64-linux-gnu"], [], False),
    ("a folder with .", base, [*CC, "--folder", f"{LIBDIR}/."], [], False),
    ("the same link twice, two targets", base,
     [*CC, "--link", LINK, "--link", f"other.so::{LIBDIR}/libnvhooktest.so", *FOLDER], [],
     False),
    ("a link and a device link, one path", base,
     [*CC, "--link", LINK, "--device-link", f"{SONAME}::{LIBDIR}/libnvhooktest.so", *FOLDER],
     [], True),
    # after a good link: a parse error (Python's, before any link) must leave none written
    ("a link with an empty target", base,
     [*CC, "--link", LINK, "--link", f"::{LIBDIR}/x.so", *FOLDER], [], False),
    ("a link path with ..", base, [*CC, "--link", f"{SONAME}::{LIBDIR}/../x.so", *FOLDER], [],
     False),
    ("a link path with .", base, [*CC, "--link", f"{SONAME}::{LIBDIR}/./x.so", *FOLDER], [],
     False),
    ("a link path relative", base, [*CC, "--link", f"{SONAME}::x.so", *FOLDER], [], False),
    ("--cuda-compat twice", compat,
     [*CC, *FOLDER, "--cuda-compat", "550.54.15", "--cuda-compat", "990.1"], [], False),
    ("--params twice", base,
     [*CC, *FOLDER, "--params", "/proc/self/status", "--params", "/proc/self/status"], [],
     False),
    ("--ldconfig not executable", base, [*CC, *FOLDER, "--ldconfig", "/etc/passwd"], [], False),
    ("--ldconfig missing", base, [*CC, *FOLDER, "--ldconfig", "/nonexistent/ldconfig"], [],
     False),
    ("--ldconfig relative", base, [*CC, *FOLDER, "--ldconfig", "sbin/ldconfig"], [], False),
    ("--ldconfig a folder", base, [*CC, *FOLDER, "--ldconfig", "/sbin"], [], False),
    ("a compat library of the host's branch, newer", compat_same_branch,
     [*CC, *FOLDER, "--cuda-compat", "550.54.15"], [], True),
    ("a compat library of the host's branch, older", compat_same_branch,
     [*CC, *FOLDER, "--cuda-compat", "550.127.5"], [], True),
    ("a compat library one branch newer", compat_next_branch,
     [*CC, *FOLDER, "--cuda-compat", "550.54.15"], [], True),
    ("ld.so.conf a symlink loop", conf_loop, [*CC, *FOLDER], [], False),
    ("/proc a symlink loop, --params", proc_loop, [*CC, *FOLDER, "--params", "/proc/self/status"],
     [], False),
    ("ld.so.conf a folder", conf_folder, [*CC, *FOLDER], [], False),
    ("/etc a file", etc_file, [*CC, *FOLDER], [], False),
    ("ld.so.conf.d a file", conf_dir_file, [*CC, *FOLDER], [], False),
]  # fmt: skip
#: Links named like a file the ld cache step writes (nvhook-contract.h's NVHOOK_LD_NAMES, the
#: first and last included): each is Python's, in /etc or elsewhere.
CASES += [
    (f"a link named {name}{where}", base, [*CC, "--link", f"{SONAME}::{folder}/{name}", *FOLDER],
     [], False)
    for name in LD_NAMES
    for where, folder in (("", "/etc"), (" elsewhere", LIBDIR))
]  # fmt: skip
ROOT_CASES: list[tuple[str, Build, list[str], list[str], bool]] = [
    ("the same device link twice, two targets", dri,
     [*CC, "--device-link", "../card1::/dev/dri/by-path/c", "--device-link",
      "./../card1::/dev/dri/by-path/c", *FOLDER], [], False),
    ("the same device link twice, one a missing device", dri,
     [*CC, "--device-link", "../card1::/dev/dri/by-path/c", "--device-link",
      "../card9::/dev/dri/by-path/c", *FOLDER], [], True),
    ("a device link to a block device", dri,
     [*CC, "--device-link", "../../sda::/dev/dri/by-path/block", *FOLDER], [], True),
    # the profile is written after the links, then the ld cache
    ("an application profile", gpus, [*CC, "--link", LINK, *FOLDER, *APP], [], True),
    ("a profile alone", gpus, [*CC, *APP], [], True),
    ("a profile, no GPU node", no_gpu, [*CC, "--link", LINK, *FOLDER, *APP], [], True),
    ("a profile, minors beyond the mask", beyond, [*CC, *FOLDER, *APP], [], True),
    ("a profile, ldconfig fails", beyond, [*CC, *FOLDER, "--ldconfig", "/bin/false", *APP],
     [], True),
    ("a profile there", profile_there, [*CC, "--link", LINK, *FOLDER, *APP], [], True),
    ("a symlink at the profile", profile_linked, [*CC, "--link", LINK, *APP], [], True),
    ("a symlink at the profile, folders", profile_linked, [*CC, *FOLDER, *APP], [], False),
    ("a folder at the profile", profile_folder, [*CC, *FOLDER, *APP], [], False),
    ("a file above the profile", profile_file_above, [*CC, *FOLDER, *APP], [], False),
    ("etc/nvidia linked out", profile_etc_linked, [*CC, *FOLDER, *APP], [], False),
    ("/dev linked out", dev_linked, [*CC, "--link", LINK, *FOLDER, *APP], [], True),
    ("/dev a file", dev_file, [*CC, *FOLDER, *APP], [], False),
    ("a profile, /etc made", gpus_distroless, [*CC, *FOLDER, *APP], [], True),
    ("a profile where ld.so.conf goes", gpus, [*CC, *FOLDER, "--application-profile",
     "/etc/ld.so.conf"], [], False),
    ("a link named like the profile", gpus,
     [*CC, "--link", f"{SONAME}::/usr/lib/{PROFILE.name}", *FOLDER, *APP], [], False),
    ("ld.so.conf linked to the profile", ld_so_conf_linked, [*CC, *FOLDER, *APP], [], False),
    ("a link makes /dev", dev_by_a_link, [*CC, "--link", "/gpu-nodes::/dev", *APP], [], False),
    ("device links", dri,
     [*CC, "--device-link", f"../card1::{BY_PATH}/pci-0000:01:00.0-card",
      "--device-link", "../renderD128::/dev/dri/by-path/pci-0000:01:00.0-render",
      "--device-link", "../card9::/dev/dri/by-path/pci-0000:09:00.0-card",
      "--device-link", "../../../../../../dev/null::/dev/dri/by-path/x", *FOLDER], [], True),
]  # fmt: skip


def _lay_out(top: Path, build: Build, library: Path, env: list[str]) -> Path:
    bundle = top / "bundle"
    root = bundle / "rootfs"
    root.mkdir(parents=True)
    build(root, library)
    spec = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"env": env}}
    (bundle / "config.json").write_text(json.dumps(spec))
    return bundle


def _run(program: str, argv: list[str], stdin: str | bytes) -> subprocess.CompletedProcess[bytes]:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    return subprocess.run(
        [program, *argv], input=data, capture_output=True, env=ENV, timeout=90, check=False
    )


def compare(
    pair: Pair,
    tmp_path: Path,
    build: Build,
    library: Path,
    argv: list[str],
    env: list[str],
    *,
    state: Callable[[Path], str | bytes] = state_json,
    config: bytes | None = None,
) -> bool:
    """Run ``argv`` through both on identical trees, one after the other at the same path
    (so that no byte of a state or message differs between them); assert the same outcome;
    whether the native hook handed the call over. The native hook's tree stays at
    ``tmp_path / TREE``."""
    results = []
    before = pair.handovers()
    for program in (pair.python, pair.native):
        shutil.rmtree(tmp_path / TREE, ignore_errors=True)
        bundle = _lay_out(tmp_path / TREE, build, library, env)
        if config is not None:
            (bundle / "config.json").write_bytes(config)
        proc = _run(program, argv, state(bundle))
        results.append((proc.returncode, proc.stderr, proc.stdout, tree(bundle)))
    assert results[1] == results[0]
    return pair.handovers() > before


@pytest.mark.parametrize(
    ("build", "argv", "env", "native"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES]
    + [pytest.param(*case[1:], id=case[0], marks=pytest.mark.root) for case in ROOT_CASES],
)
def test_same_outcome(
    pair: Pair,
    tmp_path: Path,
    test_library: Path,
    build: Build,
    argv: list[str],
    env: list[str],
    native: bool,
) -> None:
    handed_over = compare(pair, tmp_path, build, test_library, argv, env)
    assert handed_over is not native
    if build is gpus and argv[-2:] == APP:  # not only the same as Python: the GPUs' minors
        assert (tmp_path / TREE / "bundle/rootfs" / PROFILE).read_bytes() == profile(0b1001)
    if f"../card1::{BY_PATH}/pci-0000:01:00.0-card" in argv:  # only the GPU whose card node
        # is a character device there
        links = tmp_path / TREE / "bundle/rootfs/dev/dri/by-path"
        assert sorted(p.name for p in links.iterdir()) == ["pci-0000:01:00.0-card"]


def test_the_cache_lists_the_library(pair: Pair, tmp_path: Path, test_library: Path) -> None:
    """Not only the same as Python: right (the SONAME link ldconfig makes, our conf file)."""
    bundle = _lay_out(tmp_path, base, test_library, [])
    proc = _run(pair.native, [*CC, "--link", LINK, *FOLDER], state_json(bundle))
    assert (proc.returncode, proc.stderr) == (0, b"")
    root = bundle / "rootfs"
    assert os.readlink(root / LIBDIR.lstrip("/") / SONAME) == f"{SONAME}.0"
    assert (root / "etc/ld.so.conf.d/00-nvhook.conf").read_text() == (
        f"# written by nvhook-hook update-ldcache\n{LIBDIR}\n"
    )
    assert (root / "etc/ld.so.conf").read_text() == "include /etc/ld.so.conf.d/*.conf\n"
    assert SONAME.encode() in (root / "etc/ld.so.cache").read_bytes()
    assert not [p for p in root.rglob("*.nvhook")]  # no temp file left


STATE_CASES: dict[str, str] = {
    "not JSON": "{",
    "not an object": "[]",
    "no id": '{"ociVersion":"1","status":"creating","bundle":"BUNDLE"}',
    "an empty id": '{"ociVersion":"1","id":"","status":"creating","bundle":"BUNDLE"}',
    "a relative bundle": '{"ociVersion":"1","id":"x","status":"creating","bundle":"b"}',
    "a negative pid": '{"ociVersion":"1","id":"x","status":"c","pid":-1,"bundle":"BUNDLE"}',
    "a float pid": '{"ociVersion":"1","id":"x","status":"c","pid":1.0,"bundle":"BUNDLE"}',
    "an annotation not a string": (
        '{"ociVersion":"1","id":"x","status":"c","bundle":"BUNDLE","annotations":{"a":1}}'
    ),
    "NaN": '{"ociVersion":"1","id":"x","status":"c","bundle":"BUNDLE","pid":NaN}',
    "a lone surrogate": '{"ociVersion":"1","id":"\\ud800","status":"c","bundle":"BUNDLE"}',
    "escapes": '{"ociVersion":"1","id":"\\u00e9\\ud83d\\ude00","status":"c","bundle":"BUNDLE"}',
    "a duplicate key": (
        '{"ociVersion":"1","id":"x","status":"c","bundle":"/nonexistent","bundle":"BUNDLE"}'
    ),
    "trailing data": '{"ociVersion":"1","id":"x","status":"c","bundle":"BUNDLE"} x',
    "a control character": '{"ociVersion":"1","id":"a\tb","status":"c","bundle":"BUNDLE"}',
}
CONFIG_CASES: dict[str, bytes] = {
    "a byte order mark": b'\xef\xbb\xbf{"root":{"path":"rootfs"}}',
    "invalid UTF-8": b'{"root":{"path":"rootfs"},"x":"\xff"}',
    "a float uid": b'{"root":{"path":"rootfs"},"process":{"user":{"uid":1.5}}}',
    "a uid too big": b'{"root":{"path":"rootfs"},"process":{"user":{"uid":4294967296}}}',
    "env not strings": b'{"root":{"path":"rootfs"},"process":{"env":[1]}}',
    "a mount without destination": b'{"root":{"path":"rootfs"},"mounts":[{}]}',
    "a hook without path": b'{"root":{"path":"rootfs"},"hooks":{"prestart":[{}]}}',
    "no root.path": b'{"root":{}}',
    "root.path empty": b'{"root":{"path":""}}',
    "a float too big": b'{"root":{"path":"rootfs"},"x":1e400}',
    "deep": b'{"root":{"path":"rootfs"},"x":' + b"[" * 5000 + b"]" * 5000 + b"}",
    # oci.jsoncodec.MAX_DEPTH: the 1 at 256 levels, then at 257 (the config's object counts)
    "at the depth limit": b'{"root":{"path":"rootfs"},"x":' + b"[" * 255 + b"1" + b"]" * 255 + b"}",
    "a level deeper": b'{"root":{"path":"rootfs"},"x":' + b"[" * 256 + b"1" + b"]" * 256 + b"}",
    "fine, with escapes": b'{"root":{"path":"root\\u0066s"},"x":["\\u003c\\/\\n",-0.5e-3]}',
    "an absolute root": b'{"root":{"path":"ABS"}}',
}


#: The config.json files above that the native hook takes as they are.
NATIVE_CONFIGS = {"fine, with escapes", "an absolute root", "at the depth limit"}
#: The states above that the native hook takes as they are (the others: Python's call).
NATIVE_STATES = {"escapes", "a duplicate key"}


@pytest.mark.parametrize("case", sorted(STATE_CASES))
def test_any_state(pair: Pair, tmp_path: Path, test_library: Path, case: str) -> None:
    text = STATE_CASES[case]
    handed_over = compare(
        pair, tmp_path, base, test_library, [*CC, *FOLDER], [],
        state=lambda bundle: text.replace("BUNDLE", str(bundle)),
    )  # fmt: skip
    assert handed_over is (case not in NATIVE_STATES)


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_any_config(pair: Pair, tmp_path: Path, test_library: Path, case: str) -> None:
    rootfs = tmp_path / TREE / "bundle" / "rootfs"  # for "an absolute root"
    data = CONFIG_CASES[case].replace(b"ABS", bytes(rootfs))
    handed_over = compare(pair, tmp_path, base, test_library, [*CC, *FOLDER], [], config=data)
    assert handed_over is (case not in NATIVE_CONFIGS)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(b) + 1)
        choice = rng.randrange(4)
        if choice == 0 and b:
            del b[min(at, len(b) - 1)]
        elif choice == 1:
            b[at:at] = rng.choice([b'"', b"\\", b"\\u", b"{", b"]", b",", b"1e9", b"\xc3", b"\x00",
                                   b" ", b"null", b"-", b"\\ud83d", b"\xe2\x80\xa8"])  # fmt: skip
        elif choice == 2 and b:
            b[min(at, len(b) - 1)] = rng.randrange(256)
        else:
            b[at:at] = bytes(b[rng.randrange(len(b)) :][: rng.randint(1, 8)]) if b else b""
    return bytes(b)


@pytest.mark.slow  # seconds long: the whole suite runs it, ./dev test quick does not
def test_fuzz_state_and_config(pair: Pair, tmp_path: Path, test_library: Path) -> None:
    """Mutated states and config.json files: the native hook never does what Python would
    refuse, nor refuses what Python does (seeded, so a failure replays)."""
    rng = random.Random(16)
    config = json.dumps(
        {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
         "process": {"env": ["A=1"], "user": {"uid": 0, "gid": 0, "additionalGids": [1]}},
         "mounts": [{"destination": "/proc"}], "hooks": {"createContainer": [{"path": "/x"}]},
         "annotations": {"a": "b"}, "linux": {"devices": [{"path": "/dev/x"}],
                                              "resources": {"devices": [{}]}}}
    ).encode()  # fmt: skip
    natively = 0
    for i in range(40):
        which = i % 2
        work = tmp_path / str(i)
        if which == 0:  # the state
            seed = rng.random()

            def state(bundle: Path, seed: float = seed) -> bytes:
                return _mutate(random.Random(seed), state_json(bundle).encode())

            handed = compare(pair, work, base, test_library, [*CC, *FOLDER], [], state=state)
        else:
            mutated = _mutate(rng, config)
            handed = compare(pair, work, base, test_library, [*CC, *FOLDER], [], config=mutated)
        natively += not handed
    assert natively > 0  # some mutations leave valid JSON (a space, a duplicated digit)


@pytest.fixture(scope="module")
def noted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Mock compat libcudas of driver 575.57.08 with the fwd_compatibility note: one listing
    the host's branch 550, one not, one listing its own branch 575 (a host of that branch:
    used only when the library is newer)."""
    from nvhook.mock.compat import lay_out_compat

    out = {}
    for name, drivers in (("lists", (535, 550, 570)), ("not", (570,)), ("own", (550, 575))):
        root = tmp_path_factory.mktemp(f"noted-{name}")
        out[name] = lay_out_compat(
            root, profile="h100-pcie", version="575.57.08", cuda="12.9", drivers=drivers
        )
    return out


NOTE_CASES = [("lists", "550.54.15"), ("not", "550.54.15"), ("lists", "580.1.2"),
              ("own", "575.57.08"), ("own", "575.64.1"), ("own", "575.51.2")]  # fmt: skip


@pytest.mark.parametrize(("which", "host"), NOTE_CASES)
def test_the_note_decides_the_same(
    pair: Pair, tmp_path: Path, test_library: Path, noted: dict[str, Path], which: str, host: str
) -> None:
    def build(root: Path, library: Path) -> None:
        base(root, library)
        folder = root / "usr/local/cuda/compat"
        folder.mkdir(parents=True)
        shutil.copy(noted[which], folder / noted[which].name)

    argv = [*CC, *FOLDER, "--cuda-compat", host]
    assert not compare(pair, tmp_path, build, test_library, argv, [])
    conf = (tmp_path / TREE / "bundle/rootfs/etc/ld.so.conf.d/00-nvhook.conf").read_text()
    used = (which == "lists" and host.startswith("550")) or (which, host) == ("own", "575.51.2")
    assert conf.splitlines()[1] == ("/usr/local/cuda/compat" if used else LIBDIR)


#: What a failing ldconfig prints -> whether the native hook reads its last line as Python
#: does (else the call goes to Python: the one handover after ldconfig ran).
LDCONFIG_OUTPUTS: dict[str, tuple[bytes, bool]] = {
    "lines": (b"ldconfig: one\nldconfig: two\n", True),
    "trailing space and breaks": (b"  first\r\nlast one \t\x1c\n\x0b", True),
    "ASCII separators": (b"a\x1cb\x1dc\x1ed\x1fe\x0cf", True),
    "nothing": (b"", True),
    "only space": (b" \n\t ", True),
    "UTF-8": ("ldconfig: /usr/lib/libé.so: not ELF\n".encode(), True),
    "invalid UTF-8": (b"ldconfig: \xff\xfe\n", False),
    "a Unicode line break": ("one\u2028two".encode(), False),
    "a NUL": (b"a\x00b", False),
}


@pytest.mark.parametrize("case", sorted(LDCONFIG_OUTPUTS))
def test_a_failing_ldconfig_is_reported_as_python_does(
    pair: Pair, tmp_path: Path, test_library: Path, case: str
) -> None:
    output, native = LDCONFIG_OUTPUTS[case]
    (tmp_path / "out").write_bytes(output)
    fake = tmp_path / "ldconfig"
    fake.write_text(f"#!/bin/sh\ncat {tmp_path / 'out'}\nexit 3\n")
    fake.chmod(0o755)
    argv = [*CC, "--link", LINK, *FOLDER, "--ldconfig", str(fake)]
    assert compare(pair, tmp_path, base, test_library, argv, []) is not native


def _profile_over_dev(root: Path) -> None:
    (root / "gpu-nodes").mkdir()
    os.mknod(root / "gpu-nodes/nvidia0", 0o666 | stat.S_IFCHR, os.makedev(195, 0))
    (root / PROFILE).parent.mkdir(parents=True)
    (root / PROFILE).symlink_to("/gpu-nodes")
    (root / "dev").symlink_to(PROFILE_PATH)


def _gpu(root: Path) -> None:
    (root / "dev").mkdir()
    os.mknod(root / "dev/nvidia0", 0o666 | stat.S_IFCHR, os.makedev(195, 0))


@pytest.mark.root
@pytest.mark.parametrize(
    ("lay_out", "link"),
    [
        pytest.param(_profile_over_dev, [], id="a symlink at the profile that /dev goes through"),
        pytest.param(_gpu, ["--link", f"{SONAME}::{PROFILE_PATH}"], id="a link at the profile"),
    ],
)
def test_what_the_profile_replaces_is_pythons(
    pair: Pair,
    tmp_path: Path,
    test_library: Path,
    lay_out: Callable[[Path], None],
    link: list[str],
) -> None:
    """The profile replaces what is at its path, then ldconfig cannot be run: a handover
    after the write, and Python, run again, would see another tree (no /dev; a file where
    its link goes). So a symlink at the profile with folders to cache, or a link named
    like it, is Python's from the start."""
    fake = tmp_path / "ldconfig"
    fake.write_text("not a program\n")  # executable, but no format execve knows
    fake.chmod(0o755)

    def build(root: Path, library: Path) -> None:
        base(root, library)
        lay_out(root)

    argv = [*CC, *link, *FOLDER, "--ldconfig", str(fake), *APP]
    assert compare(pair, tmp_path, build, test_library, argv, []) is True


def test_stdin_it_cannot_read_is_pythons(pair: Pair, tmp_path: Path) -> None:
    """A state it cannot read (stdin a directory): the Python hook's outcome, stdin as it is."""
    results = []
    for program in (pair.python, pair.native):
        directory = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            proc = subprocess.run(
                [program, *CC, *FOLDER], stdin=directory, capture_output=True, env=ENV,
                timeout=60, check=False,
            )  # fmt: skip
        finally:
            os.close(directory)
        # CPython's own fatal error (its first line; the next name a thread id)
        results.append((proc.returncode, proc.stderr.splitlines()[:1]))
    assert results[1] == results[0]
    assert results[0][0] != 0


@pytest.mark.parametrize(("impl", "native"), [("openat2", True), ("auto", True), ("walk", False),
                                               ("bogus", False)])  # fmt: skip
def test_a_safepath_choice_other_than_openat2_is_pythons(
    pair: Pair, tmp_path: Path, test_library: Path, impl: str, native: bool
) -> None:
    results = []
    before = pair.handovers()
    for program in (pair.python, pair.native):
        shutil.rmtree(tmp_path / TREE, ignore_errors=True)
        bundle = _lay_out(tmp_path / TREE, base, test_library, [])
        proc = subprocess.run(
            [program, *CC, "--link", LINK, *FOLDER], input=state_json(bundle).encode(),
            capture_output=True, env={**ENV, "NVHOOK_SAFEPATH": impl}, timeout=60, check=False,
        )  # fmt: skip
        results.append((proc.returncode, proc.stderr, tree(bundle)))
    assert results[1] == results[0]
    assert (pair.handovers() > before) is not native


@pytest.mark.parametrize("value", ["1", "true", "TRUE", " t\t", "0", "false", "False", "", "yes"])
def test_trace_is_a_boolean_read_as_python_reads_one(pair: Pair, value: str) -> None:
    """``NVHOOK_HOOK_TRACE``: ``0``, ``false`` or empty is off, as
    :func:`nvhook.native.contract.trace_enabled` (Go's ParseBool) reads it."""
    proc = subprocess.run(
        [pair.native, "no-such-command"], input=b"", capture_output=True,
        env={**ENV, ENV_HOOK_TRACE: value}, timeout=60, check=False,
    )  # fmt: skip
    traced = b"nvhook-hook: handing over (line " in proc.stderr
    assert traced is trace_enabled(value), proc.stderr
    assert traced is (value.strip() in ("1", "true", "TRUE", "t"))


def test_a_launcher_that_cannot_be_exec_d_fails_with_the_hook_s_code(tmp_path: Path) -> None:
    """A broken install (the Python launcher gone): a handover fails with one line naming it
    and ExitCode.HOOK, as the Python hook fails."""
    launcher = tmp_path / "gone" / "nvhook-hook.py"
    native = build_native_hook(tmp_path, str(launcher))
    proc = _run(str(native), ["netdev", "--device", "a=b"], "")
    assert (proc.returncode, proc.stderr) == (
        ExitCode.HOOK,
        f"nvhook-hook: cannot exec {launcher}: No such file or directory\n".encode(),
    )


def test_a_launcher_whose_python_is_gone_fails_naming_the_interpreter(tmp_path: Path) -> None:
    """A distribution upgrade removed the Python the venv was made with: a handover fails with
    one line naming the missing interpreter (and the link that dangles) and the repair, and
    ExitCode.HOOK, as the front-end says it (nvhook-launcher.h is one copy for both)."""
    system = tmp_path / "usr/bin/python3.11"
    bin_dir = tmp_path / "venv/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(system)
    launcher = bin_dir / "nvhook-hook.py"
    launcher.write_text(f"#!{bin_dir / 'python'} -IS\n")
    launcher.chmod(0o755)
    setup = tmp_path / "lib/nvhook/setup"
    native = build_native_hook(tmp_path, str(launcher), f'-DNVHOOK_SETUP_PATH="{setup}"')
    proc = _run(str(native), ["netdev", "--device", "a=b"], "")
    assert (proc.returncode, proc.stderr) == (
        ExitCode.HOOK,
        f"nvhook-hook: cannot start {launcher}: its interpreter {bin_dir / 'python'} is missing "
        f"(a link to {system}, which is gone): the Python nvhook's venv was made with was "
        f"removed or upgraded; {REINSTALL}\n".encode(),
    )


@pytest.mark.root
def test_no_ldconfig_on_the_host_is_pythons(pair: Pair, tmp_path: Path, test_library: Path) -> None:
    """No ldconfig among update_ldcache.LDCONFIG_CANDIDATES (a broken host: hidden here by an
    empty tmpfs over their folders in a private mount namespace): Python's message and exit
    code, nothing written by either."""
    unshare = require("unshare")
    folders = sorted({os.path.realpath(os.path.dirname(c))
                      for c in update_ldcache.LDCONFIG_CANDIDATES})  # fmt: skip
    hide = " && ".join(f"mount -t tmpfs none {f}" for f in folders)
    wrapped = {}
    for name, program in (("python", pair.python), ("native", pair.native)):
        wrapper = tmp_path / f"hidden-{name}"
        wrapper.write_text(f'#!/bin/sh\nexec {unshare} --mount --propagation private /bin/sh -c '
                           f'\'{hide} && exec "$0" "$@"\' {program} "$@"\n')  # fmt: skip
        wrapper.chmod(0o755)
        wrapped[name] = str(wrapper)
    hidden = Pair(wrapped["python"], wrapped["native"], pair.record)
    argv = [*CC, "--link", LINK, *FOLDER]
    assert compare(hidden, tmp_path, base, test_library, argv, [])
    proc = _run(hidden.native, argv, state_json(tmp_path / TREE / "bundle"))
    assert proc.returncode == ExitCode.HOOK and b"no ldconfig on the host" in proc.stderr
    assert not (tmp_path / TREE / "bundle/rootfs/etc/ld.so.conf.d").exists()


def test_the_records_of_a_stale_spec_are_refused_as_python_does(
    pair: Pair, tmp_path: Path, test_library: Path
) -> None:
    """A generated spec's records in the container's env (each GPU's /proc entry, each MIG
    layout: nvhook.devices.miglayout): holding, the native hook does the call itself; one that
    no longer holds (a GPU gone, a re-layout), it hands over and Python refuses with its line,
    before any step touched the rootfs."""
    proc_nvidia = tmp_path / "proc/driver/nvidia"  # a mock root's: records name paths there
    caps = proc_nvidia / "capabilities/gpu0/mig"  # GPU 0's MIG layout as the driver lists it
    for gi, ci in ((2, 0), (3, 0), (4, 0), (10, 0)):
        (caps / f"gi{gi}" / f"ci{ci}").mkdir(parents=True)
    (caps / "gi10x").mkdir()  # not an instance's name
    entry = proc_nvidia / "gpus/0000:07:00.0"
    entry.mkdir(parents=True)
    argv = [*CC, "--link", LINK, *FOLDER]
    holding = [f"NVHOOK_GPU_0=GPU-a@{entry}", f"NVHOOK_MIG_LAYOUT_0=2.0,3.0,4.0,10.0@{caps}"]
    not_records = ["NVHOOK_GPU_x=GPU-a@/gone", "NVHOOK_GPU_1=GPU-b", "NVHOOK_MIG_LAYOUT_=@/gone"]
    assert not compare(pair, tmp_path, base, test_library, argv, holding + not_records)
    assert (tmp_path / TREE / "bundle/rootfs/etc/ld.so.cache").is_file()
    stale = {
        "gone": (
            [*holding, f"NVHOOK_GPU_5=GPU-c@{proc_nvidia}/gpus/0000:90:00.0"],
            f"GPU 5 (GPU-c) is gone: {proc_nvidia}/gpus/0000:90:00.0 does not exist; its CDI spec",
        ),
        "re-laid": (
            [f"NVHOOK_MIG_LAYOUT_0=2.0,3.0,4.0@{caps}"],
            "GPU 0's MIG layout changed (GPU.compute instances 2.0,3.0,4.0 then, now "
            "2.0,3.0,4.0,10.0), so the container's MIG device names mean other instances; its",
        ),
        "mig off": (
            [f"NVHOOK_MIG_LAYOUT_1=2.0@{proc_nvidia}/capabilities/gpu1/mig"],
            "(GPU.compute instances 2.0 then, MIG mode is off or the GPU is gone)",
        ),
    }
    for env, line in stale.values():
        assert compare(pair, tmp_path, base, test_library, argv, env)  # handed over
        bundle = _lay_out(tmp_path / "python", base, test_library, env)
        proc = _run(pair.python, argv, state_json(bundle))
        assert proc.returncode == ExitCode.HOOK
        (err,) = proc.stderr.decode().splitlines()
        assert err.startswith("nvhook-hook create-container: ") and line in err, err
        assert err.endswith("run: nvhook cdi generate (nvhook watch rewrites the spec within a "
                            "second of the change), then retry")  # fmt: skip
        assert not (bundle / "rootfs/etc/ld.so.cache").exists()
        shutil.rmtree(tmp_path / "python")


def test_an_images_own_records_cannot_point_the_hook_at_host_paths(
    pair: Pair, tmp_path: Path, test_library: Path
) -> None:
    """The records come from the container's env, which the image's own Env is part of, and
    the hook runs as root on the host: an entry that names a path of another shape (not a
    GPU's /proc entry, not the mig directory of the entry's own GPU minor, or not a clean
    absolute path) is no record, so neither hook looks there nor refuses the call (a refusal
    would tell the image that the host path does not exist)."""
    proc_nvidia = tmp_path / "proc/driver/nvidia"
    (proc_nvidia / "capabilities/gpu0/mig/gi1/ci0").mkdir(parents=True)
    argv = [*CC, "--link", LINK, *FOLDER]
    hostile = [
        "NVHOOK_GPU_0=GPU-a@/etc/nvhook-no-such-file",
        "NVHOOK_GPU_1=GPU-b@/root/../proc/driver/nvidia/gpus/0000:90:00.0",
        "NVHOOK_GPU_2=GPU-c@relative/proc/driver/nvidia/gpus/0000:90:00.0",
        "NVHOOK_GPU_3=GPU-d@/proc/driver/nvidia/gpus/0000:90:00.0/..",
        "NVHOOK_GPU_4=GPU-e@/proc/driver/nvidia/gpus/0000:90:00.0x",
        "NVHOOK_GPU_5=GPU-f@/proc/driver/nvidia/gpus/0000:90:00.8",
        "NVHOOK_GPU_6=GPU-g@//proc/driver/nvidia/gpus/0000:90:00.0",
        "NVHOOK_MIG_LAYOUT_0=9.9@/root",
        f"NVHOOK_MIG_LAYOUT_0=9.9@{proc_nvidia}/capabilities/gpu1/mig",  # another GPU's
        f"NVHOOK_MIG_LAYOUT_0=9.9@{proc_nvidia}/capabilities/gpu0/mig/.",
        f"NVHOOK_MIG_LAYOUT_0=9.9@{proc_nvidia}/capabilities/./gpu0/mig",
    ]
    for entry in hostile:
        assert not compare(pair, tmp_path, base, test_library, argv, [entry]), entry
        assert (tmp_path / TREE / "bundle/rootfs/etc/ld.so.cache").is_file(), entry
    # the same records of a record's shape are looked at, and refused
    for entry in (
        f"NVHOOK_GPU_0=GPU-a@{proc_nvidia}/gpus/0000:90:00.0",
        f"NVHOOK_MIG_LAYOUT_0=9.9@{proc_nvidia}/capabilities/gpu0/mig",
    ):
        assert compare(pair, tmp_path, base, test_library, argv, [entry]), entry
