"""The units: what they run and watch, and `systemd-analyze verify` on them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.packaging.conftest import PACKAGING
from tests.support.containers import require

UNITS = PACKAGING / "systemd"
SERVICE = "nvhook-cdi-refresh.service"
PATH_UNIT = "nvhook-cdi-refresh.path"
SERVER = "nvhook-shim-server.service"
WATCH = "nvhook-watch.service"

Unit = dict[str, list[tuple[str, str]]]


def parse(name: str) -> Unit:
    """Sections of a unit file, each a list of (key, value) in order (keys may repeat)."""
    sections: Unit = {}
    current: list[tuple[str, str]] | None = None
    for line in (UNITS / name).read_text().splitlines():
        if not line.strip() or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
        else:
            assert current is not None, f"{name}: {line!r} outside a section"
            key, _, value = line.partition("=")
            current.append((key, value))
    return sections


def values(unit: Unit, section: str, key: str) -> list[str]:
    return [v for k, v in unit.get(section, []) if k == key]


def test_only_these_units() -> None:
    assert sorted(p.name for p in UNITS.iterdir()) == [PATH_UNIT, SERVICE, SERVER, WATCH]


def test_watch_keeps_the_refresh_services_spec_current() -> None:
    """`nvhook watch` on the spec the refresh service writes, restarted when it fails, with
    no start condition (on a node without a driver it waits for one); enabled by every
    installer (the unit's comment says why) and stopped by every remover."""
    unit = parse(WATCH)
    assert values(unit, "Service", "ExecStart") == [
        "/opt/nvhook/bin/nvhook watch --output /var/run/cdi/nvidia.json"
    ]
    assert values(unit, "Service", "Type") == ["simple"]
    assert values(unit, "Service", "Restart") == ["on-failure"]
    assert values(unit, "Install", "WantedBy") == ["multi-user.target"]
    assert not [k for k, _ in unit["Unit"] if k.startswith("Condition")]
    for script in ("deb/postinst", "rpm/post", "deb/prerm", "deb/postrm", "rpm/preun"):
        assert WATCH in (PACKAGING / script).read_text(), script
    install = (PACKAGING / "install.sh").read_text()
    assert f"systemctl enable {WATCH}\n" in install and f"systemctl restart {WATCH}\n" in install


def _maintainer_script(tmp_path: Path, name: str, *args: str, was_enabled: bool) -> list[str]:
    """Run packaging/NAME with ARGS as dpkg or rpm would, against stand-ins of
    deb-systemd-helper, deb-systemd-invoke and systemctl that log their arguments; the
    script's absolute paths (the venv's setup, the legacy hook's link) point into
    ``tmp_path``. ``was_enabled``: what ``deb-systemd-helper was-enabled`` answers (true on a
    first install, false after an admin's ``systemctl disable``)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    log.write_text("")
    for tool in ("deb-systemd-helper", "deb-systemd-invoke", "systemctl"):
        stub = bin_dir / tool
        stub.write_text(
            f'#!/bin/sh\necho "{tool} $*" >>{log}\n'
            f'case "$*" in *was-enabled*) exit {0 if was_enabled else 1};; esac\nexit 0\n'
        )
        stub.chmod(0o755)
    setup = tmp_path / "setup"
    setup.write_text("#!/bin/sh\nexit 0\n")
    setup.chmod(0o755)
    text = (PACKAGING / name).read_text()
    text = text.replace("/usr/lib/nvhook/setup", str(setup))
    text = text.replace("/usr/bin/nvidia-container-runtime-hook", str(tmp_path / "legacy-hook"))
    script = tmp_path / name.replace("/", "-")
    script.write_text(text)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(["sh", str(script), *args], env=env, check=True, capture_output=True)
    return log.read_text().splitlines()


def test_the_packages_enable_the_watcher_on_first_install(tmp_path: Path) -> None:
    """The Debian postinst enables it as debhelper does (``was-enabled`` is true on a first
    install), the rpm's %post on install (1) only; an admin's disable survives an upgrade."""
    calls = _maintainer_script(tmp_path, "deb/postinst", "configure", was_enabled=True)
    assert f"deb-systemd-helper enable {WATCH}" in calls, calls
    calls = _maintainer_script(tmp_path, "deb/postinst", "configure", "1.0", was_enabled=False)
    assert f"deb-systemd-helper update-state {WATCH}" in calls, calls
    assert f"deb-systemd-helper enable {WATCH}" not in calls, calls
    (enable,) = [
        c
        for c in _maintainer_script(tmp_path, "rpm/post", "1", was_enabled=True)
        if " enable " in c
    ]
    assert enable.split()[-4:] == [PATH_UNIT, SERVICE, SERVER, WATCH], enable
    upgrade = _maintainer_script(tmp_path, "rpm/post", "2", was_enabled=True)
    assert not [c for c in upgrade if " enable " in c], upgrade


def test_shim_server_runs_the_launcher_as_root_where_the_engines_run() -> None:
    """Restarted when it fails (an upgrade: exit 75), no sandbox (it serves only callers in
    its own namespaces, with its capabilities: docs/architecture.md D12)."""
    unit = parse(SERVER)
    assert values(unit, "Service", "ExecStart") == ["/opt/nvhook/bin/nvhook-shim-server"]
    assert values(unit, "Service", "Restart") == ["on-failure"]
    keys = {k for k, _ in unit["Service"]}
    assert not keys & {"User", "PrivateTmp", "ProtectSystem", "PrivateDevices", "NoNewPrivileges"}
    assert "containerd.service" in values(unit, "Unit", "Before")[0].split()
    assert values(unit, "Install", "WantedBy") == ["multi-user.target"]


def test_service_writes_the_spec_at_boot_when_a_driver_is_loaded() -> None:
    unit = parse(SERVICE)
    assert values(unit, "Service", "Type") == ["oneshot"]
    assert values(unit, "Service", "ExecStart") == [
        "/opt/nvhook/bin/nvhook cdi generate --output /var/run/cdi/nvidia.json"
    ]
    assert values(unit, "Install", "WantedBy") == ["multi-user.target"]
    # skipped, not failed, without a driver
    assert values(unit, "Unit", "ConditionPathExists") == ["/proc/driver/nvidia/version"]
    # the path unit may start it in bursts
    assert values(unit, "Unit", "StartLimitIntervalSec") == ["0"]


def test_service_checks_every_spec_after_writing_it() -> None:
    assert values(parse(SERVICE), "Service", "ExecStartPost") == [
        "/opt/nvhook/bin/nvhook cdi check --spec-dir /etc/cdi --spec-dir /var/run/cdi"
    ]


def test_path_unit_watches_nvml_in_every_library_directory_discovery_searches() -> None:
    from nvhook.discover.catalog import DEFAULT_SEARCH_PATHS

    watched = values(parse(PATH_UNIT), "Path", "PathChanged")
    libraries = [p for p in watched if p.endswith("/libnvidia-ml.so.1")]
    assert libraries == [f"{d}/libnvidia-ml.so.1" for d in DEFAULT_SEARCH_PATHS]
    assert "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1" in libraries
    # install.sh prefixes every watched path but /dev's with the driver root
    assert [p for p in watched if p.startswith("/dev/")] == ["/dev/nvidiactl"]


def test_path_unit_watches_the_driver_files_and_starts_the_service() -> None:
    unit = parse(PATH_UNIT)
    assert values(unit, "Path", "Unit") == [SERVICE]
    watched = values(unit, "Path", "PathChanged")
    assert "/dev/nvidiactl" in watched
    assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" in watched
    # procfs sends no inotify events: watching it would never fire
    assert not [p for p in watched if p.startswith("/proc/")]
    assert {k for k, _ in unit["Path"]} == {"PathChanged", "Unit"}
    assert values(unit, "Install", "WantedBy") == ["paths.target"]


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """No error and no warning, with the paths set as install.sh sets them (to a stub nvhook)."""
    analyze = require("systemd-analyze")
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    for program in ("nvhook", "nvhook-shim-server"):
        stub = prefix / "bin" / program
        stub.write_text("#!/bin/sh\n")
        stub.chmod(0o755)
    for name in (SERVICE, PATH_UNIT, SERVER):
        text = (UNITS / name).read_text()
        (tmp_path / name).write_text(
            text.replace("/opt/nvhook", str(prefix)).replace("/var/run/cdi", str(tmp_path))
        )
    proc = subprocess.run(
        [
            analyze,
            "verify",
            str(tmp_path / SERVICE),
            str(tmp_path / PATH_UNIT),
            str(tmp_path / SERVER),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")
