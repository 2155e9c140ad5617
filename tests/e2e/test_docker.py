"""Docker's ``--gpus`` with the real dockerd 20.10, on the dgx-a100 mock laid out as root.

One private dockerd for the module (:class:`tests.support.docker.Docker`), with the
venv's bin directory first on its PATH, so that it finds ``nvidia-container-runtime-hook``
(nvhook's hook launcher) at start-up and accepts ``--gpus``; and with
``nvhook runtime configure --runtime docker`` applied to its daemon.json, so that
``--runtime nvidia`` runs ``nvhook-runtime``. Each request runs in both modes:

- hook mode: plain runc; dockerd's prestart hook (``nvhook-hook prestart``) injects;
- shim mode: ``--runtime nvidia``; the shim drops that hook and edits the spec.

What the container gets is checked from inside with the mock ``nvidia-smi -L``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvhook.mock import Profile
from tests.e2e.conftest import ELF_MAGIC, PROBE_ARGS, Shim, expected_smi_uuids, parse_probe
from tests.support.containers import BUSYBOX_IMAGE
from tests.support.docker import Docker

pytestmark = [pytest.mark.root, pytest.mark.runtime]

BIN = Path(sys.executable).parent
MODES = {"hook": (), "shim": ("--runtime", "nvidia")}
#: Each mount point of the container with the number of mounts on it.
TWICE = "cut -d' ' -f5 /proc/self/mountinfo | sort | uniq -c"


def _configure(config: Path, workdir: Path, *more: str) -> None:
    subprocess.run(
        [str(BIN / "nvhook"), "runtime", "configure", "--runtime", "docker",
         "--config", str(config), "--backup-dir", str(workdir / "backups"), *more],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


@pytest.fixture(scope="module")
def docker(
    shim: Shim, tmp_path_factory: pytest.TempPathFactory, busybox_image: Path
) -> Iterator[Docker]:
    workdir = tmp_path_factory.mktemp("docker")
    helper = Docker(workdir, path=[str(BIN)], env=shim.extra_env)
    _configure(helper.config, workdir)
    with helper:
        helper.load(busybox_image)
        yield helper


def _run(docker: Docker, mode: str, *options: str) -> subprocess.CompletedProcess[str]:
    return docker.run(BUSYBOX_IMAGE, PROBE_ARGS, *MODES[mode], *options)


def test_docker_lists_the_runtime(docker: Docker) -> None:
    info = docker.cmd("info", "--format", "{{json .Runtimes}}", check=True).stdout
    assert '"nvidia"' in info and str(BIN / "nvhook-runtime") in info


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("gpus", "minors"),
    [("all", range(8)), ('"device=0,3"', [0, 3]), ("2", [0, 1])],
    ids=["all", "device=0,3", "count=2"],
)
def test_gpus(
    docker: Docker, shim: Shim, profile: Profile, mode: str, gpus: str, minors: range
) -> None:
    result = _run(docker, mode, "--gpus", gpus)
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, list(minors))
    assert probe.gpu_nodes == {f"/dev/nvidia{n}" for n in minors}
    assert probe.lib_magic == ELF_MAGIC
    if gpus == '"device=0,3"':
        assert "/dev/nvidia1" not in probe.nodes


@pytest.mark.parametrize("mode", MODES)
def test_utility_only(docker: Docker, profile: Profile, mode: str) -> None:
    result = _run(docker, mode, "--gpus", "all,capabilities=utility")
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert probe.gpu_uuids == expected_smi_uuids(profile, range(8))  # nvidia-smi: utility
    assert probe.lib_magic == ""  # libcuda.so.1 is compute: not mounted


@pytest.mark.parametrize("mode", MODES)
def test_unknown_gpu_fails_and_leaves_nothing(docker: Docker, mode: str) -> None:
    result = _run(docker, mode, "--gpus", '"device=9"')
    assert result.returncode != 0
    who = "nvhook-hook prestart:" if mode == "hook" else "nvhook-runtime:"
    assert who in result.stderr and "9" in result.stderr, result.stderr
    assert docker.cmd("ps", "-aq", check=True).stdout == ""


def test_shim_mode_drops_the_hook(docker: Docker, shim: Shim) -> None:
    """Through nvhook-runtime the shim injects (its log says so) and dockerd's hook is gone."""
    name = "shim-drops-hook"
    result = docker.run(
        BUSYBOX_IMAGE, ["sh", "-c", TWICE],
        "--name", name, "--runtime", "nvidia", "--gpus", '"device=1"',
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    counts = dict(line.split()[::-1] for line in result.stdout.splitlines())
    assert any("libcuda.so" in point for point in counts), result.stdout  # injected
    assert {p: n for p, n in counts.items() if n != "1"} == {}  # no mount point twice
    records = [r for r in _all_records(shim) if r.get("command") == "create"]
    assert any(r.get("devices") and r.get("written") for r in records)


def test_default_runtime(docker: Docker, shim: Shim, profile: Profile) -> None:
    """``--set-as-default``, loaded by the real dockerd: plain ``--gpus`` goes through the shim."""
    _configure(docker.config, docker.workdir, "--set-as-default")
    docker.restart()
    try:
        assert docker.cmd("info", "--format", "{{.DefaultRuntime}}").stdout.strip() == "nvidia"
        before = len(_all_records(shim))
        result = docker.run(BUSYBOX_IMAGE, PROBE_ARGS, "--gpus", '"device=0,3"')
        assert result.returncode == 0, result.stderr
        assert parse_probe(result.stdout).gpu_uuids == expected_smi_uuids(profile, [0, 3])
        assert len(_all_records(shim)) > before
    finally:
        config = docker.daemon_config()
        config.pop("default-runtime", None)
        import json

        docker.config.write_text(json.dumps(config))
        docker.restart()


def _all_records(shim: Shim) -> list[dict[str, object]]:
    import json

    if not shim.log_file.exists():
        return []
    return [json.loads(line) for line in shim.log_file.read_text().splitlines()]
