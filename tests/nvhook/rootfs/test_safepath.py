"""nvhook.rootfs.safepath: both implementations against a hostile rootfs.

The "host" is a directory next to the rootfs; symlinks in the rootfs point at it in every
form an image can use. Whatever the form, nothing may appear in or change under it.
"""

from __future__ import annotations

import errno
import itertools
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nvhook.errors import HookError
from nvhook.rootfs import safepath
from nvhook.rootfs.safepath import RootFd, open_root
from tests.nvhook.hook.conftest import Flipper, escape_forms, snapshot
from tests.support.containers import require, require_root

if TYPE_CHECKING:
    from nvhook.rootfs.safepath import Impl


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    """(rootfs, host): an empty host dir with a file in it, and a rootfs with /etc."""
    host = tmp_path / "host"
    (host / "dir").mkdir(parents=True)
    (host / "dir" / "file").write_text("host file\n")
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "usr" / "lib").mkdir(parents=True)
    return rootfs, host


FORMS = ("absolute", "dotdot", "proc-self-root")


@pytest.mark.parametrize("form", FORMS)
def test_symlinked_dir_never_reaches_the_host(
    world: tuple[Path, Path], impl: Impl, form: str
) -> None:
    rootfs, host = world
    (rootfs / "etc" / "d").symlink_to(escape_forms(rootfs, host / "dir")[FORMS.index(form)])
    before = snapshot(host)
    with open_root(str(rootfs), impl=impl) as root:
        with pytest.raises((HookError, FileNotFoundError)):
            root.write_file("/etc/d/new", b"x")
        with pytest.raises(HookError, match="/etc/d is a symlink to"):
            root.mkdirs("/etc/d/sub")
        with pytest.raises(FileNotFoundError):
            root.read_file("/etc/d/file")
        with pytest.raises(FileNotFoundError):
            root.open("/etc/d/new", os.O_WRONLY | os.O_CREAT)
    assert snapshot(host) == before


@pytest.mark.parametrize("form", ("absolute", "dotdot"))
def test_symlinked_dir_resolves_inside_the_root(
    world: tuple[Path, Path], impl: Impl, form: str
) -> None:
    rootfs, host = world
    (rootfs / "etc" / "d").symlink_to(escape_forms(rootfs, host / "dir")[FORMS.index(form)])
    inside = rootfs / str(host / "dir").lstrip("/")
    inside.mkdir(parents=True)
    before = snapshot(host)
    with open_root(str(rootfs), impl=impl) as root:
        assert root.realpath("/etc/d") == str(host / "dir")
        root.mkdirs("/etc/d/a/b")
        root.write_file("/etc/d/a/b/f", b"inside")
        assert root.read_file("/etc/d/a/b/f") == b"inside"
    assert (inside / "a" / "b" / "f").read_bytes() == b"inside"
    assert snapshot(host) == before


def test_dotdot_is_clamped_at_the_root(world: tuple[Path, Path], impl: Impl) -> None:
    rootfs, _ = world
    (rootfs / "usr" / "lib" / "up").symlink_to("../../../../../../../..")
    with open_root(str(rootfs), impl=impl) as root:
        assert root.realpath("/../../..") == "/"
        assert root.realpath("/usr/lib/up") == "/"
        assert root.realpath("/usr/lib/up/etc") == "/etc"
        assert root.realpath("usr/../usr/./lib") == "/usr/lib"
        root.write_file("/usr/lib/up/../../etc/f", b"1")
    assert (rootfs / "etc" / "f").read_bytes() == b"1"


def test_symlink_chain_and_dotdot_after_a_link(world: tuple[Path, Path], impl: Impl) -> None:
    rootfs, _ = world
    (rootfs / "a" / "b" / "c").mkdir(parents=True)
    (rootfs / "x").symlink_to("a/b/c")  # x/.. is a/b, not /
    (rootfs / "y").symlink_to("/x")
    with open_root(str(rootfs), impl=impl) as root:
        assert root.realpath("/y") == "/a/b/c"
        assert root.realpath("/y/..") == "/a/b"
        assert root.readlink("/y") == "/x"


def test_symlink_loop_is_a_clear_error(world: tuple[Path, Path], impl: Impl) -> None:
    rootfs, _ = world
    (rootfs / "etc" / "l1").symlink_to("l2")
    (rootfs / "etc" / "l2").symlink_to("/etc/l1")
    with open_root(str(rootfs), impl=impl) as root:
        with pytest.raises(HookError, match=r"refusing /etc/l1 in .*: a symlink loop"):
            root.write_file("/etc/l1/x", b"")
        with pytest.raises(HookError, match="symlink loop"):
            root.realpath("/etc/l2")


def test_dangling_links(world: tuple[Path, Path], impl: Impl) -> None:
    rootfs, _ = world
    (rootfs / "etc" / "gone").symlink_to("/nowhere/at/all")
    with open_root(str(rootfs), impl=impl) as root:
        assert root.lexists("/etc/gone")
        assert root.readlink("/etc/gone") == "/nowhere/at/all"
        with pytest.raises(FileNotFoundError) as e:
            root.realpath("/etc/gone")
        assert e.value.filename == "/etc/gone"
        with pytest.raises(HookError, match="/etc/gone is a symlink to /nowhere/at/all"):
            root.mkdirs("/etc/gone/x")
        # a file written at the link's path replaces the link, never its target
        root.write_file("/etc/gone", b"now a file")
    assert (rootfs / "etc" / "gone").read_bytes() == b"now a file"
    assert not (rootfs / "nowhere").exists()


def test_write_file_replaces_a_symlink_to_a_host_file(world: tuple[Path, Path], impl: Impl) -> None:
    rootfs, host = world
    (rootfs / "etc" / "ld.so.cache").symlink_to(host / "dir" / "file")
    before = snapshot(host)
    with open_root(str(rootfs), impl=impl) as root:
        root.write_file("/etc/ld.so.cache", b"cache", 0o640)
        (rootfs / "etc" / "conf").symlink_to(host / "dir" / "file")
        root.write_file("/etc/conf", b"no fsync", sync=False)  # the same, without the fsync
    target = rootfs / "etc" / "ld.so.cache"
    assert not target.is_symlink()
    assert target.read_bytes() == b"cache"
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)
    assert not (rootfs / "etc" / "conf").is_symlink()
    assert (rootfs / "etc" / "conf").read_bytes() == b"no fsync"
    assert snapshot(host) == before
    assert sorted(p.name for p in (rootfs / "etc").iterdir()) == ["conf", "ld.so.cache"]  # no temp


def test_symlink_readlink_lstat_open(world: tuple[Path, Path], impl: Impl) -> None:
    rootfs, _ = world
    with open_root(str(rootfs), impl=impl) as root:
        root.symlink("libfoo.so.1", "/usr/lib/libfoo.so")
        with pytest.raises(FileExistsError):
            root.symlink("other", "/usr/lib/libfoo.so")
        assert root.readlink("/usr/lib/libfoo.so") == "libfoo.so.1"
        assert root.lstat("/usr/lib/libfoo.so").st_mode & 0o170000 == 0o120000
        fd = root.open("/usr/lib/libfoo.so", os.O_WRONLY | os.O_CREAT, 0o600)  # creates the target
        os.close(fd)
        with pytest.raises(OSError) as e:
            root.open("/usr/lib/libfoo.so", os.O_RDONLY | os.O_NOFOLLOW)
        assert e.value.errno == errno.ELOOP
        assert root.realpath("/usr/lib/libfoo.so") == "/usr/lib/libfoo.so.1"
    assert (rootfs / "usr" / "lib" / "libfoo.so.1").is_file()


def test_read_file_refuses_a_fifo_without_blocking(world: tuple[Path, Path], impl: Impl) -> None:
    rootfs, _ = world
    os.mkfifo(rootfs / "etc" / "ld.so.conf")
    with (
        open_root(str(rootfs), impl=impl) as root,
        pytest.raises(OSError, match="not a regular file"),
    ):
        root.read_file("/etc/ld.so.conf")


def test_not_a_directory(world: tuple[Path, Path], impl: Impl) -> None:
    rootfs, _ = world
    (rootfs / "etc" / "file").write_text("")
    with open_root(str(rootfs), impl=impl) as root:
        with pytest.raises(NotADirectoryError):
            root.mkdirs("/etc/file/sub")
        with pytest.raises(NotADirectoryError):
            root.write_file("/etc/file/sub", b"")


def test_both_implementations_agree(world: tuple[Path, Path]) -> None:
    if not safepath.openat2_available():
        pytest.skip("no openat2 here: nothing to compare")
    rootfs, host = world
    (rootfs / "a" / "b").mkdir(parents=True)
    links = {
        "abs": "/a/b",
        "rel": "a/b/../b",
        "up": "../../../..",
        "chain": "abs/../b",
        "loop": "loop",
        "dangling": "/missing",
        "host": str(host),
        "proc": "/proc/self/root",
    }
    for name, target in links.items():
        (rootfs / name).symlink_to(target)
    paths = ["/", *[f"/{n}" for n in links], "/abs/..", "/up/a/b", "/chain", "/rel/../..", "/a/b/"]

    def outcome(root: RootFd, p: str) -> str:
        try:
            return root.realpath(p)
        except HookError:
            return "refused"
        except OSError as e:
            return errno.errorcode[e.errno or 0]

    with open_root(str(rootfs), impl="openat2") as a, open_root(str(rootfs), impl="walk") as b:
        assert {p: outcome(a, p) for p in paths} == {p: outcome(b, p) for p in paths}


class _SwapAfterResolve(RootFd):
    """A root whose parent directory is replaced by a symlink to the host right after it was
    resolved: the window a path-joining implementation would lose."""

    swap: tuple[Path, Path] | None = None

    def _parent(self, path: str) -> tuple[int, str]:
        result = super()._parent(path)
        if self.swap is not None:
            directory, host = self.swap
            directory.rename(directory.with_name(directory.name + ".moved"))
            directory.symlink_to(host)
            self.swap = None
        return result


def test_directory_swapped_for_a_symlink_between_check_and_use(
    world: tuple[Path, Path], impl: Impl
) -> None:

    rootfs, host = world
    etc = rootfs / "etc"
    (etc / "d").mkdir()
    (etc / "e").mkdir()
    before = snapshot(host)
    root = open_root(str(rootfs), impl=impl)
    swapping = _SwapAfterResolve(os.dup(root.fileno()), root.path, root.impl)
    root.close()
    with swapping:
        swapping.swap = (etc / "d", host / "dir")
        swapping.write_file("/etc/d/f", b"written through the fd")
        swapping.swap = (etc / "e", host / "dir")
        swapping.symlink("t", "/etc/e/l")
    # each landed in the directory that was resolved, now moved aside inside the rootfs
    assert (etc / "d.moved" / "f").read_bytes() == b"written through the fd"
    assert (etc / "e.moved" / "l").is_symlink()
    assert snapshot(host) == before


def _write_loop(
    write: Callable[[int], None], flipper: Flipper, *, writes: int = 500, swaps: int = 100
) -> dict[str, int]:
    """Call ``write(i)`` at least ``writes`` times, and until ``flipper`` has made at least
    ``swaps`` rounds meanwhile (so the two really overlap): a race bounded by counts on
    both sides, never by the clock. Count the outcomes."""
    outcomes: dict[str, int] = {}
    start = flipper.progress()
    for i in itertools.count():
        if i >= writes and flipper.progress() - start >= swaps:
            break
        try:
            write(i)
            key = "written"
        except HookError:
            key = "refused"
        except OSError as e:
            key = errno.errorcode[e.errno or 0]
        outcomes[key] = outcomes.get(key, 0) + 1
    return outcomes


def test_racing_swaps_never_escape(world: tuple[Path, Path], impl: Impl) -> None:
    """A thread flips /etc/d between a directory and symlinks to the host while we write."""
    rootfs, host = world
    (rootfs / "etc" / "d").mkdir()
    before = snapshot(host)
    with open_root(str(rootfs), impl=impl) as root:

        def write(i: int) -> None:
            root.mkdirs(f"/etc/d/s{i % 3}")
            root.write_file(f"/etc/d/s{i % 3}/f{i}", b"x")

        with Flipper({rootfs / "etc" / "d": escape_forms(rootfs, host / "dir")}) as flipper:
            outcomes = _write_loop(write, flipper)
    assert flipper.swaps >= 300
    assert snapshot(host) == before, outcomes
    assert outcomes.get("written", 0) > 0, outcomes  # the race was really run both ways


def test_racing_swaps_do_reach_the_host_through_joined_paths(world: tuple[Path, Path]) -> None:
    """Control: the same race against path joining (what safepath replaces) does escape."""
    rootfs, host = world
    (rootfs / "etc" / "d").mkdir()
    before = snapshot(host)

    def write(i: int) -> None:
        with open(os.path.join(rootfs, f"etc/d/f{i}"), "wb") as f:
            f.write(b"x")

    with Flipper({rootfs / "etc" / "d": escape_forms(rootfs, host / "dir")}) as flipper:
        for _ in range(50):  # at most 50 x 100 rounds: enough for a loaded machine too
            _write_loop(write, flipper)
            if snapshot(host) != before:
                break
    assert snapshot(host) != before


@pytest.mark.root
def test_procfs_magic_links_in_the_rootfs_are_refused(world: tuple[Path, Path]) -> None:
    """With a real procfs mounted in the rootfs (as at createContainer time), /proc/<pid>/root
    leads to the host: both implementations must refuse to follow it."""
    require_root()
    unshare = require("unshare")
    rootfs, host = world
    (rootfs / "proc").mkdir()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (rootfs / "etc" / "self").symlink_to(f"/proc/self/root{host}/dir")
        (rootfs / "etc" / "other").symlink_to(f"/proc/{sleeper.pid}/root{host}/dir")
        (rootfs / "etc" / "fd").symlink_to("/proc/self/cwd")
        script = textwrap.dedent(
            f"""
            import json, sys
            from nvhook.errors import HookError
            from nvhook.rootfs.safepath import open_root, openat2_available
            out = {{}}
            for impl in ("openat2", "walk") if openat2_available() else ("walk",):
                root = open_root({str(rootfs)!r}, impl=impl)
                for name in ("self", "other", "fd"):
                    for op in ("write", "mkdirs", "read"):
                        try:
                            if op == "write":
                                root.write_file(f"/etc/{{name}}/new", b"x")
                            elif op == "mkdirs":
                                root.mkdirs(f"/etc/{{name}}/sub")
                            else:
                                root.read_file(f"/etc/{{name}}/file")
                            out[f"{{impl}} {{name}} {{op}}"] = "done"
                        except HookError as e:
                            out[f"{{impl}} {{name}} {{op}}"] = "refused: " + str(e)
                        except OSError as e:
                            out[f"{{impl}} {{name}} {{op}}"] = "oserror: " + str(e)
            print(json.dumps(out))
            """
        )
        proc = subprocess.run(
            [
                unshare,
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                'mount -t proc proc "$0" && exec "$1" -c "$2"',
                str(rootfs / "proc"),
                sys.executable,
                script,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=str(Path.cwd()),
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode == 0, proc.stderr
    import json

    results = json.loads(proc.stdout)
    assert results and all(v.startswith("refused") for v in results.values()), results
    assert (host / "dir" / "file").read_text() == "host file\n"
    assert sorted(p.name for p in (host / "dir").iterdir()) == ["file"]


def test_open_root_choices(world: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    rootfs, _ = world
    monkeypatch.setenv(safepath.ENV_IMPL, "walk")
    with open_root(str(rootfs)) as root:
        assert root.impl == "walk"
    monkeypatch.setenv(safepath.ENV_IMPL, "bogus")
    with pytest.raises(ValueError, match="NVHOOK_SAFEPATH"):
        open_root(str(rootfs))
    with pytest.raises(HookError, match="cannot open the container rootfs"):
        open_root(str(rootfs / "missing"), impl="walk")
    monkeypatch.delenv(safepath.ENV_IMPL)
    with open_root(str(rootfs)) as root:
        assert root.impl == ("openat2" if safepath.openat2_available() else "walk")
