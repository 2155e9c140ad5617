"""nvhook-runtime when its settings cannot be loaded: only a create that asks for GPUs fails.

Each kind of bad settings file (issue 11) meets ``state``, ``delete``, a create that
asks for nothing, and a create that asks for a GPU. The first three must exec the
low-level runtime with their argv unchanged after one warning line in the shim's log
and in the caller's ``--log``; the GPU create fails as before (exit 8, one line, the
bundle untouched, no runtime started). Every process has a timeout, so a FIFO or
``/dev/zero`` that made the shim block fails a test instead of hanging the suite.

The stand-in runtimes record their name and argv. Where the file parses as TOML its
``runtime.runtimes`` and ``runtime.log_file`` are still used (the ``configured``
stand-in, ``shim.log``); otherwise the defaults are: ``runc`` found on PATH (the
``fallback`` stand-in) and the default log file, which the probe below moves into the
test's directory (it is ``/var/log/nvhook-runtime.log``, which tests do not write).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from oci.errors import ExitCode

SPECS = Path(__file__).parents[1] / "data" / "specs"
LAUNCHER = Path(sys.executable).parent / "nvhook-runtime"

#: The shim as its launcher runs it (``python -I``), the default log file moved to argv[1].
PROBE = """\
import sys
import nvhook.settings as s
s._DEFAULTS = tuple(
    sys.argv[1] if key == "runtime.log_file" else value
    for key, value in zip(s.KEYS, s._DEFAULTS, strict=True)
)
sys.argv = ["nvhook-runtime", *sys.argv[2:]]
from nvhook.shim import main
raise SystemExit(main())
"""

TIMEOUT = 30


class Env:
    """A directory with stand-in runtimes, bundles, the logs and a settings path."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.record = tmp / "runtime-calls"
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.configured = self._stand_in(tmp / "configured-runc", "configured")
        self._stand_in(self.bin / "runc", "fallback")
        self.shim_log = tmp / "shim.log"
        self.default_log = tmp / "default.log"
        self.runc_log = tmp / "runc-log.json"
        self.config = tmp / "config.toml"
        self.valid = f'[runtime]\nruntimes = ["{self.configured}"]\nlog_file = "{self.shim_log}"\n'

    def _stand_in(self, path: Path, name: str) -> Path:
        path.write_text(f'#!/bin/sh\nprintf "%s\\n" {name} "$@" > "{self.record}"\n')
        path.chmod(0o755)
        return path

    def bundle(self, name: str, env: list[str]) -> Path:
        b = self.tmp / name
        b.mkdir()
        spec = json.loads((SPECS / "runc-spec.json").read_text())
        spec["process"]["env"] += env
        (b / "config.json").write_text(json.dumps(spec, indent="\t"))
        return b

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        self.record.unlink(missing_ok=True)
        env = {
            "NVHOOK_CONFIG": str(self.config),
            "NVHOOK_CACHE_DIR": str(self.tmp / "cache"),
            "PATH": f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        }
        return subprocess.run(
            [sys.executable, "-I", "-c", PROBE, str(self.default_log), *argv],
            cwd=self.tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )

    def runtime_call(self) -> list[str] | None:
        """(stand-in name, *argv) of the runtime started, or None."""
        return self.record.read_text().splitlines() if self.record.exists() else None


def _toml(text: str) -> Callable[[Env], None]:
    return lambda e: e.config.write_text(text)


def _missing(e: Env) -> None:
    e.config = e.tmp / "absent.toml"


def _fifo(e: Env) -> None:
    os.mkfifo(e.config)


def _dev_zero(e: Env) -> None:
    e.config.symlink_to("/dev/zero")


def _directory(e: Env) -> None:
    e.config.mkdir()


def _loop(e: Env) -> None:
    e.config.symlink_to(e.config)  # ELOOP: unreadable, even for root


def _too_big(e: Env) -> None:
    e.config.write_text(e.valid + ("# padding\n" * 30_000))  # 300 KB of valid TOML


def _invalid_utf8(e: Env) -> None:
    e.config.write_bytes(b"# caf\xe9 (Latin-1)\n" + e.valid.encode())


#: name -> (make the bad file, what the message says, whether [runtime] can still be read)
BAD: dict[str, tuple[Callable[[Env], None], str, bool]] = {
    "missing": (_missing, "absent.toml: configuration file not found (named by", False),
    "invalid-toml": (_toml("[runtime\n"), "config.toml: invalid TOML", False),
    "unknown-key": (
        lambda e: e.config.write_text(e.valid + "bogus = 1\n"),
        "config.toml: runtime.bogus: unknown setting",
        True,
    ),
    "wrong-type": (
        lambda e: e.config.write_text(e.valid + "[policy]\naccept_volume_mounts = 1\n"),
        "config.toml: policy.accept_volume_mounts: expected true or false, found 1",
        True,
    ),
    "unreadable": (_loop, "config.toml: cannot read configuration file: Too many levels", False),
    "fifo": (_fifo, "config.toml: not a regular file (a FIFO): replace it", False),
    "dev-zero": (_dev_zero, "config.toml: not a regular file (a character device)", False),
    "directory": (_directory, "config.toml: not a regular file (a directory)", False),
    "too-big": (_too_big, "config.toml: larger than 256 KiB, too big for a settings file", False),
    "invalid-utf8": (
        _invalid_utf8,
        "config.toml: not UTF-8: invalid byte 0xe9 at byte offset 5: save the file as UTF-8",
        False,
    ),
}


@pytest.fixture
def env(tmp_path: Path) -> Env:
    if not LAUNCHER.exists():
        pytest.fail(f"{LAUNCHER} is missing: run ./dev setup (nvhook install-entrypoints)")
    return Env(tmp_path)


def _bad(env: Env, kind: str) -> tuple[str, bool]:
    make, needle, parses = BAD[kind]
    make(env)
    return needle, parses


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("call", ["state", "delete", "create-no-request"])
def test_calls_without_a_gpu_request_pass_through(env: Env, kind: str, call: str) -> None:
    needle, parses = _bad(env, kind)
    b = env.bundle("b", [])
    before = (b / "config.json").read_bytes()
    argv = {
        "state": ["--log", str(env.runc_log), "--log-format", "json", "state", "c1"],
        "delete": ["--root", str(env.tmp / "r"), "--log", str(env.runc_log), "delete", "c1"],
        "create-no-request": [
            "--log", str(env.runc_log), "--log-format", "json",
            "create", "--bundle", str(b), "--pid-file", str(b / "pid"), "c1",
        ],
    }[call]  # fmt: skip
    result = env.run(*argv)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")  # nothing on stdout
    assert env.runtime_call() == ["configured" if parses else "fallback", *argv]
    command = {"state": "state", "delete": "delete", "create-no-request": "create"}[call]
    log = env.shim_log if parses else env.default_log
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert record["level"] == "warning" and record["command"] == command
    assert needle in record["msg"] and str(env.config) in record["msg"]
    assert f"passing {command} through to " in record["msg"]
    (line,) = env.runc_log.read_text().splitlines()
    if call == "delete":  # runc's default --log-format: text
        assert line.startswith('time="') and " level=warning msg=" in line
        assert "nvhook-runtime: " in line
    else:
        entry = json.loads(line)
        assert entry["level"] == "warning" and entry["msg"] == f"nvhook-runtime: {record['msg']}"
    assert (b / "config.json").read_bytes() == before
    assert not (env.shim_log if not parses else env.default_log).exists()


@pytest.mark.parametrize("kind", BAD)
def test_a_gpu_create_fails_with_the_settings_error(env: Env, kind: str) -> None:
    needle, parses = _bad(env, kind)
    b = env.bundle("b", ["NVIDIA_VISIBLE_DEVICES=0"])
    before = (b / "config.json").read_bytes()
    result = env.run(
        "--log", str(env.runc_log), "--log-format", "json", "create", "--bundle", str(b), "c1"
    )
    assert result.returncode == ExitCode.CONFIG, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"nvhook-runtime: {env.config}") and needle in line
    assert env.runtime_call() is None
    assert (b / "config.json").read_bytes() == before
    assert sorted(p.name for p in b.iterdir()) == ["config.json"]
    (entry,) = [json.loads(x) for x in env.runc_log.read_text().splitlines()]
    assert entry["level"] == "error" and needle in entry["msg"]
    log = env.shim_log if parses else env.default_log
    (record,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert record["level"] == "error" and record["exit"] == ExitCode.CONFIG


@pytest.mark.parametrize(
    ("env_vars", "mount"),
    [
        ([], True),  # a device-list mount: counted as a request although the default ignores it
        (["CUDA_VERSION=12.4"], False),  # a legacy CUDA image: all GPUs, by the default policy
    ],
    ids=["device-list-mount", "legacy-cuda-image"],
)
def test_a_create_the_default_policy_sees_asking_fails(
    env: Env, env_vars: list[str], mount: bool
) -> None:
    _bad(env, "unknown-key")
    b = env.bundle("b", env_vars)
    if mount:
        spec = json.loads((b / "config.json").read_text())
        spec["mounts"].append(
            {
                "destination": "/var/run/nvidia-container-devices/0",
                "source": "/dev/null",
                "type": "bind",
                "options": ["bind", "ro"],
            }
        )
        (b / "config.json").write_text(json.dumps(spec))
    result = env.run("create", "--bundle", str(b), "c1")
    assert result.returncode == ExitCode.CONFIG, result.stderr
    assert "runtime.bogus: unknown setting" in result.stderr
    assert env.runtime_call() is None


def test_an_unreadable_config_json_counts_as_asking(env: Env) -> None:
    """A create whose request cannot be told fails (with the settings error), as before."""
    _bad(env, "invalid-toml")
    b = env.bundle("b", [])
    (b / "config.json").write_text("{")
    result = env.run("create", "--bundle", str(b), "c1")
    assert result.returncode == ExitCode.CONFIG, result.stderr
    assert "invalid TOML" in result.stderr and env.runtime_call() is None


def test_a_valid_file_still_logs_nothing_for_a_pass_through(env: Env) -> None:
    """The control: the warnings above come from the bad file, not from every call."""
    env.config.write_text(env.valid)
    argv = ["--log", str(env.runc_log), "state", "c1"]
    result = env.run(*argv)
    assert result.returncode == 0 and env.runtime_call() == ["configured", *argv]
    assert not env.shim_log.exists() and not env.runc_log.exists()


def test_the_real_launcher_passes_through_too(env: Env) -> None:
    """Without the probe: the installed launcher, a typo'd file that still names the runtime."""
    env.config.write_text(env.valid + 'mode = "turbo"\n')
    argv = ["--log", str(env.runc_log), "--log-format", "json", "kill", "c1", "KILL"]
    result = subprocess.run(
        [str(LAUNCHER), *argv],
        cwd=env.tmp,
        env={"NVHOOK_CONFIG": str(env.config), "NVHOOK_CACHE_DIR": str(env.tmp / "cache")},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert env.runtime_call() == ["configured", *argv]
    (record,) = [json.loads(x) for x in env.shim_log.read_text().splitlines()]
    assert "runtime.mode: 'turbo' is not one of auto, cdi, jit; passing kill" in record["msg"]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "too-big", "invalid-utf8"])
def test_explain_says_what_is_wrong_with_the_file(env: Env, kind: str) -> None:
    needle, _parses = _bad(env, kind)
    b = env.bundle("b", ["NVIDIA_VISIBLE_DEVICES=0"])
    result = subprocess.run(
        [str(Path(sys.executable).parent / "nvhook"), "explain", "--bundle", str(b)],
        env={**os.environ, "NVHOOK_CONFIG": str(env.config)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == ExitCode.CONFIG, result.stdout + result.stderr
    assert needle in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
