"""Hostile images against ``nvhook-hook prestart`` (hook mode), through plain runc.

The attacks of ``test_hook_attacks.py`` (which target the createContainer hooks the shim
injects), repeated against the prestart hook: every bundle carries the hook exactly as
dockerd writes it for ``--gpus`` (``[nvidia-container-runtime-hook, prestart]``, no
``env``: it inherits runc's environment, where the test puts ``NVHOOK_CONFIG``), and asks
for GPU 0 of the dgx-a100 mock. The hook then makes the device nodes, the cgroup rules, the
driver's bind mounts into ``/usr/lib/x86_64-linux-gnu``, the SONAME links and the ld cache
itself, as root on the host, over a rootfs the image controls. Each test checks the host
(snapshots of the directories an image aims at, marker files a payload would write), not
the hook's word, and comes with a control showing the payload or the symlink does reach the
host when nothing stops it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nvhook.errors import HookError
from nvhook.rootfs.safepath import open_root
from tests.e2e.attack_support import (
    FORMS,
    LD_FILES,
    LIBDIR,
    cache_entries,
    escape_forms,
    host_tree,
    hostile_bundle,
    interpreter_of,
    markers,
    snapshot,
)
from tests.e2e.conftest import ELF_MAGIC, NVIDIA_MAJOR, Shim
from tests.e2e.test_hook_attacks import ENV_CASES, GPU0, HOST_PATH, plant
from tests.e2e.test_prestart_runc import docker_hook, legacy_hook_path
from tests.nvhook.hook.conftest import Flipper
from tests.support.containers import Runc, require, unique_id

if TYPE_CHECKING:
    from nvhook.rootfs.safepath import Impl

pytestmark = [pytest.mark.root, pytest.mark.runtime]

#: The container's command: libcuda.so.1's first bytes (the bind mount and the SONAME link),
#: then whether GPU 0's node is there and allowed (ENXIO: the mock has no driver behind it).
PROBE_GPU0 = [
    "sh",
    "-c",
    f"head -c 4 {LIBDIR}/libcuda.so.1 | od -An -tx1; "
    "cat /dev/nvidia0 2>&1 >/dev/null | grep -q 'No such device or address' && echo GPU0-OK",
]


@pytest.fixture
def hook_runc(shim: Shim, tmp_path: Path) -> Iterator[Runc]:
    """Plain runc whose environment (inherited by env-less hooks) names the shim's config."""
    helper = Runc(tmp_path / "state", binary=require("runc"), env=shim.env)
    try:
        yield helper
    finally:
        helper.cleanup()


def add_prestart_hook(bundle: Path) -> None:
    """Put dockerd's ``--gpus`` hook into ``bundle``'s config.json."""
    config = bundle / "config.json"
    spec = json.loads(config.read_text())
    spec.setdefault("hooks", {}).setdefault("prestart", []).append(docker_hook())
    config.write_text(json.dumps(spec))


def gpu_bundle(directory: Path, busybox: Path, args: list[str], env: list[str]) -> Path:
    bundle = hostile_bundle(directory, busybox, args, env)
    add_prestart_hook(bundle)
    return bundle


def refused(stderr: str, message: str) -> None:
    """The container was not created because the prestart hook said exactly ``message``."""
    assert "error running hook" in stderr, stderr
    assert f"exit status 11, stdout: , stderr: nvhook-hook prestart: {message}\\n" in stderr, stderr


#: The escape forms of :func:`escape_forms`, and ``/proc/1/root…``: at prestart, the
#: container's pid 1 is runc init, not yet ``pivot_root``-ed, whose root is the host's.
PRESTART_FORMS = (*FORMS, "proc-1-root")


def forms(rootfs: Path, target: Path) -> dict[str, str]:
    """Each of :data:`PRESTART_FORMS`: a symlink target reaching the host's ``target``."""
    targets = [*escape_forms(rootfs, target), f"/proc/1/root{target}"]
    return dict(zip(PRESTART_FORMS, targets, strict=True))


def not_created(runc: Runc, cid: str) -> None:
    assert Runc(runc.root).call("state", cid).returncode != 0


def refusal(path: str, rootfs: Path, target: str, form: str) -> str:
    """The hook's words for a ``path`` linked to ``target`` in one of the /proc forms: the
    container's procfs has no ``self`` for the hook (a process of the host's pid namespace),
    and ``1/root`` is a magic link, which resolution in the root refuses."""
    if form == "proc-self-root":
        return (
            f"refusing to create {path} in {rootfs}: {path} is a symlink to {target}, "
            "which does not exist"
        )
    assert form == "proc-1-root"
    return f"refusing {path} in {rootfs}: a symlink loop or a /proc magic link (ELOOP)"


def started_with_gpu0(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [*ELF_MAGIC.split(), "GPU0-OK"], result.stdout


# --------------------------------------------------------------------------- image env


@pytest.mark.parametrize("case", list(ENV_CASES))
def test_image_env_never_reaches_the_prestart_hook(
    case: str, hook_runc: Runc, shim: Shim, busybox_copy: Path, tmp_path: Path
) -> None:
    """The image's ``LD_PRELOAD``, ``LD_LIBRARY_PATH``, ``PYTHONPATH`` (+``PYTHONSTARTUP``)
    and ``PYTHONHOME`` name payloads in the rootfs by their absolute host path. runc gives
    a prestart hook its own environment, never the container's, and the hook's work in the
    container's mount namespace (ldconfig included) takes none of the image's: no payload
    runs. Controls: a host program honouring each variable runs its payload; for the
    loader's variables, the same hook given them in *runc's* environment (which an env-less
    hook inherits) loads the payload into the hook's interpreter."""
    marks = tmp_path / "markers"
    bundle = tmp_path / "b"
    rootfs = (bundle / "rootfs").resolve()
    rootfs.mkdir(parents=True)
    interpreter = interpreter_of(legacy_hook_path())
    planted = [plant(var, rootfs, marks, interpreter) for var in ENV_CASES[case]]
    absolute = {p.var: p.value.replace("/proc/self/cwd", str(rootfs), 1) for p in planted}
    image_env = [f"{var}={value}" for var, value in absolute.items()]
    gpu_bundle(bundle, Path(busybox_copy), PROBE_GPU0, [GPU0, *image_env])

    result = hook_runc.run(bundle, unique_id("env"))

    started_with_gpu0(result)
    assert "libcuda.so.1" in cache_entries(rootfs / "etc" / "ld.so.cache")
    assert markers(marks) == {}

    # control: a host program that honours the variable runs the payload from the rootfs
    for p in planted:
        proc = subprocess.run(
            p.control, env={"PATH": HOST_PATH, p.var: absolute[p.var]}, cwd="/",
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 0 or not p.control_works, proc.stderr
        assert any(name.startswith(p.var) for name in markers(marks)), (p, proc.stderr)
    if not case.startswith("LD_"):
        return  # the launcher's -I ignores PYTHON* even from runc's env: no runc control
    for item in marks.iterdir():
        item.unlink()
    tainted = Runc(tmp_path / "tainted", binary=hook_runc.binary, env={**shim.env, **absolute})
    try:
        result = tainted.run(bundle, unique_id("env"))
    finally:
        tainted.cleanup()
    loaded_by = {line for text in markers(marks).values() for line in text.splitlines()}
    assert os.path.realpath(interpreter) in loaded_by, (loaded_by, result.stderr)


# --------------------------------------------------------------------------- symlinks to the host


#: What runc 1.1.5 itself creates through a symlinked ``/dev`` before any hook runs: its
#: ``/dev`` links, made by path (``os.Symlink(src, rootfs + "/dev/fd")``), so they follow the
#: image's link onto the host. :func:`test_dev_symlinked_to_a_host_dir` shows it without nvhook.
RUNC_DEV_LINKS = ["fd", "ptmx", "stderr", "stdin", "stdout"]


@pytest.mark.parametrize("form", PRESTART_FORMS)
def test_dev_symlinked_to_a_host_dir(
    form: str, hook_runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    """``/dev`` is a link to a host directory. runc resolves it inside the rootfs and mounts
    its tmpfs there; the hook makes its nodes through the same link, resolved inside the
    rootfs, so the host directory gets no node of the hook's.

    The host directory is *not* unchanged, and that is runc's doing: runc 1.1.5 makes its
    ``/dev/fd``, ``/dev/ptmx`` and ``/dev/std*`` links by path, through the image's link.
    The control runs the same bundle without the hook and finds exactly the same entries;
    no hook can prevent it (runc makes them before the prestart hooks run): nodes should
    run a runc that resolves ``/dev`` inside the rootfs."""
    host = tmp_path / "host"
    (host / "dev").mkdir(parents=True)
    (host / "dev" / "keep").write_text("host\n")
    bundle = gpu_bundle(tmp_path / "b", busybox_copy, PROBE_GPU0, [GPU0])
    rootfs = (bundle / "rootfs").resolve()
    (rootfs / "dev").rmdir()
    target = forms(rootfs, host / "dev")[form]
    (rootfs / "dev").symlink_to(target)
    cid = unique_id("dev")

    result = hook_runc.run(bundle, cid)

    # runc's links follow the image's link, except through /proc/1, which is the host's
    # init to runc (not readable here) and the container's to the hook
    runc_links = [] if form == "proc-1-root" else RUNC_DEV_LINKS
    after = sorted(p.name for p in (host / "dev").iterdir())
    assert after == sorted(["keep", *runc_links])
    assert (host / "dev" / "keep").read_text() == "host\n"
    assert all((host / "dev" / n).is_symlink() for n in runc_links)
    if form in ("absolute", "dotdot"):
        started_with_gpu0(result)  # the nodes are on runc's tmpfs, where the link leads inside
    elif form == "proc-self-root":
        refused(result.stderr, refusal("/dev", rootfs, target, form))
        not_created(hook_runc, cid)
    else:  # runc gives up before the hooks: /proc/1 is not readable on this host
        assert "error setting up ptmx" in result.stderr, result.stderr
        assert "error running hook" not in result.stderr
        not_created(hook_runc, cid)
    if not runc_links:
        return
    # control: runc alone, same image, no hook: the same entries appear on the host
    for name in runc_links:
        (host / "dev" / name).unlink()
    spec = json.loads((bundle / "config.json").read_text())
    del spec["hooks"]
    spec["process"]["args"] = ["true"]
    (bundle / "config.json").write_text(json.dumps(spec))
    plain = Runc(tmp_path / "plain", binary=hook_runc.binary)
    try:
        assert plain.run(bundle, unique_id("dev")).returncode == 0
    finally:
        plain.cleanup()
    assert sorted(p.name for p in (host / "dev").iterdir()) == after


@pytest.mark.parametrize("form", PRESTART_FORMS)
def test_lib_dir_symlinked_to_a_host_dir(
    form: str, hook_runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    """``/usr/lib/x86_64-linux-gnu`` points at a host directory: the hook's bind mounts,
    links and ld cache all land where the link leads *inside* the rootfs."""
    host = host_tree(tmp_path / "host")
    bundle = gpu_bundle(tmp_path / "b", busybox_copy, PROBE_GPU0, [GPU0])
    rootfs = (bundle / "rootfs").resolve()
    libdir = rootfs / LIBDIR.lstrip("/")
    libdir.parent.mkdir(parents=True)
    target = forms(rootfs, host / "lib")[form]
    libdir.symlink_to(target)
    inside = rootfs / str(host / "lib").lstrip("/")  # where the link leads, in the root
    inside.mkdir(parents=True)
    before = snapshot(host)
    cid = unique_id("libdir")

    result = hook_runc.run(bundle, cid)

    assert snapshot(host) == before
    if form not in ("absolute", "dotdot"):
        refused(result.stderr, refusal(LIBDIR, rootfs, target, form))
        not_created(hook_runc, cid)
        assert os.listdir(inside) == []
        return
    started_with_gpu0(result)
    assert os.readlink(inside / "libcuda.so.1") == "libcuda.so.550.54.15"
    assert os.readlink(inside / "libcuda.so") == "libcuda.so.1"
    # the hook's bind mounts were in the container's mount namespace only
    assert (inside / "libcuda.so.550.54.15").stat().st_size == 0
    entries = cache_entries(rootfs / "etc" / "ld.so.cache")
    assert entries["libcuda.so.1"] == f"{LIBDIR}/libcuda.so.1"


LD_CASES = [(name, form) for name in LD_FILES for form in PRESTART_FORMS]


@pytest.mark.parametrize(("name", "form"), LD_CASES, ids=[f"{n}-{f}" for n, f in LD_CASES])
def test_ld_files_symlinked_to_host_files(
    name: str, form: str, hook_runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    """``/etc/ld.so.conf.d``, ``/etc/ld.so.cache`` or ``/etc/ld.so.conf`` point at the
    host's. The outcomes of the createContainer hook's test, with ``/proc/1/root`` as the
    magic link (the hook sees no ``/proc/self`` in the container's procfs, so that form
    dangles): the cache is replaced in the rootfs whatever the form; ld.so.conf is replaced
    by a new file when the link leads nowhere in the root, refused as a magic link;
    ld.so.conf.d, which the hook must create, is refused in every form."""
    host = host_tree(tmp_path / "host")
    bundle = gpu_bundle(tmp_path / "b", busybox_copy, PROBE_GPU0, [GPU0])
    rootfs = (bundle / "rootfs").resolve()
    path, aim = LD_FILES[name]
    target = forms(rootfs, host / aim)[form]
    link = rootfs / path.lstrip("/")
    link.symlink_to(target)
    before = snapshot(host)
    cid = unique_id(name)

    result = hook_runc.run(bundle, cid)

    assert snapshot(host) == before
    if name != "cache" and (name == "confd" or form == "proc-1-root"):
        if form == "proc-1-root":
            refused(result.stderr, refusal(path, rootfs, target, form))
        else:  # even through /proc/self: the container's procfs has no self for the hook
            refused(
                result.stderr,
                f"refusing to create {path} in {rootfs}: {path} is a symlink to {target}, "
                "which does not exist",
            )
        not_created(hook_runc, cid)
        assert link.is_symlink() and os.readlink(link) == target
        return
    started_with_gpu0(result)
    assert not link.is_symlink() and link.is_file()
    entries = cache_entries(rootfs / "etc" / "ld.so.cache")
    assert entries["libcuda.so.1"] == f"{LIBDIR}/libcuda.so.1"
    if name == "conf":
        assert link.read_text() == "include /etc/ld.so.conf.d/*.conf\n"


# --------------------------------------------------------------------------- races

RUNC_TRIES = 30  # containers created through runc and the prestart hook while the flipper runs
DIRECT_TRIES = 150  # device nodes made by the hook's own code while the flipper runs

#: The nodes of the direct tier: one in /dev, one in a directory the hook creates there.
RACE_NODES = [
    {"path": "/dev/nvidia0", "type": "c", "major": NVIDIA_MAJOR, "minor": 0},
    {"path": "/dev/nvidia-caps/nvidia-cap1", "type": "c", "major": 511, "minor": 1},
]


@pytest.mark.slow
def test_symlinks_swapped_in_while_the_hook_runs_never_escape(
    hook_runc: Runc, busybox_copy: Path, tmp_path: Path
) -> None:
    """A racing process flips directories of the rootfs between real directories and
    symlinks to host directories (every form, in turn) while the hook works:

    1. the library directory (the hook's bind mounts, links and ld cache: runc makes
       nothing there in hook mode) and ``/etc/ld.so.conf.d``, while containers are created
       through runc with the prestart hook, a fixed number of times;
    2. ``/dev`` while the hook's node-making code runs directly, a fixed number of times,
       with both safepath implementations. Not through runc: a ``/dev`` swapped under
       runc 1.1.5 makes runc itself write its ``/dev`` links and nodes on the host by path
       (see :func:`test_dev_symlinked_to_a_host_dir`).

    The host never changes. The direct tries made nodes in some of the tries; whether any
    runc try starts depends on how the swaps fall (on a quiet machine they can refuse
    every one), so a control container of the same shape, with nothing flipping, must start:
    the refusals come from the race, not from a bundle that never works."""
    from nvhook.hook.mountns import _mknod  # the hook's own code, run on the host here

    host = host_tree(tmp_path / "host")
    (host / "dev" / "nvidia-caps").mkdir(parents=True)
    bundle = gpu_bundle(tmp_path / "b", busybox_copy, ["true"], [GPU0])
    rootfs = (bundle / "rootfs").resolve()
    confd = rootfs / "etc" / "ld.so.conf.d"
    libdir = rootfs / LIBDIR.lstrip("/")
    confd.mkdir()
    libdir.mkdir(parents=True)
    before = snapshot(host)
    outcomes: dict[str, int] = {}
    errors: set[str] = set()

    def count(key: str) -> None:
        outcomes[key] = outcomes.get(key, 0) + 1

    targets = {
        confd: list(forms(rootfs, host / "confd").values()),
        libdir: list(forms(rootfs, host / "lib").values()),
    }
    with Flipper(targets, min_swaps=20) as flipper:
        for _ in range(RUNC_TRIES):
            result = hook_runc.run(bundle, unique_id("race"), timeout=60)
            if result.returncode == 0:
                count("runc-started")
            else:
                count("runc-failed")
                errors.add(result.stderr.rsplit("stderr: ", 1)[-1][:200])
    swaps = flipper.swaps
    dev = rootfs / "dev"
    with Flipper({dev: list(forms(rootfs, host / "dev").values())}, min_swaps=50) as flipper:
        for i in range(DIRECT_TRIES):
            impl: Impl = "openat2" if i % 2 else "walk"
            try:
                with open_root(str(rootfs), impl=impl) as root:
                    for node in RACE_NODES:
                        _mknod(root, node)
                count("direct-made")
            except (HookError, OSError) as e:
                count("direct-refused")
                errors.add(str(e)[:200])
    swaps += flipper.swaps
    assert snapshot(host) == before, (outcomes, sorted(errors))
    assert outcomes.get("runc-started", 0) + outcomes.get("runc-failed", 0) == RUNC_TRIES
    assert outcomes.get("direct-made", 0) > 0, (outcomes, sorted(errors))
    control = gpu_bundle(tmp_path / "control", busybox_copy, ["true"], [GPU0])
    ((control / "rootfs").resolve() / LIBDIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
    result = hook_runc.run(control, unique_id("control"), timeout=60)
    assert result.returncode == 0, result.stderr
    assert swaps >= 70
