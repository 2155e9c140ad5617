"""``nvhook-hook update-ldcache``: a working cache for any image, and no way out of the rootfs."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from nvhook.discover.hooks import ldcache_hook
from nvhook.errors import HookError
from nvhook.hook.update_ldcache import (
    CONF_PATH,
    INCLUDE_LINE,
    default_ldconfig,
    procfs_mounts_under,
    update_ldcache,
)
from oci.errors import ExitCode
from tests.support.containers import Runc, make_bundle, require, require_root

from .conftest import (
    LIBDIR,
    Flipper,
    HookRunner,
    cache_entries,
    escape_forms,
    snapshot,
    state_json,
    write_bundle,
)

if TYPE_CHECKING:
    from nvhook.rootfs.safepath import Impl

SONAME = "libnvhooktest.so.1"
ARGS = ["update-ldcache", "--folder", LIBDIR]


@pytest.fixture
def rootfs(tmp_path: Path, test_library: Path) -> Path:
    """A distroless-like rootfs: no /etc at all, one library in LIBDIR."""
    root = tmp_path / "bundle" / "rootfs"
    lib = root / LIBDIR.lstrip("/")
    lib.mkdir(parents=True)
    shutil.copy(test_library, lib / test_library.name)
    write_bundle(tmp_path / "bundle", root)
    return root


@pytest.fixture
def host(tmp_path: Path, test_library: Path) -> Path:
    """A stand-in for host files an image might aim at: a conf dir, a cache, a library dir
    holding a library without its SONAME link (ldconfig would add one if it got there)."""
    top = tmp_path / "host"
    (top / "confd").mkdir(parents=True)
    (top / "confd" / "host.conf").write_text("/host/lib\n")
    (top / "ld.so.cache").write_bytes(b"host cache, do not touch\n")
    (top / "etc").mkdir()
    (top / "etc" / "ld.so.conf").write_text("host conf\n")
    (top / "lib").mkdir()
    shutil.copy(test_library, top / "lib" / test_library.name)
    return top


def test_image_without_ld_setup_gets_one(run_hook: HookRunner, rootfs: Path, impl: Impl) -> None:
    proc = run_hook(ARGS, bundle=rootfs.parent, impl=impl)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    etc = rootfs / "etc"
    assert (etc / "ld.so.conf").read_text() == f"{INCLUDE_LINE}\n"
    assert (rootfs / CONF_PATH.lstrip("/")).read_text().splitlines()[1:] == [LIBDIR]
    assert cache_entries(etc / "ld.so.cache")[SONAME] == f"{LIBDIR}/{SONAME}"
    assert (rootfs / LIBDIR.lstrip("/") / SONAME).readlink() == Path(f"{SONAME}.0")
    # idempotent: a second run changes nothing in our files and keeps the cache right
    conf = (rootfs / CONF_PATH.lstrip("/")).read_bytes()
    again = run_hook(ARGS, bundle=rootfs.parent, impl=impl)
    assert again.returncode == 0, again.stderr
    assert (rootfs / CONF_PATH.lstrip("/")).read_bytes() == conf
    assert cache_entries(etc / "ld.so.cache")[SONAME] == f"{LIBDIR}/{SONAME}"


def test_existing_ld_so_conf_is_kept(run_hook: HookRunner, rootfs: Path) -> None:
    (rootfs / "etc").mkdir()
    debian = b"include /etc/ld.so.conf.d/*.conf\n\n"
    (rootfs / "etc" / "ld.so.conf").write_bytes(debian)
    proc = run_hook(ARGS, bundle=rootfs.parent)
    assert proc.returncode == 0, proc.stderr
    assert (rootfs / "etc" / "ld.so.conf").read_bytes() == debian
    assert SONAME in cache_entries(rootfs / "etc" / "ld.so.cache")


def test_ld_so_conf_without_include_still_gets_the_folders(
    run_hook: HookRunner, rootfs: Path
) -> None:
    (rootfs / "etc").mkdir()
    (rootfs / "etc" / "ld.so.conf").write_text("/opt/lib\n")
    proc = run_hook(ARGS, bundle=rootfs.parent)
    assert proc.returncode == 0, proc.stderr
    assert "does not include /etc/ld.so.conf.d" in proc.stderr
    assert (rootfs / "etc" / "ld.so.conf").read_text() == "/opt/lib\n"
    assert SONAME in cache_entries(rootfs / "etc" / "ld.so.cache")


def test_missing_folder_is_noted_not_fatal(run_hook: HookRunner, rootfs: Path) -> None:
    proc = run_hook([*ARGS, "--folder", "/opt/nothing"], bundle=rootfs.parent)
    assert proc.returncode == 0, proc.stderr
    assert "/opt/nothing does not resolve in the rootfs" in proc.stderr
    assert SONAME in cache_entries(rootfs / "etc" / "ld.so.cache")


def test_unusable_etc_is_skipped_with_a_reason(run_hook: HookRunner, rootfs: Path) -> None:
    (rootfs / "etc").write_text("not a directory\n")
    proc = run_hook(ARGS, bundle=rootfs.parent)
    assert proc.returncode == 0
    assert "skipped: cannot set up the ld cache" in proc.stderr
    assert "/etc: Not a directory" in proc.stderr


def test_failing_ldconfig_is_skipped_with_a_reason(run_hook: HookRunner, rootfs: Path) -> None:
    false = require("false")
    proc = run_hook([*ARGS, "--ldconfig", false], bundle=rootfs.parent)
    assert proc.returncode == 0
    assert f"skipped: {false} exited with status 1" in proc.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["update-ldcache"], ExitCode.USAGE, "at least one --folder"),
        (["update-ldcache", "--folder", "lib"], ExitCode.USAGE, "absolute path"),
        (["update-ldcache", "--folder", "/a b"], ExitCode.USAGE, "without spaces"),
        (["update-ldcache", "--folder", "/a/../b"], ExitCode.USAGE, ". or .."),
        (["update-ldcache", "--folder=/x", "--bogus"], ExitCode.USAGE, "unknown option '--bogus'"),
        ([*ARGS, "--ldconfig", "ldconfig"], ExitCode.HOOK, "must be an absolute path"),
        ([*ARGS, "--ldconfig", "/nonexistent/ldconfig"], ExitCode.HOOK, "/nonexistent/ldconfig"),
    ],
)
def test_usage_errors(
    run_hook: HookRunner, rootfs: Path, args: list[str], code: int, message: str
) -> None:
    proc = run_hook(args, bundle=rootfs.parent)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2


def test_bad_state_or_bundle(run_hook: HookRunner, tmp_path: Path) -> None:
    proc = run_hook(ARGS, state="not json")
    assert proc.returncode == ExitCode.INVALID_SPEC
    assert "container state on stdin" in proc.stderr
    proc = run_hook(ARGS, bundle=tmp_path)
    assert proc.returncode == ExitCode.INVALID_SPEC
    assert f"{tmp_path}/config.json" in proc.stderr


def test_default_ldconfig_is_an_absolute_host_binary() -> None:
    path = default_ldconfig()
    assert path.startswith("/") and Path(path).is_file()


# --------------------------------------------------------------------------- attacks

ATTACKS = {
    # name: (path in the rootfs made a symlink, host target, symlink forms to try)
    "confd": ("etc/ld.so.conf.d", "confd", (0, 1, 2)),
    "cache": ("etc/ld.so.cache", "ld.so.cache", (0, 1)),
    "libdir": (LIBDIR.lstrip("/"), "lib", (0, 1, 2)),
    "etc": ("etc", "etc", (0, 1, 2)),
}
CASES = [(name, form) for name, (_, _, forms) in ATTACKS.items() for form in forms]
FORM_NAMES = ("absolute", "dotdot", "proc-self-root")


@pytest.mark.parametrize(("attack", "form"), CASES, ids=[f"{a}-{FORM_NAMES[f]}" for a, f in CASES])
def test_symlinks_to_the_host_are_not_followed(
    run_hook: HookRunner, rootfs: Path, host: Path, impl: Impl, attack: str, form: int
) -> None:
    inside, target, _ = ATTACKS[attack]
    link = rootfs / inside
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_dir():
        shutil.rmtree(link)
    link.symlink_to(escape_forms(rootfs, host / target)[form])
    before = snapshot(host)
    proc = run_hook(ARGS, bundle=rootfs.parent, impl=impl)
    assert snapshot(host) == before
    if proc.returncode == ExitCode.HOOK:
        assert f"/{inside}" in proc.stderr  # refused, naming the symlink
    else:
        assert proc.returncode == 0, proc.stderr
    if attack == "cache":  # written inside: the link is replaced by the rootfs's own cache
        assert not link.is_symlink()
        assert cache_entries(link)[SONAME] == f"{LIBDIR}/{SONAME}"


def test_control_the_attack_tree_reaches_the_host_when_followed(rootfs: Path, host: Path) -> None:
    """Control: each symlink form used above does lead to the host when followed naively."""
    for form in range(3):
        link = rootfs / "etc" / f"probe{form}"
        link.parent.mkdir(exist_ok=True)
        link.symlink_to(escape_forms(rootfs, host / "confd")[form])
        assert (link / "host.conf").read_text() == "/host/lib\n"


def test_racing_swaps_never_escape(rootfs: Path, host: Path, impl: Impl) -> None:
    """/etc/ld.so.conf.d and the library folder flip between directories and symlinks to
    the host while the hook runs again and again."""
    (rootfs / "etc" / "ld.so.conf.d").mkdir(parents=True)
    before = snapshot(host)
    outcomes: dict[str, int] = {}
    messages: list[str] = []
    targets = {
        rootfs / "etc" / "ld.so.conf.d": escape_forms(rootfs, host / "confd"),
        rootfs / LIBDIR.lstrip("/"): escape_forms(rootfs, host / "lib"),
    }
    with Flipper(targets, min_swaps=300) as flipper:
        for _ in range(25):
            try:
                done = update_ldcache(str(rootfs), [LIBDIR], impl=impl, log=messages.append)
                key = "updated" if done else "skipped"
            except HookError:
                key = "refused"
            outcomes[key] = outcomes.get(key, 0) + 1
    assert flipper.swaps >= 300
    assert snapshot(host) == before, outcomes
    assert outcomes.get("updated", 0) + outcomes.get("refused", 0) > 0, (outcomes, messages[:3])


# --------------------------------------------------------------------------- procfs in the rootfs


def _in_private_mount_ns_with_proc(
    rootfs: Path, argv: list[str], stdin: str
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in a private mount namespace where a procfs is mounted at rootfs/proc,
    as runc leaves it at createContainer time."""
    unshare = require("unshare")
    (rootfs / "proc").mkdir(exist_ok=True)
    script = 'mount -t proc proc "$0" && exec "$@"'
    return subprocess.run(
        [
            unshare,
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            str(rootfs / "proc"),
            *argv,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A host process: /proc/<its pid>/root is the host's root."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.mark.root
def test_procfs_magic_links_in_ld_so_conf_stay_inside(
    hook_bin: str, rootfs: Path, host: Path, sleeper: int
) -> None:
    """ld.so.conf listing /proc/<pid>/root/<host dir>: a chrooted ldconfig would create links
    there (the control shows it); the hook runs it with the container's /proc detached."""
    require_root()
    (rootfs / "etc").mkdir()
    (rootfs / "etc" / "ld.so.conf").write_text(
        f"{INCLUDE_LINE}\n/proc/{sleeper}/root{host}/lib\n/proc/self/root{host}/lib\n"
    )
    before = snapshot(host)
    proc = _in_private_mount_ns_with_proc(rootfs, [hook_bin, *ARGS], state_json(rootfs.parent))
    assert proc.returncode == 0, proc.stderr
    assert snapshot(host) == before
    assert SONAME in cache_entries(rootfs / "etc" / "ld.so.cache")

    control = _in_private_mount_ns_with_proc(rootfs, [default_ldconfig(), "-r", str(rootfs)], "")
    assert control.returncode == 0, control.stderr
    assert (host / "lib" / SONAME).is_symlink()  # the attack is real without the detach


@pytest.mark.root
def test_procfs_magic_link_as_conf_dir_is_refused(
    hook_bin: str, rootfs: Path, host: Path, sleeper: int
) -> None:
    require_root()
    (rootfs / "etc").mkdir()
    (rootfs / "etc" / "ld.so.conf.d").symlink_to(f"/proc/{sleeper}/root{host}/confd")
    before = snapshot(host)
    proc = _in_private_mount_ns_with_proc(rootfs, [hook_bin, *ARGS], state_json(rootfs.parent))
    assert proc.returncode == ExitCode.HOOK, proc.stderr
    assert "/etc/ld.so.conf.d" in proc.stderr
    assert snapshot(host) == before


def test_procfs_mounts_under() -> None:
    assert "/proc" in procfs_mounts_under("/")
    assert procfs_mounts_under("/nonexistent-rootfs") == []


# --------------------------------------------------------------------------- real runc


@pytest.mark.runtime
@pytest.mark.root
def test_runc_container_sees_the_cache(
    runc: Runc, tmp_path: Path, hook_bin: str, test_library: Path
) -> None:
    hook = ldcache_hook([LIBDIR], hook_path=hook_bin)
    bundle = make_bundle(
        tmp_path / "bundle",
        ["sh", "-c", f"grep -q {SONAME} /etc/ld.so.cache && readlink {LIBDIR}/{SONAME}"],
        hooks={hook.hook_name: [hook.to_oci()]},
    )
    lib = bundle / "rootfs" / LIBDIR.lstrip("/")
    lib.mkdir(parents=True)
    shutil.copy(test_library, lib / test_library.name)
    proc = runc.run(bundle)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{SONAME}.0"
    assert cache_entries(bundle / "rootfs" / "etc" / "ld.so.cache")[SONAME] == f"{LIBDIR}/{SONAME}"


@pytest.mark.runtime
@pytest.mark.root
def test_runc_hostile_ld_so_conf_cannot_reach_the_host(
    runc: Runc, tmp_path: Path, hook_bin: str, host: Path
) -> None:
    """The image lists /proc/<n>/root/<host dir> in ld.so.conf; inside runc's createContainer
    stage /proc/1/root is runc init's root, the host's filesystem. Control: plain
    ``ldconfig -r`` as the hook does create links on the host."""
    conf = INCLUDE_LINE + "\n" + "".join(f"/proc/{n}/root{host}/lib\n" for n in range(1, 8))

    def bundle_with(hook: dict[str, Any], name: str) -> Path:
        bundle = make_bundle(tmp_path / name, ["true"], hooks={"createContainer": [hook]})
        (bundle / "rootfs" / "etc" / "ld.so.conf").write_text(conf)
        return bundle

    before = snapshot(host)
    ours = ldcache_hook([LIBDIR], hook_path=hook_bin).to_oci()
    proc = runc.run(bundle_with(ours, "ours"))
    assert proc.returncode == 0, proc.stderr
    assert snapshot(host) == before

    plain_bundle = tmp_path / "plain"
    plain = {"path": default_ldconfig(), "args": ["ldconfig", "-r", str(plain_bundle / "rootfs")]}
    proc = runc.run(bundle_with(plain, "plain"))
    assert proc.returncode == 0, proc.stderr
    assert (host / "lib" / SONAME).is_symlink()


def test_library_call(rootfs: Path) -> None:
    """update_ldcache as a function (what the race test and the bench use)."""
    messages: list[str] = []
    assert update_ldcache(str(rootfs), [LIBDIR], impl="walk", log=messages.append)
    assert messages == []
    assert SONAME in cache_entries(rootfs / "etc" / "ld.so.cache")


def test_fifo_as_ld_so_conf_is_skipped_without_hanging(run_hook: HookRunner, rootfs: Path) -> None:
    (rootfs / "etc").mkdir()
    os.mkfifo(rootfs / "etc" / "ld.so.conf")
    proc = run_hook(ARGS, bundle=rootfs.parent, timeout=20)
    assert proc.returncode == 0
    assert "skipped: cannot set up the ld cache" in proc.stderr
    assert "/etc/ld.so.conf: not a regular file" in proc.stderr
