"""podman from a Debian root (tests/support/engines.py), run privately, as root or rootless.

:class:`EnginePodman` is podman inside a :class:`~tests.support.engines.PrivateRoot` with a
containers.conf and a storage.conf of its own (``CONTAINERS_CONF``,
``CONTAINERS_STORAGE_CONF``) under a work dir bound inside: its graph root and run root there
(the native overlay driver on the host's filesystem, not on the root's overlay), the
``cgroupfs`` cgroup manager (no systemd here), file events, no network namespace set-up, and
nofile/nproc limits of 1024 (root here lacks ``CAP_SYS_RESOURCE``), and no pids limit (this
VM's cgroup2 hierarchy has none of the v1 controllers, ``pids`` included: runc would fail to
write ``pids.max`` under a cgroup2-only view). Its low-level runtime is the root's runc unless
``runtime`` names another. Nothing of the host's ``/etc/containers``,
``/var/lib/containers`` or ``/run/containers`` is read or written: the root's ``/run`` is its
own tmpfs.

Rootless (``user=NAME``): the user is made inside the root's overlay (``useradd``, with
``/etc/subuid`` and ``/etc/subgid`` ranges and the given supplementary groups), podman runs
as that user through ``setpriv`` with its ``XDG_RUNTIME_DIR`` and storage under the work dir
(the user's own), and the root's ``newuidmap``/``newgidmap`` (setuid, from ``uidmap``) map its
ranges. Not in the home: that is on the root's overlay, where rootless podman falls back to
fuse-overlayfs, and this VM's ``/dev/fuse`` is root's alone (0600). The image is loaded as
that user. :func:`private_dev` gives the root a ``/dev`` with the mock's nodes, which rootless
podman bind-mounts by their container paths.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.basics import Result
from tests.support.engines import PrivateRoot
from tests.support.images import BUSYBOX_IMAGE
from tests.support.podman import run_args

__all__ = ["HOST_NODES", "EnginePodman", "RootlessUser", "private_dev"]


class RootlessUser:
    """An unprivileged user made in a private root: ``name``, ``uid``, and the supplementary
    groups (names) it belongs to; ``subids`` its first subordinate id (65536 of them)."""

    def __init__(self, name: str, uid: int, groups: Sequence[str] = (), subids: int = 200000):
        self.name = name
        self.uid = uid
        self.groups = tuple(groups)
        self.subids = subids

    def create(self, root: PrivateRoot) -> None:
        """``useradd`` it in ``root`` (its overlay: the cached root stays as it was), with its
        subordinate id ranges (ours, not those Debian's useradd picks)."""
        argv = ["useradd", "--uid", str(self.uid), "--create-home", "--shell", "/bin/sh"]
        if self.groups:
            argv += ["--groups", ",".join(self.groups)]
        root.run(*argv, self.name)
        line = f"{self.name}:{self.subids}:65536"
        for name in ("/etc/subuid", "/etc/subgid"):  # useradd may have given it a range
            root.run("sh", "-c", f"sed -i '/^{self.name}:/d' {name}; echo {line} >> {name}")


class EnginePodman:
    """podman in ``root`` with its configuration and storage under ``workdir`` (see the module
    docstring); ``runtime`` its low-level runtime (a path inside); ``user`` runs it rootless.
    podman hands the runtime only a fixed list of variables: :meth:`with_conmon_env` is how
    nvhook's config reaches nvhook-runtime's ``create``."""

    def __init__(
        self,
        root: PrivateRoot,
        workdir: Path,
        *,
        runtime: str = "/usr/sbin/runc",
        user: RootlessUser | None = None,
    ) -> None:
        self.root = root
        self.workdir = workdir
        self.user = user
        workdir.mkdir(parents=True, exist_ok=True)
        if user is not None:
            workdir.chmod(0o755)
        self.containers_conf = workdir / "containers.conf"
        self.storage_conf = workdir / "storage.conf"
        home = f"/home/{user.name}" if user else ""
        graph = f"{workdir}/graph"
        run_root = f"{workdir}/xdg/containers" if user else f"{workdir}/run"
        engine = [
            f"runtime = {json.dumps(runtime)}",
            'cgroup_manager = "cgroupfs"',
            'events_logger = "file"',
            f'events_logfile_path = "{workdir}/events.log"',
            f'tmp_dir = "{workdir}/tmp"',
        ]
        self.containers_conf.write_text(
            "[containers]\n"
            'netns = "none"\n'
            'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
            'log_driver = "k8s-file"\n'
            "pids_limit = 0\n"
            "[engine]\n" + "\n".join(engine) + "\n"
            "[network]\n"
            f'network_config_dir = "{workdir}/networks"\n'
        )
        # rootless_storage_path: podman 5.4 takes a rootless user's graph root from it alone
        self.storage_conf.write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{graph}"\nrunroot = "{run_root}"\n'
            f'rootless_storage_path = "{graph}"\n'
        )
        self.env: dict[str, str] = {
            "CONTAINERS_CONF": str(self.containers_conf),
            "CONTAINERS_STORAGE_CONF": str(self.storage_conf),
        }
        if user is not None:
            xdg = workdir / "xdg"
            xdg.mkdir(mode=0o700, exist_ok=True)
            root.run("chown", "-R", f"{user.uid}:{user.uid}", str(workdir))
            self.env |= {"HOME": home, "USER": user.name, "XDG_RUNTIME_DIR": str(xdg)}

    def with_conmon_env(self, name: str, conmon_env: Mapping[str, str]) -> EnginePodman:
        """This podman (its storage, image and runtime) with a containers.conf of its own,
        ``containers-NAME.conf``, whose ``conmon_env_vars`` are ``conmon_env``: how a test
        gives nvhook-runtime's ``create`` a config of its own."""
        conf = self.workdir / f"containers-{name}.conf"
        pairs = json.dumps([f"{k}={v}" for k, v in conmon_env.items()])
        text = self.containers_conf.read_text()
        conf.write_text(text.replace("[engine]\n", f"[engine]\nconmon_env_vars = {pairs}\n", 1))
        other = copy.copy(self)
        other.containers_conf = conf
        other.env = {**self.env, "CONTAINERS_CONF": str(conf)}
        return other

    def as_user(self, *argv: str) -> list[str]:
        """``argv`` as the rootless user (its groups from ``/etc/group``), else as is."""
        if self.user is None:
            return list(argv)
        drop = ["setpriv", "--reuid", self.user.name, "--regid", self.user.name]
        return [*drop, "--init-groups", "--reset-env", "--", "env", *self._env_pairs(), *argv]

    def _env_pairs(self) -> list[str]:
        path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        return [f"{k}={v}" for k, v in {**self.env, "PATH": path}.items()]

    def cmd(
        self, *args: str, hooks_dir: Path | None = None, timeout: float = 120, check: bool = False
    ) -> Result:
        """``podman [--hooks-dir D] ARGS…`` inside the root."""
        hooks = ["--hooks-dir", str(hooks_dir)] if hooks_dir else []
        argv = self.as_user("podman", *hooks, *args)
        return self.root.run(*argv, env=self.env, timeout=timeout, check=check)

    def version(self) -> str:
        """``podman --version``'s line, e.g. ``podman version 5.8.6``."""
        return self.cmd("--version", check=True).stdout.strip()

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
        hooks_dir: Path | None = None,
        timeout: float = 120,
    ) -> Result:
        """``podman [--runtime R] run --rm --pull=never [--device D]… [-e K=V]… OPTS IMAGE CMD``."""
        argv = [*(["--runtime", runtime] if runtime else [])]
        argv += run_args(cmd, image=image, devices=devices, env=env, options=options)
        return self.cmd(*argv, hooks_dir=hooks_dir, timeout=timeout)


#: The host's ``/dev`` entries a private ``/dev`` (:func:`private_dev`) keeps: what podman,
#: conmon and the runtimes open (``/dev/fuse`` and ``/dev/net/tun`` are not needed: the
#: storage is native overlay, the network ``none``).
HOST_NODES = ("null", "zero", "full", "random", "urandom", "tty")


def private_dev(root: PrivateRoot, machine_dev: Path) -> None:
    """Give ``root`` a ``/dev`` of its own holding the mock machine's nodes at their real paths
    (a tmpfs over the host's rbound ``/dev``, which is left as it was): rootless podman has no
    ``mknod``, so its runtime bind-mounts each device's container path (``/dev/nvidia1``)
    from its own ``/dev``, not the spec's ``hostPath``. The mock's nodes are copied with
    their modes and groups (``cp -a``), and ``/dev/pts`` and ``/dev/shm`` are new mounts."""
    keep = " ".join(f"/dev/{n}" for n in HOST_NODES)
    script = [
        "set -e",
        "mkdir -p /run/host-dev",
        f"cp -a {keep} /run/host-dev/",
        "mount -t tmpfs -o mode=0755,nosuid tmpfs /dev",
        "cp -a /run/host-dev/. /dev/",
        "rm -rf /run/host-dev",
        "mkdir /dev/pts /dev/shm",
        "mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts",
        "ln -s pts/ptmx /dev/ptmx",
        "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm",
        f"cp -a {machine_dev}/. /dev/",
    ]
    root.run("sh", "-c", "\n".join(script))
