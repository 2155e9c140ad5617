"""``nvhook dra-plugin`` as kubelet sees it: a real process, a kubelet stand-in built from the
real protos (registration, DRA v1/v1beta1, dra-health), the API-server stand-in."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nvhook.dra.prepare import spec_file
from nvhook.dra.server import HEALTHY, UNHEALTHY, Kubelet
from nvhook.dra.vendors import driver_name
from tests.nvhook.dra.conftest import DRIVER, NODE
from tests.support.kubeapi import KubeApiServer

AddClaim = Callable[..., tuple[str, str, str]]


class Daemon:
    def __init__(
        self,
        tmp: Path,
        kubeapi: KubeApiServer,
        config: Path,
        sockets: Path | None = None,
        vendor: str = "nvidia",
    ) -> None:
        """``sockets``: where kubelet's directories go (a short path: a unix socket's is at
        most 107 bytes, which pytest's temporary paths under xdist can pass); ``vendor``:
        ``--vendor``, whose driver name the kubelet stand-in registers."""
        self.tmp = tmp
        self.vendor = vendor
        sockets = sockets or tmp
        self.registry = sockets / "registry"
        self.plugins = sockets / "plugins"
        self.cdi = tmp / "cdi"
        self.log = tmp / "daemon.log"
        self.kubeconfig = kubeapi.kubeconfig(tmp / "kubeconfig")
        self.config = config
        self.device_plugins = sockets / "device-plugins"
        self.proc: subprocess.Popen[bytes] | None = None
        for d in (self.registry, self.plugins, self.device_plugins):
            d.mkdir(exist_ok=True)

    def start(self, *args: str) -> Kubelet:
        env = {**os.environ, "NVHOOK_CONFIG": str(self.config)}
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nvhook", "dra-plugin", "--node-name", NODE,
                 "--kubeconfig", str(self.kubeconfig), "--plugins-dir", str(self.plugins),
                 "--registry-dir", str(self.registry), "--cdi-root", str(self.cdi),
                 "--health-interval", "0.2", "--rescan-interval", "0.3",
                 "--device-plugin-dir", str(self.device_plugins), "--vendor", self.vendor,
                 *args],
                env=env, stderr=log, stdout=subprocess.DEVNULL,
            )  # fmt: skip
        kubelet = Kubelet(str(self.registry), driver_name(self.vendor))
        try:
            kubelet.register(timeout=30)
        except Exception:
            self.stop(signal.SIGKILL)
            raise AssertionError(f"the driver did not register:\n{self.log.read_text()}") from None
        return kubelet

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=20)
        self.proc = None
        return rc


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A short directory for kubelet's socket directories."""
    path = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(
    tmp_path: Path, kubeapi: KubeApiServer, settings: Callable[[str], Path], sockets: Path
) -> Iterator[Callable[[str], Daemon]]:
    made: list[Daemon] = []

    def make(profile: str = "dgx-a100", config: Path | None = None) -> Daemon:
        d = Daemon(tmp_path, kubeapi, config or settings(profile), sockets)
        made.append(d)
        return d

    yield make
    for d in made:
        if d.proc is not None:
            d.stop(signal.SIGKILL)


def wait_for(
    predicate: Callable[[], Any], what: str, timeout: float = 20, poll: float = 0.05
) -> Any:
    """``predicate()``'s first true value, asked every ``poll`` seconds for ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")


def test_it_registers_publishes_prepares_through_both_versions_and_stops_cleanly(
    daemon: Callable[..., Daemon], kubeapi: KubeApiServer, add_claim: AddClaim
) -> None:
    d = daemon()
    kubelet = d.start()
    info = kubelet.info
    assert (info.type, info.name) == ("DRAPlugin", DRIVER)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert info.endpoint == str(d.plugins / DRIVER / "dra.sock")
    for sock in (d.registry / f"{DRIVER}-reg.sock", Path(info.endpoint)):
        mode = os.stat(sock).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    wait_for(lambda: kubeapi.list("resourceslices"), "the slices")
    assert kubeapi.pool_problems(DRIVER, NODE) == []
    (s,) = kubeapi.list("resourceslices")
    assert len(s["spec"]["devices"]) == 9

    one, two = add_claim("one", ["gpu-2"]), add_claim("two", ["gpu-3", "gpu-4"])
    answer = kubelet.prepare(one, two).claims
    assert set(answer) == {one[2], two[2]}
    assert [dev.device_name for dev in answer[two[2]].devices] == ["gpu-3", "gpu-4"]
    (dev,) = answer[one[2]].devices
    assert list(dev.cdi_device_ids) == [f"k8s.gpu.nvidia.com/claim={one[2]}-gpu-2"]
    assert dev.pool_name == NODE and list(dev.request_names) == ["gpus"]
    old = kubelet.prepare(one, version="v1beta1").claims[one[2]]  # an older kubelet
    assert list(old.devices[0].cdi_device_ids) == list(dev.cdi_device_ids)
    assert kubelet.unprepare(two, version="v1beta1").claims[two[2]].error == ""
    assert not os.path.exists(spec_file(str(d.cdi), two[2]))
    kubelet.close()
    assert d.stop() == 0
    assert not (d.registry / f"{DRIVER}-reg.sock").exists()
    assert not Path(info.endpoint).exists()
    assert os.path.exists(spec_file(str(d.cdi), one[2]))  # prepared claims outlive a restart


def test_sigkill_between_prepare_and_unprepare_then_a_new_process_unprepares(
    daemon: Callable[..., Daemon], add_claim: AddClaim
) -> None:
    d = daemon()
    kubelet = d.start()
    claim = add_claim("crash", ["gpu-0-mig-2-0"])
    (dev,) = kubelet.prepare(claim).claims[claim[2]].devices
    kubelet.close()
    d.stop(signal.SIGKILL)
    kubelet = d.start()
    again = kubelet.prepare(claim).claims[claim[2]]  # kubelet's retry after its restart
    assert list(again.devices[0].cdi_device_ids) == list(dev.cdi_device_ids)
    assert kubelet.unprepare(claim).claims[claim[2]].error == ""
    assert not os.path.exists(spec_file(str(d.cdi), claim[2]))
    assert "unprepared" in kubelet.prepare(claim).claims[claim[2]].error
    unknown = ("default", "never", "0000-unknown")
    assert kubelet.unprepare(unknown).claims["0000-unknown"].error == ""
    kubelet.close()


def test_it_registers_again_when_kubelet_removes_its_socket(daemon: Callable[..., Daemon]) -> None:
    d = daemon()
    kubelet = d.start()
    sock = d.registry / f"{DRIVER}-reg.sock"
    sock.unlink()  # kubelet restarted and cleaned its registry directory
    wait_for(sock.exists, "the registration socket to come back")
    assert kubelet.register().name == DRIVER
    endpoint = Path(kubelet.info.endpoint)
    endpoint.unlink()  # and its plugins directory
    wait_for(endpoint.exists, "the endpoint to come back")
    assert stat.S_IMODE(os.stat(endpoint).st_mode) == 0o600
    assert kubelet.register().endpoint == str(endpoint)
    assert kubelet.unprepare(("default", "x", "0000-x")).claims["0000-x"].error == ""
    kubelet.close()


def test_health_streams_every_device_and_an_unhealthy_one_is_tainted(
    daemon: Callable[..., Daemon],
    kubeapi: KubeApiServer,
    make_mock_machine: Callable[..., Path],
    tmp_path: Path,
) -> None:
    root = make_mock_machine("l40s-x4")
    config = tmp_path / "own.toml"
    config.write_text(f'[host]\nroot = "{root}"\n')
    d = daemon(config=config)
    kubelet = d.start()
    stream = kubelet.watch_health()
    first = next(stream)
    assert {x.device.device_name: x.health for x in first.devices} == {
        f"gpu-{i}": HEALTHY for i in range(4)
    }
    assert {x.device.pool_name for x in first.devices} == {NODE}
    gone = sorted((root / "proc/driver/nvidia/gpus").iterdir())[0]
    gone.rename(gone.with_name(".gone"))  # the GPU fell off the bus
    second = next(stream)
    bad = {x.device.device_name: x.message for x in second.devices if x.health == UNHEALTHY}
    assert len(bad) == 1 and len(second.devices) == 4
    (name, message) = next(iter(bad.items()))
    assert "is gone" in message

    def tainted() -> bool:
        (s,) = kubeapi.list("resourceslices")
        return any(dev.get("taints") for dev in s["spec"]["devices"] if dev["name"] == name)

    wait_for(tainted, "the unhealthy device's taint")
    assert kubeapi.pool_problems(DRIVER, NODE) == []
    stream.cancel()  # type: ignore[attr-defined]
    kubelet.close()


def test_without_follow_a_rescan_republishes_and_leaves_prepared_claims_alone(
    daemon: Callable[..., Daemon],
    kubeapi: KubeApiServer,
    add_claim: AddClaim,
    make_mock_machine: Callable[..., Path],
    tmp_path: Path,
) -> None:
    root = make_mock_machine("dgx-a100")
    config = tmp_path / "own.toml"
    config.write_text(f'[host]\nroot = "{root}"\n')
    d = daemon(config=config)
    kubelet = d.start("--no-follow-gpus")  # the rescan (following: tests/…/test_follow.py)
    wait_for(lambda: kubeapi.list("resourceslices"), "the slices")
    (before,) = kubeapi.list("resourceslices")
    claim = add_claim("mig", ["gpu-0-mig-3-0"])
    assert kubelet.prepare(claim).claims[claim[2]].error == ""
    nvml = root / "etc/nvhook-mock/nvml.txt"
    lines = nvml.read_text().splitlines(keepends=True)
    nvml.write_text("".join(x for x in lines if "MIG-876d730c" not in x))  # gi 4 destroyed

    def republished() -> dict[str, Any] | None:
        (s,) = kubeapi.list("resourceslices")
        return s if s["spec"]["pool"]["generation"] > before["spec"]["pool"]["generation"] else None

    after = wait_for(republished, "a new pool generation")
    names = [x["name"] for x in after["spec"]["devices"]]
    assert "gpu-0-mig-4-0" not in names and "gpu-0-mig-3-0" in names
    assert kubeapi.pool_problems(DRIVER, NODE) == []
    assert os.path.exists(spec_file(str(d.cdi), claim[2]))
    assert kubelet.prepare(claim).claims[claim[2]].error == ""
    kubelet.close()


def test_it_refuses_to_run_beside_a_gpu_device_plugin(
    daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    """One node, one inventory: a GPU offered by both would go to two pods."""
    import socket

    d = daemon()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d.device_plugins / "nvhook-nvidia.com_gpu.sock"))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "nvhook", "dra-plugin", "--node-name", NODE,
             "--kubeconfig", str(d.kubeconfig), "--plugins-dir", str(d.plugins),
             "--registry-dir", str(d.registry), "--device-plugin-dir", str(d.device_plugins)],
            env={**os.environ, "NVHOOK_CONFIG": str(d.config)},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        sock.close()
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()
    assert "nvhook-nvidia.com_gpu.sock: a GPU device plugin serves this node" in line
    assert not (d.registry / f"{DRIVER}-reg.sock").exists()


def pool_slice(node: str, driver: str) -> dict[str, Any]:
    """A one-slice pool of ``driver`` on ``node``, as another driver's daemon publishes it."""
    return {
        "metadata": {"name": f"{node}-{driver}-0"},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}},
    }  # fmt: skip


def withdraw(kubeconfig: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``nvhook dra-plugin [options] --node-name NODE --withdraw``, as a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "nvhook", "dra-plugin", *options, "--node-name", NODE,
         "--kubeconfig", str(kubeconfig), "--withdraw"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_withdraw_deletes_the_node_s_slices_only(
    daemon: Callable[..., Daemon], kubeapi: KubeApiServer
) -> None:
    d = daemon()
    kubelet = d.start()
    wait_for(lambda: kubeapi.list("resourceslices"), "the slices")
    kubelet.close()
    assert d.stop() == 0
    kubeapi.put("resourceslices", pool_slice("node-b", DRIVER))
    proc = withdraw(d.kubeconfig)
    assert proc.returncode == 0, proc.stderr
    assert f"deleted 1 ResourceSlices of gpu.nvidia.com on node {NODE}" in proc.stdout
    assert [s["spec"]["nodeName"] for s in kubeapi.list("resourceslices")] == ["node-b"]


def test_imex_channels_health_is_unknown_and_gpus_healthy(
    mock_machine: Callable[..., Path], kubeapi: KubeApiServer, tmp_path: Path
) -> None:
    """No health source watches IMEX channels: UNKNOWN, saying so, rather than a guess."""
    from nvhook.dra.inventory import discover
    from nvhook.dra.kubeapi import connect
    from nvhook.dra.plugin import DraPlugin
    from nvhook.dra.server import UNKNOWN
    from nvhook.planner import Host

    host = Host(root=str(mock_machine("gb200-imex")))
    api = connect(str(kubeapi.kubeconfig(tmp_path / "kc")))
    plugin = DraPlugin(host, node=NODE, api=api)
    plugin._check_health(discover(host))
    _, states = plugin.health.snapshot()
    assert states["channel-0"] == (UNKNOWN, "no health check of IMEX channels")
    assert {states[f"gpu-{i}"] for i in range(4)} == {(HEALTHY, "")}


def test_an_api_server_that_fails_is_retried_with_backoff(
    daemon: Callable[..., Daemon], kubeapi: KubeApiServer
) -> None:
    """The driver serves kubelet while the API is down, and retries the publish 0.5 s, 1 s,
    2 s… apart, not every tick; once the API answers the pool is there."""
    kubeapi.fail("GET", "/resourceslices", status=503, times=3)
    d = daemon()
    kubelet = d.start()  # registration does not wait for the API: right after the 1st try
    started = time.monotonic()
    wait_for(lambda: kubeapi.list("resourceslices"), "the slices after the outage", 30)
    assert time.monotonic() - started >= 3.0  # retried 0.5 s, then 1 s, then 2 s later
    lists = [p for m, p in kubeapi.requests if m == "GET" and p.endswith("/resourceslices")]
    assert len(lists) == 4  # 3 failures, then the success
    assert kubeapi.pool_problems(DRIVER, NODE) == []
    kubelet.close()
