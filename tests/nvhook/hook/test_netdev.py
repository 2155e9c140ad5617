"""``nvhook-hook netdev``: host interfaces into a real network namespace, checks first."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvhook.discover.hooks import netdev_hook
from nvhook.errors import MissingExtraError, UsageError
from nvhook.hook.netdev import check_ifname, move_devices, parse_device
from oci.errors import ExitCode
from tests.nvhook.test_extras import hide
from tests.support.containers import Runc, make_bundle, require, require_root

from .conftest import HookRunner, state_json

_ids = itertools.count()


def _links(netns_pid: int | None = None) -> dict[str, str]:
    """name -> "UP"/"DOWN" of the interfaces in our namespace or in that of ``netns_pid``."""
    ip = require("ip")
    argv = [ip, "-j", "link", "show"]
    if netns_pid is not None:
        argv = [require("nsenter"), "-t", str(netns_pid), "-n", *argv]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return {link["ifname"]: link.get("operstate", "") for link in json.loads(out)}


@pytest.fixture
def make_link() -> Iterator[Callable[[str], str]]:
    """``make_link("veth"|"ifb") -> host name``: a fresh link with a unique name, removed after."""
    require_root()
    ip = require("ip")
    made: list[str] = []

    def make(kind: str) -> str:
        name = f"nvh{os.getpid() % 100000}x{next(_ids)}"
        if kind == "veth":
            cmd = [ip, "link", "add", name, "type", "veth", "peer", "name", name + "p"]
        else:
            cmd = [ip, "link", "add", name, "type", kind]
        subprocess.run(cmd, check=True, capture_output=True)
        made.append(name)
        return name

    yield make
    for name in made:  # links moved into a namespace died with it; the rest go now
        subprocess.run([ip, "link", "del", name], capture_output=True, check=False)


@pytest.mark.root
def test_moves_and_renames_veth_and_ifb(
    run_hook: HookRunner, netns_pid: int, make_link: Callable[[str], str]
) -> None:
    veth, ifb = make_link("veth"), make_link("ifb")
    proc = run_hook(
        ["netdev", "--device", f"{veth}=eth1", "--device", f"{ifb}=gpu0nic"],
        state=state_json("/nonexistent", pid=netns_pid),
    )
    assert proc.returncode == 0, proc.stderr
    inside, outside = _links(netns_pid), _links()
    assert {"eth1", "gpu0nic"} <= set(inside)
    assert veth not in inside and ifb not in inside
    assert veth not in outside and ifb not in outside
    assert veth + "p" in outside  # the peer stays on the host


@pytest.mark.root
def test_missing_host_interface_moves_nothing(
    run_hook: HookRunner, netns_pid: int, make_link: Callable[[str], str]
) -> None:
    veth = make_link("veth")
    proc = run_hook(
        ["netdev", "--device", f"{veth}=eth1", "--device", "nvhmissing0=eth2"],
        state=state_json("/nonexistent", pid=netns_pid),
    )
    assert proc.returncode == ExitCode.HOOK
    assert "host network interface not found: nvhmissing0" in proc.stderr
    assert veth in _links()
    assert "eth1" not in _links(netns_pid)


@pytest.mark.root
def test_name_taken_in_the_container_moves_nothing(
    run_hook: HookRunner, netns_pid: int, make_link: Callable[[str], str]
) -> None:
    ifb = make_link("ifb")
    proc = run_hook(
        ["netdev", "--device", f"{ifb}=lo"], state=state_json("/nonexistent", pid=netns_pid)
    )
    assert proc.returncode == ExitCode.HOOK
    assert "already has an interface named lo" in proc.stderr
    assert ifb in _links()


@pytest.mark.root
def test_container_sharing_the_host_namespace_is_refused(
    run_hook: HookRunner, make_link: Callable[[str], str], mountns_pid: int
) -> None:
    ifb = make_link("ifb")
    proc = run_hook(
        ["netdev", "--device", f"{ifb}=eth9"], state=state_json("/nonexistent", pid=mountns_pid)
    )
    assert proc.returncode == ExitCode.HOOK
    assert "shares the host's network namespace" in proc.stderr
    assert ifb in _links()


@pytest.mark.root
@pytest.mark.parametrize("who", ["host init", "the hook's runtime"])
def test_a_pid_that_is_not_the_containers_init_moves_nothing(
    run_hook: HookRunner, make_link: Callable[[str], str], who: str
) -> None:
    """A state naming the host's pid 1 (not the runtime's child) or the runtime itself (this
    process: not its own child, and in the host's mount namespace) moves nothing: the pid
    is checked before its network namespace is opened (hook mode's check_init)."""
    ifb = make_link("ifb")
    pid = 1 if who == "host init" else os.getpid()
    proc = run_hook(["netdev", "--device", f"{ifb}=eth9"], state=state_json("/x", pid=pid))
    assert (proc.returncode, proc.stderr.count("\n")) == (ExitCode.HOOK, 1), proc.stderr
    assert (
        f"pid {pid} of the container state is not a child of the runtime that started this "
        "hook: run nvhook-hook netdev as a createRuntime hook"
    ) in proc.stderr
    assert ifb in _links()


def test_dead_pid_is_an_error(run_hook: HookRunner) -> None:
    proc = run_hook(["netdev", "--device", "a=b"], state=state_json("/x", pid=2**22 + 12345))
    assert proc.returncode == ExitCode.HOOK
    assert (
        f"pid {2**22 + 12345} of the container state is gone (it exited): "
        "run nvhook-hook netdev as a createRuntime hook"
    ) in proc.stderr


@pytest.mark.runtime
@pytest.mark.root
def test_runc_create_runtime_hook(
    runc: Runc, tmp_path: Path, hook_bin: str, make_link: Callable[[str], str]
) -> None:
    """A real container: runc runs the createRuntime hook, the container sees its NIC."""
    ifb = make_link("ifb")
    hook = netdev_hook({ifb: "gpunic0"}, hook_path=hook_bin)
    bundle = make_bundle(
        tmp_path / "bundle",
        ["sh", "-c", "cat /sys/class/net/gpunic0/type"],
        hooks={hook.hook_name: [hook.to_oci()]},
    )
    proc = runc.run(bundle)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"  # ARPHRD_ETHER: the ifb device, renamed


@pytest.mark.parametrize(
    "spec",
    ["eth0", "=eth0", "eth0=", "a=b/c", "a=b:c", "a=b c", "a=" + "x" * 16, "..=a", "a=.."],
)
def test_parse_device_errors(spec: str) -> None:
    with pytest.raises(UsageError):
        parse_device(spec)


def test_names() -> None:
    assert parse_device("enp1s0f0=eth1") == ("enp1s0f0", "eth1")
    check_ifname("x" * 15)
    with pytest.raises(UsageError, match="1 to 15 bytes"):
        check_ifname("x" * 16)


def test_duplicates_are_usage_errors(run_hook: HookRunner) -> None:
    proc = run_hook(["netdev", "--device", "a=x", "--device", "b=x"], state=state_json("/x", pid=1))
    assert proc.returncode == ExitCode.USAGE
    assert "container name given more than once: x" in proc.stderr


def test_pyroute2_is_not_imported_with_the_hook_package() -> None:
    code = "import sys, nvhook.hook; print('pyroute2' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


@pytest.mark.root
def test_kernel_refusal_is_reported(run_hook: HookRunner, netns_pid: int) -> None:
    """The loopback device cannot change namespace (NETIF_F_NETNS_LOCAL): the kernel says no."""
    proc = run_hook(["netdev", "--device", "lo=nvhlo"], state=state_json("/x", pid=netns_pid))
    assert proc.returncode == ExitCode.HOOK
    assert f"cannot move host interface lo into the container (pid {netns_pid})" in proc.stderr
    assert "lo" in _links()


@pytest.mark.root
def test_netdev_names_its_missing_extra(monkeypatch: pytest.MonkeyPatch, netns_pid: int) -> None:
    hide(monkeypatch, "pyroute2")
    with pytest.raises(MissingExtraError) as caught:
        move_devices(netns_pid, [("nvhook-x0", "eth9")])
    assert str(caught.value).startswith(
        "nvhook-hook netdev needs pyroute2, which is not installed: pip install 'nvhook[netdev]'"
    )
    assert caught.value.exit_code == ExitCode.CONFIG
