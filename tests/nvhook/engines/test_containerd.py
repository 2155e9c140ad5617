"""``nvhook runtime configure --runtime containerd``: golden configs, loaded by the real containerd.

Each case under ``tests/data/containerd/<case>/`` is data: ``in/`` (the config tree before,
``@ROOT@`` standing for where it lies; no ``config.toml``: no config file), ``case.toml``
(name, set_as_default, containerd_major, load) and ``out/`` (the tree after, ``@ROOT@``
again; review it by eye; ``pytest --update-golden`` rewrites it). Every case is configured,
compared, configured again (nothing changes), loaded by containerd 1.6 unless ``load =
false`` (``config dump`` shows the runtime with runc's options, and a containerd started
on it loads its CRI plugin), then unconfigured (the tree is byte for byte ``in/`` again).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_subprocess import FakeProcess

from nvhook import engines
from nvhook.cli import main
from nvhook.engines import DEFAULT_CONFIGS, apply_plan, apply_unconfigure, plan_unconfigure
from nvhook.engines.containerd import (
    CRI_PLUGIN,
    DEFAULT_CONFIG,
    installed_containerd_major,
    plan_configure,
)
from nvhook.errors import EngineConfigError, EngineWriteError
from tests.support.containers import require, require_root, unique_id

DATA = Path(__file__).parents[2] / "data" / "containerd"
CASES = sorted(p.name for p in DATA.iterdir() if (p / "case.toml").is_file())
SHIM = "/usr/local/bin/nvhook-runtime"  # golden files name this path; nothing runs it here


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under root, by relative path (directories show as empty entries)."""
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel + ("/" if path.is_dir() else "")] = path.read_bytes() if path.is_file() else b""
    return out


def _configure(case: dict[str, Any], root: Path, backups: Path) -> list[str]:
    plan = plan_configure(
        str(root / "config.toml"),
        name=case["name"],
        runtime_path=SHIM,
        set_as_default=case.get("set_as_default", False),
        containerd_major=case.get("containerd_major"),
    )
    return apply_plan(plan, str(backups))


@pytest.mark.parametrize("case_name", CASES)
def test_golden(case_name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    case_dir = DATA / case_name
    case = tomllib.loads((case_dir / "case.toml").read_text())
    root, backups = tmp_path / "etc", tmp_path / "backups"
    root.mkdir()
    for path in sorted((case_dir / "in").rglob("*")):  # "@ROOT@" in a file: where it lies now
        target = root / path.relative_to(case_dir / "in")
        if path.is_dir():
            target.mkdir()
        else:
            target.write_bytes(path.read_bytes().replace(b"@ROOT@", str(root).encode()))
    before = _tree(root)
    assert _configure(case, root, backups)

    after = {k: v.replace(str(root).encode(), b"@ROOT@") for k, v in _tree(root).items()}
    out = case_dir / "out"
    if request.config.getoption("--update-golden"):
        shutil.rmtree(out, ignore_errors=True)
        for rel, data in after.items():
            if not rel.endswith("/"):
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                (out / rel).write_bytes(data)
    expected = _tree(out)
    assert {k for k in after if not k.endswith("/")} == {k for k in expected if not k.endswith("/")}
    for rel, data in expected.items():
        if not rel.endswith("/"):
            assert after[rel].decode() == data.decode(), f"{case_name}: {rel} differs from out/"

    # configuring again changes nothing, and keeps the first backup
    record = list(backups.iterdir())
    record_bytes = {p: p.read_bytes() for p in record}
    assert _configure(case, root, backups) == []
    assert {p: p.read_bytes() for p in backups.iterdir()} == record_bytes

    if case.get("load", True):
        _check_with_containerd(root / "config.toml", case, tmp_path / "containerd")

    plan = plan_unconfigure("containerd", str(root / "config.toml"), str(backups))
    apply_unconfigure(plan, str(backups))
    assert _tree(root) == before
    assert list(backups.iterdir()) == []


# --------------------------------------------------------------------------- real containerd


def _check_with_containerd(config: Path, case: dict[str, Any], workdir: Path) -> None:
    """containerd 1.6 reads the configured file: the runtime is there with runc's options,
    runc is still there, and the CRI plugin loads (its runtime checks pass)."""
    binary = require("containerd")
    major = installed_containerd_major()
    if major != 1:
        pytest.skip(f"the golden files are checked with containerd 1.x, not {major}")
    dump = subprocess.run(
        [binary, "--config", str(config), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd="/",  # as under systemd: containerd 1.x globs relative imports from there
    )
    assert dump.returncode == 0, dump.stderr
    dumped = tomllib.loads(dump.stdout)
    containerd = dumped["plugins"][CRI_PLUGIN[2]]["containerd"]
    runtime = containerd["runtimes"][case["name"]]
    assert runtime["runtime_type"] == "io.containerd.runc.v2"
    assert runtime["options"]["BinaryName"] == SHIM
    assert "cdi.k8s.io/*" in runtime["container_annotations"]  # CRI passes those on
    runc = containerd["runtimes"]["runc"]
    for key, value in runc["options"].items():
        if key != "BinaryName":
            assert runtime["options"][key] == value, key  # inherited from runc
    expected_default = case["name"] if case.get("set_as_default") else "runc"
    assert containerd["default_runtime_name"] == expected_default
    _start(binary, config, workdir)


def _start(binary: str, config: Path, workdir: Path) -> None:
    """Start containerd on ``config`` with private root, state and socket; its CRI plugin
    must load. A private mount namespace with a tmpfs on /opt keeps the opt plugin's
    /opt/containerd off the host."""
    require_root()
    ctr = require("ctr")
    workdir.mkdir()
    sock = Path(f"/tmp/{unique_id('nvh-ctrd')}.sock")
    argv = [
        "unshare", "--mount", "--propagation", "private", "sh", "-c",
        'mount -t tmpfs tmpfs /opt && exec "$@"', "sh",
        binary, "--config", str(config), "--root", str(workdir / "root"),
        "--state", str(workdir / "state"), "--address", str(sock),
    ]  # fmt: skip
    with open(workdir / "log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd="/")
    try:
        plugins = ""
        for _ in range(200):
            if proc.poll() is not None:
                break
            probe = subprocess.run(
                [ctr, "-a", str(sock), "plugins", "ls"], capture_output=True, text=True, check=False
            )
            if probe.returncode == 0:
                plugins = probe.stdout
                break
            time.sleep(0.05)
        log_text = (workdir / "log").read_text()
        cri = [line.split() for line in plugins.splitlines() if " cri " in f" {line} "]
        assert cri and cri[0][-1] == "ok", f"CRI plugin did not load:\n{plugins}\n{log_text}"
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        sock.unlink(missing_ok=True)
        Path(f"{sock}.ttrpc").unlink(missing_ok=True)


# --------------------------------------------------------------------------- errors


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def _plan(path: Path, **kwargs: Any) -> Any:
    return plan_configure(str(path), name="nvidia", runtime_path=SHIM, **kwargs)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version = 2\n[plugins\n", "config.toml: invalid TOML: "),
        ("version = 4\n", "containerd config version 4 is not supported"),
        ('version = "2"\n', "containerd config version '2' is not supported"),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes = "x"\n',
            'config.toml: plugins."io.containerd.grpc.v1.cri".containerd.runtimes is not a table',
        ),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\nnvidia = 1\n',
            'config.toml: plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia is not',
        ),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
            "options = 1\n",
            'config.toml: plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options',
        ),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
            'container_annotations = "cdi.k8s.io/*"\n',
            "runtimes.nvidia.container_annotations is not an array of strings",
        ),
        ('version = 2\nimports = ["missing.toml"]\n', "missing.toml (imported by"),
        ("version = 2\nimports = [1]\n", "imports must be an array of strings"),
    ],
)
def test_invalid_configs_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = _config(tmp_path, text)
    with pytest.raises(EngineConfigError) as err:
        _plan(path)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert path.read_text() == text


def test_container_annotations_keep_their_patterns_and_gain_cdi_once(tmp_path: Path) -> None:
    """A runtime listing annotation patterns keeps them; ``cdi.k8s.io/*`` is added once."""
    runtimes = 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes'
    path = _config(
        tmp_path,
        f'version = 2\n[{runtimes}.runc]\nruntime_type = "io.containerd.runc.v2"\n'
        f'[{runtimes}.nvidia]\ncontainer_annotations = ["io.katacontainers.*"]\n',
    )
    assert apply_plan(_plan(path), str(tmp_path / "backups"))
    nvidia = tomllib.loads(path.read_text())["plugins"][CRI_PLUGIN[2]]["containerd"]["runtimes"]
    assert nvidia["nvidia"]["container_annotations"] == ["io.katacontainers.*", "cdi.k8s.io/*"]
    assert "container_annotations" not in nvidia["runc"]
    assert apply_plan(_plan(path), str(tmp_path / "backups")) == []  # already there: no change


def test_non_utf8_config_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"version = 2\n# caf\xe9\n")
    with pytest.raises(EngineConfigError, match=r"config.toml: not UTF-8 \(byte 17\)"):
        _plan(path)


def test_symlinked_config_is_refused(tmp_path: Path) -> None:
    real = _config(tmp_path, "version = 2\n")
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    with pytest.raises(
        EngineConfigError, match=r"link.toml is a symbolic link \(to .*config.toml\)"
    ):
        _plan(link)
    assert real.read_text() == "version = 2\n" and link.is_symlink()


def test_mixed_versions_in_imports_are_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.toml").write_text("version = 3\n")
    path = _config(tmp_path, f'version = 2\nimports = ["{tmp_path}/d/*.toml"]\n')
    with pytest.raises(EngineConfigError, match=r"a.toml: containerd config version 3 differs"):
        _plan(path)


def test_foreign_drop_in_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "99-nvhook.toml").write_text("version = 2\n")
    path = _config(tmp_path, f'version = 2\nimports = ["{tmp_path}/d/*.toml"]\n')
    with pytest.raises(EngineConfigError, match=r"99-nvhook.toml exists and was not written by"):
        _plan(path)


def test_drop_in_goes_after_the_files_that_configure_cri(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "zzz-late.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "p:1"\n'
    )
    path = _config(tmp_path, f'version = 2\nimports = ["{tmp_path}/d/*.toml"]\n')
    plan = _plan(path)
    # 99-nvhook.toml and zz-nvhook.toml sort before zzz-late.toml: an explicit import instead
    assert [c.path for c in plan.changed] == [str(path), str(tmp_path / "conf.d/99-nvhook.toml")]
    assert plan.dirs == (str(tmp_path / "conf.d"),)
    dropin = tomllib.loads(plan.changed[1].new.decode())
    assert dropin["plugins"][CRI_PLUGIN[2]]["sandbox_image"] == "p:1"


def test_no_place_for_a_drop_in(tmp_path: Path) -> None:
    (tmp_path / "late.toml").write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n')
    (tmp_path / "conf.d").mkdir()
    # conf.d/99-nvhook.toml imports late.toml, which would then come after it
    path = _config(tmp_path, f'version = 2\nimports = ["{tmp_path}/conf.d/*.toml", "late.toml"]\n')
    (tmp_path / "conf.d" / "a.toml").write_text('version = 2\nimports = ["../late.toml"]\n')
    with pytest.raises(EngineConfigError, match="no place for a drop-in"):
        _plan(path)


def test_new_file_version_follows_the_installed_containerd(tmp_path: Path) -> None:
    assert DEFAULT_CONFIGS["containerd"] == DEFAULT_CONFIG == "/etc/containerd/config.toml"
    for major, version in ((1, 2), (2, 3), (None, 3)):
        plan = _plan(tmp_path / f"new-{major}.toml", containerd_major=major)
        assert tomllib.loads(plan.changed[0].new.decode())["version"] == version


@pytest.mark.parametrize(
    ("output", "version"),
    [
        ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1\n", 2),
        ("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n", 2),
        ("containerd github.com/containerd/containerd/v2 v2.1.1 cb1076646aa3740577fa\n", 3),
        ("", 3),  # it failed, or printed nothing: the current format
    ],
    ids=["debian-1.6", "docker-1.7", "2.1", "no-version"],
)
def test_a_new_config_follows_the_containerd_on_path(
    fp: FakeProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str, version: int
) -> None:
    """What ``containerd --version`` says picks the version of a config written from scratch.
    Its output is faked: a test can install neither containerd 2 nor Docker's build beside
    Debian's 1.6."""
    binary = tmp_path / "bin" / "containerd"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 99\n")  # never run: fp answers in its place
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(binary.parent))
    fp.register([str(binary), "--version"], stdout=output, returncode=0 if output else 1)
    plan = engines.plan_configure(
        "containerd", config=str(tmp_path / "config.toml"), runtime_path=SHIM
    )
    assert tomllib.loads(plan.changed[0].new.decode())["version"] == version
    assert fp.call_count([str(binary), "--version"]) == 1


def test_an_existing_config_keeps_its_version_whatever_containerd_says(
    fp: FakeProcess, tmp_path: Path
) -> None:
    """containerd is asked only when there is no config: fp refuses any command run."""
    config = _config(tmp_path, "version = 2\n")
    plan = engines.plan_configure("containerd", config=str(config), runtime_path=SHIM)
    assert tomllib.loads(plan.changed[0].new.decode())["version"] == 2
    assert len(fp.calls) == 0


# --------------------------------------------------------------------------- CLI, backups


@pytest.fixture
def shim_path(tmp_path: Path) -> str:
    path = tmp_path / "bin" / "nvhook-runtime"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def _cli(*args: str) -> int:
    return main(["runtime", *args])


def test_cli_dry_run_prints_a_diff_and_writes_nothing(
    tmp_path: Path, shim_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, "version = 2\n")
    backups = tmp_path / "backups"
    args = ["--runtime", "containerd", "--config", str(path), "--backup-dir", str(backups)]
    assert _cli("configure", *args, "--runtime-path", shim_path, "--dry-run") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"--- {path}\n+++ {path}\n@@ -1 +1,")
    assert f'+BinaryName = "{shim_path}"\n' in out
    assert path.read_text() == "version = 2\n"
    assert not backups.exists()


def test_cli_configure_twice_then_unconfigure(
    tmp_path: Path, shim_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    original = "# mine\nversion = 2\n"
    path = _config(tmp_path, original)
    os.chmod(path, 0o640)
    backups = tmp_path / "backups"
    args = ["--runtime", "containerd", "--config", str(path), "--backup-dir", str(backups)]
    assert _cli("configure", *args, "--runtime-path", shim_path) == 0
    assert capsys.readouterr().out.startswith(f"wrote {path}\noriginals saved under {backups}")
    configured = path.read_bytes()
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert _cli("configure", *args, "--runtime-path", shim_path) == 0
    assert "already has runtime 'nvidia': nothing changed" in capsys.readouterr().out
    # a second configure with another option: the backup still holds the true original
    assert _cli("configure", *args, "--runtime-path", shim_path, "--set-as-default") == 0
    assert path.read_bytes() != configured
    assert _cli("unconfigure", *args, "--dry-run") == 0
    assert '-default_runtime_name = "nvidia"' in capsys.readouterr().out
    assert path.read_bytes() != original.encode()
    assert _cli("unconfigure", *args) == 0
    assert capsys.readouterr().out.startswith(f"restored {path}\n")
    assert path.read_text() == original
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert list(backups.iterdir()) == []
    assert _cli("unconfigure", *args) == 0  # nothing recorded: nothing to do
    assert "nothing to undo" in capsys.readouterr().err


def test_cli_unconfigure_refuses_a_file_changed_since(
    tmp_path: Path, shim_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, "version = 2\n")
    backups = tmp_path / "backups"
    args = ["--runtime", "containerd", "--config", str(path), "--backup-dir", str(backups)]
    assert _cli("configure", *args, "--runtime-path", shim_path) == 0
    with path.open("a") as f:
        f.write("# a later edit\n")
    capsys.readouterr()
    assert _cli("unconfigure", *args) == 8
    err = capsys.readouterr().err
    assert err.startswith(f"nvhook: {path} changed since nvhook wrote it (its original is ")
    assert err.count("\n") == 1
    assert path.read_text().endswith("# a later edit\n")
    assert _cli("unconfigure", *args, "--force") == 0
    assert path.read_text() == "version = 2\n"


def test_cli_unconfigure_force_restores_a_deleted_file_with_its_mode_and_owner(
    tmp_path: Path, shim_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    require_root()  # to give the file another owner
    original = "# mine\nversion = 2\n"
    path = _config(tmp_path, original)
    os.chmod(path, 0o604)
    os.chown(path, 1234, 5678)
    backups = tmp_path / "backups"
    args = ["--runtime", "containerd", "--config", str(path), "--backup-dir", str(backups)]
    assert _cli("configure", *args, "--runtime-path", shim_path) == 0
    path.unlink()  # someone deleted the configured file
    capsys.readouterr()
    assert _cli("unconfigure", *args) == 8
    assert capsys.readouterr().err.startswith(f"nvhook: {path} changed since nvhook wrote it")
    assert not path.exists()
    assert _cli("unconfigure", *args, "--force") == 0
    assert capsys.readouterr().out.startswith(f"restored {path}\n")
    st = path.stat()
    assert (path.read_text(), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (
        original,
        0o604,
        1234,
        5678,
    )
    assert list(backups.iterdir()) == []


def test_cli_new_file_is_removed_by_unconfigure(tmp_path: Path, shim_path: str) -> None:
    path = tmp_path / "containerd" / "config.toml"
    path.parent.mkdir()
    backups = tmp_path / "backups"
    args = ["--runtime", "containerd", "--config", str(path), "--backup-dir", str(backups)]
    assert _cli("configure", *args, "--runtime-path", shim_path) == 0
    assert path.read_text().startswith("# Written by `nvhook runtime configure")
    assert _cli("unconfigure", *args) == 0
    assert not path.exists()


def test_cli_errors_are_one_line(
    tmp_path: Path, shim_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, "version = 2\n")
    base = ["--runtime", "containerd", "--config", str(path), "--backup-dir", str(tmp_path / "b")]
    assert _cli("configure", *base, "--runtime-path", "nvhook-runtime") == 8
    assert capsys.readouterr().err == (
        "nvhook: runtime path 'nvhook-runtime' must be absolute (engines have no PATH)\n"
    )
    assert _cli("configure", *base, "--runtime-path", str(tmp_path / "nope")) == 8
    assert "nope is not an executable file" in capsys.readouterr().err
    assert _cli("configure", *base, "--runtime-path", shim_path, "--name", "runc") == 8
    assert "runtime name 'runc' would replace" in capsys.readouterr().err
    assert _cli("configure", *base, "--runtime-path", shim_path, "--name", "a b") == 8
    assert path.read_text() == "version = 2\n"


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory nobody, root included, can write: a read-only bind mount (or mode 0555)."""
    directory = tmp_path / "ro"
    directory.mkdir()
    (directory / "config.toml").write_text("version = 2\n")
    if os.geteuid() != 0:
        directory.chmod(0o555)
        yield directory
        directory.chmod(0o755)
        return
    subprocess.run(["mount", "--bind", str(directory), str(directory)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(directory)], check=True)
        yield directory
    finally:
        subprocess.run(["umount", str(directory)], check=True)


def test_unwritable_config_changes_nothing(read_only_dir: Path, tmp_path: Path) -> None:
    path = read_only_dir / "config.toml"
    backups = tmp_path / "backups"
    plan = _plan(path)
    with pytest.raises(EngineWriteError, match=r"cannot write .*ro/config.toml: "):
        apply_plan(plan, str(backups))
    assert path.read_text() == "version = 2\n"
    assert list(backups.iterdir()) == []  # the backup record was taken back too


def test_unwritable_backup_dir_changes_nothing(read_only_dir: Path, tmp_path: Path) -> None:
    path = _config(tmp_path, "version = 2\n")
    with pytest.raises(EngineWriteError, match=r"cannot write the backup of .*config.toml to "):
        apply_plan(_plan(path), str(read_only_dir / "backups"))
    assert path.read_text() == "version = 2\n"


def test_relative_glob_is_not_a_drop_in_place_for_containerd_1(tmp_path: Path) -> None:
    # containerd 1.x globs "conf.d/*.toml" from its working directory, not from the file's
    (tmp_path / "conf.d").mkdir()
    path = _config(tmp_path, 'version = 2\nimports = ["conf.d/*.toml"]\n')
    plan = _plan(path)
    assert [c.path for c in plan.changed] == [str(path), str(tmp_path / "conf.d/99-nvhook.toml")]
    assert tomllib.loads(plan.changed[0].new.decode())["imports"] == [
        "conf.d/*.toml",
        str(tmp_path / "conf.d/99-nvhook.toml"),
    ]
    # containerd 2.x globs it relative to the file: the drop-in goes there, the file stays
    path.write_text('version = 3\nimports = ["conf.d/*.toml"]\n')
    assert [c.path for c in _plan(path).changed] == [str(tmp_path / "conf.d/99-nvhook.toml")]


def test_inline_tables_are_extended(tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'runtimes = { runc = { runtime_type = "io.containerd.runc.v2", '
        "options = { SystemdCgroup = true } } }\n",
    )
    new = tomllib.loads(_plan(path).changed[0].new.decode())
    assert new["plugins"][CRI_PLUGIN[2]]["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2",
        "container_annotations": ["cdi.k8s.io/*"],
        "options": {"SystemdCgroup": True, "BinaryName": SHIM},
    }


def test_a_layout_tomlkit_cannot_edit_is_refused(tmp_path: Path) -> None:
    text = (
        "version = 2\n[plugins]\n"
        '"io.containerd.grpc.v1.cri".containerd.runtimes.runc.runtime_type = "x"\n'
    )
    path = _config(tmp_path, text)
    with pytest.raises(EngineConfigError, match="cannot edit this file's layout faithfully"):
        _plan(path)
    assert path.read_text() == text


def test_drop_in_follows_the_other_files_and_keeps_its_runtimes(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    cri = tmp_path / "d" / "10-cri.toml"
    cri.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "p:1"\n')
    path = _config(tmp_path, f'version = 2\nimports = ["{tmp_path}/d/*.toml"]\n')
    backups = str(tmp_path / "backups")
    drop_in = tmp_path / "d" / "99-nvhook.toml"

    def configure(name: str) -> dict[str, Any]:
        plan = plan_configure(str(path), name=name, runtime_path=SHIM, set_as_default=True)
        apply_plan(plan, backups)
        section: dict[str, Any] = tomllib.loads(drop_in.read_text())["plugins"][CRI_PLUGIN[2]]
        return section

    assert configure("a")["sandbox_image"] == "p:1"
    cri.write_text(cri.read_text().replace("p:1", "p:2"))
    section = configure("b")  # made again from 10-cri.toml, keeping runtime a
    assert section["sandbox_image"] == "p:2"
    assert set(section["containerd"]["runtimes"]) == {"runc", "a", "b"}
    assert section["containerd"]["default_runtime_name"] == "b"
    apply_unconfigure(plan_unconfigure("containerd", str(path), backups), backups)
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["10-cri.toml"]


# --------------------------------------------------------------------------- an existing runtime

_RUNC = """
[{base}.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  privileged_without_host_devices = false
  pod_annotations = ["io.kubernetes.*"]
  container_annotations = ["io.runc.*"]
  base_runtime_spec = "/etc/containerd/runc-spec.json"
  [{base}.runtimes.runc.options]
    BinaryName = "/usr/sbin/runc"
    SystemdCgroup = true
    Root = "/run/runc-root"
    NoNewKeyring = true
"""
#: an nvidia runtime some other tool wrote, whose keys differ from runc's
_NVIDIA = """
[{base}.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v1"
  privileged_without_host_devices = true
  pod_annotations = ["nvidia.com/*"]
  base_runtime_spec = "/etc/containerd/nvidia-spec.json"
  [{base}.runtimes.nvidia.options]
    BinaryName = "/usr/bin/nvidia-container-runtime"
    SystemdCgroup = false
    Root = "/run/nvidia-runc"
    CriuPath = "/usr/local/bin/criu"
"""


@pytest.mark.parametrize(
    ("version", "imports"), [(2, False), (3, False), (2, True), (3, True)], ids=str
)
def test_an_existing_runtime_keeps_its_own_keys(
    tmp_path: Path, version: int, imports: bool
) -> None:
    """Configuring over a runtime of the same name keeps every key it has, even where runc's
    differs; it gains only the keys it lacks from runc, plus the runtime type and BinaryName."""
    base = f'plugins."{CRI_PLUGIN[version]}".containerd'
    tables = _RUNC.format(base=base) + _NVIDIA.format(base=base)
    main = f"version = {version}\n"
    if imports:
        (tmp_path / "conf.d").mkdir()
        (tmp_path / "conf.d" / "10-cri.toml").write_text(main + tables)
        main += f'imports = ["{tmp_path}/conf.d/*.toml"]\n'
    else:
        main += tables
    path = _config(tmp_path, main)
    before = {p: tomllib.loads(p.read_text()) for p in [path, *sorted(tmp_path.glob("conf.d/*"))]}
    assert apply_plan(_plan(path), str(tmp_path / "backups"))

    written = {p: tomllib.loads(p.read_text()) for p in [path, *sorted(tmp_path.glob("conf.d/*"))]}
    ours = [p for p in written if p not in before]
    assert len(ours) == (1 if imports else 0)  # the drop-in
    where = ours[0] if imports else path
    runtimes = written[where]["plugins"][CRI_PLUGIN[version]]["containerd"]["runtimes"]
    assert runtimes["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2",  # set
        "privileged_without_host_devices": True,  # kept, though runc's is false
        "pod_annotations": ["nvidia.com/*"],  # kept
        "base_runtime_spec": "/etc/containerd/nvidia-spec.json",  # kept
        "container_annotations": ["io.runc.*", "cdi.k8s.io/*"],  # lacked: runc's, plus CDI's
        "options": {
            "BinaryName": SHIM,  # set
            "SystemdCgroup": False,  # kept, though runc's is true
            "Root": "/run/nvidia-runc",  # kept
            "CriuPath": "/usr/local/bin/criu",  # kept: runc has none
            "NoNewKeyring": True,  # lacked: from runc
        },
    }
    held = tmp_path / "conf.d" / "10-cri.toml" if imports else path  # the runtimes before
    old_runtimes = before[held]["plugins"][CRI_PLUGIN[version]]["containerd"]["runtimes"]
    if version == 3 and imports:  # containerd 2.x merges key by key: only the runtime
        assert set(runtimes) == {"nvidia"}
    else:
        assert runtimes["runc"] == old_runtimes["runc"]  # runc itself is left as it was
    # nothing else changes: the other files, and the rest of an edited file
    if imports:
        assert {p: written[p] for p in before} == before
    else:
        del runtimes["nvidia"], old_runtimes["nvidia"]
        assert written[path] == before[path]


# --------------------------------------------------------------------------- --enable-cdi


@pytest.mark.parametrize(
    ("text", "plugin"),
    [
        ("", "cri"),  # version 1: containerd 1.x
        ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = false\n', CRI_PLUGIN[2]),
        ("version = 3\n", CRI_PLUGIN[3]),  # containerd 2.x: on by default, said once more
    ],
    ids=["v1", "v2-off", "v3"],
)
def test_enable_cdi_switches_containerds_own_cdi_on(tmp_path: Path, text: str, plugin: str) -> None:
    path = _config(tmp_path, text)
    backups = str(tmp_path / "backups")
    apply_plan(_plan(path), backups)
    assert tomllib.loads(path.read_text())["plugins"][plugin].get("enable_cdi") is not True

    apply_plan(_plan(path, enable_cdi=True), backups)

    data = tomllib.loads(path.read_text())["plugins"][plugin]
    assert data["enable_cdi"] is True
    assert data["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == SHIM
    assert apply_plan(_plan(path, enable_cdi=True), backups) == []


@pytest.mark.parametrize("version", [2, 3])
def test_enable_cdi_goes_to_the_drop_in_and_stays(tmp_path: Path, version: int) -> None:
    """With ``imports`` it is the drop-in's, loaded last, and a later configure keeps it (1.x:
    the drop-in is made again from the other files, which have ``enable_cdi = false``)."""
    (tmp_path / "d").mkdir()
    off = f"version = {version}\n[plugins.{json.dumps(CRI_PLUGIN[version])}]\nenable_cdi = false\n"
    (tmp_path / "d" / "10-cri.toml").write_text(off)
    path = _config(tmp_path, f'version = {version}\nimports = ["{tmp_path}/d/*.toml"]\n')
    backups = str(tmp_path / "backups")
    drop_in = tmp_path / "d" / "99-nvhook.toml"

    apply_plan(_plan(path, enable_cdi=True), backups)
    assert tomllib.loads(drop_in.read_text())["plugins"][CRI_PLUGIN[version]]["enable_cdi"] is True
    apply_plan(_plan(path, set_as_default=True), backups)
    section = tomllib.loads(drop_in.read_text())["plugins"][CRI_PLUGIN[version]]
    assert section["enable_cdi"] is True
    assert section["containerd"]["default_runtime_name"] == "nvidia"


NRI = "io.containerd.nri.v1.nri"


@pytest.mark.parametrize("version", [2, 3])
def test_nri_switches_nri_on_in_the_file_and_in_a_drop_in(tmp_path: Path, version: int) -> None:
    """``--nri``: ``disable = false`` where 1.7's ``config default`` says true; with ``imports``
    in the drop-in, kept by a later configure (1.x makes the drop-in again)."""
    off = f'version = {version}\n[plugins."{NRI}"]\ndisable = true\nsocket_path = "/x.sock"\n'
    path = _config(tmp_path, off)
    backups = str(tmp_path / "backups")
    apply_plan(_plan(path, enable_nri=True), backups)
    data = tomllib.loads(path.read_text())["plugins"][NRI]
    assert data == {"disable": False, "socket_path": "/x.sock"}
    assert apply_plan(_plan(path, enable_nri=True), backups) == []

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "10-nri.toml").write_text(off)
    path = _config(tmp_path, f'version = {version}\nimports = ["{tmp_path}/d/*.toml"]\n')
    drop_in = tmp_path / "d" / "99-nvhook.toml"
    apply_plan(_plan(path, enable_nri=True), backups)
    assert tomllib.loads(drop_in.read_text())["plugins"][NRI]["disable"] is False
    apply_plan(_plan(path, set_as_default=True), backups)
    assert tomllib.loads(drop_in.read_text())["plugins"][NRI]["disable"] is False


def test_cli_enable_cdi_is_for_containerd_and_docker_only(
    tmp_path: Path, shim_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "containers.conf"
    path.write_text("")
    args = ["--runtime", "podman", "--config", str(path), "--backup-dir", str(tmp_path / "b")]
    assert _cli("configure", *args, "--runtime-path", shim_path, "--enable-cdi") == 8
    assert capsys.readouterr().err == (
        "nvhook: --enable-cdi is for --runtime containerd or docker; podman has no such "
        "setting to switch\n"
    )
    assert path.read_text() == ""
