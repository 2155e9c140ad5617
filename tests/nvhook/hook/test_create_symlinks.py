"""``nvhook-hook create-symlinks``: idempotent links, conflicts named, escapes refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nvhook.errors import HookError, UsageError
from nvhook.hook.create_symlinks import create_symlinks, parse_link, target_escapes
from oci.errors import ExitCode

from .conftest import HookRunner, escape_forms, snapshot, write_bundle

if TYPE_CHECKING:
    from nvhook.rootfs.safepath import Impl

LIB = "/usr/lib/x86_64-linux-gnu"


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    root = tmp_path / "bundle" / "rootfs"
    (root / LIB.lstrip("/")).mkdir(parents=True)
    (root / LIB.lstrip("/") / "libcuda.so.1").write_text("")
    write_bundle(tmp_path / "bundle", root)
    return root


def _link(rootfs: Path, path: str) -> Path:
    return rootfs / path.lstrip("/")


def test_creates_links_and_parents_idempotently(
    run_hook: HookRunner, rootfs: Path, impl: Impl
) -> None:
    args = [
        "create-symlinks",
        "--link", f"libcuda.so.1::{LIB}/libcuda.so",
        "--link=/usr/bin/nvidia-smi::/usr/local/bin/nvidia-smi",
        "--link", "../../lib/x86_64-linux-gnu/libcuda.so.1::/opt/new/dir/libcuda.so",
    ]  # fmt: skip
    for _ in range(2):  # the second run finds every link in place
        proc = run_hook(args, bundle=rootfs.parent, impl=impl)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
    assert _link(rootfs, f"{LIB}/libcuda.so").readlink() == Path("libcuda.so.1")
    assert _link(rootfs, "/usr/local/bin/nvidia-smi").readlink() == Path("/usr/bin/nvidia-smi")
    assert _link(rootfs, "/opt/new/dir/libcuda.so").is_symlink()


def test_existing_different_link_is_an_error_naming_it(
    run_hook: HookRunner, rootfs: Path, impl: Impl
) -> None:
    _link(rootfs, f"{LIB}/libcuda.so").symlink_to("libcuda.so.0")
    proc = run_hook(
        ["create-symlinks", "--link", f"libcuda.so.1::{LIB}/libcuda.so"],
        bundle=rootfs.parent,
        impl=impl,
    )
    assert proc.returncode == ExitCode.HOOK
    assert f"{LIB}/libcuda.so in {rootfs} already points to libcuda.so.0, not libcuda.so.1" in (
        proc.stderr
    )
    assert _link(rootfs, f"{LIB}/libcuda.so").readlink() == Path("libcuda.so.0")


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_existing_non_link_is_an_error(rootfs: Path, impl: Impl, kind: str) -> None:
    path = _link(rootfs, f"{LIB}/libcuda.so")
    path.write_text("") if kind == "file" else path.mkdir()
    with pytest.raises(HookError, match=f"{LIB}/libcuda.so in .* exists and is"):
        create_symlinks(str(rootfs), [("libcuda.so.1", f"{LIB}/libcuda.so")], impl=impl)


@pytest.mark.parametrize(
    "spec",
    [
        "/../../etc/shadow::/usr/lib/x",
        "../../../../etc::/usr/lib/y",
        "../../..::/usr/lib/z",
        "a/../../../../b::/usr/lib/w",
    ],
)
def test_targets_resolving_outside_are_refused(
    run_hook: HookRunner, rootfs: Path, impl: Impl, spec: str
) -> None:
    proc = run_hook(["create-symlinks", "--link", spec], bundle=rootfs.parent, impl=impl)
    assert proc.returncode == ExitCode.HOOK
    target, _, link = spec.partition("::")
    assert f"refusing link {link} -> {target}" in proc.stderr
    assert not _link(rootfs, link).is_symlink()


def test_checks_come_before_any_change(rootfs: Path, impl: Impl) -> None:
    links = [("libcuda.so.1", f"{LIB}/libcuda.so"), ("../../../../etc", "/usr/lib/y")]
    with pytest.raises(HookError, match="refusing link /usr/lib/y"):
        create_symlinks(str(rootfs), links, impl=impl)
    assert not _link(rootfs, f"{LIB}/libcuda.so").is_symlink()


def test_escape_is_judged_from_the_physical_directory(rootfs: Path, impl: Impl) -> None:
    """/opt/l is a symlink to /: a target two levels up from /opt/l/x escapes."""
    (rootfs / "opt").mkdir()
    (rootfs / "opt" / "l").symlink_to("/")
    with pytest.raises(HookError, match="outside the container's root"):
        create_symlinks(str(rootfs), [("../../x", "/opt/l/x/link")], impl=impl)
    # lexically from /opt/l/x it would have stayed inside
    assert not target_escapes("../../x", "/opt/l/x")


def test_link_directory_symlinked_to_the_host_stays_inside(
    rootfs: Path, tmp_path: Path, impl: Impl
) -> None:
    host = tmp_path / "host"
    host.mkdir()
    before = snapshot(host)
    for i, form in enumerate(escape_forms(rootfs, host)):
        (rootfs / f"d{i}").symlink_to(form)
        inside = rootfs / str(host).lstrip("/")
        if i < 2:  # absolute and ../.. forms resolve to this path inside the rootfs
            inside.mkdir(parents=True, exist_ok=True)
        try:
            create_symlinks(str(rootfs), [("t", f"/d{i}/l{i}")], impl=impl)
            assert (inside / f"l{i}").is_symlink()
        except HookError as e:
            assert f"/d{i} is a symlink to" in str(e)
    assert snapshot(host) == before


def test_same_link_twice_with_different_targets(rootfs: Path) -> None:
    with pytest.raises(HookError, match="asked to point to both a and b"):
        create_symlinks(str(rootfs), [("a", "/x"), ("b", "/x")])


def test_race_with_an_identical_link_is_fine(rootfs: Path, impl: Impl) -> None:
    """An identical link that is already there (a second run, another hook) is accepted."""
    _link(rootfs, f"{LIB}/libcuda.so").symlink_to("libcuda.so.1")
    assert create_symlinks(str(rootfs), [("libcuda.so.1", f"{LIB}/libcuda.so")], impl=impl) == []


@pytest.mark.parametrize(
    ("target", "directory", "escapes"),
    [
        ("libcuda.so.1", "/usr/lib", False),
        ("/usr/bin/x", "/usr/lib", False),
        ("../../etc", "/usr/lib", False),
        ("../../../etc", "/usr/lib", True),
        ("/../etc", "/usr/lib", True),
        ("./a/./../../..", "/usr", True),
        ("a/../b", "/", False),
        ("..", "/", True),
    ],
)
def test_target_escapes(target: str, directory: str, escapes: bool) -> None:
    assert target_escapes(target, directory) is escapes


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("libcuda.so", "TARGET::LINK"),
        ("::/usr/lib/x", "TARGET::LINK"),
        ("a::", "TARGET::LINK"),
        ("a::relative/x", "absolute path"),
        ("a::/usr/lib/", "absolute path to a file"),
        ("a::/usr/../lib/x", ". or .."),
    ],
)
def test_parse_link_errors(spec: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_link(spec)


def test_usage_error_exit_code(run_hook: HookRunner, rootfs: Path) -> None:
    proc = run_hook(["create-symlinks", "--link", "nope"], bundle=rootfs.parent)
    assert proc.returncode == ExitCode.USAGE
    assert "TARGET::LINK" in proc.stderr


# --device-link (create-container): DRI by-path links, made only where the node is there

BY_PATH = "/dev/dri/by-path"


def _dri_rootfs(rootfs: Path, *nodes: str) -> None:
    """``/dev/dri`` with the char nodes ``nodes`` (card1, renderD128...), as runc makes them."""
    from tests.support.containers import require_root

    require_root()
    dri = rootfs / "dev" / "dri"
    dri.mkdir(parents=True)
    for name in nodes:
        minor = int(name.removeprefix("renderD").removeprefix("card"))
        os.mknod(dri / name, 0o600 | stat.S_IFCHR, os.makedev(226, minor))


@pytest.mark.root
def test_device_links_only_for_nodes_the_container_has(
    run_hook: HookRunner, rootfs: Path, impl: Impl
) -> None:
    _dri_rootfs(rootfs, "card1", "renderD128")
    args = [
        "create-container",
        "--device-link", f"../card1::{BY_PATH}/pci-0000:c1:00.0-card",
        "--device-link", f"../renderD128::{BY_PATH}/pci-0000:c1:00.0-render",
        "--device-link", f"../card2::{BY_PATH}/pci-0000:01:00.0-card",  # another GPU's
        "--device-link", f"../renderD129::{BY_PATH}/pci-0000:01:00.0-render",
    ]  # fmt: skip
    for _ in range(2):  # idempotent
        proc = run_hook(args, bundle=rootfs.parent, impl=impl)
        assert proc.returncode == 0, proc.stderr
    by_path = rootfs / BY_PATH.lstrip("/")
    assert sorted(p.name for p in by_path.iterdir()) == [
        "pci-0000:c1:00.0-card",
        "pci-0000:c1:00.0-render",
    ]
    assert (by_path / "pci-0000:c1:00.0-card").readlink() == Path("../card1")
    assert stat.S_ISCHR((by_path / "pci-0000:c1:00.0-render").stat().st_mode)


@pytest.mark.root
def test_device_link_target_must_be_a_char_device_inside(
    rootfs: Path, tmp_path: Path, impl: Impl
) -> None:
    """A regular file, a fifo, a directory or a symlink at the node's name is not a device;
    a target climbing out of the root is never looked at on the host."""
    _dri_rootfs(rootfs)
    dri = rootfs / "dev" / "dri"
    (dri / "card1").write_text("")
    os.mkfifo(dri / "card2")
    (dri / "card3").mkdir()
    host_node = tmp_path / "card4"
    os.mknod(host_node, 0o600 | stat.S_IFCHR, os.makedev(226, 4))
    (dri / "card4").symlink_to(host_node)  # absolute: in-root it dangles
    escaping = "../" * 8 + str(host_node).lstrip("/")
    links = [(f"../card{n}", f"{BY_PATH}/pci-0000:0{n}:00.0-card") for n in (1, 2, 3, 4)]
    links.append((escaping, f"{BY_PATH}/pci-0000:05:00.0-card"))
    assert create_symlinks(str(rootfs), [], device_links=links, impl=impl) == []
    assert not (dri / "by-path").exists()


@pytest.mark.root
def test_device_links_beside_plain_links_conflict_is_named(rootfs: Path, impl: Impl) -> None:
    _dri_rootfs(rootfs, "card1")
    (rootfs / "dev" / "dri" / "by-path").mkdir()
    (rootfs / "dev" / "dri" / "by-path" / "pci-0000:c1:00.0-card").symlink_to("../card9")
    with pytest.raises(HookError, match=r"pci-0000:c1:00.0-card .* already points to \.\./card9"):
        create_symlinks(
            str(rootfs),
            [("libcuda.so.1", f"{LIB}/libcuda.so")],
            device_links=[("../card1", f"{BY_PATH}/pci-0000:c1:00.0-card")],
            impl=impl,
        )
    assert not _link(rootfs, f"{LIB}/libcuda.so").is_symlink()  # checked before any is made
