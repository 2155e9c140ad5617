"""Pieces shared by the end-to-end attack and dynamic-loading tests.

The hostile images are busybox rootfs made by :func:`tests.e2e.conftest.probe_rootfs`;
host snapshots, symlink escape forms and the flipping process come from the hook unit
tests (``tests/nvhook/hook/conftest.py``), so both levels attack with the same tools.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from nvhook.discover.hooks import HOOK_PROGRAM, LIFECYCLES, validate_injected_hook
from tests.nvhook.hook.conftest import cache_entries, escape_forms, snapshot
from tests.support.containers import make_bundle, require

__all__ = [
    "FORMS",
    "LD_FILES",
    "LIBDIR",
    "LOADER",
    "PAYLOAD_C",
    "cache_entries",
    "compile_c",
    "copy_host_file",
    "escape_forms",
    "host_tree",
    "hostile_bundle",
    "injected_hooks",
    "interpreter_of",
    "markers",
    "memory_peak_and_ooms",
    "python_launcher",
    "snapshot",
]

LIBDIR = "/usr/lib/x86_64-linux-gnu"
LOADER = "/lib64/ld-linux-x86-64.so.2"
#: The ld files an image may aim at the host (``host_tree``'s names): name -> (path in the
#: rootfs, what it points at in the host tree).
LD_FILES = {
    "confd": ("/etc/ld.so.conf.d", "confd"),
    "cache": ("/etc/ld.so.cache", "ld.so.cache"),
    "conf": ("/etc/ld.so.conf", "ld.so.conf"),
}
#: The names of :func:`escape_forms`'s three symlink targets, in its order.
FORMS = ("absolute", "dotdot", "proc-self-root")

#: A library whose load leaves a trace on the host: its constructor appends the loading
#: program's path to the file ``MARKER`` (an absolute host path, given with ``-DMARKER=``).
PAYLOAD_C = r"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void nvhook_attack_payload(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    int fd = open(MARKER, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (n < 0) n = 0;
    exe[n] = '\n';
    (void)!write(fd, exe, (size_t)n + 1);
    close(fd);
}
"""


def compile_c(source: str, output: Path, *flags: str) -> Path:
    """Compile ``source`` with the host's gcc into ``output`` (the source kept next to it)."""
    gcc = require("gcc")
    src = output.with_name(output.name + ".c")
    src.write_text(source)
    proc = subprocess.run(
        [gcc, *flags, "-o", str(output), str(src)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"gcc failed for {output.name}:\n{proc.stderr}", pytrace=False)
    return output


def markers(directory: Path) -> dict[str, str]:
    """Every marker file in ``directory``: name -> content."""
    if not directory.is_dir():
        return {}
    return {p.name: p.read_text(errors="replace") for p in sorted(directory.iterdir())}


def hostile_bundle(
    directory: Path,
    busybox: Path,
    args: Sequence[str],
    env: Sequence[str],
    *,
    readonly: bool | None = None,
    hooks: Mapping[str, Sequence[dict[str, Any]]] | None = None,
    edit: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """A bundle at ``directory`` whose rootfs (``directory/rootfs``) is a minimal busybox one."""
    from tests.e2e.conftest import probe_rootfs

    probe_rootfs(directory / "rootfs", busybox)
    rootfs = directory / "rootfs"
    return make_bundle(
        directory, args, env, rootfs=rootfs, readonly=readonly, hooks=hooks, edit=edit
    )


def host_tree(top: Path) -> Path:
    """Host files an image may aim its symlinks at: ``lib/`` (libraries, a SONAME link, a
    sub-directory), ``confd/`` (an ld.so.conf.d), ``ld.so.cache`` and ``ld.so.conf``."""
    lib = top / "lib"
    (lib / "sub").mkdir(parents=True)
    (lib / "libhost.so.1.0").write_bytes(b"\x7fELF host library")
    (lib / "libhost.so.1").symlink_to("libhost.so.1.0")
    (lib / "sub" / "keep").write_text("host\n")
    (top / "confd").mkdir()
    (top / "confd" / "host.conf").write_text("/host/lib\n")
    (top / "ld.so.cache").write_bytes(b"host ld.so.cache\n")
    (top / "ld.so.conf").write_text("include /host/ld.so.conf.d/*.conf\n")
    return top


def injected_hooks(
    bundle: Path, commands: Sequence[str] = ("create-container",)
) -> list[dict[str, Any]]:
    """The hooks in ``bundle``'s config.json (the shim wrote them), each passed through
    :func:`validate_injected_hook`; their commands must be exactly ``commands`` (sorted)."""
    spec = json.loads((bundle / "config.json").read_text())
    hooks: list[dict[str, Any]] = []
    for stage, items in (spec.get("hooks") or {}).items():
        for item in items:
            validate_injected_hook(item, lifecycle=stage)
            hooks.append(item)
    found = sorted(h["args"][1] for h in hooks)
    assert found == sorted(commands), found
    assert all(h["args"][0] == HOOK_PROGRAM for h in hooks)
    assert {LIFECYCLES[c] for c in found} == set(spec["hooks"])
    return hooks


def python_launcher(hook: str) -> str:
    """The Python launcher of the hook program ``hook``: itself, or the ``nvhook-hook.py``
    beside it when ``hook`` is the native hook (nvhook/native/nvhook-hook.c)."""
    with open(hook, "rb") as f:
        native = f.read(4) == b"\x7fELF"
    return f"{hook}.py" if native else hook


def interpreter_of(launcher: str) -> str:
    """The interpreter a ``#!`` launcher starts (the hooks' Python); for the native hook, the
    one its Python launcher starts."""
    with open(python_launcher(launcher), "rb") as f:
        line = f.readline().decode()
    assert line.startswith("#!"), launcher
    return line[2:].split()[0]


def memory_peak_and_ooms(pid: int) -> tuple[int, int]:
    """The peak memory use (bytes) of the memory cgroup of process ``pid``, and how many
    processes the OOM killer killed in it (cgroup v1 or v2)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            v1 = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            oom = (v1 / "memory.oom_control").read_text()
            peak = int((v1 / "memory.max_usage_in_bytes").read_text())
            break
        if controllers == "" and line.startswith("0::"):
            v2 = Path("/sys/fs/cgroup") / path.lstrip("/")
            if (v2 / "memory.peak").exists():
                oom = (v2 / "memory.events").read_text()
                peak = int((v2 / "memory.peak").read_text())
                break
    else:
        pytest.fail(f"no memory cgroup for pid {pid}", pytrace=False)
    kills = dict(line.split() for line in oom.splitlines())
    return peak, int(kills["oom_kill"])


def copy_host_file(path: str, rootfs: Path) -> None:
    """Copy the host's file ``path`` (its symlinks followed) to the same path in ``rootfs``."""
    dest = rootfs / path.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(os.path.realpath(path), dest)
