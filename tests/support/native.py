"""nvhook's native programs (nvhook/native/*.c) built for tests: ASan and UBSan, any
report fatal, handing over to a given launcher."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nvhook.native import HOOK_SOURCE


def require_cc() -> str:
    """The C compiler (``cc`` or ``gcc``); skips the test where this machine has none (CI
    has one: the native programs are then always built)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler: nvhook's native programs cannot be built here")
    return cc


def build_sanitized_program(source: str, binary: Path, launcher: str, *defines: str) -> Path:
    """Compile ``source`` to ``binary`` with ASan and UBSan and ``defines`` (``-DNAME=…``),
    handing over to ``launcher``; ``binary``."""
    subprocess.run(
        [require_cc(), "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
         "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
         f'-DNVHOOK_LAUNCHER="{launcher}"', *defines, "-o", str(binary), source],
        check=True,
    )  # fmt: skip
    return binary


def build_native_hook(work: Path, launcher: str, *defines: str) -> Path:
    """The native hook built in ``work`` (:func:`build_sanitized_program`); its path."""
    return build_sanitized_program(HOOK_SOURCE, work / "nvhook-hook", launcher, *defines)
