"""Python 3.13 and 3.14: nvhook installs as a developer installs it, and its unit layer passes.

Each interpreter is a Debian root's own ``python3`` (tests/packaging/debianroot.py, cached):
Debian 13 (trixie) has 3.13, Debian unstable (sid) 3.14 (sid moves: the test prints what it
ran). In an overlay of the root, a copy of this checkout (its tracked and untracked files, as
git lists them) gets ``DEV_SKIP_APT=1 ./dev setup`` (``python3 -m venv .venv``, ``pip install
-e '.[test]'`` from the package index, ``nvhook install-entrypoints``, which compiles the
native programs with the root's gcc), then pytest runs the unit layer there: every test that
starts no container, needs no root and is not slow (``-m "not runtime and not root and not
slow"``), on both cores. That includes the code that drives interpreter internals: CPython's
_json scanner and encoder (oci/jsoncodec.py), the marshal caches (oci/_cache.py), the
launchers' ``-I -S`` start. The host's own interpreter (3.11 on Debian 12) runs the whole suite
already. pip's cache is kept beside the roots, so a second run fetches nothing.

The root recipe is python3, python3-venv (``./dev setup`` makes the venv with pip), gcc and
libc6-dev (the native front-end and hook, the tests' stub libraries); pip reaches the package
index through the host's network and trusts the host's certificate bundle (``PIP_CERT``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.packaging.debianroot import (
    NO_VALID_UNTIL,
    cache_dir,
    chroot,
    debian_root,
    ok,
    scratch_copy,
)
from tests.support.containers import require

pytestmark = [pytest.mark.root, pytest.mark.slow]

#: The interpreter of CI's machine (Debian 12), which runs the whole suite.
HOST_PYTHON = "3.11"
#: The Debian suite whose python3 is each supported version that is not the host's.
SUITES = {"3.13": "trixie", "3.14": "sid"}
#: Supported, and run nowhere here: no Debian suite has it (Debian 12 has 3.11, 13 has 3.13,
#: unstable 3.14; Ubuntu 24.04's 3.12 is not in Debian's archive).
NOT_RUN = {"3.12": "no Debian suite ships Python 3.12"}
#: What the roots hold besides minbase.
PACKAGES = ("python3", "python3-venv", "gcc", "libc6-dev")
#: The unit layer: what runs without containers, root or time.
UNIT_LAYER = "not runtime and not root and not slow"
CHECKOUT = Path(__file__).parents[2]


def checkout_files() -> list[str]:
    """This checkout's files as git lists them: tracked, and untracked but not ignored."""
    out = subprocess.run(
        [require("git"), "-C", str(CHECKOUT), "ls-files", "-z", "--cached", "--others",
         "--exclude-standard"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    return [name for name in out.decode().split("\0") if name]


def copy_checkout(dest: Path) -> None:
    for name in checkout_files():
        source = CHECKOUT / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the work tree, not yet in git
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)


def host_certificates() -> Path:
    """The certificate bundle this machine's pip trusts (a proxy's CA may be in it)."""
    for candidate in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE"),
                      "/etc/ssl/certs/ca-certificates.crt"):  # fmt: skip
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    pytest.fail("no certificate bundle for pip (PIP_CERT, /etc/ssl/certs)", pytrace=False)


@contextmanager
def pip_cache(root: Path, version: str) -> Iterator[None]:
    """pip's cache for ``version``, kept beside the roots, on the root's ``/root/.cache/pip``."""
    kept = cache_dir() / f"pip-cache-python{version}"
    kept.mkdir(parents=True, exist_ok=True)
    inside = root / "root/.cache/pip"
    inside.mkdir(parents=True, exist_ok=True)
    subprocess.run([require("mount"), "--bind", str(kept), str(inside)], check=True)
    try:
        yield
    finally:
        subprocess.run([require("umount"), "--lazy", str(inside)], check=False)


@pytest.fixture(params=sorted(SUITES), ids=[f"python{v}" for v in sorted(SUITES)])
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def root(version: str, tmp_path: Path) -> Iterator[Path]:
    require("mmdebstrap")
    suite = SUITES[version]
    lower = debian_root(suite, PACKAGES, aptopts=(NO_VALID_UNTIL,) if suite == "sid" else ())
    with scratch_copy(lower, tmp_path / "overlay") as merged:
        yield merged


def test_the_unit_layer_passes(version: str, root: Path) -> None:
    """``./dev setup`` in the root's Python, then the unit layer, every test passing."""
    shown = ok(chroot(root, "python3 -VV && gcc --version | head -n 1"))
    print(f"{SUITES[version]}: {shown.strip()}")  # sid moves: what this run ran
    assert shown.startswith(f"Python {version}.")
    copy_checkout(root / "checkout")
    shutil.copy(host_certificates(), root / "etc/nvhook-test-ca.crt")
    env = {"PIP_CERT": "/etc/nvhook-test-ca.crt", "DEV_SKIP_APT": "1"}
    if os.environ.get("PIP_INDEX_URL"):
        env["PIP_INDEX_URL"] = os.environ["PIP_INDEX_URL"]
    with pip_cache(root, version):
        setup = chroot(root, "cd /checkout && ./dev setup", env, timeout=900)
    assert setup.returncode == 0, f"./dev setup failed:\n{setup.stdout}\n{setup.stderr}"
    venv = ok(chroot(root, "/checkout/.venv/bin/python -c 'import sys; print(sys.version)'"))
    assert venv.startswith(f"{version}.")
    # the native programs were built with the root's gcc, in front of their launchers
    for name in ("nvhook-runtime", "nvhook-hook"):
        assert (root / "checkout/.venv/bin" / name).read_bytes()[:4] == b"\x7fELF", name
    tests = chroot(
        root,
        f"cd /checkout && .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 -m '{UNIT_LAYER}'",
        {"HYPOTHESIS_STORAGE_DIRECTORY": "/tmp/hypothesis", "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=1800,
    )
    summary = tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else ""
    print(f"python{version}: {summary}")
    assert tests.returncode == 0, f"{tests.stdout[-20000:]}\n{tests.stderr[-3000:]}"
    assert " passed" in summary and " failed" not in summary, summary
