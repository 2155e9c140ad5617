"""Hostile images against the hooks the shim injects, through ``nvhook-runtime`` and real runc.

Every container asks for GPU 0 of the dgx-a100 mock (``NVIDIA_VISIBLE_DEVICES=0``), so the
shim bind-mounts the driver's libraries into ``/usr/lib/x86_64-linux-gnu`` and injects the
``create-container`` createContainer hook (links, then the ld cache), which runs as root on the
host with the image's rootfs under them. Each test then checks the host, not the hook's
word: marker files that a payload would write, snapshots of the host directories an image
aims at (names, contents, modes, mtimes). Every hook found in the resulting config.json
goes through :func:`validate_injected_hook`.

Each attack comes with a control showing its payload or its symlinks do reach the host when
the defence is not there, so no test passes because the attack was a dud.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from nvhook.discover.hooks import HOOK_ENV, default_hook_path, symlinks_hook
from nvhook.errors import HookError
from nvhook.hook.args import parse_args
from nvhook.hook.create_symlinks import create_symlinks, parse_link
from nvhook.hook.update_ldcache import LDCONFIG_MAX_DATA, LDCONFIG_TIMEOUT_S, update_ldcache
from tests.e2e.attack_support import (
    FORMS,
    LD_FILES,
    LIBDIR,
    PAYLOAD_C,
    cache_entries,
    compile_c,
    escape_forms,
    host_tree,
    hostile_bundle,
    injected_hooks,
    interpreter_of,
    markers,
    memory_peak_and_ooms,
    python_launcher,
    snapshot,
)
from tests.e2e.conftest import ELF_MAGIC
from tests.nvhook.hook.conftest import Flipper
from tests.support.containers import Runc, unique_id

if TYPE_CHECKING:
    from nvhook.rootfs.safepath import Impl

pytestmark = [pytest.mark.root, pytest.mark.runtime]

GPU0 = "NVIDIA_VISIBLE_DEVICES=0"
#: The container's command: the first bytes of libcuda.so.1, through the SONAME link.
READ_LIBCUDA = ["sh", "-c", f"head -c 4 {LIBDIR}/libcuda.so.1 | od -An -tx1"]
HOST_PATH = dict(e.split("=", 1) for e in HOOK_ENV)["PATH"]


def refused(stderr: str, command: str, message: str) -> None:
    """The container was not created because hook ``command`` said exactly ``message``."""
    assert "error running hook" in stderr, stderr
    assert f"exit status 11, stdout: , stderr: nvhook-hook {command}: {message}\\n" in stderr, (
        stderr
    )


def not_created(runc: Runc, cid: str) -> None:
    assert Runc(runc.root).call("state", cid).returncode != 0


# --------------------------------------------------------------------------- image env


#: Each case: the variables the image sets. PYTHONSTARTUP rides along with PYTHONPATH: CPython
#: reads it only when it takes commands from an interactive stdin, which a hook's launcher (a
#: script) never does, so alone no broken defence would let it act and its test could not fail.
ENV_CASES: dict[str, tuple[str, ...]] = {
    "LD_PRELOAD": ("LD_PRELOAD",),
    "LD_LIBRARY_PATH": ("LD_LIBRARY_PATH",),
    "PYTHONPATH+PYTHONSTARTUP": ("PYTHONPATH", "PYTHONSTARTUP"),
    "PYTHONHOME": ("PYTHONHOME",),
}


@dataclass(frozen=True)
class Planted:
    """A payload in the rootfs, the value the image gives ``var`` to reach it, and a host
    command that honours ``var`` (the control: the payload runs)."""

    var: str
    value: str
    control: list[str]
    control_works: bool = True  # whether the control command itself exits 0


def plant(var: str, rootfs: Path, marks: Path, interpreter: str) -> Planted:
    """Put ``var``'s payload into ``rootfs``; it creates ``marks/<var>…`` when it runs.

    A createContainer hook's cwd is the rootfs, so ``/proc/self/cwd/…`` reaches the payload
    from the host (the CVE-2025-23266 form).
    """
    marks.mkdir(exist_ok=True)
    mark = str(marks / var)

    def planter(name: str) -> str:  # posix, not open(): early enough for encodings
        path = f"{mark}.{name}"
        return f"import posix\nposix.close(posix.open({path!r}, posix.O_WRONLY | posix.O_CREAT))\n"

    if var == "LD_PRELOAD":
        compile_c(PAYLOAD_C, rootfs / "evil.so", "-shared", "-fPIC", f'-DMARKER="{mark}"')
        true = shutil.which("true", path=HOST_PATH)
        assert true is not None
        return Planted(var, "/proc/self/cwd/evil.so", [true])
    if var == "LD_LIBRARY_PATH":
        # libm.so.6, which libpython needs: a proxy that runs the payload and hands every
        # symbol to the host's real libm (its DT_NEEDED, a link to it), so Python still works
        evil = rootfs / "evillib"
        evil.mkdir()
        real = evil / "libnvhook-real-m.so"
        compile_c("", real, "-shared", "-fPIC", "-Wl,-soname,libnvhook-real-m.so")
        flags = ("-shared", "-fPIC", f'-DMARKER="{mark}"', f"-L{evil}", "-Wl,--no-as-needed")
        compile_c(PAYLOAD_C, evil / "libm.so.6", *flags, "-l:libnvhook-real-m.so")
        real.unlink()
        real.symlink_to(_host_library(interpreter, "libm.so.6"))
        return Planted(var, "/proc/self/cwd/evillib", [interpreter, "-I", "-c", "pass"])
    if var == "PYTHONPATH":
        pkg = rootfs / "evilpy"
        (pkg / "ctypes").mkdir(parents=True)
        (pkg / "sitecustomize.py").write_text(planter("sitecustomize"))
        (pkg / "json.py").write_text(planter("json"))
        # the hooks import ctypes (safepath): a shadow that plants, then hands over the real one
        (pkg / "ctypes" / "__init__.py").write_text(
            planter("ctypes")
            + "import importlib, sys\n"
            + "sys.path = [p for p in sys.path if 'evilpy' not in p]\n"
            + "del sys.modules['ctypes']\n"
            + "sys.modules['ctypes'] = importlib.import_module('ctypes')\n"
        )
        return Planted(var, "/proc/self/cwd/evilpy", [interpreter, "-c", "import ctypes"])
    if var == "PYTHONSTARTUP":
        (rootfs / "startup.py").write_text(planter("startup"))
        return Planted(var, "/proc/self/cwd/startup.py", [interpreter, "-i"])
    assert var == "PYTHONHOME"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    encodings = rootfs / "evilhome" / "lib" / version / "encodings"
    encodings.mkdir(parents=True)
    (encodings / "__init__.py").write_text(planter("encodings"))
    # the planted stdlib is not a working one: the control's Python dies after the payload
    return Planted(var, "/proc/self/cwd/evilhome", [interpreter, "-c", "pass"], False)


def _host_library(program: str, soname: str) -> str:
    out = subprocess.run(["ldd", program], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        name, _, rest = line.strip().partition(" => ")
        if name == soname:
            return rest.split(" (")[0]
    pytest.fail(f"{program} does not load {soname}:\n{out}", pytrace=False)


@pytest.mark.parametrize("case", list(ENV_CASES))
def test_image_env_never_reaches_the_hooks(
    case: str, shim_runc: Runc, runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    marks = tmp_path / "markers"
    bundle = tmp_path / "b"
    rootfs = bundle / "rootfs"
    rootfs.mkdir(parents=True)
    interpreter = interpreter_of(default_hook_path())
    planted = [plant(var, rootfs, marks, interpreter) for var in ENV_CASES[case]]
    image_env = [f"{p.var}={p.value}" for p in planted]
    hostile_bundle(bundle, busybox_copy, READ_LIBCUDA, [GPU0, *image_env])

    result = shim_runc.run(bundle)

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ELF_MAGIC.split()  # both hooks ran: the SONAME link
    assert "libcuda.so.1" in cache_entries(rootfs / "etc" / "ld.so.cache")
    hooks = injected_hooks(bundle)
    assert markers(marks) == {}

    # control: a host program that honours the variable runs the payload from the rootfs
    for p in planted:
        proc = subprocess.run(
            p.control, env={"PATH": HOST_PATH, p.var: p.value}, cwd=rootfs,
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 0 or not p.control_works, proc.stderr
        assert any(name.startswith(p.var) for name in markers(marks)), (p, proc.stderr)
    if not case.startswith("LD_"):
        return
    # control through runc: the same hooks without their `env` get the image's env (runc
    # 1.1.5 gives a createContainer hook without env the container's process.env), and the
    # loader acts before Python's -I can
    spec = json.loads((bundle / "config.json").read_text())
    installed = hooks[0]["path"]
    launcher = python_launcher(installed)  # the installed hook itself when it is Python
    for program in dict.fromkeys([installed, launcher]):
        for item in marks.iterdir():
            item.unlink()
        for hook in spec["hooks"]["createContainer"]:
            hook.pop("env", None)
            hook["path"] = program
        (bundle / "config.json").write_text(json.dumps(spec))
        result = runc.run(bundle)
        assert result.returncode == 0, result.stderr
        loaded_by = {line for text in markers(marks).values() for line in text.splitlines()}
        if program == launcher:  # the loader of the launcher's interpreter reads it
            assert os.path.realpath(interpreter_of(launcher)) in loaded_by, loaded_by
        else:  # the native hook is static: no loader of its own reads the variable
            assert loaded_by == set(), loaded_by


# --------------------------------------------------------------------------- symlinks to the host


def _start(shim_runc: Runc, bundle: Path, cid: str) -> subprocess.CompletedProcess[str]:
    result = shim_runc.run(bundle, cid)
    injected_hooks(bundle)
    return result


@pytest.mark.parametrize("form", FORMS)
def test_lib_dir_symlinked_to_a_host_dir(
    form: str, shim_runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    """``/usr/lib/x86_64-linux-gnu`` points at a host directory. runc resolves the mount
    targets inside the rootfs; the hooks do too. Absolute and ``..`` forms: the container
    starts with the libraries where the link leads *inside* the rootfs. The procfs form
    (``/proc/self/root/…``, a magic link once the container's /proc is mounted) is refused
    by the links step of create-container, naming the directory."""
    host = host_tree(tmp_path / "host")
    bundle = hostile_bundle(tmp_path / "b", busybox_copy, READ_LIBCUDA, [GPU0])
    rootfs = (bundle / "rootfs").resolve()
    libdir = rootfs / LIBDIR.lstrip("/")
    libdir.parent.mkdir(parents=True)
    libdir.symlink_to(escape_forms(rootfs, host / "lib")[FORMS.index(form)])
    before = snapshot(host)
    cid = unique_id("libdir")

    result = _start(shim_runc, bundle, cid)

    assert snapshot(host) == before
    inside = rootfs / str(host / "lib").lstrip("/")  # where the link leads, in the root
    assert (inside / "libcuda.so.550.54.15").is_file()  # runc's mount target, inside
    if form == "proc-self-root":
        message = f"refusing {LIBDIR} in {rootfs}: a symlink loop or a /proc magic link (ELOOP)"
        refused(result.stderr, "create-container", message)
        not_created(shim_runc, cid)
        assert not (rootfs / "etc" / "ld.so.cache").exists()
        return
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ELF_MAGIC.split()
    assert os.readlink(inside / "libcuda.so.1") == "libcuda.so.550.54.15"
    assert os.readlink(inside / "libcuda.so") == "libcuda.so.1"
    entries = cache_entries(rootfs / "etc" / "ld.so.cache")
    assert entries["libcuda.so.1"] == f"{LIBDIR}/libcuda.so.1"


LD_CASES = [(name, form) for name in LD_FILES for form in FORMS]


@pytest.mark.parametrize(("name", "form"), LD_CASES, ids=[f"{n}-{f}" for n, f in LD_CASES])
def test_ld_files_symlinked_to_host_files(
    name: str, form: str, shim_runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    """``/etc/ld.so.conf.d``, ``/etc/ld.so.cache`` or ``/etc/ld.so.conf`` point at the
    host's. Outcomes, each asserted exactly: the cache is replaced in the rootfs by ldconfig
    (its new file renamed over the link, whatever the link's form); ld.so.conf, which the
    hook reads, is replaced by a new one when the link leads nowhere in the root, and
    refused as a magic link; ld.so.conf.d, a directory the hook must create, is refused
    when the link leads nowhere in the root, and as a magic link."""
    host = host_tree(tmp_path / "host")
    bundle = hostile_bundle(tmp_path / "b", busybox_copy, READ_LIBCUDA, [GPU0])
    rootfs = (bundle / "rootfs").resolve()
    path, aim = LD_FILES[name]
    target = escape_forms(rootfs, host / aim)[FORMS.index(form)]
    link = rootfs / path.lstrip("/")
    link.symlink_to(target)
    before = snapshot(host)
    cid = unique_id(name)

    result = _start(shim_runc, bundle, cid)

    assert snapshot(host) == before
    if form == "proc-self-root" and name != "cache":
        message = f"refusing {path} in {rootfs}: a symlink loop or a /proc magic link (ELOOP)"
    elif name == "confd":
        message = (
            f"refusing to create {path} in {rootfs}: {path} is a symlink to {target}, "
            "which does not exist"
        )
    else:
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ELF_MAGIC.split()
        assert not link.is_symlink() and link.is_file()
        entries = cache_entries(rootfs / "etc" / "ld.so.cache")
        assert entries["libcuda.so.1"] == f"{LIBDIR}/libcuda.so.1"
        if name == "conf":
            assert link.read_text() == "include /etc/ld.so.conf.d/*.conf\n"
        return
    refused(result.stderr, "create-container", message)
    not_created(shim_runc, cid)
    assert link.is_symlink() and os.readlink(link) == target


SAFETY_LIMIT = 1 << 30


def test_endless_ld_conf_file_is_cut_short(
    shim_runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    """``/etc/ld.so.conf.d/zero.conf`` is a link to ``/dev/zero`` (runc makes that node
    before the hooks run; an image layer may carry such a node itself). ldconfig, run by
    the hook as root, reads it as one line that never ends. The hooks run in the
    container's cgroup, so the container gets a memory limit here as a safety net: without
    LDCONFIG_MAX_DATA ldconfig fills it and is OOM-killed there (with no limit, the
    host's memory). With it, ldconfig's allocation fails at 256 MiB, glibc's ldconfig takes
    that as the end of the file, and the cache is written as usual."""

    def memory_limit(spec: dict[str, Any]) -> None:
        spec["linux"].setdefault("resources", {})["memory"] = {"limit": SAFETY_LIMIT}

    bundle = hostile_bundle(tmp_path / "b", busybox_copy, ["true"], [GPU0], edit=memory_limit)
    rootfs = bundle / "rootfs"
    (rootfs / "etc" / "ld.so.conf.d").mkdir()
    (rootfs / "etc" / "ld.so.conf.d" / "zero.conf").symlink_to("/dev/zero")
    started = time.monotonic()

    cid = shim_runc.create(bundle)

    assert time.monotonic() - started < LDCONFIG_TIMEOUT_S
    injected_hooks(bundle)
    peak, oom_kills = memory_peak_and_ooms(shim_runc.state(cid)["pid"])
    assert oom_kills == 0
    assert peak < LDCONFIG_MAX_DATA + (256 << 20), peak
    assert cache_entries(rootfs / "etc" / "ld.so.cache")["libcuda.so.1"] == f"{LIBDIR}/libcuda.so.1"


# --------------------------------------------------------------------------- races

RUNC_TRIES = 50  # containers created through the shim and runc while the flipper runs
DIRECT_TRIES = 150  # runs of the hooks' work, called directly, while the flipper runs


def _hook_work(bundle: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """The folders and links of the injected hooks, parsed as nvhook-hook parses them."""
    folders: list[str] = []
    links: list[tuple[str, str]] = []
    for hook in injected_hooks(bundle):
        _, options = parse_args(hook["args"][1:])
        folders += options.get("--folder", [])
        links += [parse_link(spec) for spec in options.get("--link", [])]
    return folders, links


@pytest.mark.slow
def test_symlinks_swapped_in_while_the_hooks_run_never_escape(
    shim_runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    """A racing process flips directories of the rootfs between real directories and
    symlinks to host directories (all three forms, in turn) while the hooks run:

    1. ``/etc/ld.so.conf.d`` while containers are created through the shim and runc;
    2. ``/etc/ld.so.conf.d`` and the library directory while the injected hooks' work (their
       arguments, read from config.json) runs directly, faster, with both safepath
       implementations.

    The host never changes. Not the library directory through runc: runc 1.1.5 creates its
    bind-mount targets by path after resolving them, so a swap in between makes runc itself
    create empty files in the host directory (CVE-2024-45310, fixed in runc 1.1.14), which
    no hook can prevent.
    """
    host = host_tree(tmp_path / "host")
    bundle = hostile_bundle(tmp_path / "b", busybox_copy, ["true"], [GPU0])
    rootfs = (bundle / "rootfs").resolve()
    confd = rootfs / "etc" / "ld.so.conf.d"
    libdir = rootfs / LIBDIR.lstrip("/")
    confd.mkdir()
    libdir.mkdir(parents=True)
    result = shim_runc.run(bundle)  # the shim writes its hooks into config.json
    assert result.returncode == 0, result.stderr
    folders, links = _hook_work(bundle)
    before = snapshot(host)
    outcomes: dict[str, int] = {}
    errors: set[str] = set()

    def count(key: str) -> None:
        outcomes[key] = outcomes.get(key, 0) + 1

    with Flipper({confd: escape_forms(rootfs, host / "confd")}, min_swaps=20) as flipper:
        for _ in range(RUNC_TRIES):
            result = shim_runc.run(bundle, unique_id("race"), timeout=30)
            if result.returncode == 0:
                count("runc-started")
            else:
                count("runc-failed")
                errors.add(result.stderr.rsplit("stderr: ", 1)[-1][:200])
    swaps = flipper.swaps
    for aside in confd.parent.glob(f"{confd.name}.*"):  # what the flipper moved aside
        shutil.rmtree(aside)
    targets = {
        confd: escape_forms(rootfs, host / "confd"),
        libdir: escape_forms(rootfs, host / "lib"),
    }
    with Flipper(targets, min_swaps=50) as flipper:
        for i in range(DIRECT_TRIES):
            impl: Impl = "openat2" if i % 2 else "walk"
            try:
                create_symlinks(str(rootfs), links, impl=impl)
                done = update_ldcache(str(rootfs), folders, impl=impl, log=lambda _: None)
                count(f"direct-{'updated' if done else 'skipped'}")
            except HookError as e:
                count("direct-refused")
                errors.add(str(e)[:200])
    swaps += flipper.swaps
    assert snapshot(host) == before, (outcomes, sorted(errors))
    # every raced runc try ran to an outcome (the same bundle started before the race, so a
    # refusal is the race's: on a quiet machine the swaps can refuse all of them); the hooks
    # did their work directly in some of the tries
    assert outcomes.get("runc-started", 0) + outcomes.get("runc-failed", 0) == RUNC_TRIES
    assert outcomes.get("direct-updated", 0) > 0, (outcomes, sorted(errors))
    assert swaps >= 70


# --------------------------------------------------------------------------- create-symlinks


@pytest.mark.parametrize("case", ["dotdot", "physical-dir"])
def test_create_symlinks_target_outside_the_rootfs_is_refused(
    case: str, shim_runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    """A ``create-symlinks`` hook in config.json (as a CDI spec could bring) whose target
    climbs out of the root: lexically (``../../…``), or from the link's physical directory
    (the image made the library directory a link to ``/``, so ``../etc/passwd``, harmless
    from /usr/lib/x86_64-linux-gnu, would leave the root). runc runs it first; it refuses
    before creating anything, and the container is not created."""
    link = f"{LIBDIR}/libnvhook-evil.so"
    target = "../../../../../../../../etc/shadow" if case == "dotdot" else "../etc/passwd"
    hook = symlinks_hook([(target, link)], hook_path=default_hook_path())
    hooks = {"createContainer": [hook.to_oci()]}
    bundle = hostile_bundle(tmp_path / "b", busybox_copy, ["true"], [GPU0], hooks=hooks)
    rootfs = bundle / "rootfs"
    physical = LIBDIR  # where the link's directory is, once resolved in the root
    if case == "physical-dir":
        (rootfs / "usr" / "lib").mkdir(parents=True)
        (rootfs / LIBDIR.lstrip("/")).symlink_to("/")
        physical = "/"
    cid = unique_id("symlink")

    result = shim_runc.run(bundle, cid)

    commands = ("create-symlinks", "create-container")
    assert injected_hooks(bundle, commands)[0]["args"] == list(hook.args)  # first
    message = (
        f"refusing link {link} -> {target} in {rootfs.resolve()}: the target resolves outside "
        f"the container's root (from {physical})"
    )
    refused(result.stderr, "create-symlinks", message)
    not_created(shim_runc, cid)
    found = subprocess.run(
        ["find", str(rootfs), "-name", "libnvhook-evil.so"], capture_output=True, text=True
    )
    assert found.stdout == ""


# --------------------------------------------------------------------------- CUDA compat


@pytest.mark.parametrize("form", FORMS)
def test_cuda_compat_folder_symlinked_to_a_host_dir(
    form: str, shim_runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    """``/usr/local/cuda`` points at a host directory whose ``compat/`` holds a newer
    ``libcuda``. ``--cuda-compat`` looks inside the rootfs only: the absolute and ``..``
    forms lead to nothing there, so the host's file is never listed in the container's ld
    cache; the procfs form (a magic link once the container's /proc is mounted) is refused.
    Control: followed on the host, each form does reach the host's library."""
    host = host_tree(tmp_path / "host")
    (host / "compat").mkdir()
    (host / "compat" / "libcuda.so.999.1.1").write_bytes(b"\x7fELF the host's")
    bundle = hostile_bundle(tmp_path / "b", busybox_copy, READ_LIBCUDA, [GPU0])
    rootfs = (bundle / "rootfs").resolve()
    cuda = rootfs / "usr/local/cuda"
    cuda.parent.mkdir(parents=True)
    cuda.symlink_to(escape_forms(rootfs, host)[FORMS.index(form)])
    if form != "proc-self-root":  # the control: on the host, the link does lead there
        assert (cuda / "compat" / "libcuda.so.999.1.1").is_file()
    before = snapshot(host)
    cid = unique_id("compat")

    result = _start(shim_runc, bundle, cid)

    assert snapshot(host) == before
    spec = json.loads((bundle / "config.json").read_text())
    (hook,) = spec["hooks"]["createContainer"]
    assert "--cuda-compat" in hook["args"]
    if form == "proc-self-root":
        assert "error running hook" in result.stderr and "magic link" in result.stderr
        not_created(shim_runc, cid)
        return
    assert result.returncode == 0, result.stderr
    conf = (rootfs / "etc/ld.so.conf.d/00-nvhook.conf").read_text()
    assert "compat" not in conf and str(host) not in conf
    assert "999" not in json.dumps(cache_entries(rootfs / "etc" / "ld.so.cache"))


def test_cuda_compat_names_that_are_not_files(
    shim_runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    """A FIFO, a directory and a symlink to ``/dev/zero`` named like a newer compat
    ``libcuda``: none is opened or read (a FIFO would block the hook until its timeout,
    ``/dev/zero`` never end), none is taken for the library, the container starts."""
    bundle = hostile_bundle(tmp_path / "b", busybox_copy, READ_LIBCUDA, [GPU0])
    compat = bundle / "rootfs/usr/local/cuda/compat"
    compat.mkdir(parents=True)
    os.mkfifo(compat / "libcuda.so.999.1.1")
    (compat / "libcuda.so.999.1.2").mkdir()
    (compat / "libcuda.so.999.1.3").symlink_to("/dev/zero")
    start = time.monotonic()

    result = _start(shim_runc, bundle, unique_id("compat-names"))

    assert result.returncode == 0, result.stderr
    assert time.monotonic() - start < 30
    conf = (bundle / "rootfs/etc/ld.so.conf.d/00-nvhook.conf").read_text()
    assert "/usr/local/cuda/compat" not in conf
