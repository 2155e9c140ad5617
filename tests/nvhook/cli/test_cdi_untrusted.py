"""Untrusted CDI spec files through `nvhook cdi check` and `nvhook cdi list`.

Each case is a mock spec directory with exactly one fault the runtime would refuse (a file
of another owner, a group-writable file, a world-writable directory, a symbolic link), and
the same directory without it as the control. The setting ``cdi.untrusted_specs`` comes
from the file ``--config`` names: refuse (the default) makes the file a finding that fails
the check and a problem of the listing; warn reports it as a warning and uses it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.cli import main
from oci.errors import ExitCode
from tests.support.basics import require_root

KIND = "example.com/dev"
LIB = "/usr/lib/libfoo.so.1"
REFUSED = " (not used)"
WARNED = " (used anyway: untrusted spec files are only warned of)"


class Host:
    """A root with the library a spec mounts, and a trusted spec directory holding the spec."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "root"
        (self.root / "usr/lib").mkdir(parents=True)
        self.lib = self.root / LIB.lstrip("/")
        self.lib.write_bytes(b"")
        self.spec_dir = tmp_path / "cdi"
        self.spec_dir.mkdir()
        os.chmod(self.spec_dir, 0o755)
        self.file = self.spec_dir / "foo.json"
        spec = {
            "cdiVersion": "0.5.0",
            "kind": KIND,
            "containerEdits": {
                "mounts": [{"hostPath": LIB, "containerPath": LIB, "options": ["ro", "bind"]}]
            },
            "devices": [{"name": "d0", "containerEdits": {"env": ["A=1"]}}],
        }
        self.file.write_text(json.dumps(spec))
        os.chmod(self.file, 0o644)
        self.warn = tmp_path / "warn.toml"
        self.warn.write_text('[cdi]\nuntrusted_specs = "warn"\n')
        self.refuse = tmp_path / "refuse.toml"
        self.refuse.write_text('[cdi]\nuntrusted_specs = "refuse"\n')

    def check(self, *config: str) -> list[str]:
        return ["cdi", "check", "--spec-dir", str(self.spec_dir), "--root", str(self.root), *config]

    def list(self, *config: str) -> list[str]:
        return ["cdi", "list", "--spec-dir", str(self.spec_dir), *config]


def _other_owner(host: Host) -> tuple[str, str]:
    require_root()  # chown; under CI a missing root fails, it does not skip
    os.chown(host.file, 65534, 65534)
    f = host.file
    return (
        f"{f}: CDI spec file is owned by uid 65534, not root (uid 65534, mode 0644), and its "
        f"hooks would run as root: chown root {f} and chmod go-w {f}, or remove it",
        f"chown root {f} and chmod go-w {f}, or remove it",
    )


def _group_writable(host: Host) -> tuple[str, str]:
    os.chmod(host.file, 0o664)
    f = host.file
    return (
        f"{f}: CDI spec file is writable by group or others (uid {os.geteuid()}, mode 0664), "
        f"and its hooks would run as root: chown root {f} and chmod go-w {f}, or remove it",
        f"chown root {f} and chmod go-w {f}, or remove it",
    )


def _world_writable_dir(host: Host) -> tuple[str, str]:
    os.chmod(host.spec_dir, 0o777)
    d = host.spec_dir
    return (
        f"{d}: CDI spec directory is writable by group or others (uid "
        f"{os.geteuid()}, mode 0777), so anyone who can write it decides what runs as root: "
        f"chown root {d} and chmod go-w {d}",
        f"chown root {d} and chmod go-w {d}",
    )


def _symlink(host: Host) -> tuple[str, str]:
    target = host.spec_dir.parent / "elsewhere.json"
    host.file.rename(target)
    host.file.symlink_to(target)
    f = host.file
    return (
        f"{f}: CDI spec file is a symbolic link, whose target's directory is not checked: "
        f"replace {f} with a copy of the file it links to",
        f"replace {f} with a copy of the file it links to",
    )


#: Each applies its fault, and gives the line that names it (the file's, or its directory's)
#: and the fix.
FAULTS: dict[str, Callable[[Host], tuple[str, str]]] = {
    "another owner": _other_owner,
    "group-writable file": _group_writable,
    "world-writable dir": _world_writable_dir,
    "symlinked spec": _symlink,
}


def _finding(host: Host, fault: str) -> tuple[str, str]:
    """The fault applied: the line of `nvhook cdi check` (which names the file first) and
    the fix."""
    line, fix = FAULTS[fault](host)
    file = str(host.file)
    return (line if line.startswith(f"{file}: ") else f"{file}: {line}"), fix


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    monkeypatch.delenv("NVHOOK_CONFIG", raising=False)  # /etc/nvhook/config.toml, absent here
    return Host(tmp_path)


def test_the_control_is_clean(host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    for config in ((), ("--config", str(host.refuse)), ("--config", str(host.warn))):
        assert main(host.check(*config)) == 0
        out, err = capsys.readouterr()
        assert out == f"1 CDI spec file(s) in {host.spec_dir}: all match the host\n"
        assert main(host.list(*config)) == 0
        out, err = capsys.readouterr()
        assert (out, err) == (f"{KIND}=d0\t{host.file}\n", "")


@pytest.mark.parametrize("fault", FAULTS)
def test_check_refuses_an_untrusted_spec(
    host: Host, fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line, fix = _finding(host, fault)
    host.lib.unlink()  # stale too, but a refused file is not read further
    for config in ((), ("--config", str(host.refuse))):
        assert main(host.check(*config)) == ExitCode.VALIDATION
        out, err = capsys.readouterr()
        assert out.splitlines() == [line + REFUSED, fix]
        assert err == ""


@pytest.mark.parametrize("fault", FAULTS)
def test_check_warns_of_an_untrusted_spec_and_checks_it(
    host: Host, fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line, fix = _finding(host, fault)
    file = str(host.file)
    warning = f"{file}: warning: {line.removeprefix(file + ': ')}{WARNED}"
    assert main(host.check("--config", str(host.warn))) == 0
    out, _ = capsys.readouterr()
    summary = f"1 CDI spec file(s) in {host.spec_dir}: all match the host"
    assert out.splitlines() == [warning, fix, summary]
    host.lib.unlink()  # the spec is still checked
    assert main(host.check("--config", str(host.warn))) == ExitCode.VALIDATION
    out, _ = capsys.readouterr()
    stale = f"{file}: containerEdits: mount {LIB}: host file is missing"
    regenerate = f"regenerate {file} with the tool that wrote it, or remove it"
    assert out.splitlines() == [warning, stale, fix, regenerate]


@pytest.mark.parametrize("fault", FAULTS)
def test_list_under_each_setting(
    host: Host, fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line, _ = FAULTS[fault](host)
    for config in ((), ("--config", str(host.refuse))):
        assert main(host.list(*config)) == ExitCode.INVALID_CDI
        out, err = capsys.readouterr()
        assert (out, err.splitlines()) == ("", [line + REFUSED])
    assert main(host.list("--config", str(host.warn))) == 0
    out, err = capsys.readouterr()
    assert out == f"{KIND}=d0\t{host.file}\n"
    assert err.splitlines() == [line + WARNED]


def test_a_config_file_that_is_not_there(host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    gone = host.spec_dir.parent / "gone.toml"
    for argv in (host.check("--config", str(gone)), host.list("--config", str(gone))):
        assert main(argv) == ExitCode.CONFIG
        err = capsys.readouterr().err
        assert err == f"nvhook: {gone}: configuration file not found (named by --config)\n"


def _bundle(host: Host) -> Path:
    bundle = host.spec_dir.parent / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "process": {}}))
    return bundle


@pytest.mark.parametrize("fault", FAULTS)
def test_inject_judges_spec_files_as_the_runtime_does(
    host: Host, fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`nvhook cdi inject` refuses an untrusted spec's devices under refuse (the default) and
    applies them with the warning under warn; the bundle is unchanged when refused."""
    line, _ = FAULTS[fault](host)
    bundle = _bundle(host)
    before = (bundle / "config.json").read_bytes()
    argv = ["cdi", "inject", "-b", str(bundle), "--spec-dir", str(host.spec_dir)]
    for config in ((), ("--config", str(host.refuse))):
        assert main([*argv, *config, f"{KIND}=d0"]) == ExitCode.UNRESOLVED
        assert f"{KIND}=d0" in capsys.readouterr().err
        assert (bundle / "config.json").read_bytes() == before
    assert main([*argv, "--config", str(host.warn), f"{KIND}=d0"]) == 0
    assert capsys.readouterr().err.splitlines() == [line + WARNED]
    assert "A=1" in json.loads((bundle / "config.json").read_text())["process"]["env"]


def test_commands_default_to_the_settings_spec_dirs(
    host: Host, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --spec-dir, list, check and inject read cdi.spec_dirs of the settings, as the
    runtime resolves names, not the built-in default."""
    config = host.spec_dir.parent / "dirs.toml"
    config.write_text(f'[cdi]\nspec_dirs = ["{host.spec_dir}"]\n')
    assert main(["cdi", "list", "--config", str(config)]) == 0
    assert capsys.readouterr().out == f"{KIND}=d0\t{host.file}\n"
    assert main(["cdi", "check", "--root", str(host.root), "--config", str(config)]) == 0
    summary = f"1 CDI spec file(s) in {host.spec_dir}: all match the host\n"
    assert capsys.readouterr().out == summary
    bundle = _bundle(host)
    assert main(["cdi", "inject", "-b", str(bundle), "--config", str(config), f"{KIND}=d0"]) == 0
    assert "A=1" in json.loads((bundle / "config.json").read_text())["process"]["env"]
