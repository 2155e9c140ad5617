"""Docker 28.5 (Debian unstable) and 26.1 (Debian 13), each a private dockerd from its Debian
root (tests/support/engine_docker.py), on the dgx-a100 mock.

``nvhook runtime configure --runtime docker --enable-cdi`` on the daemon's own ``daemon.json``,
loaded by that dockerd: ``docker info`` lists runtime ``nvidia`` running nvhook-runtime, and
Docker's CDI is on with its default spec dirs (on 26.1 only because of ``--enable-cdi``; 28.2+
has it on by default). nvhook's generated spec is in the root's ``/etc/cdi``. Then, each
container checked from inside (the mock's ``nvidia-smi -L`` lists exactly its GPUs):

- ``--gpus all``, ``--gpus '"device=0,3"'``, ``--gpus 2`` in hook mode (plain runc; dockerd
  adds its prestart hook ``nvidia-container-runtime-hook``, nvhook's hook launcher, which it
  found on its PATH at start) and in shim mode (``--runtime nvidia``: the shim drops that hook
  and edits the spec itself);
- ``--runtime nvidia -e NVIDIA_VISIBLE_DEVICES=1``: no device request, the shim alone;
- Docker's own CDI, ``--device nvidia.com/gpu=0`` and ``=all``, under plain runc: nvhook's
  spec with its createContainer hook, and no nvhook-runtime.

Neither version has moby's ``nvidia.cdi`` ``--gpus`` driver (it came in Docker 29.2, moby PR
#50228; neither dockerd holds the string ``nvidia-cdi-hook``), so ``--gpus`` takes the
``nvidia-container-runtime-hook`` path on both. What that driver hands Docker's CDI driver for
each ``--gpus`` form (``nvidia.com/gpu=<id>``, moby's mapping cited below) is run here as
``--device`` requests, through the same CDI driver, with nvhook's spec. And ``nvhook explain``
on a running container's bundle names the path it took: hook, shim or engine CDI.

Another vendor through the same dockerd, on the ``mi300x-8`` mock (CPX: 64 devices):
Docker's own CDI with ``--device amd.com/gpu=9`` from ``nvhook cdi generate --vendor amd``'s
spec in ``/etc/cdi`` (no nvhook-runtime), and ``--runtime nvidia-amd -e AMD_VISIBLE_DEVICES=9``
through the shim in jit mode (``nvidia-amd``: the shim with a config whose host is that mock,
as dockerd hands one environment to every runtime); either container sees exactly
``/dev/kfd`` and partition 9's card and render nodes, and the mock ``rocm-smi`` (the image's,
mounted in) lists that partition alone.

Then hook mode under a cgroup2-only ``/sys/fs/cgroup`` (dockerd's runc puts an eBPF device
filter on the container's cgroup): ``--gpus '"device=1"'`` through plain runc, the prestart hook
extending that program: ``/dev/nvidia1`` opens as far as the driver (ENXIO: the mock has none),
and a node of GPU 0 that the container makes itself (``mknod``, which Docker's default device
rules allow, without read or write) fails with EPERM.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.mock import Profile
from tests.e2e.conftest import ELF_MAGIC, PROBE, PROBE_ARGS, Shim, expected_smi_uuids, parse_probe
from tests.e2e.engines.conftest import Engine, private_root
from tests.support.basics import Result
from tests.support.engine_docker import EngineDocker
from tests.support.images import BUSYBOX_IMAGE

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]

#: engine -> (Debian suite, Docker's major version)
DOCKERS = {"docker28": ("sid", 28), "docker26": ("trixie", 26)}
#: the venv's bin: nvhook-runtime, nvhook-hook and nvidia-container-runtime-hook
BIN = Path(__file__).resolve().parents[3] / ".venv/bin"
MODES = {"hook": (), "shim": ("--runtime", "nvidia")}
LIBCUDA_LINK = "/usr/lib/x86_64-linux-gnu/libcuda.so"
#: PROBE, then where the link nvhook's createContainer hook makes points
LINK_PROBE = f"{PROBE}; echo '--- link'; readlink {LIBCUDA_LINK}"
#: GPU 1's node; then GPU 1's and GPU 0's made by the container (Docker's default rules allow
#: mknod, not access): the copy of 1 opens as its original does, so 0's EPERM is the filter's
OPEN_PROBE = (
    f"{PROBE}; echo '--- open'; cat /dev/nvidia1 2>&1; "
    "mknod /tmp/gpu1 c 195 1 && cat /tmp/gpu1 2>&1; "
    "mknod /tmp/gpu0 c 195 0 && cat /tmp/gpu0 2>&1; true"
)


class Daemon:
    """A started dockerd of the module (in its engine's root), configured by nvhook."""

    def __init__(
        self,
        engine: Engine,
        docker: EngineDocker,
        before: dict[str, object],
        amd: Path | None = None,
    ):
        self.engine = engine
        self.docker = docker
        self.before = before  # ``docker info`` before nvhook configured it
        self.amd = amd  # the mi300x-8 mock whose spec is in /etc/cdi (runtime nvidia-amd)

    def run(self, *options: str, command: str | None = None) -> Result:
        argv = PROBE_ARGS if command is None else ["sh", "-c", command]
        return self.docker.run(BUSYBOX_IMAGE, argv, *options)


def _start(
    engine: Engine, shim: Shim, busybox_image: Path, dgx: Path, case: Path, *, amd: bool = False
) -> Iterator[Daemon]:
    """dockerd on an empty daemon.json (its ``docker info`` kept), then configured by
    ``runtime configure --enable-cdi`` and restarted, nvhook's spec in ``/etc/cdi``; with
    ``amd`` also the ``mi300x-8`` mock's AMD spec there and a runtime ``nvidia-amd``."""
    spec = case / "nvidia.json"
    assert main(["cdi", "generate", "--root", str(dgx), "--output", str(spec)]) == 0
    engine.root.run("sh", "-c", f"mkdir -p /etc/cdi && cp {spec} /etc/cdi/nvidia.json")
    machine = _amd_machine(engine, shim, case) if amd else None
    docker = EngineDocker(engine.root, case / "docker", path=[str(BIN)], env=shim.extra_env)
    with docker:
        before = docker.info()
        args = ["--runtime", "docker", "--config", str(docker.config)]
        args += ["--runtime-path", shim.binary, "--backup-dir", str(case / "backups")]
        assert main(["runtime", "configure", *args, "--enable-cdi"]) == 0
        if machine is not None:  # the shim, on the AMD mock's config
            config = docker.daemon_config()
            config["runtimes"]["nvidia-amd"] = {"path": str(case / "nvhook-runtime-amd")}
            docker.config.write_text(json.dumps(config, indent=2) + "\n")
        docker.restart()
        docker.load(busybox_image)
        yield Daemon(engine, docker, before, machine)


def _amd_machine(engine: Engine, shim: Shim, case: Path) -> Path:
    """The ``mi300x-8`` mock: its ``--vendor amd`` spec in the root's ``/etc/cdi``, and
    ``CASE/nvhook-runtime-amd``, the shim with a config whose host is that mock."""
    from nvhook.mock.vendors import create as create_vendor

    machine = create_vendor("mi300x-8", case / "amd", nodes="char").root
    spec = case / "amd.json"
    argv = ["cdi", "generate", "--root", str(machine), "--vendor", "amd", "-o", str(spec)]
    assert main(argv) == 0
    engine.root.run("cp", str(spec), "/etc/cdi/amd.json")
    config = shim.with_config(f"{engine.name}-amd", host={"root": str(machine)}).config
    wrapper = case / "nvhook-runtime-amd"
    wrapper.write_text(f'#!/bin/sh\nNVHOOK_CONFIG={config} exec {shim.binary} "$@"\n')
    wrapper.chmod(0o755)
    return machine


@pytest.fixture(scope="module", params=list(DOCKERS))
def _daemon(
    request: pytest.FixtureRequest,
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    shim: Shim,
    busybox_image: Path,
    dgx: Path,
) -> Iterator[Daemon]:
    yield from _dockerds(request.param, suite_root, tmp_path_factory, shim, busybox_image, dgx)


def _dockerds(
    param: str,
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    shim: Shim,
    busybox_image: Path,
    dgx: Path,
    *,
    cgroup2: bool = False,
) -> Iterator[Daemon]:
    """The module fixtures' dockerd of ``DOCKERS[param]`` (``cgroup2``: on a cgroup2-only
    ``/sys/fs/cgroup``)."""
    suite, major = DOCKERS[param]
    name = f"{param}-cgroup2" if cgroup2 else param
    for engine in private_root(
        suite_root, tmp_path_factory, name, suite, ("dockerd", "--version"), major, cgroup2=cgroup2
    ):
        yield from _start(engine, shim, busybox_image, dgx, engine.work / "case", amd=not cgroup2)


@pytest.fixture
def daemon(_daemon: Daemon, print_version: Callable[[Engine], None]) -> Daemon:
    print_version(_daemon.engine)
    return _daemon


def test_configure_is_loaded(daemon: Daemon, shim: Shim) -> None:
    info = daemon.docker.info()
    assert info["ServerVersion"].startswith(f"{daemon.engine.major}.")
    assert info["Driver"] == "overlay2"  # its data root is on the host's file system
    assert "nvidia" not in daemon.before["Runtimes"]  # type: ignore[operator]
    assert info["Runtimes"]["nvidia"]["path"] == shim.binary
    assert "runc" in info["Runtimes"]
    cdi_dirs = ["/etc/cdi", "/var/run/cdi"]
    # Docker 26 has CDI off until daemon.json's features.cdi, which --enable-cdi set
    before = daemon.before.get("CDISpecDirs") or []
    assert before == ([] if daemon.engine.major < 28 else cdi_dirs)
    assert info["CDISpecDirs"] == cdi_dirs
    assert daemon.docker.daemon_config()["features"] == {"cdi": True}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("gpus", "minors"),
    [("all", range(8)), ('"device=0,3"', [0, 3]), ("2", [0, 1])],
    ids=["all", "device=0,3", "count=2"],
)
def test_gpus(
    daemon: Daemon, shim: Shim, profile: Profile, mode: str, gpus: str, minors: range
) -> None:
    result = daemon.run(*MODES[mode], "--gpus", gpus)
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, list(minors))
    assert probe.gpu_nodes == {f"/dev/nvidia{n}" for n in minors}
    assert probe.lib_magic == ELF_MAGIC


def test_runtime_nvidia_with_the_env_alone(daemon: Daemon, shim: Shim, profile: Profile) -> None:
    name = f"env-{daemon.engine.name}"
    result = daemon.run("--name", name, "--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=1")
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [1])
    assert probe.gpu_nodes == {"/dev/nvidia1"}
    created = [r for r in _records(shim) if r.get("command") == "create" and r.get("devices")]
    assert created and created[-1]["devices"] == "1" and created[-1]["written"]


@pytest.mark.parametrize(("device", "minors"), [("0", [0]), ("all", range(8))], ids=["0", "all"])
def test_dockers_own_cdi_applies_nvhooks_spec(
    daemon: Daemon, shim: Shim, profile: Profile, device: str, minors: range
) -> None:
    before = len(_records(shim))
    result = daemon.run("--device", f"nvidia.com/gpu={device}", command=LINK_PROBE)
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, list(minors))
    assert probe.gpu_nodes == {f"/dev/nvidia{n}" for n in minors}
    assert "/dev/nvidiactl" in probe.nodes
    assert probe.lib_magic == ELF_MAGIC
    assert result.stdout.split("--- link\n", 1)[1].strip() == "libcuda.so.1"  # nvhook-hook's
    assert len(_records(shim)) == before  # no nvhook-runtime on this path


#: how an AMD container asks: Docker's own CDI, or the shim's jit mode through its variable
AMD_WAYS = {
    "engine-cdi": ("--device", "amd.com/gpu=9"),
    "shim-jit": ("--runtime", "nvidia-amd", "-e", "AMD_VISIBLE_DEVICES=9"),
}


@pytest.mark.parametrize("how", AMD_WAYS)
def test_amd_partition_through_docker(daemon: Daemon, shim: Shim, how: str) -> None:
    """An MI300X CPX partition (``mi300x-8``'s device 9) through Docker: exactly ``/dev/kfd``
    and its card and render nodes, which the mock ``rocm-smi`` lists alone."""
    assert daemon.amd is not None
    before = len(_records(shim))
    smi = f"{daemon.amd}/opt/rocm/bin/rocm-smi:/usr/bin/rocm-smi:ro"
    look = "ls /dev /dev/dri; echo '--- smi'; rocm-smi"
    result = daemon.run(*AMD_WAYS[how], "-v", smi, command=look)
    assert result.returncode == 0, result.stderr
    listing, _, out = result.stdout.partition("--- smi\n")
    names = set(listing.split())
    dri = {n for n in names if n.startswith(("card", "renderD"))}
    assert "kfd" in names and dri == {"card10", "renderD137"}, names
    assert not any(n.startswith("nvidia") for n in names), names
    assert out.splitlines() == ["GPU[9] : 0000:26:00.0 renderD137 CPX/NPS1 partition 1"]
    created = _records(shim)[before:]
    if how == "engine-cdi":  # Docker's CDI alone: no nvhook-runtime on this path
        assert created == []
    else:
        assert any(r.get("command") == "create" for r in created), created


#: ``--gpus`` value -> the CDI device ids Docker 29.2's ``nvidia.cdi`` driver asks its CDI
#: driver for (moby docker-v29.2.0 daemon/devices_nvidia_linux.go: getRequestedDevicesIDs,
#: then normalizeDeviceID prefixes ``nvidia.com/gpu=``), and the GPUs that must appear
DOCKER29_CDI = {
    "all": (["all"], range(8)),
    '"device=0,3"': (["0", "3"], [0, 3]),
    "2": (["0", "1"], [0, 1]),
    '"device=GPU-UUID2"': (["GPU-UUID2"], [2]),
}


@pytest.mark.parametrize("gpus", DOCKER29_CDI, ids=["all", "device=0,3", "count=2", "uuid"])
def test_the_cdi_names_of_docker29s_gpus_driver(
    daemon: Daemon, shim: Shim, profile: Profile, gpus: str
) -> None:
    """What ``--gpus`` becomes on Docker 29.2+ with ``nvidia-cdi-hook`` on dockerd's PATH:
    the same CDI driver request that ``--device nvidia.com/gpu=ID`` makes here, each served by
    nvhook's spec. (No Docker 29 is packaged by Debian yet: the mapping is moby's, cited.)"""
    ids, minors = DOCKER29_CDI[gpus]
    gpu2 = profile.gpu_by_minor(2)
    assert gpu2 is not None
    ids = [gpu2.uuid if i == "GPU-UUID2" else i for i in ids]
    options = [f"--device=nvidia.com/gpu={i}" for i in ids]
    result = daemon.run(*options, command=LINK_PROBE)
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, list(minors))
    assert probe.gpu_nodes == {f"/dev/nvidia{n}" for n in minors}


def test_neither_version_has_the_nvidia_cdi_gpus_driver(daemon: Daemon) -> None:
    """Docker 28.5 and 26.1 look only for nvidia-container-runtime-hook (the string Docker
    29.2 looks up is not in their dockerd): --gpus takes the hook path on both."""
    dockerd = (daemon.engine.root.lower / "usr/sbin/dockerd").read_bytes()
    assert b"nvidia-container-runtime-hook" in dockerd
    assert b"nvidia-cdi-hook" not in dockerd


#: how a container asks -> the path ``nvhook explain`` says its GPUs came by
PATHS = {
    "hook": ("--gpus", '"device=1"'),
    "shim": ("--runtime", "nvidia", "--gpus", '"device=1"'),
    "engine-cdi": ("--device", "nvidia.com/gpu=1"),
}


@pytest.mark.parametrize("path", PATHS)
def test_explain_tells_which_path_a_container_took(daemon: Daemon, shim: Shim, path: str) -> None:
    """``nvhook explain --bundle`` on a running container's bundle (under dockerd's exec
    root, named by its id), with the shim's settings (its log), says which path it took."""
    docker = daemon.docker
    started = docker.cmd(
        "run", "-d", "--network", "none", *PATHS[path], BUSYBOX_IMAGE, "sleep", "120",
        check=True,
    )  # fmt: skip
    cid = started.stdout.strip()
    try:
        bundle = f"{docker.exec_root}/containerd/daemon/io.containerd.runtime.v2.task/moby/{cid}"
        out = daemon.engine.root.run(
            str(BIN / "nvhook"), "explain", "--bundle", bundle, "--json", env=shim.extra_env
        ).stdout
    finally:
        docker.cmd("rm", "-f", cid, check=True)
    found = json.loads(out)["injected_by"]
    assert found["path"] == path, found
    if path == "hook":
        assert f"{BIN}/nvidia-container-runtime-hook" in found["text"]
    if path == "engine-cdi":
        assert "/dev/nvidia1" in found["text"] and "/dev/nvidia0" not in found["text"]


def _records(shim: Shim) -> list[dict[str, object]]:
    if not shim.log_file.exists():
        return []
    return [json.loads(line) for line in shim.log_file.read_text().splitlines()]


# --------------------------------------------------------------------------- cgroup v2


@pytest.fixture(scope="module", params=list(DOCKERS))
def _daemon_cgroup2(
    request: pytest.FixtureRequest,
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    shim: Shim,
    busybox_image: Path,
    dgx: Path,
) -> Iterator[Daemon]:
    yield from _dockerds(
        request.param, suite_root, tmp_path_factory, shim, busybox_image, dgx, cgroup2=True
    )


@pytest.fixture
def daemon_cgroup2(_daemon_cgroup2: Daemon, print_version: Callable[[Engine], None]) -> Daemon:
    print_version(_daemon_cgroup2.engine)
    return _daemon_cgroup2


def test_hook_mode_under_cgroup2_extends_the_device_program(
    daemon_cgroup2: Daemon, profile: Profile
) -> None:
    info = daemon_cgroup2.docker.info()
    assert info["CgroupVersion"] == "2"
    result = daemon_cgroup2.run("--gpus", '"device=1"', command=OPEN_PROBE)
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [1])
    opened = result.stdout.split("--- open\n", 1)[1].splitlines()
    assert opened == [
        "cat: can't open '/dev/nvidia1': No such device or address",  # allowed: the driver's
        "cat: can't open '/tmp/gpu1': No such device or address",
        "cat: can't open '/tmp/gpu0': Operation not permitted",  # not given: the eBPF filter's
    ]
