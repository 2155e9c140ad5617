"""bench/instructions.py: callgrind's counts per process, and the baseline check."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from bench.instructions import (
    BASELINE,
    SHARE,
    callgrind,
    compare,
    parse_outputs,
    soname_links,
    without_links,
)
from tests.support.basics import require, require_root

#: ``prog LOOPS EXEC``: LOOPS iterations, a forked child of LOOPS/10, LOOPS more, then exec
#: EXEC.
PROGRAM = r"""
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>
volatile long x;
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    for (long i = 0; i < n; i++) x += i;
    pid_t pid = fork();
    if (pid == 0) { for (long i = 0; i < n / 10; i++) x += i; _exit(0); }
    waitpid(pid, 0, 0);
    for (long i = 0; i < n; i++) x += i;
    execv(argv[2], argv + 2);
    return 1;
}
"""


def test_parse_outputs_sums_each_process_dump_parts(tmp_path: Path) -> None:
    (tmp_path / "cg.10").write_text("events: Ir\ntotals: 5\n")
    (tmp_path / "cg.10.1").write_text("summary: 7\ntotals: 7\n")
    (tmp_path / "cg.10.2").write_text("totals: 11\n")
    (tmp_path / "cg.12").write_text("totals: 3\n")
    (tmp_path / "cg.13").write_text("")  # exec'd before its first dump: no count
    (tmp_path / "other.10").write_text("totals: 99\n")
    assert parse_outputs(tmp_path) == {10: 23, 12: 3}


def test_compare_flags_a_row_beyond_its_share() -> None:
    baseline = {"rows": {"py": {"ir": 1000, "kind": "python"},
                         "c": {"ir": 1000, "kind": "native"}}}  # fmt: skip
    within = int(1000 * (1 + SHARE["python"]))
    rows = {"py": within, "c": int(1000 * (1 + SHARE["native"])) + 1, "fresh": 5}
    assert compare(rows, baseline) == [
        ("py", within, 1000, "ok"),
        ("c", rows["c"], 1000, "OVER"),
        ("fresh", 5, None, "new"),
    ]


def test_the_recorded_baseline_names_a_share_for_every_row() -> None:
    rows = json.loads(BASELINE.read_text())["rows"]
    assert {"Python shim: create 1 GPU, cdi", "server child: create 1 GPU, cdi"} <= set(rows)
    assert all(entry["kind"] in SHARE and entry["ir"] > 0 for entry in rows.values())


def test_callgrind_counts_each_process_up_to_its_exec(tmp_path: Path) -> None:
    require("valgrind")
    cc = require("cc")
    prog = tmp_path / "prog"
    (tmp_path / "prog.c").write_text(PROGRAM)
    subprocess.run([cc, "-O1", "-o", str(prog), str(tmp_path / "prog.c")], check=True)
    true = require("true")
    own_small, every_small = callgrind([str(prog), "100000", true], {})
    own_big, every_big = callgrind([str(prog), "1000000", true], {})
    # the parent up to its exec, before the fork and after it; the exec'd program not counted
    loop = (own_big - own_small) / (2 * 900000)
    assert 3 <= loop <= 20
    # the forked child from its fork (its parent's count before it is not inherited):
    # a twentieth of its parent's loops
    (child_small,) = (n for pid, n in every_small.items() if n != own_small)
    (child_big,) = (n for pid, n in every_big.items() if n != own_big)
    assert 19 < (own_big - own_small) / (child_big - child_small) < 21
    assert child_big < own_big / 10
    # with children: the exec'd program counted too
    _, with_exec = callgrind([str(prog), "100000", true], {}, children=True)
    assert sum(with_exec.values()) > sum(every_small.values())


def test_soname_links_are_the_links_ldconfig_makes(tmp_path: Path) -> None:
    cc = require("cc")
    lib = tmp_path / "usr/lib"
    lib.mkdir(parents=True)
    source = tmp_path / "l.c"
    source.write_text("int f(void) { return 1; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libx.so.1", "-o",
                    str(lib / "libx.so.1.2"), str(source)], check=True)  # fmt: skip
    args = ["--link", "libx.so.1.2::/usr/lib/libx.so.1",  # ldconfig makes it
            "--link", "libx.so.1::/usr/lib/libx.so",  # a dev link: not made by ldconfig
            "--link", "libx.so.1.2::/usr/lib/other/libx.so.1",  # not a --folder
            "--folder", "/usr/lib"]  # fmt: skip
    made = soname_links(args, lib)
    assert made == {"libx.so.1.2::/usr/lib/libx.so.1"}
    assert without_links(args, made) == args[2:]


def test_ldconfig_is_counted_on_its_own_in_the_rootfs_the_hook_left(tmp_path: Path) -> None:
    """The hook's ldconfig under callgrind: chrooted by ``-r``, it writes its counts where
    the rootfs holds the work directory's path (valgrind opened that path before the
    chroot); it builds the cache from scratch (the ld cache and ldconfig's aux cache of an
    earlier run removed), and nothing of the counting is left in the rootfs."""
    import os
    import shutil

    from bench.instructions import HookBench

    require("valgrind")
    require_root()  # ldconfig -r chroots
    bench = HookBench.__new__(HookBench)
    bench.work, bench.bundle = tmp_path, tmp_path / "bundle"
    rootfs = bench.bundle / "rootfs"
    lib = rootfs / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    real = Path(os.path.realpath("/usr/lib/x86_64-linux-gnu/libz.so.1"))
    shutil.copy2(real, lib / real.name)
    (rootfs / "etc").mkdir()
    (rootfs / "etc/ld.so.conf").write_text("/usr/lib/x86_64-linux-gnu\n")
    (rootfs / "var/cache/ldconfig").mkdir(parents=True)
    (rootfs / "var/cache/ldconfig/aux-cache").write_bytes(b"stale")
    before = sorted(p.relative_to(rootfs) for p in rootfs.rglob("*"))
    count = bench.ldconfig_count()
    assert 100_000 < count < 20_000_000  # ldconfig itself, not a Python hook (~50 M)
    assert os.readlink(lib / "libz.so.1") == real.name  # it ran, on this root
    assert (rootfs / "etc/ld.so.cache").stat().st_size > 0
    after = sorted(p.relative_to(rootfs) for p in rootfs.rglob("*"))
    assert set(after) - set(before) == {
        Path("etc/ld.so.cache"),
        Path("usr/lib/x86_64-linux-gnu/libz.so.1"),
    }
    assert not (tmp_path / "ldconfig-cg").exists()
