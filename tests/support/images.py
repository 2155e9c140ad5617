"""The one container image the harness uses: ``localhost/busybox:latest``, built offline."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.basics import require, run_command
from tests.support.bundles import busybox_rootfs

__all__ = ["BUSYBOX_IMAGE", "busybox_image_tar"]

BUSYBOX_IMAGE = "localhost/busybox:latest"
"""The name under which :func:`busybox_image_tar` stores its image."""


_image_cache: Path | None = None


def busybox_image_tar(directory: Path) -> Path:
    """Build ``localhost/busybox:latest`` offline as a docker-archive tar under ``directory``.

    umoci makes an OCI layout from the busybox rootfs, skopeo converts it (both from Debian's
    packages; no registry is reachable from the test machines).
    Cached per process: a second call returns the first tar while it exists.
    """
    global _image_cache
    if _image_cache is not None and _image_cache.is_file():
        return _image_cache
    umoci, skopeo = require("umoci"), require("skopeo")
    directory.mkdir(parents=True, exist_ok=True)
    layout, unpacked = directory / "oci", directory / "unpacked"
    tar = directory / "busybox.tar"
    for d in (layout, unpacked):
        shutil.rmtree(d, ignore_errors=True)
    tar.unlink(missing_ok=True)
    image = f"{layout}:latest"
    for argv in (
        [umoci, "init", "--layout", str(layout)],
        [umoci, "new", "--image", image],
        [umoci, "unpack", "--image", image, str(unpacked)],
    ):
        run_command(argv, timeout=120, check=True)
    shutil.rmtree(unpacked / "rootfs")
    busybox_rootfs(unpacked / "rootfs")
    for argv in (
        [umoci, "repack", "--image", image, str(unpacked)],
        [umoci, "config", "--image", image, "--config.cmd", "sh"],
        [
            skopeo,
            "--insecure-policy",
            "copy",
            "-q",
            f"oci:{image}",
            f"docker-archive:{tar}:{BUSYBOX_IMAGE}",
        ],
    ):
        run_command(argv, timeout=120, check=True)
    shutil.rmtree(unpacked, ignore_errors=True)
    _image_cache = tar
    return tar
