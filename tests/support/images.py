"""The harness's images: ``localhost/busybox:latest`` and CRI's pause image, built offline by
:mod:`nvhook.tools.images` (the demo builds its images there too); here a missing tool skips
the test (fails under CI) and the busybox tar is cached per process."""

from __future__ import annotations

from pathlib import Path

from nvhook.tools import images
from tests.support.basics import fail_on_engine_error, require
from tests.support.bundles import busybox_rootfs

__all__ = ["BUSYBOX_IMAGE", "PAUSE_IMAGE", "busybox_image_tar", "pause_image_tar"]

BUSYBOX_IMAGE = images.BUSYBOX_IMAGE
"""The name under which :func:`busybox_image_tar` stores its image."""
PAUSE_IMAGE = images.PAUSE_IMAGE
"""The name under which :func:`pause_image_tar` stores its image."""


_image_cache: Path | None = None


def busybox_image_tar(directory: Path) -> Path:
    """``localhost/busybox:latest`` as a docker-archive tar under ``directory``, its rootfs
    copied from the harness's busybox template. Cached per process: a second call returns the
    first tar while it exists."""
    global _image_cache
    if _image_cache is not None and _image_cache.is_file():
        return _image_cache
    require("umoci"), require("skopeo")
    with fail_on_engine_error():
        _image_cache = images.busybox_image_tar(directory, rootfs=busybox_rootfs)
    return _image_cache


def pause_image_tar(busybox_tar: Path, directory: Path) -> Path:
    """The busybox image with ``/bin/sleep 3600`` as entrypoint, as ``PAUSE_IMAGE``."""
    require("umoci"), require("skopeo")
    with fail_on_engine_error():
        return images.pause_image_tar(busybox_tar, directory)
