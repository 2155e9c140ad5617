"""The createContainer hook under real runc while the image's folders are swapped under it.

``nvhook-hook create-container`` (the Python launcher, and the native hook in front of it)
is the one createContainer hook of a bundle run by plain runc, with the arguments jit
injects: a SONAME link in the library folder, the ld cache over that folder and a second
one, and ``--cuda-compat``. No bind mount goes into those folders (runc 1.1.5 would create
its own mount targets by path there: CVE-2024-45310, not the hook's), so everything done in
them is the hook's. Meanwhile another process keeps swapping the library folder, the second
folder, ``/etc/ld.so.conf.d`` and ``/usr/local/cuda/compat`` between a directory and a
symlink to a host canary tree (absolute, ``..`` and ``/proc/self/root`` forms, in turn),
each path independently of the others (the hook refuses at its first link, so paths that
turned into links together would hide the later steps from the race).

Every run either starts the container (the hook did its work inside the rootfs) or is
refused by the hook with its exit code 11; the canary tree (every entry's kind, content hash
or link target, mode and mtime) is the same before and after. The runs are bounded by count
(``RUNS`` per hook program), the swaps by the time those take (at least ``MIN_SWAPS``
rounds of the four paths); a control run with nothing swapping must start, so refusals
are the race's, not a broken bundle's.

The application profile is raced the same way on its own: its folder swapped between a
directory and a link to a host folder holding a file of the same name, while runc runs
``create-container --application-profile`` for a container with one GPU node.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from nvhook.discover.hooks import create_container_hook
from nvhook.hook.app_profile import PROFILE_PATH, profile
from tests.e2e.attack_support import LIBDIR, escape_forms, host_tree, hostile_bundle, snapshot
from tests.nvhook.hook.conftest import Flipper
from tests.support.containers import Runc, require, unique_id

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]

RUNS = 40  # containers run per hook program while the flipper runs
#: Rounds of the flipper: each flips the four paths through all 16 mixes of link and
#: directory (16 swaps), so 250 rounds are 4,000 swaps.
MIN_SWAPS = 250
SECOND = "/usr/lib/nvhook-race"
COMPAT = "/usr/local/cuda/compat"
CONFD = "/etc/ld.so.conf.d"
HOST_DRIVER = "550.54.14"


def _refused_by_the_hook(stderr: str) -> bool:
    return "error running hook" in stderr and (
        "exit status 11, stdout: , stderr: nvhook-hook create-container: " in stderr
    )


def _race(
    runc: Runc, bundle: Path, targets: dict[Path, list[str]], min_swaps: int
) -> tuple[dict[str, int], list[str], int, int]:
    """:data:`RUNS` containers of ``bundle`` while ``targets`` flip: how many started and how
    many the hook refused, the end of every other failure's stderr, the swaps made while
    the containers ran, and all the swaps."""
    outcomes = {"started": 0, "refused": 0}
    others: list[str] = []
    with Flipper(targets, min_swaps=min_swaps, independent=True) as flipper:
        for _ in range(RUNS):
            result = runc.run(bundle, unique_id("race"), timeout=60)
            if result.returncode == 0:
                outcomes["started"] += 1
            elif _refused_by_the_hook(result.stderr):
                outcomes["refused"] += 1
            else:
                others.append(result.stderr[-400:])
        during = flipper.progress()
    return outcomes, others, during, flipper.swaps


def test_swapped_folders_never_reach_the_host(
    hook_bin: str, busybox_copy: Path, tmp_path: Path
) -> None:
    host = host_tree(tmp_path / "host")
    (host / "compat").mkdir()
    (host / "compat" / "libcuda.so.999.1.1").write_bytes(b"\x7fELF the host's")
    hook = create_container_hook(
        links=[("libcuda.so.1.0", f"{LIBDIR}/libcuda.so.1")],
        folders=[LIBDIR, SECOND],
        cuda_compat=HOST_DRIVER,
        hook_path=hook_bin,
    )
    bundle = hostile_bundle(
        tmp_path / "b", busybox_copy, ["true"], [], hooks={"createContainer": [hook.to_oci()]}
    )
    rootfs = (bundle / "rootfs").resolve()
    paths = {name: rootfs / name.lstrip("/") for name in (LIBDIR, SECOND, CONFD, COMPAT)}
    for path in paths.values():
        path.mkdir(parents=True, exist_ok=True)
    (paths[LIBDIR] / "libcuda.so.1.0").write_bytes(b"\x7fELF the image's")
    runc = Runc(tmp_path / "state", binary=require("runc"))
    try:
        control = runc.run(bundle, unique_id("control"), timeout=60)
        assert control.returncode == 0, control.stderr
        assert (paths[LIBDIR] / "libcuda.so.1").is_symlink()  # the hook did its work

        targets = {
            paths[LIBDIR]: escape_forms(rootfs, host / "lib"),
            paths[SECOND]: escape_forms(rootfs, host / "lib" / "sub"),
            paths[CONFD]: escape_forms(rootfs, host / "confd"),
            paths[COMPAT]: escape_forms(rootfs, host / "compat"),
        }
        before = snapshot(host)
        outcomes, others, during, swaps = _race(runc, bundle, targets, MIN_SWAPS)
        assert snapshot(host) == before, outcomes
        assert others == [], (outcomes, others)
        assert sum(outcomes.values()) == RUNS
        assert during > 0 and swaps >= MIN_SWAPS, (during, swaps)
    finally:
        runc.cleanup()
        for path in paths.values():  # what the flipper moved aside
            for aside in path.parent.glob(f"{path.name}.*"):
                if aside.is_dir() and not aside.is_symlink():
                    shutil.rmtree(aside)


def test_swapped_profile_folder_never_reaches_the_host(
    hook_bin: str, busybox_copy: Path, tmp_path: Path
) -> None:
    host = tmp_path / "host"
    (host / "profiles").mkdir(parents=True)
    name = PROFILE_PATH.rsplit("/", 1)[1]
    (host / "profiles" / name).write_text("the host's\n")
    hook = create_container_hook(application_profile=PROFILE_PATH, hook_path=hook_bin)

    def a_gpu(spec: dict[str, Any]) -> None:  # runc makes the node: its minor is in the mask
        node = {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}
        spec["linux"].setdefault("devices", []).append(node)

    bundle = hostile_bundle(
        tmp_path / "b",
        busybox_copy,
        ["true"],
        [],
        hooks={"createContainer": [hook.to_oci()]},
        edit=a_gpu,
    )
    rootfs = (bundle / "rootfs").resolve()
    folder = rootfs / PROFILE_PATH.rsplit("/", 1)[0].lstrip("/")
    folder.mkdir(parents=True, exist_ok=True)
    runc = Runc(tmp_path / "state", binary=require("runc"))
    try:
        control = runc.run(bundle, unique_id("control"), timeout=60)
        assert control.returncode == 0, control.stderr
        assert (folder / name).read_bytes() == profile(1)  # the hook did its work
        before = snapshot(host)
        targets = {folder: escape_forms(rootfs, host / "profiles")}  # a link half the time
        outcomes, others, during, swaps = _race(runc, bundle, targets, 100)
        assert snapshot(host) == before, outcomes
        assert others == [], (outcomes, others)
        assert during > 0 and swaps >= 100, (during, swaps)
    finally:
        runc.cleanup()
        for aside in folder.parent.glob(f"{folder.name}.*"):  # what the flipper moved aside
            if aside.is_dir() and not aside.is_symlink():
                shutil.rmtree(aside)
