"""MPS sharing (``sharing.mps``): one MPS control daemon per shared GPU, its limits, its health.

NVIDIA's plugin (``cmd/mps-control-daemon/mps/daemon.go``, ``internal/plugin/mps.go``) runs
one ``nvidia-cuda-mps-control -d`` per resource; here each shared GPU gets its own, so that a
daemon that dies takes only its GPU's replicas with it, and each daemon sees only its GPU
(``CUDA_VISIBLE_DEVICES=<uuid>``). What a daemon is given is NVIDIA's:

- its pipe and log directories, ``<mpsRoot>/<resource>/gpu<index>/{pipe,log}``
  (``CUDA_MPS_PIPE_DIRECTORY``, ``CUDA_MPS_LOG_DIRECTORY``), and ``<mpsRoot>/shm``;
- the GPU in ``EXCLUSIVE_PROCESS`` compute mode (``nvidia-smi -i <uuid> -c``; where that
  fails, a warning: a process outside MPS could then share the GPU too);
- its defaults, sent on the client's stdin: ``set_default_device_pinned_mem_limit 0 <M>M``
  with M the GPU's memory in MiB over the replicas, ``set_default_active_thread_percentage
  <100 / replicas>`` (integer division, as NVIDIA's ``activeThreadPercentage``);
- a ``.started`` file once it answers.

:class:`MpsDaemons` starts them, :meth:`~MpsDaemons.check` asks each one
``get_default_active_thread_percentage`` (NVIDIA's ``AssertHealthy``): a daemon that does
not answer makes its GPU unhealthy, with the reason, and is started again, so its replicas
are healthy once more on the next check that it answers. Across a configuration change or a
re-discovery of the GPUs, :meth:`~MpsDaemons.start` takes the running daemons over: one whose
identity is unchanged (binary, resource, GPU, pipe directory) keeps running, not restarted,
so the containers using it keep their MPS server; only the daemons no longer wanted stop.
:func:`container_share` is what a container allocated replicas of one GPU gets
(:mod:`nvhook.deviceplugin.allocate`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence

from nvhook.errors import DriverError
from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.deviceplugin.model import Device, Resource
    from nvhook.planner import Host

__all__ = [
    "CONTAINER_ROOT",
    "CONTROL",
    "MpsDaemon",
    "MpsDaemons",
    "Share",
    "container_share",
    "control_binary",
    "limits",
]

#: where a container sees the MPS root (NVIDIA's ``mps.ContainerRoot``)
CONTAINER_ROOT = "/mps"
CONTROL = "nvidia-cuda-mps-control"
_TIMEOUT = 10.0


def limits(memory_bytes: int, replicas: int) -> tuple[str, int]:
    """Each replica's pinned device memory (``"20480M"``) and active-thread percentage."""
    return f"{memory_bytes // replicas // (1 << 20)}M", 100 // replicas


class Share(Frozen):
    """What a container given replicas of one MPS-shared GPU gets."""

    envs: tuple[tuple[str, str], ...]
    mounts: tuple[tuple[str, str], ...]  # (container path, host path), read-write


def container_share(root: str, resource: str, device: Device, replicas: int) -> Share:
    """The env and mounts of a container given replicas of ``device`` of ``resource``: the
    pipe directory of its GPU's daemon at ``/mps/<resource>/pipe`` (NVIDIA's path),
    ``<mpsRoot>/shm`` at ``/dev/shm``, and the per-replica limits as the client's
    ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``."""
    pipe = f"{CONTAINER_ROOT}/{resource}/pipe"
    memory, threads = limits(device.memory_bytes, replicas)
    envs = [("CUDA_MPS_PIPE_DIRECTORY", pipe), ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(threads))]
    if device.memory_bytes:
        envs.append(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", f"0={memory}"))
    host = _directory(root, resource, device.gpu_index)
    return Share(
        envs=tuple(envs),
        mounts=((pipe, os.path.join(host, "pipe")), ("/dev/shm", os.path.join(root, "shm"))),
    )


def _directory(root: str, resource: str, gpu_index: int) -> str:
    return os.path.join(root, resource, f"gpu{gpu_index}")


class MpsDaemon:
    """The MPS control daemon of GPU ``device`` of ``resource``, ``replicas`` clients."""

    def __init__(
        self,
        binary: str,
        root: str,
        resource: str,
        device: Device,
        replicas: int,
        log: Callable[[str], None],
    ) -> None:
        self.binary, self.resource, self.device, self.replicas, self.log = (
            binary,
            resource,
            device,
            replicas,
            log,
        )
        self.directory = _directory(root, resource, device.gpu_index)
        self.pipe_dir = os.path.join(self.directory, "pipe")
        self.log_dir = os.path.join(self.directory, "log")
        self.shm_dir = os.path.join(root, "shm")
        self.started_file = os.path.join(self.directory, ".started")

    def _env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "CUDA_VISIBLE_DEVICES": self.device.gpu_uuid,
            "CUDA_MPS_PIPE_DIRECTORY": self.pipe_dir,
            "CUDA_MPS_LOG_DIRECTORY": self.log_dir,
        }

    def _run(self, argv: list[str], input: str | None = None) -> subprocess.CompletedProcess[str]:
        """``argv`` with the daemon's environment, bounded (DriverError: it could not run)."""
        try:
            return subprocess.run(
                argv,
                input=input,
                env=self._env(),
                capture_output=True,
                text=True,
                timeout=_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise DriverError(f"{' '.join(argv)}: cannot run it: {e}") from None

    def control(self, command: str) -> str:
        """Send ``command`` through the client; its answer (DriverError: it failed)."""
        proc = self._run([self.binary], command + "\n")
        if proc.returncode != 0:
            why = (proc.stderr.strip() or f"exit status {proc.returncode}").splitlines()[-1]
            raise DriverError(f"MPS control daemon in {self.pipe_dir}: {command}: {why}")
        return proc.stdout

    @property
    def identity(self) -> tuple[str, str, str, str]:
        """What a running daemon is (its binary, resource, GPU, pipe directory): one of the
        same identity is the same daemon to the containers using it."""
        return (self.binary, self.resource, self.device.gpu_uuid, self.pipe_dir)

    @property
    def defaults(self) -> tuple[int, str, int]:
        """Its replicas and their limits: the defaults it is given."""
        return (self.replicas, *limits(self.device.memory_bytes, self.replicas))

    def start(self) -> None:
        """Start the daemon and give it its defaults."""
        for d in (self.pipe_dir, self.log_dir, self.shm_dir):
            os.makedirs(d, mode=0o755, exist_ok=True)
        self._compute_mode("EXCLUSIVE_PROCESS")
        proc = self._run([self.binary, "-d"])
        if proc.returncode != 0 and "already running" not in proc.stderr:
            why = proc.stderr.strip() or f"exit status {proc.returncode}"
            raise DriverError(f"{self.binary} -d for GPU {self.device.gpu_index}: {why}")
        self.give_defaults()

    def give_defaults(self) -> None:
        """Send the daemon its per-replica defaults (for the MPS servers it starts from now
        on: a server already running keeps its own, nvidia-cuda-mps-control(1))."""
        memory, threads = limits(self.device.memory_bytes, self.replicas)
        if self.device.memory_bytes:
            self.control(f"set_default_device_pinned_mem_limit 0 {memory}")
        self.control(f"set_default_active_thread_percentage {threads}")
        with open(self.started_file, "w", encoding="utf-8") as f:
            f.write(f"{self.device.gpu_uuid}\n")
        self.log(
            f"MPS control daemon for GPU {self.device.gpu_index} ({self.resource}, "
            f"{self.replicas} replicas: {memory} pinned memory, {threads}% threads each) in "
            f"{self.pipe_dir}"
        )

    def problem(self) -> str | None:
        """None when the daemon answers (NVIDIA's AssertHealthy), else why not."""
        try:
            self.control("get_default_active_thread_percentage")
        except DriverError as e:
            return e.message
        return None

    def stop(self) -> None:
        with contextlib.suppress(DriverError):  # already gone
            self.control("quit")
        with contextlib.suppress(OSError):
            os.unlink(self.started_file)
        self._compute_mode("DEFAULT")

    def _compute_mode(self, mode: str) -> None:
        smi = shutil.which("nvidia-smi") if not os.path.isabs(self.binary) else None
        smi = smi or os.path.join(os.path.dirname(self.binary), "nvidia-smi")
        try:
            proc = subprocess.run(
                [smi, "-i", self.device.gpu_uuid, "-c", mode],
                capture_output=True,
                text=True,
                timeout=_TIMEOUT,
                check=False,
            )
            ok, why = proc.returncode == 0, (proc.stderr or proc.stdout).strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            ok, why = False, str(e)
        if not ok:
            self.log(
                f"warning: GPU {self.device.gpu_index}: cannot set compute mode {mode} "
                f"({smi}: {why.splitlines()[-1] if why else 'failed'})"
            )


def control_binary(host: Host) -> str:
    """``nvidia-cuda-mps-control`` of the driver root, else on PATH."""
    path = os.path.join(host.driver_root, "usr/bin", CONTROL)
    if os.access(path, os.X_OK):
        return path
    found = shutil.which(CONTROL)
    if found is None:
        raise DriverError(
            f"sharing.mps: {CONTROL} is neither in {os.path.dirname(path)} nor on PATH; "
            "install the driver's MPS binaries, or use sharing.timeSlicing"
        )
    return found


class MpsDaemons:
    """The daemons of every MPS-shared resource: started together, checked each tick."""

    def __init__(
        self,
        host: Host,
        root: str,
        resources: Sequence[Resource],
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.log = log
        self.daemons: list[MpsDaemon] = []
        shared = [r for r in resources if r.replicas > 1]
        if not shared:
            return
        binary = control_binary(host)
        for r in shared:
            seen: dict[str, Device] = {}
            for d in r.devices:
                if d.replica is not None:
                    seen.setdefault(d.gpu_uuid, d)
            for d in seen.values():
                self.daemons.append(MpsDaemon(binary, root, r.name, d, r.replicas, log))

    def start(self, running: MpsDaemons | None = None) -> None:
        """Start the daemons, taking over those of ``running`` (the ones served until a
        configuration change or a re-discovery): a running daemon of the same
        :attr:`~MpsDaemon.identity` is kept as it runs, never restarted (the containers
        using it keep their MPS server), and given its new defaults only where its replicas
        changed; the others of ``running`` stop first (their GPU back in compute mode
        ``DEFAULT``), then the new ones start."""
        before = {d.identity: d for d in running.daemons} if running is not None else {}
        wanted = {d.identity for d in self.daemons}
        for identity, gone in before.items():
            if identity not in wanted:
                gone.stop()
        for daemon in self.daemons:
            old = before.get(daemon.identity)
            where = f"MPS control daemon for GPU {daemon.device.gpu_index} ({daemon.resource})"
            if old is None:
                daemon.start()
            elif old.defaults == daemon.defaults:
                self.log(f"{where} kept running as it is in {daemon.pipe_dir}")
            else:  # see the README's MPS section: a restart would cut its clients off
                self.log(
                    f"{where} kept running, {old.replicas} -> {daemon.replicas} replicas: its "
                    "new defaults apply to the MPS servers it starts from now on"
                )
                try:
                    daemon.give_defaults()
                except DriverError:  # it died meanwhile: started again, as check() would
                    daemon.start()

    def check(self) -> dict[str, str]:
        """GPU UUID → why, for each GPU whose daemon does not answer; those are started
        again (their GPU healthy again on the next check that they answer)."""
        out: dict[str, str] = {}
        for daemon in self.daemons:
            problem = daemon.problem()
            if problem is None:
                continue
            out[daemon.device.gpu_uuid] = problem
            try:
                daemon.start()
            except DriverError as e:
                self.log(f"MPS control daemon for GPU {daemon.device.gpu_index}: {e.message}")
        return out

    def stop(self) -> None:
        for daemon in self.daemons:
            daemon.stop()
