"""The native ``nvhook-hook`` (nvhook/frontend/nvhook-hook.c) built for tests: ASan and UBSan,
any report fatal, handing over to a given Python launcher."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nvhook.frontend import HOOK_SOURCE


def build_native_hook(work: Path, launcher: str, *defines: str) -> Path:
    """Compile the native hook into ``work`` handing over to ``launcher``; its path. Skips the
    test where this machine has no C compiler (CI has one: the hook is then always built)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler: the native nvhook-hook cannot be built here")
    binary = work / "nvhook-hook"
    subprocess.run(
        [cc, "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
         "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
         f'-DNVHOOK_LAUNCHER="{launcher}"', *defines, "-o", str(binary), HOOK_SOURCE],
        check=True,
    )  # fmt: skip
    return binary
