"""The LD_PRELOAD / PYTHONPATH class (CVE-2025-23266): nothing from the environment runs in a hook.

Two layers, each tested with a control showing the attack works without it:

(a) every injected hook has an explicit, fixed ``env``; runc gives a hook exactly that list,
    so an ``LD_PRELOAD`` in the runtime's (or image's) environment never reaches the
    dynamic loader of the hook's interpreter — the only protection there is, since the
    loader acts before any Python runs;
(b) the launcher starts Python with ``-I``, so ``PYTHONPATH``, ``PYTHONHOME``,
    ``PYTHONSTARTUP``, the user site and the current directory (the rootfs, for
    createContainer hooks) cannot change which code runs, should any reach it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.discover.hooks import HOOK_ENV, ldcache_hook, symlinks_hook, validate_injected_hook
from tests.support.containers import Runc, make_bundle

from .conftest import LIBDIR, HookRunner, state_json, write_bundle


@pytest.fixture
def hook_bin(python_hook_bin: str) -> str:
    """The Python launcher only: these tests are about its interpreter (the native hook is
    static, so no loader of its own reads LD_PRELOAD; what it hands over runs this launcher)."""
    return python_hook_bin


PRELOAD_SOURCE = r"""
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void nvhook_test_preload(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = 0;
    if (strstr(exe, "python") == NULL) return;  /* only the hook's interpreter, not runc */
    int fd = open(MARKER, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) close(fd);
}
"""


@pytest.fixture
def evil(tmp_path: Path, cc: Callable[..., Path]) -> dict[str, Path]:
    """Markers and the things that would create them: a preload library, a PYTHONPATH dir
    with sitecustomize.py and json.py, a PYTHONSTARTUP file, a user site (HOME and
    PYTHONUSERBASE) with usercustomize.py, and a cwd holding json.py."""
    top = tmp_path / "evil"
    markers = top / "markers"
    markers.mkdir(parents=True)

    def planter(name: str) -> str:
        return f"open({str(markers / name)!r}, 'w').close()\n"

    pythonpath = top / "pythonpath"
    pythonpath.mkdir()
    (pythonpath / "sitecustomize.py").write_text(planter("sitecustomize"))
    (pythonpath / "json.py").write_text(planter("json") + "from _json import *\n")
    # nvhook.rootfs.safepath imports ctypes: a shadow that runs first, then hands over the real one
    (pythonpath / "ctypes").mkdir()
    (pythonpath / "ctypes" / "__init__.py").write_text(
        planter("ctypes")
        + "import importlib, sys\n"
        + f"sys.path = [p for p in sys.path if p != {str(pythonpath)!r}]\n"
        + "del sys.modules['ctypes']\n"
        + "sys.modules['ctypes'] = importlib.import_module('ctypes')\n"
    )
    (top / "startup.py").write_text(planter("startup"))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for base in ("home/.local", "userbase"):
        site = top / base / "lib" / version / "site-packages"
        site.mkdir(parents=True)
        (site / "usercustomize.py").write_text(planter("usercustomize"))
    cwd = top / "cwd"
    cwd.mkdir()
    (cwd / "json.py").write_text(planter("cwd-json"))
    preload = cc(PRELOAD_SOURCE, top / "preload.so", "-shared", "-fPIC",
                 f'-DMARKER="{markers / "preload"}"')  # fmt: skip
    return {
        "markers": markers,
        "pythonpath": pythonpath,
        "startup": top / "startup.py",
        "home": top / "home",
        "userbase": top / "userbase",
        "cwd": cwd,
        "preload": preload,
    }


def _python_env(evil: dict[str, Path]) -> dict[str, str]:
    return {
        **dict(e.split("=", 1) for e in HOOK_ENV),
        "PYTHONPATH": str(evil["pythonpath"]),
        "PYTHONSTARTUP": str(evil["startup"]),
        "PYTHONUSERBASE": str(evil["userbase"]),
        "HOME": str(evil["home"]),
    }


def _markers(evil: dict[str, Path]) -> list[str]:
    return sorted(p.name for p in evil["markers"].iterdir())


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    root = tmp_path / "bundle" / "rootfs"
    root.mkdir(parents=True)
    write_bundle(tmp_path / "bundle", root)
    return root


ARGS = ["create-symlinks", "--link", "libcuda.so.1::/usr/lib/libcuda.so"]


def test_launcher_ignores_python_variables(
    run_hook: HookRunner, evil: dict[str, Path], rootfs: Path
) -> None:
    env = {**_python_env(evil), "PYTHONHOME": "/bogus/home", "PYTHONINSPECT": "1"}
    proc = run_hook(ARGS, bundle=rootfs.parent, env=env, cwd=evil["cwd"])
    assert proc.returncode == 0, proc.stderr
    assert (rootfs / "usr" / "lib" / "libcuda.so").is_symlink()  # the hook worked
    assert _markers(evil) == []


def test_control_without_isolation_the_planted_code_runs(
    hook_bin: str, evil: dict[str, Path], rootfs: Path
) -> None:
    """The same launcher run by a plain interpreter (no -I): the planted modules execute
    (not the user site's usercustomize: a venv turns the user site off by itself)."""
    proc = subprocess.run(
        [sys.executable, hook_bin, *ARGS],
        input=state_json(rootfs.parent), capture_output=True, text=True,
        env=_python_env(evil), cwd=evil["cwd"], check=False, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert {"sitecustomize", "ctypes"} <= set(_markers(evil))


def test_ld_preload_reaches_the_interpreter_whatever_its_flags(
    run_hook: HookRunner, evil: dict[str, Path], rootfs: Path
) -> None:
    """Why the explicit env matters: -I cannot stop the loader; only an env without it can."""
    env = {**dict(e.split("=", 1) for e in HOOK_ENV), "LD_PRELOAD": str(evil["preload"])}
    proc = run_hook(ARGS, bundle=rootfs.parent, env=env)
    assert proc.returncode == 0, proc.stderr
    assert _markers(evil) == ["preload"]


def test_injected_hooks_carry_exactly_the_fixed_env(
    hook_bin: str, run_hook: HookRunner, evil: dict[str, Path], rootfs: Path
) -> None:
    """(a) through the checker; then run each the way runc does, with exactly its env."""
    hooks = [
        ldcache_hook([LIBDIR], hook_path=hook_bin),
        symlinks_hook([("libcuda.so.1", "/usr/lib/libcuda.so")], hook_path=hook_bin),
    ]
    for hook in hooks:
        validate_injected_hook(hook)
        assert hook.env == ("PATH=/usr/sbin:/usr/bin:/sbin:/bin",)
        proc = subprocess.run(
            [hook.path, *hook.args[1:]],
            input=state_json(rootfs.parent), capture_output=True, text=True,
            env=dict(e.split("=", 1) for e in hook.env), cwd=evil["cwd"], check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    assert _markers(evil) == []


@pytest.mark.runtime
@pytest.mark.root
def test_runc_gives_injected_hooks_nothing_of_the_image_or_runtime_env(
    runc: Runc, tmp_path: Path, hook_bin: str, evil: dict[str, Path]
) -> None:
    """The CVE-2025-23266 shape: the image sets ``LD_PRELOAD=/proc/self/cwd/evil.so`` (a
    createContainer hook's cwd is the rootfs) and PYTHON* variables; runc itself runs with
    them too. runc 1.1.5 gives a createContainer hook *without* ``env`` the container's
    process env (and a createRuntime one runc's own). Our hooks carry an explicit env:
    nothing runs. Control: the same hook without ``env`` loads the image's library."""
    hook = symlinks_hook([("libcuda.so.1", "/usr/lib/libcuda.so")], hook_path=hook_bin)
    image_env = [f"{k}={v}" for k, v in _python_env(evil).items() if k != "PATH"]
    image_env.append("LD_PRELOAD=/proc/self/cwd/evil.so")
    hostile = Runc(runc.root, env={**_python_env(evil), "LD_PRELOAD": str(evil["preload"])})

    def bundle(name: str, args: list[str], hook_item: dict[str, object]) -> Path:
        b = make_bundle(tmp_path / name, args, image_env, hooks={hook.hook_name: [hook_item]})
        shutil.copy(evil["preload"], b / "rootfs" / "evil.so")
        return b

    try:
        proc = hostile.run(bundle("ours", ["readlink", "/usr/lib/libcuda.so"], hook.to_oci()))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "libcuda.so.1"
        assert _markers(evil) == []

        without_env = {k: v for k, v in hook.to_oci().items() if k != "env"}
        proc = hostile.run(bundle("control", ["true"], without_env))
        assert proc.returncode == 0, proc.stderr
        assert _markers(evil) == ["preload"]  # and -I still kept the PYTHON* ones out
    finally:
        hostile.cleanup()
