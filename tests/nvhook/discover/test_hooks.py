"""nvhook.discover.hooks: the hooks nvhook injects, and the checker every one must pass."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from nvhook.discover.hooks import (
    HOOK_ENV,
    HOOK_PROGRAM,
    HOOK_TIMEOUT_S,
    LIFECYCLES,
    create_container_hook,
    default_hook_path,
    ldcache_hook,
    netdev_hook,
    symlinks_hook,
    validate_injected_hook,
)
from nvhook.errors import HookError, UsageError
from nvhook.hook.args import COMMANDS
from oci.cdi.edits import Edits, Hook


def test_builders(hook_bin: str) -> None:
    ld = ldcache_hook(["/usr/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib"],
                      hook_path=hook_bin)  # fmt: skip
    assert ld == Hook(
        hook_name="createContainer",
        path=hook_bin,
        args=(HOOK_PROGRAM, "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu",
              "--folder", "/lib"),
        env=HOOK_ENV,
        timeout=90,
    )  # fmt: skip
    links = symlinks_hook([("libcuda.so.1", "/usr/lib/libcuda.so")], hook_path=hook_bin)
    assert links.args == (HOOK_PROGRAM, "create-symlinks", "--link",
                          "libcuda.so.1::/usr/lib/libcuda.so")  # fmt: skip
    assert symlinks_hook({"/usr/lib/libcuda.so": "libcuda.so.1"}, hook_path=hook_bin) == links
    both = create_container_hook(links={"/usr/lib/libcuda.so": "libcuda.so.1"},
                                 folders=["/lib", "/lib"], hook_path=hook_bin)  # fmt: skip
    assert (both.hook_name, both.args) == ("createContainer", (
        HOOK_PROGRAM, "create-container", "--link", "libcuda.so.1::/usr/lib/libcuda.so",
        "--folder", "/lib"))  # fmt: skip
    assert create_container_hook(folders=["/lib"], hook_path=hook_bin).args[1:] == (
        "create-container", "--folder", "/lib")  # fmt: skip
    params = create_container_hook(params="/proc/driver/nvidia/params", folders=["/lib"],
                                   hook_path=hook_bin)  # fmt: skip
    assert params.args[1:] == ("create-container", "--params", "/proc/driver/nvidia/params",
                               "--folder", "/lib")  # fmt: skip
    validate_injected_hook(params)
    for bad in ("proc/driver/nvidia/params", "/proc/../etc/passwd", "/a\nb"):
        with pytest.raises(ValueError, match="params must be a clean absolute path"):
            create_container_hook(params=bad, hook_path=hook_bin)
    with pytest.raises(ValueError, match="needs params, a link or a folder"):
        create_container_hook(hook_path=hook_bin)
    net = netdev_hook({"enp1s0": "eth1"}, hook_path=hook_bin)
    assert (net.hook_name, net.args) == ("createRuntime", (HOOK_PROGRAM, "netdev", "--device",
                                                           "enp1s0=eth1"))  # fmt: skip
    for hook in (ld, links, both, net):
        assert hook.env == ("PATH=/usr/sbin:/usr/bin:/sbin:/bin",)
        assert hook.timeout == HOOK_TIMEOUT_S == 90
        assert hook.to_oci()["timeout"] == hook.to_dict()["timeout"] == 90
        validate_injected_hook(hook)
        validate_injected_hook(hook.to_dict())  # CDI form
        validate_injected_hook(hook.to_oci(), lifecycle=hook.hook_name)  # OCI form
        assert Edits.from_dict(Edits(hooks=(hook,)).to_dict()).hooks == (hook,)


def test_every_command_has_a_lifecycle() -> None:
    assert set(LIFECYCLES) == set(COMMANDS)


@pytest.mark.parametrize(
    "build",
    [
        lambda p: ldcache_hook(["/lib"], hook_path=p),
        lambda p: symlinks_hook([("a", "/b")], hook_path=p),
        lambda p: netdev_hook([("a", "b")], hook_path=p),
    ],
)
@pytest.mark.parametrize("path", ["nvhook-hook", "bin/nvhook-hook", "/usr/../bin/nvhook-hook", ""])
def test_hook_path_must_be_clean_and_absolute(build: Any, path: str) -> None:
    with pytest.raises(ValueError, match="clean absolute path"):
        build(path)


def test_builders_check_their_arguments(hook_bin: str) -> None:
    with pytest.raises(UsageError):
        ldcache_hook(["relative"], hook_path=hook_bin)
    with pytest.raises(UsageError):
        ldcache_hook(["/with space"], hook_path=hook_bin)
    with pytest.raises(UsageError):
        symlinks_hook([("t", "relative")], hook_path=hook_bin)
    with pytest.raises(UsageError):
        netdev_hook([("eth0", "a/b")], hook_path=hook_bin)
    with pytest.raises(ValueError, match="at least one"):
        ldcache_hook([], hook_path=hook_bin)


def _oci(hook_bin: str, **changes: Any) -> dict[str, Any]:
    hook = ldcache_hook(["/lib"], hook_path=hook_bin).to_oci()
    hook.update(changes)
    return {k: v for k, v in hook.items() if v is not None}


@pytest.mark.parametrize(
    ("changes", "lifecycle", "message"),
    [
        ({"env": None}, "createContainer", "env is missing"),
        ({"env": []}, "createContainer", "env is missing"),
        ({"env": [*HOOK_ENV, "LD_PRELOAD=/x.so"]}, "createContainer", "env must be exactly"),
        ({"env": ["PATH=/usr/local/bin:/usr/bin"]}, "createContainer", "env must be exactly"),
        ({}, "createRuntime", "update-ldcache must run at createContainer"),
        ({"path": "nvhook-hook"}, "createContainer", "is not absolute"),
        ({"path": "/usr/bin/../bin/nvhook-hook"}, "createContainer", "is not clean"),
        ({"args": ["sh", "-c", "x"]}, "createContainer", "do not start with nvhook-hook"),
        ({"args": ["nvhook-hook", "rm-rf"]}, "createContainer", "do not start with nvhook-hook"),
        ({"timeout": None}, "createContainer", "timeout must be 90 .seconds., got None"),
        ({"timeout": 3600}, "createContainer", "timeout must be 90 .seconds., got 3600"),
        ({"timeout": 90.0}, "createContainer", "timeout must be 90 .seconds., got 90.0"),
    ],
)
def test_validate_refuses(
    hook_bin: str, changes: dict[str, Any], lifecycle: str, message: str
) -> None:
    with pytest.raises(HookError, match=message):
        validate_injected_hook(_oci(hook_bin, **changes), lifecycle=lifecycle)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"#!{sys.executable}\nfrom nvhook.hook.dispatch import main\n", "isolated"),
        (f"#!{sys.executable} -E\n", "isolated"),
        (f"#!{sys.executable} --I\n", "isolated"),
        ("#!/usr/bin/env python3 -I\n", "isolated"),
        ("#!python3 -I\n", "not an absolute path"),
        ("echo hi\n", "neither a script nor a native executable"),
    ],
)
def test_validate_inspects_the_launcher(tmp_path: Path, text: str, message: str) -> None:
    launcher = tmp_path / "nvhook-hook"
    launcher.write_text(text)
    launcher.chmod(0o755)
    with pytest.raises(HookError, match=message):
        validate_injected_hook(ldcache_hook(["/lib"], hook_path=str(launcher)))


def test_validate_launcher_missing_or_not_executable(tmp_path: Path) -> None:
    missing = ldcache_hook(["/lib"], hook_path=str(tmp_path / "nvhook-hook"))
    with pytest.raises(HookError, match="cannot read the launcher"):
        validate_injected_hook(missing)
    validate_injected_hook(missing, check_launcher=False)  # e.g. a spec for another host
    (tmp_path / "nvhook-hook").write_text(f"#!{sys.executable} -I\n")
    with pytest.raises(HookError, match="not executable"):
        validate_injected_hook(missing)


def test_validate_lists_every_problem_on_one_line(tmp_path: Path) -> None:
    bad = {"path": "rel", "args": ["x"], "env": None}
    with pytest.raises(HookError) as e:
        validate_injected_hook(bad, lifecycle="createContainer")
    assert str(e.value).count(";") == 3 and "\n" not in str(e.value)  # path, args, env, timeout


def test_the_timeout_lets_ldconfig_time_out_first_and_beats_the_kubelet() -> None:
    """runc kills a hook still running after HOOK_TIMEOUT_S (tests/e2e: real runc does)."""
    from nvhook.hook.update_ldcache import LDCONFIG_TIMEOUT_S

    assert LDCONFIG_TIMEOUT_S + 20 <= HOOK_TIMEOUT_S < 120  # kubelet: --runtime-request-timeout


def test_default_hook_path() -> None:
    path = default_hook_path()
    assert path.startswith("/") and path.endswith("/nvhook-hook")
    assert Path(path).parent == Path(sys.executable).parent.absolute()
