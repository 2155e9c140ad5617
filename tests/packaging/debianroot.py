"""A Debian root made with mmdebstrap from the Debian archive, cached on this machine, and
throw-away copies of it (overlayfs) to chroot into.

The root is made once per recipe (suite, variant, packages) under ``$NVHOOK_TEST_CACHE``
(default ``/var/cache/nvhook-tests``), which a CI machine that is kept between runs keeps: a
first run fetches ~40 MB from deb.debian.org (about a minute), later ones reuse it. It is
made under a temporary name and renamed when complete, with a lock held, so an interrupted
or concurrent run never sees half a root. A test never writes it: :func:`scratch_copy` mounts
an overlay over it, with the host's ``/dev`` and a fresh ``/proc``, and takes it all down after.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.containers import require

MIRROR = "http://deb.debian.org/debian"
#: The apt option without which apt refuses the mirror's ``sid`` Release file: it is past its
#: Valid-Until date ("Release file … is expired"; trixie's main suite carries no such date).
NO_VALID_UNTIL = 'Acquire::Check-Valid-Until "false"'


def cache_dir() -> Path:
    return Path(os.environ.get("NVHOOK_TEST_CACHE", "/var/cache/nvhook-tests"))


def debian_root(
    suite: str,
    packages: tuple[str, ...],
    variant: str = "minbase",
    arch: str | None = None,
    aptopts: tuple[str, ...] = (),
) -> Path:
    """The cached root of ``suite`` with ``packages``, made first if missing; of another
    Debian architecture ``arch`` (``arm64``: its programs run under qemu-user, through the
    kernel's binfmt_misc, see :func:`require_foreign`). ``aptopts`` are apt options for the
    build (mmdebstrap's ``--aptopt``; ``sid`` needs :data:`NO_VALID_UNTIL`)."""
    recipe = f"{suite} {variant} {' '.join(sorted(packages))} {MIRROR}"
    if arch is not None:
        recipe += f" {arch}"
    if aptopts:
        recipe += f" {' '.join(aptopts)}"
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    root = cache / f"debian-{suite}{'-' + arch if arch else ''}-{digest}"
    with open(cache / f".debian-{suite}-{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "etc/debian_version").is_file():
            return root
        tmp = cache / f"{root.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        proc = subprocess.run(
            [require("mmdebstrap"), f"--variant={variant}",
             *([f"--include={','.join(packages)}"] if packages else []),
             *([f"--architectures={arch}"] if arch else []),
             *[f"--aptopt={opt}" for opt in aptopts],
             "--mode=root", suite, str(tmp), MIRROR],
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.fail(f"mmdebstrap {recipe} failed:\n{proc.stderr[-3000:]}", pytrace=False)
        (tmp / "etc/nvhook-test-recipe").write_text(recipe + "\n")
        tmp.rename(root)
    return root


#: Debian architecture -> the binfmt_misc entry qemu-user-static registers for it.
QEMU_BINFMT = {"arm64": "qemu-aarch64"}


def require_foreign(arch: str) -> None:
    """Programs of ``arch`` run here: qemu-user-static's binfmt_misc entry is enabled (./dev
    setup installs it and mounts binfmt_misc); else skip (fail under CI)."""
    entry = Path("/proc/sys/fs/binfmt_misc") / QEMU_BINFMT[arch]
    try:
        enabled = entry.read_text().splitlines()[0] == "enabled"
    except OSError:
        enabled = False
    if not enabled:
        message = f"{entry} is not enabled: no qemu-user for {arch} (./dev setup installs it)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def _mount(*argv: str) -> None:
    subprocess.run([require("mount"), *argv], capture_output=True, text=True, check=True)


@contextmanager
def scratch_copy(lower: Path, work: Path) -> Iterator[Path]:
    """``lower`` as a writable overlay under ``work``, with ``/dev`` and ``/proc`` mounted."""
    upper, scratch, merged = work / "upper", work / "work", work / "merged"
    for d in (upper, scratch, merged):
        d.mkdir(parents=True)
    mounted: list[Path] = []
    try:
        _mount("-t", "overlay", "overlay", "-o",
               f"lowerdir={lower},upperdir={upper},workdir={scratch}", str(merged))  # fmt: skip
        mounted.append(merged)
        _mount("--rbind", "/dev", str(merged / "dev"))  # with /dev/pts, for apt's log
        mounted.append(merged / "dev")
        _mount("--make-rslave", str(merged / "dev"))  # its unmount stays here
        _mount("-t", "proc", "proc", str(merged / "proc"))
        mounted.append(merged / "proc")
        yield merged
    finally:
        for path in reversed(mounted):
            subprocess.run([require("umount"), "--lazy", str(path)], check=False)


def chroot(
    root: Path, script: str, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``sh -c script`` in ``root``, from its ``/``, with a clean environment."""
    return subprocess.run(
        [require("chroot"), str(root), "/bin/sh", "-c", f"cd / && {script}"],
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "DEBIAN_FRONTEND": "noninteractive",
            **(env or {}),
        },
        timeout=timeout,
        check=False,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    """The stdout of a chroot call that must succeed."""
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def check_native_hook(root: Path, libdir: str, *, openat2: bool) -> None:
    """The installed ``/opt/nvhook/bin/nvhook-hook`` in ``root`` is the native hook in front
    of its Python launcher, and does a ``create-container`` on a small bundle there: the
    SONAME link, nvhook's conf file, and the root's ldconfig run on the rootfs. With
    ``openat2`` it does it itself (``NVHOOK_HOOK_TRACE`` prints no handover); without (qemu-user
    7.2 has none) it hands the call to the Python hook: one "handing over" line."""
    assert (root / "opt/nvhook/bin/nvhook-hook").read_bytes()[:4] == b"\x7fELF"
    launcher = (root / "opt/nvhook/bin/nvhook-hook.py").read_text()
    assert launcher.startswith("#!/opt/nvhook/bin/python -I")
    bundle = root / "tmp/nvhook-hb"
    lib = bundle / "rootfs" / libdir.lstrip("/")
    (bundle / "rootfs/etc").mkdir(parents=True)
    lib.mkdir(parents=True)
    shutil.copy(root / libdir.lstrip("/") / "libc.so.6", lib)
    (bundle / "config.json").write_text('{"root":{"path":"rootfs"}}')
    state = '{"ociVersion":"1.0.2","id":"c","status":"creating","bundle":"/tmp/nvhook-hb"}'
    hook = chroot(
        root,
        f"echo '{state}' | NVHOOK_HOOK_TRACE=1 /opt/nvhook/bin/nvhook-hook create-container "
        f"--link libc.so.6::{libdir}/libc.so --folder {libdir}",
    )
    assert hook.returncode == 0, hook.stderr
    if openat2:
        assert hook.stderr == ""
    else:
        assert hook.stderr.startswith("nvhook-hook: handing over"), hook.stderr
        assert hook.stderr.count("\n") == 1, hook.stderr
    assert os.readlink(lib / "libc.so") == "libc.so.6"
    conf = (bundle / "rootfs/etc/ld.so.conf.d/00-nvhook.conf").read_text()
    assert conf.endswith(f"{libdir}\n")
    assert b"libc.so.6" in (bundle / "rootfs/etc/ld.so.cache").read_bytes()
    shutil.rmtree(bundle)
