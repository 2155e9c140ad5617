"""``nvhook doctor`` on the mock machine: a healthy node, and each broken setup it must name."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.engines import apply_plan, plan_configure
from nvhook.tools.doctor import (
    Check,
    Options,
    cgroup_layout,
    check_cgroups,
    check_engines,
    diagnose,
    exit_code,
    render_text,
)
from nvhook.tools.doctor.engine_config import daemon_start
from nvhook.tools.doctor.server import RESTART, check_shim_server
from nvhook.tools.entrypoints import ENTRYPOINTS, launcher_text
from oci.errors import ExitCode

RUNTIME = "/usr/bin/nvhook-runtime"


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def configure_command(root: Path, engine: str, config: Path, *, default: bool = False) -> None:
    plan = plan_configure(
        engine, config=str(config), name="nvidia", runtime_path=RUNTIME, set_as_default=default
    )
    apply_plan(plan, str(root / "var/lib/nvhook/backups"))


@pytest.fixture
def node(make_mock_machine: Callable[..., Path]) -> Path:
    """A healthy mock node: driver, launchers in /usr/bin, a CDI spec, containerd configured."""
    root = make_mock_machine("l40s-x4", as_root_nodes=True)
    _write(root / "usr/bin/python3", "#!/bin/sh\n", 0o755)  # the launchers' interpreter
    for entry in ENTRYPOINTS:
        _write(root / "usr/bin" / entry.name, launcher_text(entry, "/usr/bin/python3", []), 0o755)
    spec = root / "var/run/cdi/nvidia.json"
    spec.parent.mkdir(parents=True)
    assert main(["cdi", "generate", "--root", str(root), "--output", str(spec)]) == 0
    config = _write(root / "etc/containerd/config.toml", "version = 2\n")
    configure_command(root, "containerd", config)
    return root


def _opts(root: Path, **kw: object) -> Options:
    return Options(root=str(root), bin_dir=str(root / "usr/bin"), **kw)  # type: ignore[arg-type]


def _engine(root: Path, engine: str) -> list[Check]:
    """``engine``'s findings but the daemon's absence (the mock runs no daemon)."""
    return [
        c
        for c in check_engines(_opts(root))
        if c.area == engine and not c.message.endswith("is not running")
    ]


def _problems(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == "fail"]


def test_a_healthy_node_exits_zero(node: Path) -> None:
    checks = diagnose(_opts(node))
    assert _problems(checks) == [], render_text(checks)
    assert exit_code(checks) == ExitCode.OK
    areas = {c.area for c in checks}
    assert {"driver", "settings", "cdi", "containerd", "cgroups"} <= areas
    messages = "\n".join(c.message for c in checks)
    assert "4 GPUs" in messages
    assert "runtime 'nvidia' runs /usr/bin/nvhook-runtime" in messages
    # no containerd process under the mock's /proc: said, but not a failure
    assert any(c.status == "warn" and "containerd is not running" in c.message for c in checks)


def test_json_and_exit_code_from_the_command_line(
    node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["doctor", "--root", str(node), "--bin-dir", str(node / "usr/bin"), "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["healthy"] is True
    assert {"area", "status", "message", "fix"} == set(data["checks"][0])
    (node / "var/run/cdi/nvidia.json").unlink()
    assert main(argv[:-1]) == ExitCode.VALIDATION
    out = capsys.readouterr().out
    assert "FAIL  no CDI spec" in out
    assert f"fix: nvhook cdi generate --root {node} --output {node}/var/run/cdi/nvidia.json" in out


def test_no_spec(node: Path) -> None:
    (node / "var/run/cdi/nvidia.json").unlink()
    [problem] = _problems(diagnose(_opts(node)))
    assert problem.area == "cdi"
    assert "defines nvidia.com/gpu devices" in problem.message
    assert problem.fix.startswith(f"nvhook cdi generate --root {node} --output ")


def test_invalid_spec_is_regenerated(node: Path) -> None:
    spec = node / "var/run/cdi/nvidia.json"
    spec.write_text('{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": "no"}')
    problems = _problems(diagnose(_opts(node)))
    assert problems and all(p.area == "cdi" for p in problems)
    assert problems[0].message.startswith("invalid CDI spec: ")
    assert problems[0].fix == f"nvhook cdi generate --root {node} --output {spec}"


def test_untrusted_spec_is_reported_with_its_fix(node: Path) -> None:
    """A spec file others may write: its hooks would run as root (refused by default)."""
    spec = node / "var/run/cdi/nvidia.json"
    os.chmod(spec, 0o666)
    untrusted = [c for c in diagnose(_opts(node)) if c.message.startswith("untrusted CDI spec")]
    assert [(c.status, c.fix) for c in untrusted] == [
        ("fail", f"chown root {spec} && chmod go-w {spec}")
    ]
    assert "writable by group or others" in untrusted[0].message
    assert "mode 0666" in untrusted[0].message
    others = [c.message for c in _problems(diagnose(_opts(node))) if c not in untrusted]
    assert not [m for m in others if m.startswith(("stale", "invalid"))]  # reported once


def test_stale_spec(node: Path) -> None:
    spec = node / "var/run/cdi/nvidia.json"
    mounts = json.loads(spec.read_text())["containerEdits"]["mounts"]
    gone = next(m["hostPath"] for m in mounts if "libnvidia-cfg.so." in m["hostPath"])
    Path(gone).unlink()  # the driver's files changed since the spec was generated
    [problem] = _problems(diagnose(_opts(node)))
    assert problem.area == "cdi"
    assert problem.message.startswith(f"stale CDI spec: {spec}: ")
    assert gone in problem.message
    assert problem.fix == f"nvhook cdi generate --root {node} --output {spec}"
    assert exit_code([problem]) == ExitCode.VALIDATION


def test_bad_settings(node: Path) -> None:
    config = _write(
        node / "etc/nvhook/config.toml", '[runtime]\nmode = "auto"\n\n[host]\nresolver = "magic"\n'
    )
    [problem] = _problems(diagnose(_opts(node)))
    assert problem.area == "settings"
    assert "host.resolver: 'magic' is not one of procfs, nvml" in problem.message
    assert problem.fix == f"${{EDITOR:-vi}} +5 {config}"


def test_a_toolkit_config_is_translated(node: Path) -> None:
    config = _write(node / "etc/nvhook/config.toml", '[nvidia-container-runtime]\nmode = "cdi"\n')
    [problem] = _problems(diagnose(_opts(node)))
    assert "looks like nvidia-container-runtime's config.toml" in problem.message
    assert "nvidia-container-runtime.mode -> runtime.mode" in problem.message
    new = f"{config}.nvhook"
    assert problem.fix == f"nvhook config import {config} > {new} && mv {new} {config}"


def test_missing_launcher(node: Path) -> None:
    (node / "usr/bin/nvhook-hook").unlink()
    problems = _problems(diagnose(_opts(node)))
    assert [p.message for p in problems] == [
        f"{node}/usr/bin/nvhook-hook is missing",
        "hook.path is empty, so the shim injects /usr/bin/nvhook-hook, which is not an "
        "executable file: containers given GPUs fail at their createContainer hook",
    ]
    assert problems[0].fix == f"nvhook install-entrypoints --bin-dir {node}/usr/bin"


def test_launcher_whose_interpreter_is_gone(node: Path) -> None:
    (node / "usr/bin/python3").unlink()
    problems = _problems(diagnose(_opts(node)))
    assert (
        f"{node}/usr/bin/nvhook-runtime runs /usr/bin/python3, which is not an executable file"
        in [p.message for p in problems]
    )
    # the engine's runtime is that launcher too
    assert any(p.area == "containerd" and "runs /usr/bin/python3" in p.message for p in problems)


def test_hook_path_setting_must_be_executable(node: Path) -> None:
    _write(node / "etc/nvhook/config.toml", '[hook]\npath = "/opt/nvhook/bin/nvhook-hook"\n')
    [problem] = _problems(diagnose(_opts(node)))
    assert problem.message.startswith("hook.path /opt/nvhook/bin/nvhook-hook is not an executable")
    assert problem.fix == "nvhook install-entrypoints --bin-dir /opt/nvhook/bin"


def test_cache_dir_writable_by_others(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = node / "run/nvhook"
    cache.mkdir(parents=True)
    cache.chmod(0o777)
    monkeypatch.setenv("NVHOOK_CACHE_DIR", "/run/nvhook")
    [problem] = _problems(diagnose(_opts(node)))
    assert "can be written by others" in problem.message
    assert problem.fix == f"rm -rf {cache}"


def test_engine_config_without_the_runtime(node: Path) -> None:
    _write(node / "etc/containerd/config.toml", "version = 2\n")
    [problem] = _problems(diagnose(_opts(node)))
    assert problem.area == "containerd"
    assert problem.message == (
        f"nvhook's runtime is not configured: {node}/etc/containerd/config.toml has no "
        "runtime 'nvidia'"
    )
    assert problem.fix == (
        f"nvhook runtime configure --runtime containerd --config "
        f"{node}/etc/containerd/config.toml && systemctl restart containerd"
    )


def test_an_unconfigured_engine_beside_a_configured_one_is_a_warning(node: Path) -> None:
    _write(node / "etc/docker/daemon.json", "{}\n")
    checks = check_engines(_opts(node))
    docker = [c for c in checks if c.area == "docker"]
    assert [c.status for c in docker] == ["warn"]
    (node / "etc/containerd/config.toml").write_text("version = 2\n")
    assert {c.status for c in check_engines(_opts(node)) if "not configured" in c.message} == {
        "fail"
    }


def test_runtime_pointing_elsewhere(node: Path) -> None:
    _write(
        node / "etc/docker/daemon.json",
        '{"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}}\n',
    )
    [problem] = _engine(node, "docker")
    assert problem.message.endswith("runs /usr/bin/nvidia-container-runtime, not nvhook-runtime")
    assert problem.fix.startswith("nvhook runtime configure --runtime docker --config ")


def _fake_proc(
    root: Path,
    comm: str,
    pid: int,
    btime: int,
    started_ticks: int,
    argv: tuple[str, ...] = (),
    env: tuple[str, ...] | None = None,
) -> None:
    _write(root / "proc/stat", f"cpu  1 2 3\nbtime {btime}\nprocesses 9\n")
    fields = ["S"] + ["0"] * 18 + [str(started_ticks)] + ["0"] * 10
    _write(root / f"proc/{pid}/stat", f"{pid} ({comm}) {' '.join(fields)}\n")
    (root / f"proc/{pid}/cmdline").write_bytes(b"".join(w.encode() + b"\0" for w in argv))
    if env is not None:
        (root / f"proc/{pid}/environ").write_bytes(b"".join(e.encode() + b"\0" for e in env))


def test_restart_pending_when_the_daemon_predates_the_config(node: Path) -> None:
    config = node / "etc/containerd/config.toml"
    ticks = os.sysconf("SC_CLK_TCK")
    mtime = config.stat().st_mtime
    _fake_proc(node, "containerd", 4242, int(mtime) - 3600, 60 * ticks)  # an hour before it
    [problem] = _problems(diagnose(_opts(node)))
    assert problem.area == "containerd"
    assert "containerd (pid 4242) started " in problem.message
    assert problem.message.endswith("it runs without the change (restart pending)")
    assert problem.fix == "systemctl restart containerd"
    _fake_proc(node, "containerd", 4242, int(mtime) + 10, 0)  # started after the change
    assert _problems(diagnose(_opts(node))) == []


def test_dockerds_own_containerd_is_not_the_one_to_restart(node: Path) -> None:
    """dockerd runs a containerd of its own, with its own config: its start time says
    nothing about /etc/containerd/config.toml."""
    config = node / "etc/containerd/config.toml"
    ticks = os.sysconf("SC_CLK_TCK")
    btime = int(config.stat().st_mtime) - 3600  # both started an hour before the change
    own = ("containerd", "--config", "/var/run/docker/containerd/containerd.toml")
    _fake_proc(node, "containerd", 4242, btime, 60 * ticks, own)
    checks = diagnose(_opts(node))
    assert _problems(checks) == []
    [said] = [c for c in checks if c.area == "containerd" and c.status == "warn"]
    assert said.message == (
        "no containerd reading /etc/containerd/config.toml is running (pid 4242 reads "
        "/var/run/docker/containerd/containerd.toml (dockerd's own containerd))"
    )
    _fake_proc(node, "containerd", 4300, btime, 90 * ticks, ("/usr/bin/containerd",))
    [problem] = _problems(diagnose(_opts(node)))
    assert "containerd (pid 4300) started " in problem.message
    assert problem.message.endswith("(restart pending)")


def test_daemon_start_of_a_real_process(tmp_path: Path) -> None:
    binary = tmp_path / "nvhkdoctest"
    shutil.copy("/bin/sleep", binary)
    before = time.time()
    proc = subprocess.Popen([str(binary), "30"])
    try:
        deadline = time.time() + 5
        found = None
        while found is None and time.time() < deadline:
            found = daemon_start("/", "nvhkdoctest")
        assert found is not None and found.pid == proc.pid
        assert before - 2 <= found.started <= time.time() + 1
    finally:
        proc.kill()
        proc.wait()
    assert daemon_start("/", "nvhkdoctest") is None


def test_set_as_default_lost(node: Path) -> None:
    config = _write(node / "etc/docker/daemon.json", '{"log-level": "warn"}\n')
    configure_command(node, "docker", config, default=True)
    assert [c.status for c in _engine(node, "docker")] == ["ok"]
    data = json.loads(config.read_text())
    data["default-runtime"] = "runc"
    config.write_text(json.dumps(data))
    [problem] = _engine(node, "docker")
    assert problem.message == (
        f"runtime 'nvidia' was made the default (--set-as-default) but {config} now makes "
        "'runc' the default"
    )
    assert "--set-as-default" in problem.fix


def test_not_default_without_set_as_default_is_fine(node: Path) -> None:
    config = _write(node / "etc/docker/daemon.json", '{"log-level": "warn"}\n')
    configure_command(node, "docker", config)
    assert [c.status for c in _engine(node, "docker")] == ["ok"]


@pytest.mark.parametrize(
    ("mounts", "layout"),
    [
        ("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "v2"),
        (
            "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
            "36 31 0:33 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n"
            "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
            "hybrid",
        ),
        (
            "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
            "36 31 0:33 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n",
            "v1",
        ),
    ],
)
def test_cgroup_layout(tmp_path: Path, mounts: str, layout: str) -> None:
    _write(tmp_path / "proc/self/mountinfo", mounts)
    assert cgroup_layout(str(tmp_path)) == layout


def test_cgroup_trap_exposed_by_the_legacy_toolkit(node: Path) -> None:
    _write(node / "proc/self/mountinfo", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    (node / "run/systemd/system").mkdir(parents=True)
    [ok] = check_cgroups(_opts(node))
    assert ok.status == "ok" and ok.message.startswith("cgroup v2; no engine uses the systemd")
    runc = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]'
    config = _write(
        node / "etc/containerd/config.toml", f"version = 2\n{runc}\nSystemdCgroup = true\n"
    )
    configure_command(node, "containerd", config)  # the nvidia runtime copies runc's options
    [ok] = check_cgroups(_opts(node))
    assert ok.message.startswith("cgroup v2; containerd uses the systemd cgroup driver")
    assert ok.message.endswith("`systemctl daemon-reload` keeps them: not exposed")
    _write(
        node / "etc/docker/daemon.json",
        '{"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}}\n',
    )
    _write(
        node / "usr/share/containers/oci/hooks.d/oci-nvidia-hook.json",
        '{"version": "1.0.0", "hook": {"path": "/usr/bin/nvidia-container-toolkit"}}',
    )
    _write(node / "usr/bin/podman", "", 0o755)
    checks = check_cgroups(_opts(node))
    assert {(c.status, c.fix.split(" &&")[0]) for c in checks} == {
        (
            "fail",
            f"nvhook runtime configure --runtime docker --config {node}/etc/docker/daemon.json",
        ),
        ("fail", f"rm {node}/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"),
    }


def test_device_nodes_that_are_not_character_devices(
    make_mock_machine: Callable[..., Path],
) -> None:
    root = make_mock_machine("h100-pcie")  # /dev holds regular files
    driver = [c for c in diagnose(Options(root=str(root))) if c.area == "driver"]
    ctl = f"{root}/dev/nvidiactl"
    assert (
        Check(
            "driver", "fail", f"{ctl} is not a character device", f"rm -f {ctl} && nvidia-modprobe"
        )
        in driver
    )


def test_device_node_modes_and_persistenced(node: Path) -> None:
    (node / "dev/nvidia2").chmod(0o600)
    (node / "run/nvidia-persistenced/socket").unlink()
    driver = [c for c in diagnose(_opts(node)) if c.area == "driver" and c.status != "ok"]
    assert [(c.status, c.fix) for c in driver] == [
        ("warn", f"chmod 0666 {node}/dev/nvidia2"),
        ("warn", "systemctl enable --now nvidia-persistenced"),
    ]
    (node / "dev/nvidia2").unlink()
    missing, stale = _problems(diagnose(_opts(node)))
    assert missing == Check(
        "driver", "fail", f"{node}/dev/nvidia2 is missing", "nvidia-modprobe -c 2"
    )
    assert stale.area == "cdi" and "(and 3 more: `nvhook cdi check`)" in stale.message


def test_no_driver(make_mock_machine: Callable[..., Path]) -> None:
    root = make_mock_machine("no-gpu")
    checks = diagnose(Options(root=str(root)))
    assert checks[0] == Check(
        "driver",
        "fail",
        f"the NVIDIA kernel module is not loaded: {root}/proc/driver/nvidia/version does not exist",
        "modprobe nvidia",
    )
    # nothing to generate a spec from: the missing spec is a warning, not a second failure
    assert [c.status for c in checks if c.area == "cdi"] == ["warn"]


def test_a_runtime_not_as_configure_writes_it(node: Path) -> None:
    config = node / "etc/containerd/config.toml"
    config.write_text(config.read_text().replace("io.containerd.runc.v2", "io.containerd.runc.v1"))
    [problem] = _engine(node, "containerd")
    assert problem.message == f"runtime 'nvidia' in {config} is not as configure writes it"
    assert "--runtime-path /usr/bin/nvhook-runtime" in problem.fix


@pytest.mark.parametrize("name", ["nvhook-runtime", "nvhook-hook"])
def test_native_programs_are_judged_by_their_python_launcher(node: Path, name: str) -> None:
    """``nvhook-runtime`` as the native front-end, ``nvhook-hook`` as the native hook: their
    ``NAME.py`` must be sound."""
    native = node / "usr/bin" / name
    launcher = node / "usr/bin" / f"{name}.py"
    native.rename(launcher)
    _write(native, "\x7fELF\x02\x01\x01 (a native program)\n", 0o755)
    assert _problems(diagnose(_opts(node))) == []
    launcher.unlink()
    assert f"{launcher} is missing" in [p.message for p in _problems(diagnose(_opts(node)))]


# --------------------------------------------------------------------------- nvhook-shim-server


def _front_end_dir(tmp_path: Path) -> Path:
    """A bin directory whose nvhook-runtime is an ELF file, as the native front-end is."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    shutil.copy("/bin/true", bin_dir / "nvhook-runtime")
    return bin_dir


def _server_checks(tmp_path: Path, cache: Path) -> list[Check]:
    opts = Options(root="/", bin_dir=str(_front_end_dir(tmp_path)), cache_dir=str(cache))
    return check_shim_server(opts)


def test_shim_server_not_asked_without_the_native_front_end(node: Path) -> None:
    assert check_shim_server(_opts(node)) == []  # the node's launchers are Python scripts


def test_shim_server_absent_or_in_doubt(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    sock = cache / "shim.sock"
    [absent] = _server_checks(tmp_path / "a", cache)
    assert (absent.status, absent.fix) == ("warn", RESTART)
    assert absent.message.startswith(f"nvhook-shim-server is not running (no {sock}): ")
    sock.write_text("")
    [regular] = _server_checks(tmp_path / "b", cache)
    assert regular.status == "fail"
    assert regular.message.startswith(f"{sock} is not a socket: the native front-end does not")
    assert regular.fix == f"rm {sock} && systemctl restart nvhook-shim-server.service"
    sock.unlink()
    with socket.socket(socket.AF_UNIX) as left:  # bound, never listening: as a dead server's
        left.bind(str(sock))
    [stale] = _server_checks(tmp_path / "c", cache)
    assert (stale.status, stale.fix) == ("warn", RESTART)
    assert "connection refused: left by a server that stopped" in stale.message


@pytest.mark.root
def test_shim_server_answering_is_probed_without_a_log_line(tmp_path: Path) -> None:
    from tests.nvhook.test_server import start_server

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    with (tmp_path / "server.log").open("w+b") as stderr:
        server = start_server(cache / "shim.sock", log=stderr)
        try:
            [found] = _server_checks(tmp_path, cache)
            time.sleep(0.2)  # the probe's child has exited by then
        finally:
            server.terminate()
            server.wait(timeout=10)
    log = (tmp_path / "server.log").read_bytes()
    assert found == Check("start path", "ok", f"nvhook-shim-server answers on {cache}/shim.sock")
    assert b"refused" not in log, log  # a probe, not a bad request


def test_shim_server_that_accepts_nothing_is_hung_not_answering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listening socket whose server no longer accepts: the connect succeeds (the
    backlog), the probe's deadline finds it hung."""
    import nvhook.tools.doctor.server as server

    monkeypatch.setattr(server, "PROBE_TIMEOUT_S", 0.3)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as hung:
        hung.bind(str(cache / "shim.sock"))
        hung.listen(8)
        [found] = _server_checks(tmp_path, cache)
    assert (found.status, found.fix) == ("fail", "systemctl restart nvhook-shim-server.service")
    assert found.message.startswith(
        f"nvhook-shim-server on {cache}/shim.sock accepts no connection within 0.3 s (hung)"
    )


def test_shim_server_that_closes_the_probe_answers(tmp_path: Path) -> None:
    """The control: a server that accepts and closes (as the real one's child does)."""
    import threading

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(cache / "shim.sock"))
        listener.listen(8)

        def serve() -> None:
            conn, _ = listener.accept()
            conn.recv(1)
            conn.close()

        thread = threading.Thread(target=serve)
        thread.start()
        [found] = _server_checks(tmp_path, cache)
        thread.join(5)
    assert found == Check("start path", "ok", f"nvhook-shim-server answers on {cache}/shim.sock")


@pytest.mark.parametrize("gone", ["libcuda", "libnvidia-ml", None])
def test_driver_without_libcuda_or_nvml_is_not_ok(
    gone: str | None, make_mock_machine: Callable[..., Path]
) -> None:
    root = make_mock_machine("h100-pcie")
    if gone:
        for lib in (root / "usr/lib/x86_64-linux-gnu").glob(f"{gone}.so*"):
            lib.unlink()
    driver = [c for c in diagnose(Options(root=str(root))) if c.area == "driver"]
    libraries = [c for c in driver if ".so." in c.message]
    if gone is None:
        assert libraries == [
            Check("driver", "ok", "libcuda.so.580.65.06, libnvidia-ml.so.580.65.06")
        ]
        return
    problem = next(c for c in libraries if c.status == "fail")
    assert problem.message.startswith(f"{gone}.so.580.65.06 is not under {root} ")
    assert problem.fix.startswith("install the user-space libraries of driver 580.65.06 ")


# --------------------------------------------------------------------------- docker run --gpus

SYSTEMD_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _dockerd(
    node: Path,
    *,
    version: str = "20.10.24+dfsg1",
    env: tuple[str, ...] = (SYSTEMD_PATH,),
    argv: tuple[str, ...] = ("/usr/sbin/dockerd", "-H", "fd://"),
    started_ago: int = 3600,
) -> None:
    """docker configured for nvhook, and a running dockerd (``/proc``) of ``version`` that
    started ``started_ago`` seconds ago with ``env`` and ``argv``."""
    config = node / "etc/docker/daemon.json"
    if not config.exists():
        _write(config, "{}\n")
        configure_command(node, "docker", config)
    _write(
        node / "usr/sbin/dockerd", f"#!/bin/sh\necho 'Docker version {version}, build x'\n", 0o755
    )
    ticks = os.sysconf("SC_CLK_TCK")
    btime = int(time.time()) - started_ago - 10
    for file in (node / "etc/docker").iterdir():  # configured before dockerd started
        os.utime(file, (btime, btime))
    _fake_proc(node, "dockerd", 777, btime, 10 * ticks, argv, env)


def _gpus(node: Path) -> list[Check]:
    return [c for c in _engine(node, "docker") if "--gpus" in c.message]


def _hook(node: Path, where: str, name: str = "nvidia-container-runtime-hook") -> Path:
    hook = _write(node / where.lstrip("/") / name, "#!/bin/sh\n", 0o755)
    past = time.time() - 7200  # before dockerd started
    os.utime(hook, (past, past))
    return hook


def test_docker_gpus_without_the_hook_on_dockerds_path(node: Path) -> None:
    _dockerd(node)
    [problem] = _gpus(node)
    assert problem.status == "fail"
    assert problem.message == (
        "dockerd (pid 777, 20.10) finds no nvidia-container-runtime-hook on its PATH "
        "(/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin): `docker run --gpus` "
        'fails with: could not select device driver "" with capabilities: [[gpu]]'
    )
    assert (
        problem.fix == "nvhook install-entrypoints --bin-dir /usr/bin && systemctl restart docker"
    )
    _hook(node, "/usr/bin")
    assert [(c.status, c.message) for c in _gpus(node)] == [
        (
            "ok",
            "docker run --gpus: dockerd (pid 777, 20.10) finds "
            "/usr/bin/nvidia-container-runtime-hook on its PATH (device driver nvidia)",
        )
    ]


def test_docker_gpus_judged_by_dockerds_path_not_ours(node: Path) -> None:
    _hook(node, "/opt/nvidia/bin")
    _dockerd(node, env=("PATH=/usr/bin:/bin", "SECRET_TOKEN=abc"))
    [problem] = _gpus(node)
    assert problem.status == "fail" and "on its PATH (/usr/bin:/bin)" in problem.message
    assert "abc" not in problem.message
    _dockerd(node, env=("PATH=/opt/nvidia/bin:/usr/bin",))
    assert [c.status for c in _gpus(node)] == ["ok"]


def test_docker_gpus_hook_installed_after_dockerd_started(node: Path) -> None:
    _dockerd(node)
    _write(node / "usr/bin/nvidia-container-runtime-hook", "#!/bin/sh\n", 0o755)  # now
    [problem] = _gpus(node)
    assert problem.status == "fail" and problem.fix == "systemctl restart docker"
    assert problem.message.endswith(
        'could not select device driver "" with capabilities: [[gpu]] (restart pending)'
    )


@pytest.mark.parametrize(
    ("version", "status"), [("29.2.0", "ok"), ("28.5.2", "fail"), ("29.1.5", "fail")]
)
def test_docker_gpus_with_only_nvidia_cdi_hook(node: Path, version: str, status: str) -> None:
    """From 29.2 dockerd's nvidia.cdi driver serves --gpus with nvidia-cdi-hook alone (moby
    PR #50228 is in docker-v29.2.0, not in v28.5.2 or docker-v29.1.5)."""
    _hook(node, "/usr/bin", "nvidia-cdi-hook")
    _dockerd(node, version=version)
    [found] = _gpus(node)
    assert found.status == status
    if status == "ok":
        assert found.message.endswith(
            "/usr/bin/nvidia-cdi-hook on its PATH (device driver nvidia.cdi)"
        )
    else:
        assert "finds no nvidia-container-runtime-hook on its PATH" in found.message


def test_docker_read_as_the_running_dockerd_reads_it(node: Path) -> None:
    """The live dockerd's --config-file is the file judged, and --add-runtime counts."""
    other = _write(node / "etc/docker/other.json", "{}\n")
    configure_command(node, "docker", other)
    argv = ("/usr/sbin/dockerd", "--config-file", "/etc/docker/other.json")
    _write(node / "etc/docker/daemon.json", "{}\n")  # the default file, without the runtime
    _dockerd(node, argv=argv)
    [ok] = [c for c in _engine(node, "docker") if "runs" in c.message]
    assert ok.status == "ok" and ok.message.startswith(
        "runtime 'nvidia' runs /usr/bin/nvhook-runtime"
    )
    _dockerd(node, argv=("/usr/sbin/dockerd",))
    # the default file lacks the runtime (a warning: containerd has it)
    assert any(
        c.status == "warn" and f"{node}/etc/docker/daemon.json has no runtime 'nvidia'" in c.message
        for c in _engine(node, "docker")
    )
    _dockerd(node, argv=("/usr/sbin/dockerd", "--add-runtime", "nvidia=/usr/bin/nvhook-runtime"))
    [ok] = [c for c in _engine(node, "docker") if "runs" in c.message]
    assert ok == Check(
        "docker", "ok", "runtime 'nvidia' runs /usr/bin/nvhook-runtime (dockerd --add-runtime)"
    )


# --------------------------------------------------------------------------- each driver fault


def _driver_faults(root: Path) -> list[tuple[str, str]]:
    return [
        (c.status, c.message)
        for c in diagnose(_opts(root))
        if c.area == "driver" and c.status != "ok"
    ]


@pytest.mark.parametrize(
    ("modules", "said"),
    [
        ("nvidia_uvm 1 0 - Live\n", ("fail", "the nvidia kernel module is not loaded")),
        ("nvidia 1 0 - Live\n", ("warn", "the nvidia_uvm module is not loaded: CUDA cannot run")),
    ],
)
def test_proc_modules_without_nvidia_or_uvm(
    node: Path, modules: str, said: tuple[str, str]
) -> None:
    (node / "proc/modules").write_text(modules)
    assert _driver_faults(node) == [said]
    (node / "proc/modules").write_text("nvidia_uvm 1 0 - Live\nnvidia 2 1 nvidia_uvm, Live\n")
    assert _driver_faults(node) == []  # the control: both loaded


def test_driver_that_sees_no_gpu(node: Path) -> None:
    assert _driver_faults(node) == []
    shutil.rmtree(node / "proc/driver/nvidia/gpus")
    (node / "proc/driver/nvidia/gpus").mkdir()
    faults = _driver_faults(node)
    assert (
        "warn",
        "driver 535.230.02 is loaded but sees no GPU (the kernel log says why)",
    ) in faults


def test_device_node_with_the_wrong_numbers(node: Path) -> None:
    node0 = node / "dev/nvidia0"
    node0.unlink()
    os.mknod(node0, 0o666 | 0o020000, os.makedev(195, 9))
    node0.chmod(0o666)
    assert _driver_faults(node) == [("fail", f"{node0} is device 195:9, the driver's is 195:0")]


@pytest.mark.root
def test_a_user_outside_the_nodes_group_is_told_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver restricting its nodes to group 44 (``root:video 0660``), doctor run by a user
    (here: root's checks, with the caller's uid and groups those of uid 1500): outside the
    group, one line names the user, the group and the fix; in it, an ok line with the
    rootless podman flag. (``tests/e2e/engines/test_podman.py`` runs it as a real user.)"""
    from nvhook.mock import create

    create("l40s-x4", tmp_path / "m", device_file_gid=44, device_file_mode=0o660)
    root = tmp_path / "m"
    groups: list[int] = [1500]
    monkeypatch.setattr(os, "geteuid", lambda: 1500)
    monkeypatch.setattr(os, "getgroups", lambda: groups)
    monkeypatch.setattr(os, "access", lambda p, m: 44 in groups)
    driver = [c for c in diagnose(Options(root=str(root))) if c.area == "driver"]
    [missing] = [c for c in driver if c.status == "fail"]
    assert missing.message == (
        f"user 1500 (uid 1500) is not in group {_group_name(44)} (gid 44), which alone may open "
        f"{root}/dev/nvidiactl and 6 more (0660): its containers (rootless podman) see no GPU"
    )
    assert missing.fix == (
        f"usermod -aG {_group_name(44)} 1500 (then log in again) and run rootless podman with "
        "--group-add keep-groups"
    )
    groups.append(44)
    driver = [c for c in diagnose(Options(root=str(root))) if c.area == "driver"]
    assert not [c for c in driver if c.status == "fail"]
    assert (
        Check(
            "driver",
            "ok",
            f"user 1500 opens the device nodes through group {_group_name(44)} (gid 44); rootless "
            "podman keeps it in the container with --group-add keep-groups (crun)",
        )
        in driver
    )


def _group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
