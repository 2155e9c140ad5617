"""The launchers: absolute interpreter, isolated, immune to the caller's Python environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nvhook.tools.entrypoints import (
    CDI_HOOK_ENTRYPOINT,
    ENTRYPOINTS,
    LEGACY_HOOK_ENTRYPOINT,
    Entrypoint,
    import_paths,
    install_entrypoints,
    launcher_text,
)
from oci._preload import image_name

BIN = Path(sys.executable).parent


def test_launcher_text_is_absolute_and_isolated() -> None:
    entry = ENTRYPOINTS[0]
    text = launcher_text(entry, "/opt/nvhook/bin/python", ["/opt/nvhook/lib/site"])
    first = text.splitlines()[0]
    assert first == "#!/opt/nvhook/bin/python -ISXutf8"
    assert "sys.path.extend(['/opt/nvhook/lib/site'])" in text
    with pytest.raises(ValueError, match="absolute"):
        launcher_text(entry, "python3", [])


def test_import_paths_are_those_of_site() -> None:
    paths = import_paths(sys.executable)
    import site

    for directory in site.getsitepackages():
        if os.path.isdir(directory):
            assert directory in paths


def test_installed_launchers_run_from_another_directory(tmp_path: Path) -> None:
    written = install_entrypoints(str(tmp_path / "bin"), sys.executable, frontend="off")
    image = tmp_path / "bin" / image_name()
    assert sorted(p.name for p in written) == [
        "nvhook",
        "nvhook-hook",
        "nvhook-runtime",
        "nvhook-shim-server",
        image.name,
        "nvidia-cdi-hook",
        "nvidia-container-runtime-hook",
    ]
    for path in written:
        if path == image:  # the start image the launchers install (oci._preload)
            assert path.stat().st_mode & 0o777 == 0o644
            continue
        assert os.access(path, os.X_OK)
        text = path.read_text()
        assert text.startswith(f"#!{sys.executable} -ISXutf8\n")
        assert (f"install({str(image)!r})" in text) == (path.name != "nvhook")  # not the CLI
    hook = subprocess.run(
        [str(tmp_path / "bin" / "nvhook-hook")], capture_output=True, text=True, env={}
    )
    assert hook.returncode == 2 and "usage" in hook.stderr.lower()
    cli = subprocess.run(
        [str(tmp_path / "bin" / "nvhook"), "cdi", "generate", "--kind", "fpga"],
        capture_output=True,
        text=True,
        env={},
    )
    assert cli.returncode == 2 and "Usage: nvhook cdi generate" in cli.stderr


def test_runtime_ignores_the_callers_python_environment(tmp_path: Path) -> None:
    """PYTHONPATH, PYTHONHOME, PYTHONSTARTUP, a user site and a shadowing module change nothing."""
    if shutil.which("runc") is None and not Path("/usr/sbin/runc").exists():
        pytest.skip("runc is not installed: the pass-through has nothing to exec")
    marker = tmp_path / "marker"
    evil = tmp_path / "evil"
    for module in ("nvhook", "oci"):
        (evil / module).mkdir(parents=True)
        payload = f"open({str(marker)!r}, 'w').write('{module}')\n"
        (evil / module / "__init__.py").write_text(payload)
    (evil / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('site')\n")
    (evil / "startup.py").write_text(f"open({str(marker)!r}, 'w').write('startup')\n")
    home = tmp_path / "home"
    user_site = home / ".local/lib/python3.11/site-packages/nvhook"
    user_site.mkdir(parents=True)
    (user_site / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('user')\n")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "PYTHONPATH": str(evil),
        "PYTHONHOME": str(tmp_path / "no-such-home"),
        "PYTHONSTARTUP": str(evil / "startup.py"),
        "PYTHONUSERBASE": str(home / ".local"),
        "NVHOOK_CONFIG": str(tmp_path / "config.toml"),
        "NVHOOK_CACHE_DIR": str(tmp_path / "cache"),
    }
    (tmp_path / "config.toml").write_text('[runtime]\nlog_file = ""\n')
    result = subprocess.run(
        [str(BIN / "nvhook-runtime"), "--version"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("nvhook-runtime version ")
    assert result.stdout.splitlines()[1].startswith("runc version")
    assert not marker.exists(), f"the caller's environment ran code: {marker.read_text()}"
    # the control: the same environment does run the payload in a plain interpreter
    subprocess.run([sys.executable, "-c", "import nvhook"], env={**env, "PYTHONHOME": ""})
    assert marker.exists()


def test_legacy_hook_name_never_overwrites_a_foreign_file(tmp_path: Path) -> None:
    """NVIDIA's toolkit's nvidia-container-runtime-hook stays; the note says what to do."""
    foreign = tmp_path / "nvidia-container-runtime-hook"
    foreign.write_bytes(b"\x7fELF not ours")
    notes: list[str] = []
    written = install_entrypoints(str(tmp_path), notes=notes, frontend="off")
    assert foreign.read_bytes() == b"\x7fELF not ours"
    assert sorted(p.name for p in written) == [
        "nvhook",
        "nvhook-hook",
        "nvhook-runtime",
        "nvhook-shim-server",
        image_name(),
        "nvidia-cdi-hook",
    ]
    (note,) = notes
    assert str(foreign) in note and "--runtime nvidia" in note
    # our own launcher under that name is rewritten (an upgrade)
    foreign.unlink()
    install_entrypoints(str(tmp_path))
    assert foreign.name in [p.name for p in install_entrypoints(str(tmp_path))]


def test_cdi_hook_name_is_ours_unless_a_foreign_file_holds_it(tmp_path: Path) -> None:
    """nvidia-cdi-hook (Docker 29.2+ routes --gpus through CDI while it is on dockerd's PATH)
    is nvhook's hook; NVIDIA's toolkit's, or a link to it, stays as it is."""
    written = install_entrypoints(str(tmp_path), frontend="off")
    ours = tmp_path / "nvidia-cdi-hook"
    assert ours in written and "nvhook.hook.dispatch import main" in ours.read_text()
    usage = subprocess.run([str(ours), "--help"], capture_output=True, text=True, check=True)
    assert "create-symlinks --link TARGET::LINK" in usage.stdout
    ours.unlink()
    elsewhere = tmp_path / "toolkit-cdi-hook"
    elsewhere.write_bytes(b"\x7fELF not ours")
    ours.symlink_to(elsewhere)
    notes: list[str] = []
    written = install_entrypoints(str(tmp_path), notes=notes, frontend="off")
    assert ours.is_symlink() and elsewhere.read_bytes() == b"\x7fELF not ours"
    assert ours not in written
    (note,) = notes
    assert note.startswith(f"{ours} left alone") and "Docker 29.2+" in note


def test_a_launcher_starts_without_the_start_image_or_its_loader(tmp_path: Path) -> None:
    """The image gone, or an older nvhook installed under the launchers without
    oci._preload: the launcher still runs its entry point, importing as before."""
    from oci._preload import image_name

    bin_dir = tmp_path / "bin"
    install_entrypoints(str(bin_dir), sys.executable, frontend="off")
    hook = bin_dir / "nvhook-hook"

    def usage() -> bool:
        run = subprocess.run([str(hook)], capture_output=True, text=True, env={})
        return run.returncode == 2 and "usage" in run.stderr.lower()

    assert usage()  # control: with the image
    (bin_dir / image_name()).unlink()
    assert usage()
    old = tmp_path / "old"  # a tree whose oci has no _preload module
    for package in ("oci", "nvhook"):
        shutil.copytree(Path(__file__).parents[3] / package, old / package,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    (old / "oci" / "_preload.py").unlink()
    text = hook.read_text().replace(
        "sys.path.extend([", f"sys.path[:0] = [{str(old)!r}]\nsys.path.extend(["
    )
    hook.write_text(text)
    assert usage()


def modules_of(image: bytes) -> dict[str, tuple[object, ...]]:
    """An image's table with each module's code object in place of where it lies (marshal's
    bytes of equal values differ between processes: it marks shared objects by refcount)."""
    import marshal

    from oci._preload import HEADER

    size = int.from_bytes(image[:HEADER], "little")
    *_, table = marshal.loads(image[HEADER : HEADER + size])
    base = HEADER + size
    return {name: (*entry[:4], marshal.loads(image[base + entry[4][0] :][: entry[4][1]]))
            for name, entry in table.items()}  # fmt: skip


def test_the_image_for_another_interpreter_is_made_by_that_interpreter(tmp_path: Path) -> None:
    """``install-entrypoints --interpreter``-style: the image is the bytecode of the launchers'
    own interpreter, made by it (here the same Python behind a wrapper, so it must equal the
    one this process makes), named by its cache tag, 0644."""
    from nvhook.tools.entrypoints import start_image
    from nvhook.tools.startimage import image_bytes
    from oci._preload import image_name

    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    image = start_image(tmp_path, str(wrapper), import_paths(sys.executable))
    assert image == tmp_path / image_name()
    assert modules_of(image.read_bytes()) == modules_of(image_bytes())
    assert image.stat().st_mode & 0o777 == 0o644
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    assert start_image(tmp_path / "none", str(broken), []) is None


@pytest.mark.parametrize("brief", [True, False])
def test_a_launcher_runs_in_utf8_mode_and_a_brief_one_without_the_collector(
    tmp_path: Path, brief: bool
) -> None:
    """What the ``#!`` flags and the launcher's first lines give the entry point: UTF-8 mode
    under a UTF-8 locale of the caller's too (``LC_ALL=C.UTF-8``, glibc's built-in one, under
    which ``-I -S`` alone runs in locale mode: the mode the C locale alone would turn on),
    ``-I -S`` as ever, and the cyclic collector off only where the entry point is brief
    (the shim, the hooks), on for the server and the CLI."""
    (tmp_path / "probe_entry.py").write_text(
        "import gc, sys\n"
        "def main():\n"
        "    print(sys.flags.utf8_mode, sys.getfilesystemencoding(), sys.flags.isolated,\n"
        "          sys.flags.no_site, gc.isenabled(), 'site' in sys.modules)\n"
        "    return 0\n"
    )
    entry = Entrypoint("probe", "probe_entry", "main", brief=brief)
    launcher = tmp_path / "probe"
    launcher.write_text(launcher_text(entry, sys.executable, [str(tmp_path)]))
    launcher.chmod(0o755)
    done = subprocess.run(
        [str(launcher)],
        capture_output=True,
        text=True,
        env={"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"},
        check=True,
    )
    assert done.stdout.split() == ["1", "utf-8", "1", "1", str(not brief), "False"]
    assert {
        e.name for e in (*ENTRYPOINTS, LEGACY_HOOK_ENTRYPOINT, CDI_HOOK_ENTRYPOINT) if e.brief
    } == {
        "nvhook-runtime",
        "nvhook-hook",
        "nvidia-container-runtime-hook",
        "nvidia-cdi-hook",
    }
