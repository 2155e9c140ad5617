"""Compile the mock machine's C sources with the system C compiler, cached by content hash.

A :class:`Unit` is one output file (a shared object or an executable): the sources written into
a scratch directory, the files among them to compile, and the compiler arguments. Its key is
the SHA-256 of all of that plus the compiler's identity, so the same unit is compiled once per
machine and then copied out of the cache. The cache lives in ``$NVHOOK_MOCK_CACHE``, else
``$XDG_CACHE_HOME/nvhook/mock``, else ``~/.cache/nvhook/mock``; entries are written to a
temporary name and renamed, so concurrent builders (pytest-xdist workers) never see half a file.

The compiler is ``$CC`` or ``gcc``. 32-bit objects are built with ``-m32 -nostdlib`` and linked
against a 32-bit stand-in carrying the SONAME ``libc.so.6`` (:func:`libc32_standin`): the result
is a valid ELF32 i386 shared object that needs ``libc.so.6`` like the real ones (so ldconfig
files it as ``libc6``), and the host needs no 32-bit C library (no gcc-multilib).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

from nvhook.errors import MockError
from oci._frozen import Frozen

__all__ = [
    "Toolchain",
    "Unit",
    "build",
    "cache_dir",
    "csource",
    "libc32_standin",
    "toolchain",
]

_KEY_VERSION = b"nvhook-mock-build-1"


class Toolchain(Frozen):
    cc: str  # absolute path of the compiler
    identity: str  # its --version line, part of every cache key


class Unit(Frozen):
    """One compiler run that produces one file."""

    output: str  # the output's file name
    sources: tuple[tuple[str, bytes], ...]  # (file name, content) written before compiling
    compile: tuple[str, ...]  # which of the sources go on the command line
    args: tuple[str, ...]  # compiler arguments (flags, -D…, -Wl,…, extra inputs by name)

    def key(self, tc: Toolchain) -> str:
        h = hashlib.sha256(_KEY_VERSION)
        for part in (tc.identity, self.output, *self.compile, "\0", *self.args, "\0"):
            h.update(part.encode() + b"\0")
        for name, content in self.sources:
            h.update(name.encode() + b"\0" + len(content).to_bytes(8, "little") + content)
        return h.hexdigest()


@functools.cache
def toolchain() -> Toolchain:
    """The system C compiler (``$CC`` or ``gcc``)."""
    name = os.environ.get("CC") or "gcc"
    cc = shutil.which(name)
    if cc is None:
        raise MockError(
            f"no C compiler {name!r} on PATH: the mock machine compiles its driver stubs; "
            "install gcc (apt-get install gcc libc6-dev) or set CC"
        )
    try:
        out = subprocess.run(
            [cc, "--version"], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise MockError(f"C compiler {cc} does not run: {e}") from e
    return Toolchain(cc=cc, identity=out.splitlines()[0] if out else cc)


def cache_dir() -> Path:
    """Where compiled units are kept (``$NVHOOK_MOCK_CACHE`` overrides)."""
    explicit = os.environ.get("NVHOOK_MOCK_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "nvhook" / "mock"


def csource(name: str) -> bytes:
    """A C source file shipped in ``nvhook/mock/csrc``."""
    return resources.files("nvhook.mock.csrc").joinpath(name).read_bytes()


def libc32_standin() -> Unit:
    """A 32-bit shared object with SONAME ``libc.so.6``, only ever used as a link input."""
    return Unit(
        output="libc.so.6",
        sources=(("standin.c", b"int nvhook_mock_libc_standin;\n"),),
        compile=("standin.c",),
        args=("-m32", "-shared", "-nostdlib", "-fPIC", "-Wl,-soname,libc.so.6"),
    )


def build(units: Sequence[Unit]) -> list[Path]:
    """Paths of the built units (in order), compiling those not in the cache, in parallel."""
    tc = toolchain()
    cache = cache_dir()
    targets = [cache / key[:2] / f"{key}-{unit.output}" for unit in units for key in [unit.key(tc)]]
    missing = list({t: u for u, t in zip(units, targets, strict=True) if not t.exists()}.items())
    if missing:
        try:
            (cache / "tmp").mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise MockError(f"cannot create the mock build cache {cache}: {e.strerror}") from e
        workers = min(len(missing), os.cpu_count() or 2)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(_compile, tc, cache, u, t) for t, u in missing]:
                future.result()
    return targets


def _compile(tc: Toolchain, cache: Path, unit: Unit, target: Path) -> None:
    with tempfile.TemporaryDirectory(dir=cache / "tmp") as scratch:
        work = Path(scratch)
        for name, content in unit.sources:
            (work / name).write_bytes(content)
        cmd = [tc.cc, *unit.args, *unit.compile, "-o", unit.output]
        try:
            proc = subprocess.run(
                cmd, cwd=work, capture_output=True, text=True, timeout=300, check=False
            )
        except (OSError, subprocess.SubprocessError) as e:
            raise MockError(f"cannot run {tc.cc} to build {unit.output}: {e}") from e
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            detail = next((ln for ln in lines if "error" in ln), lines[-1] if lines else "")
            raise MockError(
                f"{Path(tc.cc).name} failed to build {unit.output} for the mock machine "
                f"(exit {proc.returncode}): {detail.strip()}"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.parent / f".{target.name}.{os.getpid()}.tmp"
        shutil.copyfile(work / unit.output, staged)
        os.replace(staged, target)
