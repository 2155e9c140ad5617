"""Hook mode's createContainer steps run after ``setns`` into the container's mount namespace,
where no module of the host can be found: every module they import inside a function must be
loaded before (``nvhook.hook.prestart._STEP_IMPORTS``). Found by reading the steps' modules;
checked in a fresh interpreter, where only what prestart loads is loaded (Debian 13's and
sid's Pythons ship ``resource`` and ``select`` as files, so a late import fails there)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
#: the modules whose functions the steps run (create_container and what it calls)
STEP_MODULES = (
    "nvhook/hook/create_container.py",
    "nvhook/hook/create_symlinks.py",
    "nvhook/hook/update_ldcache.py",
    "nvhook/hook/cuda_compat.py",
    "nvhook/hook/app_profile.py",
    "nvhook/hook/device_files.py",
    "nvhook/rootfs/safepath.py",
)
TYPING_ONLY = {"collections.abc", "typing", "__future__"}


def _late_imports(path: Path) -> set[str]:
    """The modules imported inside a function of ``path`` (not under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
    return found - TYPING_ONLY


PROBE = """
import json, sys
from nvhook.hook import prestart
for name in prestart._STEP_IMPORTS:
    __import__(name)
print(json.dumps(sorted(sys.modules)))
"""


def test_every_late_import_of_the_steps_is_loaded_before_setns() -> None:
    late = set().union(*(_late_imports(ROOT / p) for p in STEP_MODULES))
    assert {"resource", "select", "nvhook.rootfs.safepath"} <= late  # the reader works
    done = subprocess.run(
        [sys.executable, "-I", "-c", PROBE], capture_output=True, text=True, cwd=ROOT, check=True
    )
    loaded = set(json.loads(done.stdout))
    assert sorted(late - loaded) == []
