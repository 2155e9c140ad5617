"""nvhook.discover.root: symlinks are followed inside the root, never out of it."""

from __future__ import annotations

import stat
from pathlib import Path

from nvhook.discover.root import Root


def _tree(tmp_path: Path) -> Root:
    """A root with a merged /usr, absolute and relative links, a loop and an escape attempt."""
    r = tmp_path / "root"
    (r / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (r / "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15").write_text("elf")
    (r / "lib").symlink_to("usr/lib")
    (r / "usr/lib/x86_64-linux-gnu/libcuda.so.1").symlink_to("libcuda.so.550.54.15")
    (r / "usr/lib/x86_64-linux-gnu/libcuda.so").symlink_to("/lib/x86_64-linux-gnu/libcuda.so.1")
    (r / "etc").mkdir()
    (r / "etc/escape").symlink_to("../../../../../../etc/hostname")
    (r / "etc/abs-escape").symlink_to("/../../../etc")
    (r / "etc/loop-a").symlink_to("loop-b")
    (r / "etc/loop-b").symlink_to("loop-a")
    (r / "etc/dangling").symlink_to("/nowhere")
    (r / "etc/hostname").write_text("inside")
    return Root(str(r))


def test_host_paths(tmp_path: Path) -> None:
    assert Root("/").host("/usr/bin/nvidia-smi") == "/usr/bin/nvidia-smi"
    assert Root("//").path == "/"
    assert Root("").path == "/"
    assert Root("/run/nvidia/driver/").host("/usr/bin/x") == "/run/nvidia/driver/usr/bin/x"
    assert Root("/run/nvidia/driver").host("/") == "/run/nvidia/driver"


def test_absolute_and_relative_links_resolve_inside(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    real = "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
    assert root.resolve("/lib/x86_64-linux-gnu/libcuda.so.1") == real
    assert root.resolve("/usr/lib/x86_64-linux-gnu/libcuda.so") == real
    assert root.resolve("lib/x86_64-linux-gnu/libcuda.so") == real
    assert root.resolve("/lib") == "/usr/lib"
    assert root.resolve("/") == "/"
    assert root.regular_file("/lib/x86_64-linux-gnu/libcuda.so") == real
    assert root.directory("/lib/x86_64-linux-gnu") == "/usr/lib/x86_64-linux-gnu"


def test_dot_dot_stops_at_the_root(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    # Without the root, these would reach the host's /etc/hostname and /etc.
    assert root.resolve("/etc/escape") == "/etc/hostname"
    assert root.resolve("/etc/abs-escape") == "/etc"
    assert root.resolve("/../../etc/hostname") == "/etc/hostname"
    assert root.resolve("/usr/lib/../../etc/hostname") == "/etc/hostname"
    with open(root.host(root.resolve("/etc/escape") or "")) as f:
        assert f.read() == "inside"


def test_missing_loops_and_wrong_kinds(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    assert root.resolve("/etc/loop-a") is None
    assert root.resolve("/etc/loop-a/x") is None
    assert root.resolve("/etc/dangling") is None
    assert root.resolve("/no/such/file") is None
    assert root.resolve("/etc/hostname/child") is None  # a file is not a directory
    assert root.regular_file("/usr/lib") is None
    assert root.directory("/etc/hostname") is None
    assert root.stat("/nowhere") is None
    st = root.stat("/lib")
    assert st is not None and stat.S_ISDIR(st.st_mode)


def test_listdir_is_sorted_and_cached(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    names = root.listdir("/lib/x86_64-linux-gnu")
    assert names == ("libcuda.so", "libcuda.so.1", "libcuda.so.550.54.15")
    (tmp_path / "root/usr/lib/x86_64-linux-gnu/new").write_text("")
    assert root.listdir("/usr/lib/x86_64-linux-gnu") == names  # one discovery, one listing
    assert Root(root.path).listdir("/usr/lib/x86_64-linux-gnu") != names
    assert root.listdir("/etc/hostname") == ()
    assert root.listdir("/missing") == ()
