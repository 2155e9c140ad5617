"""Shared set-up of the end-to-end runtime tests: a mock DGX A100, the shim, its config.

Everything costly is made once per session: the ``dgx-a100`` mock laid out as root (real
``c 195:N`` nodes), a shim config file pointing at it (with a CDI spec directory of its
own, so no test writes to ``/etc/cdi`` or ``/var/run/cdi``), and, in the containerd and
podman tests, the busybox image.

Every container runs :data:`PROBE`, which reports what a user would check from inside:
``nvidia-smi -L`` (the mock one, counting the GPUs whose ``/dev/nvidiaN`` opens with
ENXIO), ``ls -l /dev`` and ``/dev/nvidia-caps``, the env, and the first bytes of an
injected library. :func:`parse_probe` turns that output into a :class:`Probe`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from nvhook.mock import Profile, load_profile
from tests.support.basics import wait_for_line
from tests.support.containers import (
    Containerd,
    Podman,
    Runc,
    in_ci,
    make_bundle,
    require,
    require_root,
)

PROFILE = "dgx-a100"
LIBCUDA = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
NVIDIA_MAJOR = 195
CTL_MINOR = 255

#: The command every container runs; sections start with ``--- NAME``.
PROBE = (
    "echo '--- smi'; nvidia-smi -L; echo \"rc=$?\"; "
    "echo '--- dev'; ls -l /dev /dev/nvidia-caps; "
    "echo '--- env'; env; "
    f"echo '--- lib'; cat {LIBCUDA} > /dev/null && head -c 4 {LIBCUDA} | od -An -tx1; "
    "echo '--- end'"
)
PROBE_ARGS = ["sh", "-c", PROBE]
ELF_MAGIC = "7f 45 4c 46"


@dataclass(frozen=True)
class Probe:
    """What :data:`PROBE` saw inside a container."""

    raw: str
    smi: list[str]  # nvidia-smi -L lines
    smi_rc: int
    nodes: dict[str, tuple[int, int]]  # /dev and /dev/nvidia-caps char nodes: path -> (maj, min)
    env: dict[str, str]
    lib_magic: str  # hex of libcuda.so.1's first 4 bytes, "" when it could not be read

    @property
    def gpu_uuids(self) -> list[str]:
        """UUIDs of the whole GPUs nvidia-smi listed, in its order."""
        return [
            line.split("(UUID: ")[1].rstrip(")") for line in self.smi if line.startswith("GPU ")
        ]

    @property
    def mig_uuids(self) -> list[str]:
        return [_uuid(line) for line in self.smi if line.lstrip().startswith("MIG ")]

    @property
    def gpu_nodes(self) -> set[str]:
        """``/dev/nvidiaN`` nodes present (N a number)."""
        return {p for p in self.nodes if p.startswith("/dev/nvidia") and p[11:].isdigit()}

    @property
    def caps_nodes(self) -> set[str]:
        return {p for p in self.nodes if p.startswith("/dev/nvidia-caps/")}


def _uuid(smi_line: str) -> str:
    """``GPU 0: NAME (UUID: GPU-…)`` -> ``GPU-…``."""
    return smi_line.rsplit("(UUID: ", 1)[1].rstrip(")")


def parse_probe(output: str) -> Probe:
    """Parse :data:`PROBE`'s output; fails the test when a section is missing."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        if line.startswith("--- "):
            current = sections.setdefault(line[4:], [])
        elif current is not None:
            current.append(line)
    if not {"smi", "dev", "env", "lib", "end"} <= sections.keys():
        pytest.fail(f"probe output incomplete:\n{output}", pytrace=False)
    smi = [line for line in sections["smi"] if not line.startswith("rc=")]
    rc = next(int(line[3:]) for line in sections["smi"] if line.startswith("rc="))
    nodes: dict[str, tuple[int, int]] = {}
    directory = "/dev"
    for line in sections["dev"]:
        if line.endswith(":") and line.startswith("/dev"):
            directory = line[:-1]
        elif line.startswith("c"):
            # crw-rw-rw-    1 root     root      195,   3 Nov 30 08:18 nvidia3
            fields = line.split()
            major, minor = int(fields[4].rstrip(",")), int(fields[5])
            nodes[f"{directory}/{fields[-1]}"] = (major, minor)
    env = dict(line.split("=", 1) for line in sections["env"] if "=" in line)
    magic = " ".join(" ".join(sections["lib"]).split())
    return Probe(output, smi, rc, nodes, env, magic)


def expected_smi_uuids(profile: Profile, minors: Sequence[int]) -> list[str]:
    """The UUIDs ``nvidia-smi -L`` lists for whole GPUs ``minors`` (PCI bus order)."""
    gpus = [g for g in map(profile.gpu_by_minor, minors) if g is not None]
    assert len(gpus) == len(minors), f"{profile.name} has no GPU among {minors}"
    return [g.uuid for g in sorted(gpus, key=lambda g: g.bus_id)]


@dataclass(frozen=True)
class Shim:
    """The installed ``nvhook-runtime`` and a config of its own pointing at the mock."""

    binary: str
    runc: str
    machine: Path
    config: Path
    cache_dir: Path
    log_file: Path
    cdi_dir: Path
    workdir: Path

    @property
    def env(self) -> dict[str, str]:
        """The environment for the shim (or for a containerd/podman that calls it)."""
        return {**os.environ, **self.extra_env}

    @property
    def extra_env(self) -> dict[str, str]:
        return {"NVHOOK_CONFIG": str(self.config), "NVHOOK_CACHE_DIR": str(self.cache_dir)}

    def with_config(self, name: str, **sections: Mapping[str, Any]) -> Shim:
        """A sibling shim config: the base settings with ``sections`` overlaid."""
        path = self.workdir / f"{name}.toml"
        path.write_text(self._toml(sections))
        return replace(self, config=path)

    def log_records(self, container_id: str) -> list[dict[str, Any]]:
        """The shim's own log lines about ``container_id``."""
        if not self.log_file.exists():
            return []
        records = [json.loads(line) for line in self.log_file.read_text().splitlines()]
        return [r for r in records if r.get("id") == container_id]

    def runc_for(self, root: Path) -> Runc:
        """A :class:`Runc` helper that calls the shim, with state under ``root``."""
        return Runc(root, binary=self.binary, env=self.env)

    def _toml(self, overlay: Mapping[str, Mapping[str, Any]]) -> str:
        sections: dict[str, dict[str, Any]] = {
            "runtime": {"runtimes": [self.runc], "log_file": str(self.log_file)},
            "host": {"root": str(self.machine)},
            "cdi": {"spec_dirs": [str(self.cdi_dir)]},
        }
        for name, values in overlay.items():
            sections.setdefault(name, {}).update(values)
        lines = []
        for name, values in sections.items():
            lines.append(f"[{name}]")
            lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
        return "\n".join(lines) + "\n"


def start_shim_server(bin_dir: Path, cache: Path) -> subprocess.Popen[bytes]:
    """``bin_dir``'s ``nvhook-shim-server`` on ``shim.sock`` in ``cache`` (made root's, 0700,
    as the front-end wants it), once it says it listens; the caller stops it."""
    cache.mkdir(mode=0o700)
    sock = cache / "shim.sock"
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(
            [str(bin_dir / "nvhook-shim-server"), "--socket", str(sock)],
            env={"PATH": "/usr/bin:/bin"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        wait_for_line(server, log, b"listening on ", what=f"{bin_dir}/nvhook-shim-server")
    return server


def shim_binary() -> str:
    """``nvhook-runtime`` next to this interpreter (written by ``nvhook install-entrypoints``)."""
    path = Path(sys.executable).parent / "nvhook-runtime"
    if not path.is_file():
        reason = f"{path} missing: run `{path.parent}/nvhook install-entrypoints`"
        if in_ci():
            pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)", pytrace=False)
        pytest.skip(reason)
    return str(path)


@pytest.fixture(scope="session")
def profile() -> Profile:
    return load_profile(PROFILE)


@pytest.fixture(scope="session")
def dgx(mock_machine: Callable[..., Path]) -> Path:
    """The dgx-a100 mock laid out with real char nodes (needs root), shared read-only."""
    return mock_machine(PROFILE, as_root_nodes=True)


def new_shim(machine: Path, workdir: Path) -> Shim:
    """The shim on the mock at ``machine``, runc as its runtime, its config, cache, log and CDI
    directory under ``workdir`` (the config not written yet)."""
    (workdir / "cdi").mkdir(parents=True)
    return Shim(
        binary=shim_binary(),
        runc=require("runc"),
        machine=machine,
        config=workdir / "config.toml",
        cache_dir=workdir / "cache",
        log_file=workdir / "shim.log",
        cdi_dir=workdir / "cdi",
        workdir=workdir,
    )


@pytest.fixture(scope="session")
def shim(dgx: Path, tmp_path_factory: pytest.TempPathFactory) -> Shim:
    """The shim with a session config (mode auto, host.root = the mock, runc as runtime)."""
    require_root()
    base = new_shim(dgx, tmp_path_factory.mktemp("shim"))
    base.config.write_text(base._toml({}))
    return base


@pytest.fixture
def shim_runc(shim: Shim, tmp_path: Path) -> Iterator[Runc]:
    """A :class:`Runc` helper calling the shim; its containers are force-deleted after."""
    helper = shim.runc_for(tmp_path / "state")
    try:
        yield helper
    finally:
        helper.cleanup()


#: The busybox applets :data:`PROBE` and the tests use.
APPLETS = ("sh", "ls", "env", "cat", "head", "od", "echo", "sleep", "true")


@pytest.fixture(scope="session")
def busybox_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy of the static busybox that every probe rootfs hard-links."""
    source = require("/usr/bin/busybox")
    dest = tmp_path_factory.mktemp("busybox") / "busybox"
    shutil.copy2(source, dest)
    return dest


def probe_rootfs(dest: Path, busybox: Path) -> Path:
    """A minimal rootfs for :data:`PROBE`: busybox hard-linked, one link per applet used.

    A few milliseconds instead of the full rootfs's ``cp -a`` of ~400 links (~0.15 s here),
    which matters for the concurrent test. Each container still has a rootfs of its own:
    the hooks write ``/etc/ld.so.cache`` and library links into it.
    """
    for d in ("bin", "etc", "dev", "proc", "sys", "tmp", "root"):
        (dest / d).mkdir(parents=True, exist_ok=True)
    try:
        os.link(busybox, dest / "bin/busybox")
    except OSError:  # another filesystem
        shutil.copy2(busybox, dest / "bin/busybox")
    for applet in APPLETS:
        (dest / "bin" / applet).symlink_to("busybox")
    (dest / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (dest / "etc/group").write_text("root:x:0:\n")
    return dest


@pytest.fixture
def gpu_bundle(tmp_path: Path, busybox_copy: Path) -> Callable[..., Path]:
    """Factory: ``gpu_bundle(name, env=[…], annotations={…}) -> Path`` running :data:`PROBE`."""

    def make(
        name: str,
        env: Sequence[str] = (),
        *,
        annotations: Mapping[str, str] | None = None,
        args: Sequence[str] = PROBE_ARGS,
    ) -> Path:
        rootfs = probe_rootfs(tmp_path / name / "rootfs", busybox_copy)
        return make_bundle(tmp_path / name, args, env, annotations=annotations, rootfs=rootfs)

    return make


@pytest.fixture(scope="session")
def shim_containerd(
    shim: Shim, tmp_path_factory: pytest.TempPathFactory, busybox_image: Path
) -> Iterator[Containerd]:
    """A private containerd whose env (inherited by its shims, then by ours) names our config."""
    helper = Containerd(tmp_path_factory.mktemp("ctrd-shim"), env=shim.extra_env)
    with helper:
        helper.import_image(busybox_image)
        yield helper


@dataclass(frozen=True)
class ShimPodman:
    """podman (the harness's private one) calling the shim as its runtime.

    podman hands the runtime a fixed short list of variables, not its own environment
    (create gets PATH, HOME, XDG_RUNTIME_DIR, CONTAINERS_CONF, …; start only PATH;
    delete nothing). ``conmon_env_vars`` in containers.conf is how the ``create`` call
    gets ``NVHOOK_CONFIG``: a copy of the harness's containers.conf adds it. The other
    calls pass through with the defaults (no ``/etc/nvhook/config.toml`` here), finding
    runc on PATH or at ``/usr/sbin/runc``.
    """

    binary: str
    env: dict[str, str]
    shim: Shim

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``podman --runtime SHIM ARGS…``."""
        return subprocess.run(
            [self.binary, "--runtime", self.shim.binary, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )


@pytest.fixture(scope="session")
def shim_podman(shim: Shim, podman: Podman) -> ShimPodman:
    conf = podman.containers_conf.read_text()
    assert "[engine]\n" in conf
    pairs = json.dumps([f"{k}={v}" for k, v in shim.extra_env.items()])
    ours = shim.workdir / "containers.conf"
    ours.write_text(conf.replace("[engine]\n", f"[engine]\nconmon_env_vars = {pairs}\n", 1))
    return ShimPodman(podman.binary, {**podman.env, "CONTAINERS_CONF": str(ours)}, shim)
