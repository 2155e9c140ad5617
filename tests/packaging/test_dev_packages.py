"""``./dev setup``'s Debian packages resolve on Debian 13 (trixie), not only on Debian 12.

The list is the one ``./dev packages`` prints there (the script itself, run by the root's bash:
nothing copied from it), and apt, in an overlay of the cached trixie root
(tests/packaging/debianroot.py), simulates installing exactly that list against trixie's
archive. apt's indexes are kept beside the roots (``$NVHOOK_TEST_CACHE/apt-lists-trixie``), so
a later run's ``apt-get update`` fetches only what changed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.packaging.conftest import ROOT
from tests.packaging.debianroot import cache_dir, chroot, debian_root, ok, scratch_copy
from tests.support.basics import require, require_root

pytestmark = [pytest.mark.root, pytest.mark.slow]


@contextmanager
def kept_lists(root: Path, suite: str) -> Iterator[None]:
    """apt's indexes of ``suite``, kept beside the roots, on the root's /var/lib/apt/lists."""
    kept = cache_dir() / f"apt-lists-{suite}"
    (kept / "partial").mkdir(parents=True, exist_ok=True)
    inside = root / "var/lib/apt/lists"
    subprocess.run([require("mount"), "--bind", str(kept), str(inside)], check=True)
    try:
        yield
    finally:
        subprocess.run([require("umount"), "--lazy", str(inside)], check=False)


def test_dev_setup_packages_resolve_on_debian_13(tmp_path: Path) -> None:
    require_root()
    require("mmdebstrap")
    lower = debian_root("trixie", ("python3",))  # test_trixie.py's root
    with scratch_copy(lower, tmp_path / "overlay") as root:
        shutil.copy(ROOT / "dev", root / "tmp/dev")
        packages = ok(chroot(root, "bash /tmp/dev packages")).split()
        here = subprocess.run([str(ROOT / "dev"), "packages"], capture_output=True, text=True)
        assert packages and packages == here.stdout.split()  # one list for both releases
        with kept_lists(root, "trixie"):
            ok(chroot(root, "apt-get -q update", timeout=600))
            simulated = chroot(
                root, f"apt-get install --simulate -q -y {' '.join(packages)}", timeout=600
            )
    assert simulated.returncode == 0, f"{simulated.stdout[-3000:]}\n{simulated.stderr}"
    installed = set(re.findall(r"^Inst (\S+) ", simulated.stdout, re.MULTILINE))
    already = set(re.findall(r"^(\S+) is already the newest", simulated.stdout, re.MULTILINE))
    assert set(packages) <= installed | already, sorted(set(packages) - installed - already)
