"""Launchers for the programs that runtimes and hooks start: ``nvhook-runtime`` and ``nvhook-hook``.

Runtimes start ``nvhook-runtime`` with their own environment (podman's cleanup
call has no PATH at all), and runc starts hooks as root on the host. So each
launcher names its interpreter by absolute path (never ``/usr/bin/env
python3``: a pyenv shim on PATH costs ~200 ms and PATH may be empty) and runs
it isolated (``-I``: no ``PYTHON*`` variables, no user site-packages, no
script directory on ``sys.path``) and without ``site`` (``-S``: the import
paths are written into the launcher), so nothing in the caller's environment
can change which code runs, and no ``.pth`` file runs code at every start.

pip cannot write such launchers (it drops interpreter flags from a script's
shebang), so ``nvhook install-entrypoints`` writes them, next to the
interpreter by default; ``./dev setup`` and the node installer run it.

Where a C compiler exists, ``nvhook-runtime`` is the native front-end instead
(:mod:`nvhook.native`, issue 16): it runs the calls that ask for nothing without
starting Python and hands every other call to the Python launcher, written as
``nvhook-runtime.py`` beside it (which tells the shim that ``nvhook-runtime`` is
itself, so that the shim never picks it as the low-level runtime). ``nvhook-shim-server``
is the same shim pre-forked (:mod:`nvhook.server`), which the front-end tries first when
it listens; a launcher like the others, so it runs the same code with the same paths. ``frontend``
chooses: ``"auto"`` (build it when a compiler works, else the Python launcher as
``nvhook-runtime``), ``"off"``, or the path of one built beforehand for this
directory (the packages ship it compiled).

``nvhook-hook`` is native the same way (``nvhook/native/nvhook-hook.c``, issue 16 item
3): it does the common ``create-container`` call itself and hands every other call, argv
and stdin unchanged, to the Python hook written as ``nvhook-hook.py`` beside it. With a
prebuilt front-end, the prebuilt hook is the ``nvhook-hook`` beside it (when there is one).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from oci._frozen import Frozen

__all__ = [
    "CDI_HOOK_ENTRYPOINT",
    "CLI_ENTRYPOINT",
    "ENTRYPOINTS",
    "FLAGS",
    "FRONTEND_LAUNCHER",
    "HOOK_LAUNCHER",
    "LEGACY_HOOK_ENTRYPOINT",
    "NATIVE",
    "Entrypoint",
    "install_entrypoints",
    "launcher_text",
]


class Entrypoint(Frozen):
    name: str
    module: str
    function: str
    #: A process that ends in milliseconds (an exec or an exit, never a loop): its launcher
    #: turns the cyclic garbage collector off (:func:`launcher_text`).
    brief: bool = False


#: The Python launcher's name when ``nvhook-runtime`` is the native front-end.
FRONTEND_LAUNCHER = "nvhook-runtime.py"
#: The Python launcher's name when ``nvhook-hook`` is the native hook.
HOOK_LAUNCHER = "nvhook-hook.py"
#: The entry points that have a native program in front of their Python launcher.
NATIVE: tuple[str, ...] = ("nvhook-runtime", "nvhook-hook")

ENTRYPOINTS: tuple[Entrypoint, ...] = (
    Entrypoint("nvhook-runtime", "nvhook.shim", "main", brief=True),
    Entrypoint("nvhook-hook", "nvhook.hook.dispatch", "main", brief=True),
    # the runtime shim pre-forked for the native front-end (docs/architecture.md D12)
    Entrypoint("nvhook-shim-server", "nvhook.server", "main"),
)
#: The CLI, over pip's console script: without ``site`` and ``.pth`` files it starts sooner.
#: Not in :data:`ENTRYPOINTS`, the container-start path (tests/test_layers.py rule B).
CLI_ENTRYPOINT = Entrypoint("nvhook", "nvhook.cli", "main")

#: ``nvhook-hook`` under the name Docker's ``--gpus`` looks for on dockerd's PATH (it runs
#: it with argv ``[nvidia-container-runtime-hook, prestart]``: hook mode). Installed
#: beside the others unless a file of another origin (NVIDIA's toolkit) holds the name.
LEGACY_HOOK_ENTRYPOINT = Entrypoint(
    "nvidia-container-runtime-hook", "nvhook.hook.dispatch", "main", brief=True
)
#: ``nvhook-hook`` under the name Docker 29.2+ looks for on dockerd's PATH at start to route
#: ``--gpus`` through CDI (its ``nvidia.cdi`` driver, moby PR #50228): ``--gpus all``,
#: ``device=0,3``, ``2`` become the CDI names ``nvidia.com/gpu=all``, ``=0``/``=3``,
#: ``=0``/``=1``, which dockerd applies from the specs in its CDI dirs (nvhook's included),
#: falling back to the prestart hook when that fails. dockerd only looks the name up; run, it
#: is nvhook's hook (whose ``create-symlinks`` and ``update-ldcache`` take NVIDIA's options).
#: Installed under the same rule as :data:`LEGACY_HOOK_ENTRYPOINT`.
CDI_HOOK_ENTRYPOINT = Entrypoint("nvidia-cdi-hook", "nvhook.hook.dispatch", "main", brief=True)
#: The names that are not written over a file of another origin.
_OTHERS_NAMES = (LEGACY_HOOK_ENTRYPOINT, CDI_HOOK_ENTRYPOINT)
_MARK = "written by `nvhook install-entrypoints`"
#: The interpreter's flags on every launcher's ``#!`` line (:func:`launcher_text`).
FLAGS = "-ISXutf8"


def launcher_text(
    entry: Entrypoint,
    interpreter: str,
    paths: list[str],
    *,
    program: str | None = None,
    image: str | None = None,
) -> str:
    """The launcher script: an absolute, isolated interpreter and a few lines of Python.

    The interpreter runs with ``-I -S -X utf8``, written ``-ISXutf8`` (a ``#!`` line passes
    one argument): ``site`` is skipped (its cost is ``python -I -c pass`` over
    ``python -I -S -c pass`` in ``bench/figures.py``), so the launcher puts the environment's
    import paths, computed at install time, on ``sys.path``; and Python's UTF-8 mode is on,
    as it is anyway under the C locale, whatever ``LANG`` the caller passes: file names and
    the environment are decoded as UTF-8 (undecodable bytes kept by ``surrogateescape``),
    and the interpreter does not load the caller's locale at start (with ``LANG=C.UTF-8``,
    the system locale systemd hands its services, 1.0 M of a GPU create's 46.0 M
    instructions: ``bench/instructions.py``'s row run with that ``LANG``).

    ``program``: the native front-end this launcher serves, set as ``sys.argv[0]`` (the
    program the shim must never exec as the runtime). ``image``: the start image the
    launcher installs before its first import (:mod:`oci._preload`; an nvhook installed
    later without it still starts, importing as before).

    A ``brief`` entry point's launcher first turns the cyclic garbage collector off: the
    process ends in an exec or an exit within milliseconds (its memory goes with it), and the
    collections its allocations would trigger on the way, each walking every object made so
    far, were ~5% of a GPU create's instructions (2.6 M of 47.9 M, ``bench/instructions.py``).
    Reference counting still frees what it can; nothing of these processes relies on cycles
    being collected.
    """
    if not os.path.isabs(interpreter):
        raise ValueError(f"interpreter must be an absolute path, got {interpreter!r}")
    name = os.path.basename(program) + ".py" if program else entry.name
    return (
        f"#!{interpreter} {FLAGS}\n"
        f"# {name}: written by `nvhook install-entrypoints`; do not edit.\n"
        + ("import gc\ngc.disable()  # a brief process: no collections\n" if entry.brief else "")
        + "import sys\n"
        f"sys.path.extend({paths!r})\n"
        + (f"sys.argv[0] = {program!r}\n" if program else "")
        + (
            "try:\n    from oci._preload import install\nexcept ImportError:  # an older nvhook\n"
            f"    pass\nelse:\n    install({image!r})\n"
            if image
            else ""
        )
        + f"from {entry.module} import {entry.function}\n"
        f"raise SystemExit({entry.function}())\n"
    )


def import_paths(interpreter: str) -> list[str]:
    """What ``site`` would add to ``sys.path`` for ``interpreter``: its site-packages and the
    directories its ``.pth`` files name (import lines in them are not run)."""
    import subprocess

    probe = subprocess.run(
        [interpreter, "-I", "-c", "import site, sys; print('\\n'.join(site.getsitepackages()))"],
        capture_output=True,
        text=True,
        check=True,
    )
    paths: list[str] = []
    for site_dir in probe.stdout.splitlines():
        if not os.path.isdir(site_dir):
            continue
        paths.append(site_dir)
        for name in sorted(os.listdir(site_dir)):
            if not name.endswith(".pth"):
                continue
            with open(os.path.join(site_dir, name)) as f:
                for line in f:
                    line = line.rstrip("\n")
                    if not line or line.startswith(("#", "import ", "import\t")):
                        continue
                    entry = os.path.join(site_dir, line)
                    if os.path.isdir(entry) and entry not in paths:
                        paths.append(entry)
    return paths


def install_entrypoints(
    bin_dir: str | None = None,
    interpreter: str | None = None,
    *,
    notes: list[str] | None = None,
    frontend: str = "auto",
) -> list[Path]:
    """Write every launcher into ``bin_dir`` (default: the interpreter's directory), atomically.

    ``nvidia-container-runtime-hook`` and ``nvidia-cdi-hook`` are not written over a file that
    is not one of these launchers (NVIDIA's toolkit's binaries); a line saying so is appended
    to ``notes``.
    ``frontend``: ``"auto"``, ``"off"`` or a prebuilt front-end's path (module docstring).
    """
    python = interpreter or sys.executable
    target = Path(bin_dir) if bin_dir else Path(python).parent
    target.mkdir(parents=True, exist_ok=True)
    paths = import_paths(python)
    image = start_image(target, python, paths)
    written = [] if image is None else [image]
    for entry in (*ENTRYPOINTS, *_OTHERS_NAMES, CLI_ENTRYPOINT):
        path = target / entry.name
        if entry in _OTHERS_NAMES and foreign_file(path):
            if notes is not None:
                notes.append(
                    legacy_hook_note(path)
                    if entry is LEGACY_HOOK_ENTRYPOINT
                    else cdi_hook_note(path)
                )
            continue
        native = None
        if entry.name in NATIVE and frontend != "off":
            native = _frontend(target, path, _prebuilt(entry.name, frontend))
        launcher = target / f"{entry.name}.py"
        started = None if entry is CLI_ENTRYPOINT or image is None else str(image)
        if native is None:
            _write(path, launcher_text(entry, python, paths, image=started), target)
            written.append(path)
            if entry.name in NATIVE:
                launcher.unlink(missing_ok=True)  # a native program's, from an earlier run
            continue
        text = launcher_text(entry, python, paths, program=str(path), image=started)
        _write(launcher, text, target)
        os.replace(native, path)
        written += [path, launcher]
    return written


def start_image(target: Path, python: str, paths: list[str]) -> Path | None:
    """Write the start image for ``python`` into ``target`` (:mod:`nvhook.tools.startimage`),
    mode 0644, as the launchers are written: made in this process when ``python`` is this
    interpreter, else by ``python`` itself (the image is its bytecode, of the nvhook its
    ``paths`` import). None, with the launchers then importing as without it, where it
    cannot be made."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        from nvhook.tools.startimage import image_bytes
        from oci._preload import image_name

        name, data = image_name(), image_bytes()
    else:
        import subprocess

        script = (
            "import sys; sys.path.extend(sys.argv[1:]); "
            "from nvhook.tools.startimage import image_bytes; from oci._preload import image_name; "
            "sys.stdout.buffer.write(image_name().encode() + b'\\n' + image_bytes())"
        )
        made = subprocess.run([python, "-I", "-S", "-c", script, *paths],
                              capture_output=True, check=False)  # fmt: skip
        if made.returncode != 0 or b"\n" not in made.stdout:
            return None
        first, _, data = made.stdout.partition(b"\n")
        name = first.decode(errors="replace")
        if not (name.startswith("nvhook-start.") and name.endswith(".marshal")) or "/" in name:
            return None
    path = target / name
    _write(path, data, target, mode=0o644)
    return path


def _prebuilt(name: str, frontend: str) -> str:
    """What ``frontend`` means for the entry point ``name``: ``"auto"``/``"off"`` as is; a
    prebuilt front-end's path for ``nvhook-runtime``, the ``nvhook-hook`` beside it for
    ``nvhook-hook`` (``"off"`` when there is none: the Python hook)."""
    if frontend in ("auto", "off") or name == "nvhook-runtime":
        return frontend
    beside = os.path.join(os.path.dirname(frontend), name)
    return beside if os.path.isfile(beside) else "off"


def foreign_file(path: Path) -> bool:
    """Whether ``path`` exists (a link included) and is not a launcher written here."""
    if not path.is_symlink() and not path.exists():
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return True
    return _MARK.encode() not in head


def legacy_hook_note(path: Path) -> str:
    """Why ``path`` was left alone, and what to do (one line)."""
    return (
        f"{path} left alone: it is another program (the NVIDIA Container Toolkit's hook?); "
        "Docker's --gpus runs that one. Remove the toolkit (or that file) and run "
        "`nvhook install-entrypoints` again to use nvhook's hook mode, or use "
        "`docker run --runtime nvidia` after `nvhook runtime configure --runtime docker`"
    )


def cdi_hook_note(path: Path) -> str:
    """Why ``path`` (``nvidia-cdi-hook``) was left alone, and what it means (one line)."""
    return (
        f"{path} left alone: it is another program (the NVIDIA Container Toolkit's CDI hook?); "
        "Docker 29.2+ still routes --gpus through CDI while it is on dockerd's PATH, with the "
        "specs in /etc/cdi and /var/run/cdi (nvhook's among them: `nvhook cdi generate`)"
    )


def _frontend(target: Path, path: Path, frontend: str) -> Path | None:
    """The native program for ``path``, built (or copied) next to it under a temporary name;
    None when there is none (``frontend`` "off", or no compiler)."""
    import shutil

    from nvhook.native import HOOK_SOURCE, SOURCE, build

    if frontend == "off":
        return None
    source = HOOK_SOURCE if path.name == "nvhook-hook" else SOURCE
    launcher = str(target.resolve() / f"{path.name}.py")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=target)
    os.close(fd)
    try:
        if frontend == "auto":
            if build(launcher, tmp, source=source) is not None:
                Path(tmp).unlink(missing_ok=True)
                return None
        else:
            data = Path(frontend).read_bytes()
            if launcher.encode() + b"\0" not in data:
                raise ValueError(
                    f"{frontend} was not built for {target} (it does not hand over to {launcher})"
                )
            shutil.copyfile(frontend, tmp)
        os.chmod(tmp, 0o755)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _write(path: Path, data: str | bytes, target: Path, *, mode: int = 0o755) -> None:
    """``data`` at ``path`` in ``target``, atomically (a temporary file renamed over it)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=target)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
