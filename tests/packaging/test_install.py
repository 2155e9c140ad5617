"""packaging/install.sh run for real, with every path it writes moved into a temporary tree.

The wheelhouse comes from ``packaging/wheels.sh``; the host root is a mock machine, so the CDI
step generates a real spec; systemd is never called (``SYSTEMD=no``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from nvhook.engines import DEFAULT_NAME
from tests.packaging.conftest import PACKAGING

INSTALL = PACKAGING / "install.sh"
TEMPLATE = (PACKAGING / "config.toml").read_bytes()
#: Every setting of install.sh that names a place on the host.
PATH_SETTINGS = (
    "PREFIX",
    "SYSCONFDIR",
    "CDI_DIR",
    "CONTAINERD_CONFIG",
    "BACKUP_DIR",
    "SYSTEMD_UNIT_DIR",
)
UNITS = ("nvhook-cdi-refresh.service", "nvhook-cdi-refresh.path")
CRI = 'plugins."io.containerd.grpc.v1.cri"'


def settings(tmp_path: Path, **overrides: str) -> dict[str, str]:
    """install.sh's environment: every host path under ``tmp_path/host``, systemd left alone."""
    host = tmp_path / "host"
    values = {
        "PREFIX": str(host / "prefix"),
        "SYSCONFDIR": str(host / "sysconf"),
        "CDI_DIR": str(host / "cdi"),
        "CONTAINERD_CONFIG": str(host / "containerd" / "config.toml"),
        "BACKUP_DIR": str(host / "backups"),
        "SYSTEMD_UNIT_DIR": str(host / "units"),
        "SYSTEMD": "no",
        "ENGINE": "none",
        "HOST_ROOT": str(tmp_path / "no-driver"),
        # the interpreter behind this venv: the wheelhouse's wheels are for its version
        "PYTHON": os.path.realpath(sys.executable),
        "SOURCE": str(tmp_path / "no-source"),
        **overrides,
    }
    for name in PATH_SETTINGS:  # never the real host's
        assert Path(values[name]).is_relative_to(host), name
    return values


def run(
    command: str, env: Mapping[str, str], *, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(INSTALL), command],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if ok and proc.returncode != 0:
        pytest.fail(
            f"install.sh {command} failed ({proc.returncode}):\n{proc.stderr}", pytrace=False
        )
    return proc


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.slow
def test_install_again_and_uninstall(
    tmp_path: Path, wheelhouse: Path, make_mock_machine: Callable[..., Path]
) -> None:
    env = settings(tmp_path, SOURCE=str(wheelhouse), HOST_ROOT=str(make_mock_machine("h100-pcie")))
    prefix, sysconf, cdi = Path(env["PREFIX"]), Path(env["SYSCONFDIR"]), Path(env["CDI_DIR"])
    units = Path(env["SYSTEMD_UNIT_DIR"])

    run("install", env)
    # the venv, with launchers naming its interpreter absolutely and isolated; where a C
    # compiler works, nvhook-runtime is the native front-end in front of nvhook-runtime.py
    native = (prefix / "bin" / "nvhook-runtime").read_bytes()[:4] == b"\x7fELF"
    assert native == (shutil.which("cc") is not None or shutil.which("gcc") is not None)
    assert ((prefix / "bin" / "nvhook-hook").read_bytes()[:4] == b"\x7fELF") == native
    names = ("nvhook-runtime.py", "nvhook-hook.py") if native else ("nvhook-runtime", "nvhook-hook")
    for launcher in names:
        first = (prefix / "bin" / launcher).read_text().splitlines()[0]
        assert first.startswith(f"#!{prefix}/bin/python -I"), first
    version = subprocess.run(
        [str(prefix / "bin" / "nvhook"), "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.startswith("nvhook, version ")
    # the config: the defaults
    assert (sysconf / "config.toml").read_bytes() == TEMPLATE
    # the spec, from the mock's driver, with this venv's hook in it; valid
    spec = cdi / "nvidia.json"
    assert f"{prefix}/bin/nvhook-hook" in spec.read_text()
    subprocess.run(
        [str(prefix / "bin" / "nvhook"), "cdi", "validate", "--strict", str(spec)],
        capture_output=True,
        check=True,
    )
    # the units, their paths set to ours
    service = (units / UNITS[0]).read_text()
    assert f"ExecStart={prefix}/bin/nvhook cdi generate --output {cdi}/nvidia.json" in service
    assert (
        f"ExecStartPost={prefix}/bin/nvhook cdi check --spec-dir /etc/cdi --spec-dir {cdi}\n"
        in service
    )
    assert "/opt/nvhook" not in service
    assert (units / UNITS[1]).is_file()
    installed = files(tmp_path / "host")

    # an admin edits the config; installing again keeps it and changes nothing else
    edited = TEMPLATE + b"# edited\n"
    (sysconf / "config.toml").write_bytes(edited)
    again = run("install", env)
    assert f"config: {sysconf}/config.toml exists: kept" in again.stderr
    assert (sysconf / "config.toml").read_bytes() == edited
    assert files(tmp_path / "host") == installed

    out = run("uninstall", env)
    assert not prefix.exists()
    assert not spec.exists()
    assert not any(units.iterdir())
    assert (sysconf / "config.toml").read_bytes() == edited  # edited: kept
    assert "config: kept" in out.stderr
    # and again: nothing left to do, no error
    run("uninstall", env)
    assert (sysconf / "config.toml").read_bytes() == edited


def _watched(units: Path) -> list[str]:
    text = (units / UNITS[1]).read_text()
    return [line.partition("=")[2] for line in text.splitlines() if line.startswith("PathChanged=")]


@pytest.mark.slow
def test_without_a_driver_the_spec_is_skipped(tmp_path: Path, wheelhouse: Path) -> None:
    env = settings(tmp_path, SOURCE=str(wheelhouse), DRIVER_ROOT="/run/nvidia/driver/")
    out = run("install", env)
    assert "cdi: skipped: no NVIDIA driver is loaded" in out.stderr
    # the units watch and read the driver under DRIVER_ROOT; /dev stays the host's
    units = Path(env["SYSTEMD_UNIT_DIR"])
    watched = _watched(units)
    assert watched[0] == "/dev/nvidiactl"
    assert "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" in watched
    assert all(p.startswith("/run/nvidia/driver/") for p in watched[1:])
    assert (
        " cdi generate --driver-root /run/nvidia/driver --output " in (units / UNITS[0]).read_text()
    )
    assert not Path(env["CDI_DIR"]).exists()
    assert Path(env["PREFIX"], "bin", "nvhook-runtime").is_file()
    run("uninstall", env)
    # everything install made is gone, the unchanged config and its directory included
    assert not Path(env["PREFIX"]).exists()
    assert not Path(env["SYSCONFDIR"]).exists()
    assert not any(Path(env["SYSTEMD_UNIT_DIR"]).iterdir())


@pytest.mark.slow
def test_driver_root_of_the_config_goes_into_the_units(tmp_path: Path, wheelhouse: Path) -> None:
    env = settings(tmp_path, SOURCE=str(wheelhouse))
    config = Path(env["SYSCONFDIR"], "config.toml")
    config.parent.mkdir(parents=True)
    config.write_text('[host]\ndriver_root = "/opt/driver"\n')
    run("install", env)
    units = Path(env["SYSTEMD_UNIT_DIR"])
    assert "/opt/driver/usr/bin/nvidia-smi" in _watched(units)
    assert "cdi generate --driver-root /opt/driver --output" in (units / UNITS[0]).read_text()
    watch = (units / "nvhook-watch.service").read_text()  # enabled where systemd runs
    start = f"ExecStart={env['PREFIX']}/bin/nvhook watch --driver-root /opt/driver --output "
    assert start in watch
    run("uninstall", env)
    assert not (units / "nvhook-watch.service").exists()
    # an empty DRIVER_ROOT overrides the config: the host's own paths
    run("install", {**env, "DRIVER_ROOT": ""})
    assert "/usr/bin/nvidia-smi" in _watched(units)
    (start,) = [
        x for x in (units / UNITS[0]).read_text().splitlines() if x.startswith("ExecStart=")
    ]
    assert "--driver-root" not in start
    run("uninstall", env)


@pytest.mark.slow
def test_configures_containerd_and_undoes_it(tmp_path: Path, wheelhouse: Path) -> None:
    env = settings(tmp_path, SOURCE=str(wheelhouse), ENGINE="containerd")
    config = Path(env["CONTAINERD_CONFIG"])
    config.parent.mkdir(parents=True)
    original = b'version = 2\n[grpc]\naddress = "/run/containerd/containerd.sock"\n'
    config.write_bytes(original)

    out = run("install", env)
    cri = tomllib.loads(config.read_text())["plugins"]["io.containerd.grpc.v1.cri"]
    runtime = cri["containerd"]["runtimes"][DEFAULT_NAME]
    assert runtime["runtime_type"] == "io.containerd.runc.v2"
    assert runtime["options"]["BinaryName"] == f"{env['PREFIX']}/bin/nvhook-runtime"
    assert f"engine: added the '{DEFAULT_NAME}' runtime" in out.stderr
    assert "engine: restart containerd" in out.stderr  # no systemd here: says so

    configured = config.read_bytes()
    again = run("install", env)
    assert config.read_bytes() == configured
    assert f"already has the '{DEFAULT_NAME}' runtime" in again.stderr
    assert "engine: restart containerd" not in again.stderr

    out = run("uninstall", env)
    assert config.read_bytes() == original
    assert "engine: restart containerd" in out.stderr
    assert not Path(env["BACKUP_DIR"]).exists()
    out = run("uninstall", env)  # nothing left to undo
    assert config.read_bytes() == original


def test_refuses_a_prefix_it_did_not_make(tmp_path: Path) -> None:
    env = settings(tmp_path)
    prefix = Path(env["PREFIX"])
    prefix.mkdir(parents=True)
    (prefix / "precious").write_text("not ours\n")
    out = run("install", env, ok=False)
    assert out.returncode == 1
    assert f"{prefix} exists and was not made by this installer" in out.stderr
    assert run("uninstall", env).stderr.count(f"venv: kept {prefix}") == 1
    assert files(prefix) == {"precious"}
    assert not Path(env["SYSCONFDIR"]).exists()


@pytest.mark.parametrize(
    ("name", "value"),
    [("PREFIX", "relative/path"), ("CDI_DIR", "/with space"), ("PREFIX", "/"), ("SYSTEMD", "yes")],
)
def test_rejects_bad_settings(tmp_path: Path, name: str, value: str) -> None:
    env = {**settings(tmp_path), name: value}
    for command in ("install", "uninstall"):
        out = run(command, env, ok=False)
        assert out.returncode == 1
        assert f"error: {name}" in out.stderr or "cannot be /" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_refuses_an_unsupported_python_before_changing_anything(tmp_path: Path) -> None:
    python = tmp_path / "python3.14"
    python.write_text("#!/bin/sh\nexit 1\n")  # what the version check gets from 3.10 or 3.14
    python.chmod(0o755)
    out = run("install", settings(tmp_path, PYTHON=str(python)), ok=False)
    assert out.returncode == 1
    assert f"PYTHON={python} is not a supported Python (3.11, 3.12, 3.13 or 3.14)" in out.stderr
    assert not (tmp_path / "host").exists()
