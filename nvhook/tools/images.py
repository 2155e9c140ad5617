"""Container images built offline from the host's static busybox (umoci, then skopeo).

No registry is reachable from the machines nvhook is tested on, so ``nvhook demo
--kubernetes`` and the test harness (``tests/support/images.py``) build their images here:
``localhost/busybox:latest`` (a busybox root filesystem, ``cmd sh``) and, for CRI, a pause
image whose entrypoint sleeps (containerd's sandbox container). Both are docker-archive tars
for ``ctr images import``. umoci makes an OCI layout and skopeo converts it, both from
Debian's packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from nvhook.errors import ContainerEngineError

__all__ = [
    "BUSYBOX",
    "BUSYBOX_IMAGE",
    "PAUSE_IMAGE",
    "busybox_image_tar",
    "busybox_rootfs",
    "is_static",
    "pause_image_tar",
]

BUSYBOX = "/usr/bin/busybox"
BUSYBOX_IMAGE = "localhost/busybox:latest"
PAUSE_IMAGE = "localhost/nvhook-pause:latest"


def is_static(binary: str = BUSYBOX) -> bool:
    """Whether ``binary`` needs no dynamic loader (Debian's busybox-static does not)."""
    with open(binary, "rb") as f:
        return b"ld-linux" not in f.read(4096)


def busybox_rootfs(dest: Path, *, busybox: str = BUSYBOX) -> Path:
    """A static-busybox root filesystem at ``dest``: ``/bin/busybox`` and a link per applet
    (also at its usual full path, e.g. ``/usr/bin/awk``), ``/etc/passwd`` and ``/etc/group``
    with root, ``/dev``, ``/proc``, ``/sys``, ``/tmp`` (1777), ``/root``."""
    if not is_static(busybox):
        raise ContainerEngineError(f"{busybox} is dynamically linked (install busybox-static)")
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "dev", "proc", "sys", "tmp", "root"):
        (dest / d).mkdir(parents=True, exist_ok=True)
    (dest / "tmp").chmod(0o1777)
    shutil.copy2(busybox, dest / "bin" / "busybox")
    listing = subprocess.run(
        [busybox, "--list-full"], capture_output=True, text=True, check=True
    ).stdout.split()
    for full in listing:
        name = full.rsplit("/", 1)[-1]
        for link in {f"bin/{name}", full}:
            target = dest / link
            if not target.exists() and not target.is_symlink():
                target.symlink_to("/bin/busybox")
    (dest / "etc" / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
    )
    (dest / "etc" / "group").write_text("root:x:0:\nvideo:x:44:\nnogroup:x:65534:\n")
    return dest


def busybox_image_tar(
    directory: Path,
    *,
    rootfs: Callable[[Path], object] = busybox_rootfs,
    name: str = BUSYBOX_IMAGE,
) -> Path:
    """``name`` (``cmd sh``) as a docker-archive tar under ``directory``, its root filesystem
    laid out by ``rootfs(dest)``."""
    umoci, skopeo = _tool("umoci"), _tool("skopeo")
    directory.mkdir(parents=True, exist_ok=True)
    layout, unpacked = directory / "oci", directory / "unpacked"
    tar = directory / "busybox.tar"
    for d in (layout, unpacked):
        shutil.rmtree(d, ignore_errors=True)
    tar.unlink(missing_ok=True)
    image = f"{layout}:latest"
    _run([umoci, "init", "--layout", str(layout)])
    _run([umoci, "new", "--image", image])
    _run([umoci, "unpack", "--image", image, str(unpacked)])
    shutil.rmtree(unpacked / "rootfs")
    rootfs(unpacked / "rootfs")
    _run([umoci, "repack", "--image", image, str(unpacked)])
    _run([umoci, "config", "--image", image, "--config.cmd", "sh"])
    _run([skopeo, "--insecure-policy", "copy", "-q", f"oci:{image}",
          f"docker-archive:{tar}:{name}"])  # fmt: skip
    shutil.rmtree(unpacked, ignore_errors=True)
    shutil.rmtree(layout, ignore_errors=True)
    return tar


def pause_image_tar(busybox_tar: Path, directory: Path, *, name: str = PAUSE_IMAGE) -> Path:
    """The busybox image of ``busybox_tar`` with ``/bin/sleep 3600`` as entrypoint, as
    ``name``: the sandbox container of a CRI pod (the real pause image is not reachable)."""
    umoci, skopeo = _tool("umoci"), _tool("skopeo")
    directory.mkdir(parents=True, exist_ok=True)
    layout = directory / "oci"
    tar = directory / "pause.tar"
    shutil.rmtree(layout, ignore_errors=True)
    tar.unlink(missing_ok=True)
    _run([skopeo, "--insecure-policy", "copy", "-q", f"docker-archive:{busybox_tar}",
          f"oci:{layout}:pause"])  # fmt: skip
    _run([umoci, "config", "--image", f"{layout}:pause", "--config.entrypoint", "/bin/sleep",
          "--config.cmd", "3600"])  # fmt: skip
    _run([skopeo, "--insecure-policy", "copy", "-q", f"oci:{layout}:pause",
          f"docker-archive:{tar}:{name}"])  # fmt: skip
    shutil.rmtree(layout)
    return tar


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ContainerEngineError(f"{name} not found on PATH (./dev setup installs it)")
    return os.path.realpath(path)


def _run(argv: Sequence[str]) -> None:
    done = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise ContainerEngineError(
            f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()}"
        )
