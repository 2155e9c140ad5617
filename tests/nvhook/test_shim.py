"""nvhook-runtime without real containers: a recording stand-in is the low-level runtime.

The stand-in writes its argv and working directory to a file and exits 0, so
each test can tell whether the runtime was started and with what. The mock
dgx-a100 machine is the host (regular-file nodes are enough: no container runs).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from oci.errors import ExitCode
from tests.support.containers import require

SPECS = Path(__file__).parents[1] / "data" / "specs"
LAUNCHER = Path(sys.executable).parent / "nvhook-runtime"


class Shim:
    def __init__(self, tmp: Path, mock: Path) -> None:
        self.tmp = tmp
        self.record = tmp / "runtime-calls"
        self.fake = tmp / "fake-runc"
        self.fake.write_text(
            f'#!/bin/sh\nprintf "%s\\n" "$PWD" "$@" > "{self.record}"\necho "fake runc ran: $1"\n'
        )
        self.fake.chmod(0o755)
        self.log = tmp / "shim.log"
        self.config = tmp / "config.toml"
        self.spec_dir = tmp / "cdi"
        self.spec_dir.mkdir()
        self.write_config()
        self.mock = mock

    def write_config(self, extra: str = "", *, runtimes: list[str] | None = None) -> None:
        runtimes = runtimes if runtimes is not None else [str(self.fake)]
        self.config.write_text(
            f'[runtime]\nruntimes = {json.dumps(runtimes)}\nlog_file = "{self.log}"\n'
            f'[host]\nroot = "{getattr(self, "mock", "/")}"\n'
            f'[cdi]\nspec_dirs = ["{self.spec_dir}"]\n{extra}'
        )

    def bundle(self, env: list[str] | None = None, base: str = "runc-spec.json") -> Path:
        b = self.tmp / f"bundle-{len(list(self.tmp.glob('bundle-*')))}"
        b.mkdir()
        spec = json.loads((SPECS / base).read_text())
        spec["process"]["env"] += env or []
        (b / "config.json").write_text(json.dumps(spec, indent="\t"))
        return b

    def run(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        self.record.unlink(missing_ok=True)
        env = {
            "NVHOOK_CONFIG": str(self.config),
            "NVHOOK_CACHE_DIR": str(self.tmp / "cache"),
            "PATH": os.environ.get("PATH", ""),
        }
        return subprocess.run(
            [str(LAUNCHER), *argv],
            cwd=cwd or self.tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def runtime_argv(self) -> list[str] | None:
        """(cwd, *argv) the stand-in was started with, or None if it was not started."""
        if not self.record.exists():
            return None
        return self.record.read_text().splitlines()


@pytest.fixture
def shim(tmp_path: Path, mock_machine: Callable[..., Path]) -> Shim:
    if not LAUNCHER.exists():
        pytest.fail(f"{LAUNCHER} is missing: run ./dev setup (nvhook install-entrypoints)")
    s = Shim(tmp_path, mock_machine("dgx-a100"))
    s.write_config()
    return s


def test_pass_through_execs_with_the_exact_argv(shim: Shim) -> None:
    argv = ["--root", "/run/x", "--log", "/tmp/l.json", "--log-format", "json", "state", "ctr-1"]
    result = shim.run(*argv)
    assert result.returncode == 0, result.stderr
    assert shim.runtime_argv() == [str(shim.tmp), *argv]


#: create command lines that runc refuses (oci/argv.py agrees); {b} is a bundle asking for a GPU
REFUSED_BY_RUNC = [
    "create --bundle",
    "create -b {b} --bundle {b} c1",
    "create --bundle {b} c1 c2",
    "--debug=yes create --bundle {b} c1",
    "create --no-pivot=maybe --bundle {b} c1",
    "---x create --bundle {b} c1",
]


@pytest.mark.parametrize("line", REFUSED_BY_RUNC)
def test_a_command_line_runc_refuses_is_passed_through_unchanged(shim: Shim, line: str) -> None:
    b = shim.bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    before = (b / "config.json").read_bytes()
    argv = line.format(b=b).split()
    result = shim.run(*argv)
    assert result.returncode == 0, result.stderr  # the stand-in's: the shim did not fail
    assert shim.runtime_argv() == [str(shim.tmp), *argv]
    assert "nvhook-runtime" not in result.stderr
    assert (b / "config.json").read_bytes() == before  # nothing prepared for the GPU
    assert not shim.log.exists()  # not even a failure recorded


_RUNC_TIME = re.compile(r'time="[^"]*"')


@pytest.mark.parametrize("line", REFUSED_BY_RUNC)
def test_runc_says_why_it_refuses_the_command_line(shim: Shim, line: str) -> None:
    """Through the shim, runc's own exit status and words, exactly as runc alone says them."""
    runc = require("runc")
    shim.write_config(runtimes=[runc])
    b = shim.bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    before = (b / "config.json").read_bytes()
    argv = ["--root", str(shim.tmp / "state"), *line.format(b=b).split()]
    through_shim = shim.run(*argv)
    alone = subprocess.run(
        [runc, *argv], cwd=shim.tmp, capture_output=True, text=True, timeout=60, check=False
    )
    assert through_shim.returncode == alone.returncode != 0
    assert through_shim.stdout == alone.stdout
    assert _RUNC_TIME.sub("", through_shim.stderr) == _RUNC_TIME.sub("", alone.stderr)
    assert "nvhook-runtime" not in through_shim.stderr
    assert (b / "config.json").read_bytes() == before


def test_create_without_request_leaves_the_bundle_alone(shim: Shim) -> None:
    b = shim.bundle()
    before = (b / "config.json").read_bytes()
    inode = (b / "config.json").stat().st_ino
    argv = ["create", "--bundle", str(b), "--pid-file", str(b / "pid"), "c1"]
    result = shim.run(*argv)
    assert result.returncode == 0, result.stderr
    assert shim.runtime_argv() == [str(shim.tmp), *argv]
    assert (b / "config.json").read_bytes() == before
    assert (b / "config.json").stat().st_ino == inode


def test_create_with_gpus_edits_then_execs(shim: Shim) -> None:
    b = shim.bundle(["NVIDIA_VISIBLE_DEVICES=0,3"])
    result = shim.run("create", "-b", str(b), "c2")
    assert result.returncode == 0, result.stderr
    assert shim.runtime_argv() == [str(shim.tmp), "create", "-b", str(b), "c2"]
    spec = json.loads((b / "config.json").read_text())
    paths = [d["path"] for d in spec["linux"]["devices"]]
    assert "/dev/nvidia0" in paths and "/dev/nvidia3" in paths and "/dev/nvidiactl" in paths
    assert "/dev/nvidia1" not in paths
    assert any(m["destination"].endswith("libcuda.so.550.54.15") for m in spec["mounts"])
    record = json.loads(shim.log.read_text().splitlines()[-1])
    assert record["id"] == "c2" and record["mode"] == "jit" and record["devices"] == "0,3"
    assert record["command"] == "create" and record["written"] is True


def test_bundle_defaults_to_the_working_directory(shim: Shim) -> None:
    b = shim.bundle(["NVIDIA_VISIBLE_DEVICES=1"])
    result = shim.run("create", "c3", cwd=b)
    assert result.returncode == 0, result.stderr
    spec = json.loads((b / "config.json").read_text())
    assert "/dev/nvidia1" in [d["path"] for d in spec["linux"]["devices"]]


def test_second_create_of_an_edited_bundle_changes_nothing(shim: Shim) -> None:
    b = shim.bundle(["NVIDIA_VISIBLE_DEVICES=all"])
    assert shim.run("create", "-b", str(b), "c4").returncode == 0
    once = (b / "config.json").read_bytes()
    inode = (b / "config.json").stat().st_ino
    assert shim.run("create", "-b", str(b), "c4").returncode == 0
    assert (b / "config.json").read_bytes() == once
    assert (b / "config.json").stat().st_ino == inode


def _assert_failed(
    shim: Shim, result: subprocess.CompletedProcess[str], code: int, needle: str, log: Path
) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nvhook-runtime: ") and needle in lines[0]
    assert shim.runtime_argv() is None, "the low-level runtime must not start"
    entry = json.loads(log.read_text().splitlines()[-1])
    assert entry["level"] == "error" and needle in entry["msg"]
    assert set(entry) == {"level", "msg", "time"}


@pytest.mark.parametrize(
    ("env", "code", "needle"),
    [
        (["NVIDIA_VISIBLE_DEVICES=9"], ExitCode.UNRESOLVED, "GPU 9 does not exist"),
        (["NVIDIA_VISIBLE_DEVICES=GPU-0000"], ExitCode.INVALID_SPEC, "GPU-0000"),
        (["NVIDIA_VISIBLE_DEVICES=1:0"], ExitCode.UNRESOLVED, "GPU 1"),
        (
            ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,warp"],
            ExitCode.INVALID_SPEC,
            "warp",
        ),
        (
            ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"],
            ExitCode.REQUIREMENT,
            "cuda>=13.0",
        ),
        (["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=7"], ExitCode.UNRESOLVED, "nvidia.com/gpu=7"),
    ],
)
def test_failures_leave_everything_untouched(
    shim: Shim, env: list[str], code: int, needle: str
) -> None:
    b = shim.bundle(env)
    before = (b / "config.json").read_bytes()
    log = b / "log.json"
    result = shim.run(
        "--root", str(shim.tmp / "r"), "--log", str(log), "--log-format", "json",
        "create", "--bundle", str(b), "--pid-file", str(b / "pid"), "c5",
    )  # fmt: skip
    _assert_failed(shim, result, code, needle, log)
    assert (b / "config.json").read_bytes() == before
    assert sorted(p.name for p in b.iterdir()) == ["config.json", "log.json"]


def test_invalid_config_json(shim: Shim) -> None:
    b = shim.bundle()
    (b / "config.json").write_bytes(b'{"process": {"env": [1, 2]}}')
    log = b / "log.json"
    result = shim.run("--log", str(log), "--log-format", "json", "create", "-b", str(b), "c6")
    _assert_failed(shim, result, ExitCode.INVALID_SPEC, "process.env[0]", log)
    assert (b / "config.json").read_bytes() == b'{"process": {"env": [1, 2]}}'


def _in_process(
    shim: Shim, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> tuple[int, list[str]]:
    """Run the shim's main() here, with os.execv recorded instead of exec'ing."""
    execs: list[str] = []

    def fake_execv(path: str, args: list[str]) -> None:
        execs.append(path)
        raise SystemExit(0)

    monkeypatch.setenv("NVHOOK_CONFIG", str(shim.config))
    monkeypatch.setenv("NVHOOK_CACHE_DIR", str(shim.tmp / "cache"))
    monkeypatch.setattr(os, "execv", fake_execv)
    from nvhook.shim import main

    try:
        code = main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    return code, execs


def test_no_low_level_runtime(
    shim: Shim, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import nvhook.call

    monkeypatch.setattr(nvhook.call, "FALLBACK_RUNTIMES", ("/nonexistent/sbin/runc",))
    monkeypatch.setenv("PATH", str(shim.tmp / "empty-path"))
    shim.write_config(runtimes=["/nonexistent/runc-a", "no-such-runtime-b"])
    log = shim.tmp / "log.json"
    code, execs = _in_process(shim, monkeypatch, ["--log", str(log), "--log-format", "json", "x"])
    err = capsys.readouterr().err
    assert code == ExitCode.RUNTIME and execs == []
    assert err.startswith("nvhook-runtime: no low-level runtime found")
    assert "/nonexistent/runc-a, no-such-runtime-b" in err
    assert "no low-level runtime" in json.loads(log.read_text())["msg"]


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_the_shim_never_picks_itself(
    shim: Shim, monkeypatch: pytest.MonkeyPatch, link: str
) -> None:
    """Not the program it runs as, through a symbolic or a hard link to it."""
    import nvhook.call

    bin_dir = shim.tmp / "bin"
    bin_dir.mkdir()
    me = shim.tmp / "nvhook-runtime"
    shutil.copy(LAUNCHER, me)
    if link == "symbolic":
        (bin_dir / "runc").symlink_to(me)  # installed as "runc" first on PATH
    else:
        os.link(me, bin_dir / "runc")
    monkeypatch.setenv("PATH", f"{bin_dir}:{shim.fake.parent}")
    monkeypatch.setattr(sys, "argv", [str(me)])
    shutil.copy(shim.fake, shim.tmp / "runc")
    assert nvhook.call.find_runtime(["runc"]) == str(shim.tmp / "runc")


def test_unwritable_bundle(
    shim: Shim, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    b = shim.bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    before = (b / "config.json").read_bytes()

    def refuse(src: str, dst: str, **dir_fds: int) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "replace", refuse)
    monkeypatch.setattr(os, "rename", refuse)
    code, execs = _in_process(shim, monkeypatch, ["create", "-b", str(b), "c12"])
    err = capsys.readouterr().err
    assert code == ExitCode.IO and execs == []
    assert "config.json" in err and "Read-only file system" in err
    assert (b / "config.json").read_bytes() == before
    assert sorted(p.name for p in b.iterdir()) == ["config.json"]


def test_unreadable_shim_log_never_fails_a_start(shim: Shim) -> None:
    shim.write_config()
    shim.config.write_text(
        shim.config.read_text().replace(str(shim.log), "/nonexistent/dir/shim.log")
    )
    b = shim.bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    result = shim.run("create", "-b", str(b), "c8")
    assert result.returncode == 0, result.stderr
    assert shim.runtime_argv() is not None


def test_invalid_configuration_fails_only_a_gpu_create(shim: Shim) -> None:
    """Every kind of bad file, and each call: tests/nvhook/test_shim_failsafe.py."""
    shim.config.write_text(shim.config.read_text().replace("[host]", 'mode = "turbo"\n[host]'))
    result = shim.run("state", "c9")
    assert (result.returncode, result.stderr) == (0, "")
    assert shim.runtime_argv() == [str(shim.tmp), "state", "c9"]
    b = shim.bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    result = shim.run("create", "-b", str(b), "c9")
    assert result.returncode == ExitCode.CONFIG
    assert "runtime.mode" in result.stderr and str(shim.config) in result.stderr
    assert shim.runtime_argv() is None


def test_version_prints_nvhooks_then_the_runtimes(shim: Shim) -> None:
    from nvhook.constants import VERSION

    for flag in ("--version", "-v"):
        result = shim.run(flag)
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"nvhook-runtime version {VERSION}\nfake runc ran: {flag}\n"
        assert shim.runtime_argv() == [str(shim.tmp), flag]


def test_the_version_is_pyprojects() -> None:
    import tomllib
    from importlib.metadata import version

    from nvhook.constants import VERSION

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert VERSION == pyproject["project"]["version"] == version("nvhook")


def test_cdi_mode_with_annotation(shim: Shim) -> None:
    (shim.spec_dir / "gpu.json").write_text(
        json.dumps(
            {
                "cdiVersion": "0.5.0",
                "kind": "nvidia.com/gpu",
                "devices": [
                    {
                        "name": "1",
                        "containerEdits": {
                            "deviceNodes": [
                                {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1}
                            ]
                        },
                    }
                ],
            }
        )
    )
    b = shim.bundle()
    spec = json.loads((b / "config.json").read_text())
    spec["annotations"] = {"cdi.k8s.io/gpu": "nvidia.com/gpu=1"}
    (b / "config.json").write_text(json.dumps(spec))
    result = shim.run("create", "-b", str(b), "c10")
    assert result.returncode == 0, result.stderr
    out = json.loads((b / "config.json").read_text())
    assert [d["path"] for d in out["linux"]["devices"]] == ["/dev/nvidia1"]
    assert json.loads(shim.log.read_text().splitlines()[-1])["mode"] == "cdi"


def test_cdi_mode_maps_env_ids_to_the_default_kind(shim: Shim) -> None:
    cfg = shim.config.read_text().replace("[runtime]\n", '[runtime]\nmode = "cdi"\n')
    shim.config.write_text(cfg)
    b = shim.bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    log = b / "log.json"
    result = shim.run("--log", str(log), "create", "-b", str(b), "c11")
    assert result.returncode == ExitCode.UNRESOLVED
    assert "'nvidia.com/gpu=0'" in result.stderr
    assert "level=error" in log.read_text()  # the default --log-format is text


def test_an_unsafe_cache_directory_is_logged_and_never_fails_a_start(shim: Shim) -> None:
    """Settings and the CDI index share the directory: refused for both, said once a call."""
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "1"}]}
    spec["devices"][0]["containerEdits"] = {"env": ["FROM_CDI=1"]}  # type: ignore[index]
    (shim.spec_dir / "gpu.json").write_text(json.dumps(spec))
    cache = shim.tmp / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    b = shim.bundle(["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"])
    for cid in ("c13", "c14"):
        result = shim.run("create", "-b", str(b), cid)
        assert result.returncode == 0, result.stderr
        assert shim.runtime_argv() is not None
    assert "FROM_CDI=1" in json.loads((b / "config.json").read_text())["process"]["env"]
    assert list(cache.iterdir()) == []
    records = [json.loads(line) for line in shim.log.read_text().splitlines()]
    assert [(r["level"], r["id"]) for r in records] == [
        ("warning", "c13"),
        ("info", "c13"),
        ("warning", "c14"),
        ("info", "c14"),
    ]
    assert records[0]["msg"] == (
        f"cache directory {cache} is writable by group or others (mode 0777): chmod go-w it; "
        "not using it till then"
    )
    assert records[1]["mode"] == "cdi"
