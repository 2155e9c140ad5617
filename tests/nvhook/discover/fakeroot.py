"""Tiny fake driver roots: real ELF libraries compiled here, a cache made by the real ldconfig.

Test modules import the fixtures (``from tests.nvhook.discover.fakeroot import compiler,
fake_root``); a conftest.py here would clash with other packageless test dirs' conftests.

``fake_root`` gives a :class:`FakeRoot` in a fresh directory. Libraries are
compiled once per session per (SONAME, architecture) and copied in, so a test
that lays out twenty libraries costs twenty copies, not twenty compiler runs.
32-bit libraries are built with ``-m32 -nostdlib`` (this host has no 32-bit C
library) and linked against a 32-bit stand-in with the SONAME ``libc.so.6``,
so ldconfig files them as ``libc6`` like a real i386 build; ``plain32`` skips
that link and gives what ldconfig calls a plain ``ELF`` library.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

LDCONFIG = shutil.which("ldconfig") or "/sbin/ldconfig"

_STUB_C = "int nvhook_stub(void) { return 1; }\n"


class Compiler:
    """Compiles stub shared objects into a session cache."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        (cache / "stub.c").write_text(_STUB_C)
        self._libc32: Path | None = None

    def _run(self, args: list[str]) -> None:
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            pytest.fail(f"{' '.join(args)} failed: {result.stderr.strip()}")

    def libc32(self) -> Path:
        if self._libc32 is None:
            out = self.cache / "libc32-standin.so"
            stub = str(self.cache / "stub.c")
            self._run(
                [
                    "gcc",
                    "-m32",
                    "-shared",
                    "-nostdlib",
                    "-Wl,-soname,libc.so.6",
                    "-o",
                    str(out),
                    stub,
                ]
            )
            self._libc32 = out
        return self._libc32

    def require_m32(self) -> None:
        """Skip the test when gcc cannot build 32-bit objects here."""
        try:
            self.libc32()
        except pytest.fail.Exception as e:  # pragma: no cover - depends on the host
            pytest.skip(f"gcc -m32 does not work here: {e}")

    def library(self, soname: str, arch: str) -> Path:
        """A shared object with ``soname`` for ``x86_64``, ``i386`` or ``plain32``."""
        out = self.cache / f"{arch}-{soname}"
        if out.exists():
            return out
        stub = str(self.cache / "stub.c")
        args = ["gcc", "-shared", f"-Wl,-soname,{soname}", "-o", str(out), stub]
        if arch in ("i386", "plain32"):
            self.require_m32()
        if arch == "i386":
            args[1:1] = ["-m32", "-nostdlib", "-Wl,--no-as-needed"]
            args.append(str(self.libc32()))
        elif arch == "plain32":
            args[1:1] = ["-m32", "-nostdlib"]
        elif arch != "x86_64":
            raise ValueError(arch)
        self._run(args)
        return out


class FakeRoot:
    """A directory laid out like a host with an NVIDIA driver, piece by piece."""

    def __init__(self, path: Path, compiler: Compiler) -> None:
        self.path = path
        self.compiler = compiler

    def __str__(self) -> str:
        return str(self.path)

    def at(self, path: str) -> Path:
        return self.path / path.lstrip("/")

    def library(
        self,
        directory: str,
        file_name: str,
        soname: str | None,
        *,
        arch: str = "x86_64",
        link: bool = True,
    ) -> str:
        """Put a library at ``directory/file_name`` (SONAME defaults to the file name)."""
        dest = self.at(directory) / file_name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.compiler.library(soname or file_name, arch), dest)
        if link and soname and soname != file_name:
            (dest.parent / soname).unlink(missing_ok=True)
            (dest.parent / soname).symlink_to(file_name)
        return f"{directory.rstrip('/')}/{file_name}"

    def file(self, path: str, content: str = "", *, mode: int = 0o644) -> str:
        dest = self.at(path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(content)
        dest.chmod(mode)
        return path

    def binary(self, path: str) -> str:
        return self.file(path, "#!/bin/sh\n", mode=0o755)

    def symlink(self, path: str, target: str) -> str:
        dest = self.at(path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.symlink_to(target)
        return path

    def ldconfig(self, *dirs: str, fmt: str = "new", cache: str = "/etc/ld.so.cache") -> str:
        """Write ``etc/ld.so.conf`` listing ``dirs`` and run the real ``ldconfig -r`` over it."""
        conf = self.at("/etc/ld.so.conf")
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text("".join(d + "\n" for d in dirs))
        self.at(cache).parent.mkdir(parents=True, exist_ok=True)
        args = [LDCONFIG, "-r", str(self.path), "-c", fmt, "-C", cache, "-f", "/etc/ld.so.conf"]
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            pytest.fail(f"{' '.join(args)} failed: {result.stderr.strip()}")
        return str(self.at(cache))


@pytest.fixture(scope="session")
def compiler(tmp_path_factory: pytest.TempPathFactory) -> Compiler:
    if shutil.which("gcc") is None:
        pytest.skip("no gcc to compile stub libraries")
    return Compiler(tmp_path_factory.mktemp("stub-libs"))


@pytest.fixture
def fake_root(tmp_path: Path, compiler: Compiler) -> Iterator[FakeRoot]:
    root = tmp_path / "root"
    root.mkdir()
    yield FakeRoot(root, compiler)


def ldconfig_print(cache: str) -> list[tuple[str, str, str]]:
    """``(soname, flags description, path)`` as ``ldconfig -p -C cache`` prints them, in order."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
    out = subprocess.run(
        [LDCONFIG, "-p", "-C", cache], capture_output=True, text=True, check=True, env=env
    ).stdout
    rows = []
    for line in out.splitlines()[1:]:
        if " => " not in line:
            continue
        left, path = line.strip().split(" => ", 1)
        soname, _, desc = left.partition(" (")
        rows.append((soname, desc.rstrip(")"), path))
    return rows


X86 = "/usr/lib/x86_64-linux-gnu"
I386 = "/usr/lib/i386-linux-gnu"
VERSION = "550.54.15"

#: SONAMEs of the driver's libraries (``{v}``: the file's own version), as the driver sets them.
SONAMES = {
    "libnvidia-ml.so": "libnvidia-ml.so.1",
    "libnvidia-cfg.so": "libnvidia-cfg.so.1",
    "libcuda.so": "libcuda.so.1",
    "libcudadebugger.so": "libcudadebugger.so.1",
    "libnvidia-opencl.so": "libnvidia-opencl.so.1",
    "libnvidia-ptxjitcompiler.so": "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-nvvm.so": "libnvidia-nvvm.so.4",
    "libnvidia-gpucomp.so": "libnvidia-gpucomp.so.{v}",
    "libnvidia-allocator.so": "libnvidia-allocator.so.1",
    "libnvidia-encode.so": "libnvidia-encode.so.1",
    "libnvidia-opticalflow.so": "libnvidia-opticalflow.so.1",
    "libnvcuvid.so": "libnvcuvid.so.1",
    "libvdpau_nvidia.so": "libvdpau_nvidia.so.1",
    "libGLX_nvidia.so": "libGLX_nvidia.so.0",
    "libEGL_nvidia.so": "libEGL_nvidia.so.0",
    "libnvidia-glcore.so": "libnvidia-glcore.so.{v}",
    "libnvidia-egl-wayland.so": "libnvidia-egl-wayland.so.1",
}


def driver_library(
    root: FakeRoot,
    stem: str,
    *,
    version: str = VERSION,
    directory: str = X86,
    arch: str = "x86_64",
) -> str:
    """``<directory>/<stem>.<version>`` with its SONAME link; returns its path in the root."""
    soname = SONAMES.get(stem, stem + ".1").format(v=version)
    return root.library(directory, f"{stem}.{version}", soname, arch=arch)
