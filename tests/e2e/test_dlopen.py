"""``dlopen("libcuda.so.1")`` inside a container started through the shim on the mock machine.

The path ``torch.cuda.is_available()`` takes: a dynamically linked program asks the loader
for the driver by SONAME only, the loader finds it through ``/etc/ld.so.cache``, which the
injected ``create-container`` hook wrote into the rootfs, and the stub driver counts the GPUs
whose ``/dev/nvidiaN`` the container may open.

Debian's loader also searches ``/usr/lib/x86_64-linux-gnu`` by itself (a "system search
path"), so finding the library proves nothing about the cache on its own: ``LD_DEBUG=libs``
shows where the loader found it, and the test requires the cache.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nvhook.mock import Profile
from tests.e2e.attack_support import (
    LIBDIR,
    LOADER,
    cache_entries,
    compile_c,
    copy_host_file,
    hostile_bundle,
    injected_hooks,
)
from tests.support.containers import Runc

pytestmark = [pytest.mark.root, pytest.mark.runtime]

PROGRAM = "/usr/local/bin/cudacount"

#: cuInit(0) then cuDeviceGetCount through a library found by SONAME only.
CUDACOUNT_C = r"""
#include <dlfcn.h>
#include <stdio.h>

typedef int (*cu_init_t)(unsigned int);
typedef int (*cu_count_t)(int *);

int main(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    cu_init_t cu_init = (cu_init_t)dlsym(cuda, "cuInit");
    cu_count_t cu_count = (cu_count_t)dlsym(cuda, "cuDeviceGetCount");
    if (!cu_init || !cu_count) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 3;
    }
    int rc = cu_init(0);
    if (rc != 0) {
        printf("cuInit: %d\n", rc);
        return 4;
    }
    int n = -1;
    rc = cu_count(&n);
    if (rc != 0) {
        printf("cuDeviceGetCount: %d\n", rc);
        return 5;
    }
    printf("%d\n", n);
    return 0;
}
"""


@pytest.fixture(scope="session")
def cudacount(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The program, built by the host's gcc, dynamically linked against glibc."""
    out = tmp_path_factory.mktemp("cudacount") / "cudacount"
    return compile_c(CUDACOUNT_C, out, "-O1", "-Wall", "-Werror")


def needed_libraries(program: Path) -> list[str]:
    """The host files the loader maps for ``program`` (libc, and libdl where dlopen is not in
    libc yet), by ``ldd``."""
    out = subprocess.run(["ldd", str(program)], capture_output=True, text=True, check=True)
    paths = [
        line.split(" => ", 1)[1].split(" (")[0]
        for line in out.stdout.splitlines()
        if " => " in line
    ]
    assert any(p.endswith("/libc.so.6") for p in paths), out.stdout
    return paths


def loader_search(debug: str, soname: str) -> list[str]:
    """The ``LD_DEBUG=libs`` lines of the loader's search for ``soname``."""
    lines = [line.split(":", 1)[-1].strip() for line in debug.splitlines()]
    start = lines.index(f"find library={soname} [0]; searching")
    block = []
    for line in lines[start + 1 :]:
        if line.startswith(("find library=", "calling init:")) or not line:
            break
        block.append(line)
    return block


@pytest.mark.parametrize(
    ("visible", "count", "readonly"),
    [("0,3", 1, False), ("2,3", 2, True), ("all", 9, False)],
    ids=["0,3", "2,3-readonly-root", "all"],
)
def test_dlopen_finds_libcuda_through_the_hooks_ld_cache(
    shim_runc: Runc,
    busybox_copy: Path,
    cudacount: Path,
    profile: Profile,
    tmp_path: Path,
    visible: str,
    count: int,
    readonly: bool,
) -> None:
    """``count``: GPUs 0 and 1 of the dgx-a100 are in MIG mode, and CUDA (so the stub) counts
    such a GPU through its MIG devices, which a whole-GPU request gives no access to (no
    ``/dev/nvidia-caps`` nodes): 0,3 counts 1. ``all`` gives every MIG device with its access
    nodes too, so it counts the 6 whole GPUs and GPU 0's 3 MIG devices (GPU 1 is in MIG mode
    without instances): 9. A read-only root still gets its cache: runc remounts the root
    read-only after the createContainer hooks."""
    assert [g.minor for g in profile.gpus if g.mig_enabled] == [0, 1]
    bundle = hostile_bundle(
        tmp_path / "b",
        busybox_copy,
        ["sh", "-c", f"LD_DEBUG=libs {PROGRAM}"],
        [f"NVIDIA_VISIBLE_DEVICES={visible}"],
        readonly=readonly,
    )
    rootfs = bundle / "rootfs"
    for path in [*needed_libraries(cudacount), LOADER]:  # at the same paths as on the host
        copy_host_file(path, rootfs)
    (rootfs / PROGRAM.lstrip("/")).parent.mkdir(parents=True)
    shutil.copy2(cudacount, rootfs / PROGRAM.lstrip("/"))

    result = shim_runc.run(bundle)

    assert result.returncode == 0, result.stdout + result.stderr
    injected_hooks(bundle)
    assert result.stdout.strip() == str(count), result.stdout
    search = loader_search(result.stderr, "libcuda.so.1")
    assert search == ["search cache=/etc/ld.so.cache", f"trying file={LIBDIR}/libcuda.so.1"], (
        result.stderr
    )
    assert cache_entries(rootfs / "etc" / "ld.so.cache")["libcuda.so.1"] == f"{LIBDIR}/libcuda.so.1"


def test_dlopen_finds_libcuda_by_its_soname_link_when_no_cache_can_be_built(
    shim_runc: Runc, busybox_copy: Path, cudacount: Path, tmp_path: Path
) -> None:
    """The image's ``/etc`` is a read-only bind mount: the hook cannot write an ld cache and skips
    ldconfig (saying why), so the loader finds ``libcuda.so.1`` on its system search path,
    through the SONAME link the hook made itself (ldconfig would have made it too, but it did
    not run): why the hook keeps the links that ldconfig makes (docs/native-hook.md)."""

    etc = tmp_path / "etc"
    (etc / "OpenCL" / "vendors").mkdir(parents=True)
    (etc / "OpenCL" / "vendors" / "nvidia.icd").write_text("")  # compute's mount, onto a file

    def readonly_etc(spec: dict[str, Any]) -> None:  # runc remounts it read-only at once
        spec["mounts"].append({"destination": "/etc", "type": "bind", "source": str(etc),
                               "options": ["rbind", "ro"]})  # fmt: skip

    bundle = hostile_bundle(
        tmp_path / "b",
        busybox_copy,
        ["sh", "-c", f"LD_DEBUG=libs {PROGRAM}"],
        ["NVIDIA_VISIBLE_DEVICES=2,3"],
        edit=readonly_etc,
    )
    rootfs = bundle / "rootfs"
    for path in [*needed_libraries(cudacount), LOADER]:
        copy_host_file(path, rootfs)
    (rootfs / PROGRAM.lstrip("/")).parent.mkdir(parents=True)
    shutil.copy2(cudacount, rootfs / PROGRAM.lstrip("/"))

    result = shim_runc.run(bundle)

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "2", result.stdout + result.stderr
    search = loader_search(result.stderr, "libcuda.so.1")
    assert search[0] == "search cache=/etc/ld.so.cache"  # glibc says so with no cache too
    assert search[1].startswith("search path=") and search[1].endswith("(system search path)")
    assert search[-1] == f"trying file={LIBDIR}/libcuda.so.1", result.stderr
    assert sorted(p.name for p in etc.iterdir()) == ["OpenCL"]  # no cache, no conf file
