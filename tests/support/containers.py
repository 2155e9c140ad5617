"""Real-container test harness: rootfs, bundles, runc, podman, containerd, a capturing runtime.

The recipes and machine facts behind this module are in ``shared/RUNTIMES.md``.

Plain functions and classes::

    require(tool) -> str                  absolute path of a tool, or skip (fail under CI=…)
    require_root() -> None                skip unless root (fail under CI=…)
    busybox_rootfs(dest) -> Path          a static-busybox rootfs (cached template, copied)
    make_bundle(dir, args, env=None, …)   rootfs + config.json from `runc spec`, edited
    char_device(path, major, minor)       a linux.devices entry
    allow_device(major, minor)            a linux.resources.devices allow rule
    Runc(root, binary="runc")             run / create / start / state / kill / delete / cleanup
    busybox_image_tar(dir) -> Path        docker-archive of localhost/busybox:latest (umoci+skopeo)
    Podman(workdir)                       private podman: load / run / cmd / cleanup
    Containerd(workdir, cri=False, env=…) private containerd: start / ctr / import_image / run
    CaptureRuntime.create(dir, real=…)    a runc wrapper that keeps each created config.json
    cdi_spec(spec, name)                  context manager: a CDI spec file in /var/run/cdi
    unique_id(prefix) -> str              unique across tests and concurrent pytest processes

Fixtures (register with ``pytest_plugins = ["tests.support.containers"]`` in a top conftest)::

    need_root                 require_root()
    runc                      Runc under tmp_path; every container it made is force-deleted after
    busybox_image  (session)  Path of the docker-archive tar
    podman         (session)  Podman with localhost/busybox:latest loaded
    containerd     (session)  started Containerd with localhost/busybox:latest imported
    capture_runtime           CaptureRuntime wrapping the real runc, under tmp_path

A test marked ``@pytest.mark.root`` is skipped (failed under CI) when not run as root.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

__all__ = [
    "BUSYBOX_IMAGE",
    "CaptureRuntime",
    "Containerd",
    "Podman",
    "Runc",
    "allow_device",
    "busybox_image",
    "busybox_image_tar",
    "busybox_rootfs",
    "capture_runtime",
    "cdi_spec",
    "char_device",
    "containerd",
    "in_ci",
    "make_bundle",
    "need_root",
    "podman",
    "pytest_runtest_setup",
    "require",
    "require_root",
    "runc",
    "unique_id",
]

BUSYBOX_IMAGE = "localhost/busybox:latest"
"""The name under which :func:`busybox_image_tar` stores its image."""

Json = dict[str, Any]
Result = subprocess.CompletedProcess[str]

_ids = itertools.count()


def unique_id(prefix: str) -> str:
    """A name no other test, nor any concurrent pytest process on this machine, uses."""
    return f"{prefix}-{os.getpid()}-{next(_ids)}"


# --------------------------------------------------------------------------- requirements


def in_ci() -> bool:
    """True when env ``CI`` is set (CI installs every tool, so a missing one is a failure)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _missing(reason: str) -> NoReturn:
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


def require(tool: str) -> str:
    """Return the absolute path of ``tool``; skip the test when it is missing (fail under CI)."""
    path = shutil.which(tool)
    if path is None:
        _missing(f"{tool} not found on PATH (./dev setup installs it)")
    return os.path.realpath(path)


def require_root() -> None:
    """Skip the test unless it runs as root (fail under CI)."""
    if os.geteuid() != 0:
        _missing("needs root")


def _run(
    argv: Sequence[str],
    *,
    timeout: float,
    check: bool,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Result:
    """Run ``argv`` capturing text output; with ``check`` a failure fails the test readably."""
    proc = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"command failed with exit status {proc.returncode}: {' '.join(argv)}\n"
            f"--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}",
            pytrace=False,
        )
    return proc


def _rmdir_if_empty(*paths: str) -> None:
    """Remove each directory that is empty (deepest first); leave anything in use alone."""
    for p in paths:
        with contextlib.suppress(OSError):
            os.rmdir(p)


# --------------------------------------------------------------------------- rootfs


_BUSYBOX = "/usr/bin/busybox"
_template: Path | None = None


def _build_template() -> Path:
    require(_BUSYBOX)
    with open(_BUSYBOX, "rb") as f:
        head = f.read(4096)
    if b"ld-linux" in head:
        _missing(f"{_BUSYBOX} is dynamically linked (install busybox-static)")
    top = Path(tempfile.mkdtemp(prefix="nvhook-busybox-"))
    atexit.register(shutil.rmtree, top, True)
    rootfs = top / "rootfs"
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "dev", "proc", "sys", "tmp", "root"):
        (rootfs / d).mkdir(parents=True)
    (rootfs / "tmp").chmod(0o1777)
    shutil.copy2(_BUSYBOX, rootfs / "bin" / "busybox")
    listing = subprocess.run(
        [_BUSYBOX, "--list-full"], capture_output=True, text=True, check=True
    ).stdout.split()
    for full in listing:
        name = full.rsplit("/", 1)[-1]
        for link in {f"bin/{name}", full}:
            target = rootfs / link
            if not target.exists() and not target.is_symlink():
                target.symlink_to("/bin/busybox")
    (rootfs / "etc" / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
    )
    (rootfs / "etc" / "group").write_text("root:x:0:\nvideo:x:44:\nnogroup:x:65534:\n")
    return rootfs


def busybox_rootfs(dest: Path) -> Path:
    """Lay out a static-busybox rootfs at ``dest`` (created if missing) and return ``dest``.

    ``/bin`` holds busybox and a link per applet (also at its usual full path, e.g.
    ``/usr/bin/awk``); ``/etc/passwd`` and ``/etc/group`` have root; ``/dev``, ``/proc``,
    ``/sys``, ``/tmp`` exist. The tree is built once per process and copied (``cp -a``).
    """
    global _template
    if _template is None or not _template.is_dir():
        _template = _build_template()
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", f"{_template}/.", str(dest)], check=True)
    return dest


# --------------------------------------------------------------------------- bundles


_spec_cache: Json | None = None


def _runc_spec() -> Json:
    global _spec_cache
    if _spec_cache is None:
        runc_path = require("runc")
        with tempfile.TemporaryDirectory(prefix="nvhook-spec-") as d:
            subprocess.run([runc_path, "spec", "--bundle", d], check=True, capture_output=True)
            _spec_cache = json.loads(Path(d, "config.json").read_text())
    return copy.deepcopy(_spec_cache)


def char_device(
    path: str,
    major: int,
    minor: int,
    *,
    file_mode: int = 0o666,
    uid: int = 0,
    gid: int = 0,
    type: str = "c",
) -> Json:
    """A ``linux.devices`` entry: runc mknods it in the container."""
    return {
        "path": path,
        "type": type,
        "major": major,
        "minor": minor,
        "fileMode": file_mode,
        "uid": uid,
        "gid": gid,
    }


def allow_device(major: int, minor: int, access: str = "rwm", *, type: str = "c") -> Json:
    """A ``linux.resources.devices`` allow rule for one node."""
    return {"allow": True, "type": type, "major": major, "minor": minor, "access": access}


def make_bundle(
    directory: Path,
    args: Sequence[str],
    env: Sequence[str] | None = None,
    *,
    rootfs: Path | None = None,
    readonly: bool | None = None,
    devices: Sequence[Json] = (),
    device_rules: Sequence[Json] = (),
    mounts: Sequence[Json] = (),
    annotations: Mapping[str, str] | None = None,
    hooks: Mapping[str, Sequence[Json]] | None = None,
    edit: Callable[[Json], None] | None = None,
) -> Path:
    """Write an OCI bundle at ``directory`` and return it.

    config.json is real ``runc spec`` output, then edited: ``process.terminal=false``,
    ``process.args=args``, ``env`` appended to ``process.env``; ``readonly`` sets
    ``root.readonly``; ``devices`` go to ``linux.devices``, ``device_rules`` are appended to
    ``linux.resources.devices`` (after runc's deny-all), ``mounts`` appended, ``annotations``
    merged, ``hooks`` appended per stage; finally ``edit(spec)`` may change anything.
    The rootfs is a fresh busybox one at ``directory/rootfs`` unless ``rootfs`` names one.
    """
    spec = _runc_spec()
    directory.mkdir(parents=True, exist_ok=True)
    if rootfs is None:
        busybox_rootfs(directory / "rootfs")
    else:
        spec["root"]["path"] = str(rootfs.resolve())
    process = spec["process"]
    process["terminal"] = False
    process["args"] = list(args)
    process["env"] = [*process.get("env", []), *(env or [])]
    if readonly is not None:
        spec["root"]["readonly"] = readonly
    linux = spec.setdefault("linux", {})
    if devices:
        linux.setdefault("devices", []).extend(copy.deepcopy(list(devices)))
    if device_rules:
        resources = linux.setdefault("resources", {})
        resources.setdefault("devices", []).extend(copy.deepcopy(list(device_rules)))
    if mounts:
        spec.setdefault("mounts", []).extend(copy.deepcopy(list(mounts)))
    if annotations:
        spec.setdefault("annotations", {}).update(annotations)
    if hooks:
        for stage, items in hooks.items():
            spec.setdefault("hooks", {}).setdefault(stage, []).extend(copy.deepcopy(list(items)))
    if edit is not None:
        edit(spec)
    (directory / "config.json").write_text(json.dumps(spec, indent=2) + "\n")
    return directory


# --------------------------------------------------------------------------- runc


@dataclass
class Runc:
    """A runc-compatible runtime (runc itself, or the nvhook shim) with its own state root.

    ``run`` runs in the foreground and captures the container's output. ``create`` sends the
    container's stdio to ``<bundle>/<id>.stdout`` / ``.stderr`` (see :meth:`output`), since a
    pipe would stay open as long as the container lives.
    """

    root: Path
    binary: str = "runc"
    env: Mapping[str, str] | None = None
    global_args: Sequence[str] = ()
    ids: list[str] = field(default_factory=list)
    _outputs: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "/" not in self.binary:
            self.binary = require(self.binary)
        self.root.mkdir(parents=True, exist_ok=True)

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "--root", str(self.root), *self.global_args, *args]

    def call(self, *args: str, timeout: float = 60, check: bool = False) -> Result:
        """Run ``<binary> --root R [global_args] ARGS…`` and capture its output."""
        return _run(self.argv(*args), timeout=timeout, check=check, env=self.env)

    def run(
        self, bundle: Path, id: str | None = None, *, timeout: float = 60, check: bool = False
    ) -> Result:
        """``run --bundle B ID`` in the foreground: the container's output is the result's."""
        cid = id or unique_id("run")
        self.ids.append(cid)
        return self.call("run", "--bundle", str(bundle), cid, timeout=timeout, check=check)

    def create(
        self, bundle: Path, id: str | None = None, *, timeout: float = 60, check: bool = True
    ) -> str:
        """``create --bundle B ID``; returns the id. Fails the test on error when ``check``."""
        cid = id or unique_id("ctr")
        self.ids.append(cid)
        out, err = bundle / f"{cid}.stdout", bundle / f"{cid}.stderr"
        self._outputs[cid] = out
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.run(
                self.argv("create", "--bundle", str(bundle), cid),
                stdin=subprocess.DEVNULL,
                stdout=o,
                stderr=e,
                timeout=timeout,
                env=dict(self.env) if self.env is not None else None,
                check=False,
            )
        if check and proc.returncode != 0:
            pytest.fail(
                f"{self.binary} create {cid} failed ({proc.returncode}):\n"
                f"{err.read_text(errors='replace')}",
                pytrace=False,
            )
        return cid

    def start(self, id: str, *, timeout: float = 60, check: bool = True) -> Result:
        return self.call("start", id, timeout=timeout, check=check)

    def state(self, id: str, *, timeout: float = 60) -> Json:
        state: Json = json.loads(self.call("state", id, timeout=timeout, check=True).stdout)
        return state

    def kill(self, id: str, sig: str = "KILL", *, timeout: float = 60) -> Result:
        return self.call("kill", id, sig, timeout=timeout)

    def delete(self, id: str, *, force: bool = False, timeout: float = 60) -> Result:
        return self.call("delete", *(["--force"] if force else []), id, timeout=timeout)

    def wait_stopped(self, id: str, *, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.state(id)["status"] != "stopped":
            if time.monotonic() > deadline:
                pytest.fail(f"container {id} still running after {timeout}s", pytrace=False)
            time.sleep(0.02)

    def output(self, id: str) -> str:
        """What a container made by :meth:`create` wrote to its stdout so far."""
        return self._outputs[id].read_text(errors="replace")

    def cleanup(self) -> None:
        """Force-delete every container this helper made (errors ignored)."""
        for cid in reversed(self.ids):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.delete(cid, force=True, timeout=30)
        self.ids.clear()


# --------------------------------------------------------------------------- image


_image_cache: Path | None = None


def busybox_image_tar(directory: Path) -> Path:
    """Build ``localhost/busybox:latest`` offline as a docker-archive tar under ``directory``.

    umoci makes an OCI layout from the busybox rootfs, skopeo converts it (RUNTIMES.md).
    Cached per process: a second call returns the first tar while it exists.
    """
    global _image_cache
    if _image_cache is not None and _image_cache.is_file():
        return _image_cache
    umoci, skopeo = require("umoci"), require("skopeo")
    directory.mkdir(parents=True, exist_ok=True)
    layout, unpacked = directory / "oci", directory / "unpacked"
    tar = directory / "busybox.tar"
    for d in (layout, unpacked):
        shutil.rmtree(d, ignore_errors=True)
    tar.unlink(missing_ok=True)
    image = f"{layout}:latest"
    for argv in (
        [umoci, "init", "--layout", str(layout)],
        [umoci, "new", "--image", image],
        [umoci, "unpack", "--image", image, str(unpacked)],
    ):
        _run(argv, timeout=120, check=True)
    shutil.rmtree(unpacked / "rootfs")
    busybox_rootfs(unpacked / "rootfs")
    for argv in (
        [umoci, "repack", "--image", image, str(unpacked)],
        [umoci, "config", "--image", image, "--config.cmd", "sh"],
        [
            skopeo,
            "--insecure-policy",
            "copy",
            "-q",
            f"oci:{image}",
            f"docker-archive:{tar}:{BUSYBOX_IMAGE}",
        ],
    ):
        _run(argv, timeout=120, check=True)
    shutil.rmtree(unpacked, ignore_errors=True)
    _image_cache = tar
    return tar


# --------------------------------------------------------------------------- podman


class Podman:
    """podman with a private configuration and storage under ``workdir``.

    Configured as RUNTIMES.md says: runc (crun fails here), cgroupfs, file events, no network
    namespace set-up, ulimits that need no CAP_SYS_RESOURCE. ``static_dir`` is left at its
    default (graphroot/libpod): podman's cleanup process is started with ``--root`` and would
    otherwise look in another database, making every ``run --rm`` wait 20 s for it.
    CDI specs are read only from /etc/cdi and /var/run/cdi (podman 4.3): see :func:`cdi_spec`.
    """

    def __init__(self, workdir: Path, *, runtime: str = "runc") -> None:
        self.binary = require("podman")
        self.runtime = runtime
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.containers_conf = workdir / "containers.conf"
        self.storage_conf = workdir / "storage.conf"
        self.containers_conf.write_text(
            "[containers]\n"
            'netns = "none"\n'
            'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
            'log_driver = "k8s-file"\n'
            "[engine]\n"
            f"runtime = {json.dumps(runtime)}\n"
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'events_logfile_path = "{workdir}/events.log"\n'
            f'tmp_dir = "{workdir}/tmp"\n'
            "[network]\n"
            f'network_config_dir = "{workdir}/networks"\n'
        )
        self.storage_conf.write_text(
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{workdir}/graph"\n'
            f'runroot = "{workdir}/run"\n'
        )
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(self.containers_conf),
            "CONTAINERS_STORAGE_CONF": str(self.storage_conf),
        }

    def cmd(
        self,
        *args: str,
        runtime: str | None = None,
        timeout: float = 120,
        check: bool = False,
    ) -> Result:
        """``podman [--runtime R] ARGS…`` under the private configuration."""
        argv = [self.binary, *(["--runtime", runtime] if runtime else []), *args]
        return _run(argv, timeout=timeout, check=check, env=self.env)

    def load(self, tar: Path) -> None:
        self.cmd("load", "-q", "-i", str(tar), check=True)

    def run(
        self,
        cmd: Sequence[str],
        *,
        image: str = BUSYBOX_IMAGE,
        runtime: str | None = None,
        devices: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        options: Sequence[str] = (),
        timeout: float = 60,
        check: bool = False,
    ) -> Result:
        """``podman [--runtime R] run --rm --pull=never [--device D]… [-e K=V]… OPTS IMAGE CMD``."""
        argv = ["run", "--rm", "--pull=never"]
        for d in devices:
            argv += ["--device", d]
        for k, v in (env or {}).items():
            argv += ["-e", f"{k}={v}"]
        argv += [*options, image, *cmd]
        return self.cmd(*argv, runtime=runtime, timeout=timeout, check=check)

    def cleanup(self) -> None:
        """Remove its containers and images, and the shared /run dirs it left empty."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.cmd("rm", "--all", "--force", "--time", "0", timeout=60)
            self.cmd("rmi", "--all", "--force", timeout=60)
        # podman runs runc with its default state root, /run/runc
        _rmdir_if_empty("/run/containers/networks", "/run/containers", "/run/libpod", "/run/runc")


# --------------------------------------------------------------------------- containerd


class Containerd:
    """A private containerd (own root, state, sockets) for ``ctr`` or CRI tests.

    Without ``cri`` the CRI plugin is disabled. With ``cri=True`` it is configured for this VM
    (``restrict_oom_score_adj``, ``default_runtime_name = "runc"``) and ``runtimes`` maps extra
    runtime-class names to binaries; ``extra_config`` is appended to the TOML as is.
    ``env`` is added to containerd's environment, which its shims and the runtime they call
    inherit (e.g. ``NVHOOK_CONFIG`` for the nvhook shim).
    containerd 1.6 puts shim sockets under /run/containerd/s whatever its state dir:
    :meth:`stop` removes those it made and the directories it left empty.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        cri: bool = False,
        runtimes: Mapping[str, str] | None = None,
        sandbox_image: str = BUSYBOX_IMAGE,
        namespace: str = "nvhook-test",
        extra_config: str = "",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.binary = require("containerd")
        self.env = dict(env or {})
        self.ctr_binary = require("ctr")
        self.workdir = workdir
        self.namespace = namespace
        workdir.mkdir(parents=True, exist_ok=True)
        # unix socket paths are limited to 108 bytes: keep them short whatever tmp_path is
        self.sockdir = Path(tempfile.mkdtemp(prefix="nvh-ctrd-"))
        self.address = str(self.sockdir / "c.sock")
        self.config = workdir / "config.toml"
        self.log = workdir / "containerd.log"
        lines = [
            "version = 2",
            f'root = "{workdir}/root"',
            f'state = "{workdir}/state"',
        ]
        if not cri:
            lines.append('disabled_plugins = ["io.containerd.grpc.v1.cri"]')
        lines += [
            "[grpc]",
            f'  address = "{self.address}"',
            "[ttrpc]",
            f'  address = "{self.address}.ttrpc"',
            '[plugins."io.containerd.internal.v1.opt"]',
            f'  path = "{workdir}/opt"',
        ]
        if cri:
            cri_key = '[plugins."io.containerd.grpc.v1.cri"'
            lines += [
                f"{cri_key}]",
                f'  sandbox_image = "{sandbox_image}"',
                "  restrict_oom_score_adj = true",
                f"{cri_key}.cni]",
                f'  bin_dir = "{workdir}/cni/bin"',
                f'  conf_dir = "{workdir}/cni/conf"',
                f"{cri_key}.containerd]",
                '  default_runtime_name = "runc"',
                f"{cri_key}.containerd.runtimes.runc]",
                '  runtime_type = "io.containerd.runc.v2"',
            ]
            for name, binary in (runtimes or {}).items():
                lines += [
                    f"{cri_key}.containerd.runtimes.{name}]",
                    '  runtime_type = "io.containerd.runc.v2"',
                    f"{cri_key}.containerd.runtimes.{name}.options]",
                    f"  BinaryName = {json.dumps(binary)}",
                ]
        self.config.write_text("\n".join(lines) + "\n" + extra_config)
        self._proc: subprocess.Popen[bytes] | None = None
        self._shim_sockets: set[str] = set()

    def __enter__(self) -> Containerd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, timeout: float = 20) -> None:
        self._shim_sockets = set(_listdir("/run/containerd/s"))
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                [self.binary, "--config", str(self.config)],
                env={**os.environ, **self.env} if self.env else None,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                self.stop()
                pytest.fail(f"containerd exited at start:\n{self.log.read_text()}", pytrace=False)
            probe = _run([self.ctr_binary, "-a", self.address, "version"], timeout=10, check=False)
            if probe.returncode == 0:
                return
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"containerd not ready in {timeout}s:\n{self.log.read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for name in set(_listdir("/run/containerd/s")) - self._shim_sockets:
            with contextlib.suppress(OSError):
                os.unlink(f"/run/containerd/s/{name}")
        _rmdir_if_empty(
            f"/run/containerd/runc/{self.namespace}",
            "/run/containerd/runc/k8s.io",
            "/run/containerd/runc",
            "/run/containerd/s",
            "/run/containerd",
        )
        shutil.rmtree(self.sockdir, ignore_errors=True)

    def ctr(
        self, *args: str, namespace: str | None = None, timeout: float = 120, check: bool = True
    ) -> Result:
        """``ctr -a SOCK -n NS ARGS…``."""
        argv = [self.ctr_binary, "-a", self.address, "-n", namespace or self.namespace, *args]
        return _run(argv, timeout=timeout, check=check)

    def import_image(self, tar: Path, *, namespace: str | None = None) -> None:
        self.ctr("images", "import", str(tar), namespace=namespace)

    def run(
        self,
        image: str,
        id: str | None,
        cmd: Sequence[str],
        *,
        runc_binary: str | None = None,
        env: Mapping[str, str] | None = None,
        options: Sequence[str] = (),
        namespace: str | None = None,
        timeout: float = 60,
        check: bool = False,
    ) -> Result:
        """``ctr run --rm`` with private fifo and runc roots; ``runc_binary`` is the shim."""
        cid = id or unique_id("ctrd")
        argv = [
            "run",
            "--rm",
            "--fifo-dir",
            str(self.workdir / "fifo"),
            "--runc-root",
            str(self.workdir / "runc"),
        ]
        if runc_binary:
            argv += ["--runc-binary", runc_binary]
        for k, v in (env or {}).items():
            argv += ["--env", f"{k}={v}"]
        argv += [*options, image, cid, *cmd]
        return self.ctr(*argv, namespace=namespace, timeout=timeout, check=check)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


# --------------------------------------------------------------------------- capture runtime


_CAPTURE_SCRIPT = r"""#!/bin/sh
# capture runtime (tests/support/containers.py): keeps each call's argv in OUT/call-TS-PID
# (NUL-separated) and, on `create`, the bundle's config.json as OUT/create-TS-PID-<id>.json;
# then execs the real runtime with the same argv. Absolute paths: podman calls it without PATH.
out=@OUT@
real=@REAL@
stamp=$(/bin/date +%s%N)-$$
/usr/bin/printf '%s\0' "$@" > "$out/call-$stamp"
cmd= bundle= id= expect=
for a in "$@"; do
  if [ -n "$expect" ]; then
    [ "$expect" = bundle ] && bundle=$a
    expect=
    continue
  fi
  if [ -z "$cmd" ]; then
    case $a in
      --root|--log|--log-format|--criu|--rootless) expect=global ;;
      -*) ;;
      *) cmd=$a ;;
    esac
    continue
  fi
  case $a in
    --bundle|-b) expect=bundle ;;
    --bundle=*) bundle=${a#--bundle=} ;;
    -b=*) bundle=${a#-b=} ;;
    --pid-file|--console-socket|--preserve-fds) expect=value ;;
    -*) ;;
    *) id=$a ;;
  esac
done
if [ "$cmd" = create ]; then
  [ -n "$bundle" ] || bundle=$(pwd)
  /bin/cp "$bundle/config.json" "$out/create-$stamp-$id.json"
fi
exec "$real" "$@"
"""


def _sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


@dataclass(frozen=True)
class CaptureRuntime:
    """A runc wrapper script that keeps, for each ``create``, config.json as the runtime saw it.

    Pass :attr:`path` as ``podman --runtime``, ``ctr run --runc-binary`` or ``Runc(binary=…)``.
    """

    path: Path
    out: Path
    real: str

    @classmethod
    def create(cls, directory: Path, *, real: str = "runc") -> CaptureRuntime:
        real_path = real if "/" in real else require(real)
        out = directory / "captured"
        out.mkdir(parents=True, exist_ok=True)
        path = directory / "capture-runc"
        script = _CAPTURE_SCRIPT.replace("@OUT@", _sh_quote(str(out.resolve())))
        path.write_text(script.replace("@REAL@", _sh_quote(real_path)))
        path.chmod(0o755)
        return cls(path=path, out=out, real=real_path)

    def configs(self) -> dict[str, Json]:
        """Captured config.json of each created container, by container id, oldest first."""
        files = sorted(self.out.glob("create-*.json"), key=_stamp)
        return {p.stem.split("-", 3)[3]: json.loads(p.read_text()) for p in files}

    def last(self) -> Json:
        """The config.json of the most recent ``create``; fails the test if there was none."""
        configs = self.configs()
        if not configs:
            pytest.fail(f"the capture runtime saw no create (calls: {self.calls()})")
        return list(configs.values())[-1]

    def calls(self) -> list[list[str]]:
        """argv (without argv[0]) of every call, oldest first."""
        files = sorted(self.out.glob("call-*"), key=_stamp)
        return [_decode(p.read_bytes()) for p in files]


def _stamp(p: Path) -> tuple[int, int]:
    """(nanoseconds, pid) from ``call-TS-PID`` / ``create-TS-PID-ID.json``."""
    _, ts, pid = p.name.split("-", 3)[:3]
    return int(ts), int(pid.split(".")[0])


def _decode(raw: bytes) -> list[str]:
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


# --------------------------------------------------------------------------- CDI


@contextlib.contextmanager
def cdi_spec(
    spec: Mapping[str, Any] | str, name: str, *, directory: Path = Path("/var/run/cdi")
) -> Iterator[Path]:
    """Install a CDI spec file as ``directory/<name>.json`` for the block, then remove it.

    podman 4.3 reads only /etc/cdi and /var/run/cdi, which every test and every concurrent
    pytest process on the machine share. Two files defining the same device make it
    unresolvable for all (``unresolvable CDI devices``), so give each spec a kind of its own,
    e.g. class ``unique_id("t").replace("-", "")``, and a unique ``name``.
    """
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    text = spec if isinstance(spec, str) else json.dumps(spec, indent=2)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    tmp.rename(path)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)
        if created:
            _rmdir_if_empty(str(directory))


# --------------------------------------------------------------------------- fixtures


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``root`` is skipped (CI: failed) when not run as root."""
    if item.get_closest_marker("root") is not None:
        require_root()


@pytest.fixture
def need_root() -> None:
    require_root()


@pytest.fixture
def runc(tmp_path: Path) -> Iterator[Runc]:
    """A :class:`Runc` for real runc, state under tmp_path; its containers are deleted after."""
    require_root()
    helper = Runc(tmp_path / "runc-root")
    try:
        yield helper
    finally:
        helper.cleanup()


@pytest.fixture(scope="session")
def busybox_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docker-archive tar holding ``localhost/busybox:latest``, built once per session."""
    require_root()
    return busybox_image_tar(tmp_path_factory.mktemp("busybox-image"))


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory, busybox_image: Path) -> Iterator[Podman]:
    """A private :class:`Podman` with ``localhost/busybox:latest`` loaded (one per session)."""
    require("runc")
    helper = Podman(tmp_path_factory.mktemp("podman"))
    try:
        helper.load(busybox_image)
        yield helper
    finally:
        helper.cleanup()


@pytest.fixture(scope="session")
def containerd(
    tmp_path_factory: pytest.TempPathFactory, busybox_image: Path
) -> Iterator[Containerd]:
    """A started private :class:`Containerd` (no CRI) with ``localhost/busybox:latest``."""
    require("runc")
    helper = Containerd(tmp_path_factory.mktemp("containerd"))
    with helper:
        helper.import_image(busybox_image)
        yield helper


@pytest.fixture
def capture_runtime(tmp_path: Path) -> CaptureRuntime:
    """A :class:`CaptureRuntime` around the real runc, under tmp_path."""
    return CaptureRuntime.create(tmp_path / "capture")
