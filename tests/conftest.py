"""Project-wide pytest configuration and fixtures."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.tools.entrypoints import (
    ENTRYPOINTS,
    HOOK_LAUNCHER,
    import_paths,
    install_entrypoints,
    launcher_text,
)

pytest_plugins = ["tests.support.containers", "tests.support.unprivileged"]


@pytest.fixture(autouse=True)
def _private_nvhook_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings and CDI index caches go to a temp dir, never the host's /run/nvhook."""
    monkeypatch.setenv("NVHOOK_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "nvhook-cache"))


def _python_hook(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Python ``nvhook-hook`` launcher: the venv's when it is current (``nvhook-hook``,
    or ``nvhook-hook.py`` beside the native hook), else a fresh one (same text, written by
    ``install_entrypoints``) in a session temp dir."""
    entry = next(e for e in ENTRYPOINTS if e.name == "nvhook-hook")
    bin_dir = Path(sys.executable).parent
    paths = import_paths(sys.executable)
    native = str(bin_dir / entry.name)
    for name, program in ((entry.name, None), (HOOK_LAUNCHER, native)):
        installed = bin_dir / name
        current = {
            launcher_text(entry, str(bin_dir / n), paths, program=program).encode()
            for n in ("python", "python3")
        }
        if installed.is_file() and installed.read_bytes() in current:
            return str(installed)
    fresh = tmp_path_factory.mktemp("bin")
    install_entrypoints(str(fresh), sys.executable, frontend="off")
    return str(fresh / entry.name)


@pytest.fixture(scope="session")
def python_hook_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Absolute path of the Python ``nvhook-hook`` launcher (:func:`_python_hook`)."""
    return _python_hook(tmp_path_factory)


@pytest.fixture(scope="session")
def native_hook_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The native ``nvhook-hook`` (nvhook/native/nvhook-hook.c), built fresh with ASan and
    UBSan, handing over to the Python launcher; skipped without a C compiler."""
    from tests.support.native import build_native_hook

    work = tmp_path_factory.mktemp("native-hook")
    return str(build_native_hook(work, _python_hook(tmp_path_factory)))


@pytest.fixture(scope="session", params=["python", "native"])
def hook_bin(request: pytest.FixtureRequest) -> str:
    """Absolute path of an ``nvhook-hook``: each test runs with the Python launcher and with
    the native hook in front of it (which must behave the same, handing over what it does
    not do itself)."""
    name = "python_hook_bin" if request.param == "python" else "native_hook_bin"
    return str(request.getfixturevalue(name))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite the expected files of golden cases (review the diff before committing); "
        "refused when CI is set",
    )


def pytest_configure(config: pytest.Config) -> None:
    """``--update-golden`` under CI would make every golden test pass by rewriting what it
    compares against: refuse it before anything runs."""
    from tests.support.containers import in_ci

    if config.getoption("--update-golden") and in_ci():
        raise pytest.UsageError(
            f"--update-golden is refused under CI (CI={os.environ['CI']!r}): it rewrites the "
            "expectations the golden tests check; run it locally and commit the reviewed diff"
        )


# --- the mock GPU machine (nvhook.mock), shared by every test that needs a fake host ----------


@pytest.fixture(scope="session")
def mock_machine(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Factory: ``mock_machine("dgx-a100", as_root_nodes=False) -> Path`` of a laid-out mock root.

    One layout per (profile, node kind) per session, shared: treat it as read-only (use
    ``make_mock_machine`` for a tree of your own). ``as_root_nodes=True`` makes real character
    devices (skips without root; fails under CI), else ``/dev`` holds regular files.
    """
    from nvhook.mock import create

    made: dict[tuple[str, bool], Path] = {}

    def get(profile: str, *, as_root_nodes: bool = False) -> Path:
        key = (profile, as_root_nodes)
        if key not in made:
            if as_root_nodes:
                from tests.support.containers import require_root

                require_root()
            root = tmp_path_factory.mktemp(f"mock-{profile}") / "root"
            create(profile, root, nodes="char" if as_root_nodes else "file")
            made[key] = root
        return made[key]

    return get


@pytest.fixture
def make_mock_machine(tmp_path: Path) -> Callable[..., Path]:
    """Factory: ``make_mock_machine("l40s-x4", as_root_nodes=False) -> Path``, a fresh tree."""
    from nvhook.mock import create

    count = 0

    def make(profile: str, *, as_root_nodes: bool = False) -> Path:
        nonlocal count
        if as_root_nodes:
            from tests.support.containers import require_root

            require_root()
        count += 1
        root = tmp_path / f"mock-{profile}-{count}"
        create(profile, root, nodes="char" if as_root_nodes else "file")
        return root

    return make
