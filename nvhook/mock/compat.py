"""An image's CUDA forward compatibility folder, for tests and demos of ``--cuda-compat``.

:func:`lay_out_compat` writes what NVIDIA's ``cuda-compat-<X>-<Y>`` package puts in a CUDA
image, ``/usr/local/cuda/compat/libcuda.so.<version>`` and its ``libcuda.so.1`` link, into
a container rootfs. The library is the mock machine's ``libcuda`` stub (``csrc/cuda.c``,
compiled for the profile's GPUs) built as a newer branch: ``cuDriverGetVersion`` answers
the given CUDA version, so a container that loads it sees what forward compatibility gives
it. With ``drivers``, it carries NVIDIA's ``.note.cuda.fwd_compatibility`` ELF note (owner
``NVIDIA Corporation``, JSON with ``"CUDA version"`` and the host ``"driver"`` branches it
supports), laid out as in NVIDIA's own compat libraries since CUDA 12.9 (``readelf -n``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from nvhook.mock import build
from nvhook.mock.profiles import load_profile
from nvhook.mock.userspace import libcuda_unit

__all__ = ["lay_out_compat"]


def _note_source(cuda: str, drivers: tuple[int, ...]) -> bytes:
    desc = json.dumps(
        {"format": 1, "CUDA version": cuda, "driver": list(drivers), "device": [7, 8, 9, 10]},
        separators=(",", ":"),
    )
    text = json.dumps(desc)  # a C string literal: JSON's escapes are C's for this text
    return (
        "/* the .note.cuda.fwd_compatibility ELF note of a CUDA compat libcuda */\n"
        f"#define DESC {text}\n"
        "struct note { unsigned namesz, descsz, type; char name[20];\n"
        "              char desc[(sizeof(DESC) + 3) & ~3u]; };\n"
        '__attribute__((section(".note.cuda.fwd_compatibility"), used, aligned(4)))\n'
        'static const struct note cuda_fwd_note = {19, sizeof(DESC), 0, "NVIDIA Corporation",'
        " DESC};\n"
    ).encode()


def lay_out_compat(
    rootfs: str | os.PathLike[str],
    *,
    profile: str,
    version: str,
    cuda: str,
    drivers: tuple[int, ...] | None = None,
    folder: str = "/usr/local/cuda/compat",
) -> Path:
    """Write ``<folder>/libcuda.so.<version>`` (and ``libcuda.so.1``) under ``rootfs``;
    return the library's path. ``profile`` names the mock machine whose GPUs it counts;
    ``drivers`` adds the ELF note listing those host branches."""
    prof = load_profile(profile)
    extra = () if drivers is None else (("note.c", _note_source(cuda, drivers)),)
    unit = libcuda_unit(prof, f"libcuda.so.{version}", "libcuda.so.1", cuda=cuda, extra=extra)
    (built,) = build.build([unit])
    where = Path(rootfs, folder.lstrip("/"))
    where.mkdir(parents=True, exist_ok=True)
    library = where / f"libcuda.so.{version}"
    library.write_bytes(built.read_bytes())
    library.chmod(0o755)
    link = where / "libcuda.so.1"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(library.name)
    return library
