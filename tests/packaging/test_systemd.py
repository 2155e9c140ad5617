"""The units: what they run and watch, and `systemd-analyze verify` on them."""

from __future__ import annotations

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
    """`nvhook watch` on the spec the refresh service writes, restarted when it fails; shipped
    but enabled by no installer (the operator's choice: docs/watch.md)."""
    unit = parse(WATCH)
    assert values(unit, "Service", "ExecStart") == [
        "/opt/nvhook/bin/nvhook watch --output /var/run/cdi/nvidia.json"
    ]
    assert values(unit, "Service", "Type") == ["simple"]
    assert values(unit, "Service", "Restart") == ["on-failure"]
    assert values(unit, "Install", "WantedBy") == ["multi-user.target"]
    for script in ("deb/postinst", "rpm/post"):
        assert WATCH not in (PACKAGING / script).read_text(), script
    for script in ("deb/prerm", "deb/postrm", "rpm/preun", "install.sh"):
        assert WATCH in (PACKAGING / script).read_text(), script


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
