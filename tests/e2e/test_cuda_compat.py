"""CUDA forward compatibility through the shim and real runc, on the dgx-a100 mock (550, CUDA 12.4).

The image ships the mock's ``libcuda`` built as branch 575 (CUDA 12.9) in
``/usr/local/cuda/compat`` (:func:`nvhook.mock.compat.lay_out_compat`). A program that
``dlopen("libcuda.so.1")`` and asks ``cuDriverGetVersion`` shows which ``libcuda`` the
loader took from the container's ld cache: 12090 when the compat folder comes first,
12040 (the host driver's) when the container opts out. ``NVIDIA_REQUIRE_CUDA=cuda>=12.9``
holds only through the compat library. Attacks on the compat folder are in
``test_hook_attacks.py``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nvhook.mock.compat import lay_out_compat
from tests.e2e.attack_support import (
    LOADER,
    compile_c,
    copy_host_file,
    hostile_bundle,
)
from tests.e2e.test_dlopen import loader_search, needed_libraries
from tests.support.containers import Runc

pytestmark = [pytest.mark.root, pytest.mark.runtime]

PROGRAM = "/usr/local/bin/cudaversion"
COMPAT = "/usr/local/cuda/compat"
CUDAVERSION_C = r"""
#include <dlfcn.h>
#include <stdio.h>

int main(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    int (*version)(int *) = (int (*)(int *))dlsym(cuda, "cuDriverGetVersion");
    int v = -1;
    if (!version || version(&v) != 0)
        return 3;
    printf("%d\n", v);
    return 0;
}
"""


@pytest.fixture(scope="module")
def cudaversion(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cudaversion") / "cudaversion"
    return compile_c(CUDAVERSION_C, out, "-O1", "-Wall", "-Werror")


def _bundle(tmp_path: Path, busybox: Path, program: Path, env: list[str]) -> Path:
    bundle = hostile_bundle(
        tmp_path / "b",
        busybox,
        ["sh", "-c", f"LD_DEBUG=libs {PROGRAM}"],
        ["NVIDIA_VISIBLE_DEVICES=2", *env],
    )
    rootfs = bundle / "rootfs"
    for path in [*needed_libraries(program), LOADER]:
        copy_host_file(path, rootfs)
    (rootfs / PROGRAM.lstrip("/")).parent.mkdir(parents=True)
    shutil.copy2(program, rootfs / PROGRAM.lstrip("/"))
    lay_out_compat(rootfs, profile="dgx-a100", version="575.57.08", cuda="12.9", drivers=(550,))
    return bundle


@pytest.mark.parametrize(
    ("env", "version", "found"),
    [
        ([], "12090", f"{COMPAT}/libcuda.so.1"),
        (["NVIDIA_DISABLE_CUDA_COMPAT=true"], "12040", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
        (["NVIDIA_REQUIRE_CUDA=cuda>=12.9 brand=tesla,driver>=600"], "12090", None),
    ],
    ids=["compat-first", "opted-out", "requirement-met-by-compat"],
)
def test_the_compat_libcuda_comes_first(
    shim_runc: Runc,
    busybox_copy: Path,
    cudaversion: Path,
    tmp_path: Path,
    env: list[str],
    version: str,
    found: str | None,
) -> None:
    bundle = _bundle(tmp_path, busybox_copy, cudaversion, env)
    result = shim_runc.run(bundle)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == version
    rootfs = bundle / "rootfs"
    conf = (rootfs / "etc/ld.so.conf.d/00-nvhook.conf").read_text().splitlines()[1:]
    if found is not None:
        search = loader_search(result.stderr, "libcuda.so.1")
        assert search == ["search cache=/etc/ld.so.cache", f"trying file={found}"]
    if version == "12090":
        assert conf[0] == COMPAT  # before the driver's folder
    else:
        assert COMPAT not in conf


def test_requirement_not_met_without_compat_names_the_versions(
    shim_runc: Runc, busybox_copy: Path, cudaversion: Path, tmp_path: Path
) -> None:
    """The same requirement with the compat library opted out: the host's 12.4 fails it."""
    env = ["NVIDIA_REQUIRE_CUDA=cuda>=12.9", "NVIDIA_DISABLE_CUDA_COMPAT=true"]
    bundle = _bundle(tmp_path, busybox_copy, cudaversion, env)
    result = shim_runc.run(bundle)
    assert result.returncode != 0
    assert "NVIDIA_REQUIRE_CUDA is not met: cuda>=12.9 but the host's CUDA version is 12.4" in (
        result.stderr
    )
    assert not (bundle / "rootfs/etc/ld.so.conf.d").exists()  # nothing ran


def test_readelf_sees_nvidias_note(tmp_path: Path) -> None:
    """The mock's compat library carries the note as ``readelf`` (binutils) reads it."""
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf")
    library = lay_out_compat(tmp_path, profile="dgx-a100", version="575.57.08", cuda="12.9",
                             drivers=(535, 550))  # fmt: skip
    out = subprocess.run(
        [readelf, "-p", ".note.cuda.fwd_compatibility", str(library)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "NVIDIA Corporation" in out
    assert '"CUDA version":"12.9","driver":[535,550]' in out
