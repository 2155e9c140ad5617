"""Fixtures of the tests of today's engines (tests/support/engines.py): the Debian roots
(made or found once per session), and :class:`Engine`, a root started privately for a module.

Run one engine's tests alone with ``./dev test tests/e2e/engines -k containerd2`` (or
``containerd17``, ``docker28``, ``docker26``). Each test prints the version of the engine it
ran (``-rA`` or ``-s`` shows it) and records it as the junit property ``engine``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.engines import PrivateRoot, engine_root


class Engine:
    """A private root of ``suite`` (entered) for the tests of engine ``name`` (``version``:
    its ``--version`` line; ``major`` the major version the test expects), with a work dir
    bound inside."""

    def __init__(
        self, name: str, suite: str, root: PrivateRoot, work: Path, version: str, major: int
    ) -> None:
        self.name = name
        self.suite = suite
        self.root = root
        self.work = work
        self.version = version
        self.major = major


@pytest.fixture(scope="session")
def suite_root() -> Callable[[str], Path]:
    """``suite_root("sid") -> Path`` of the cached root, made at most once per session."""
    made: dict[str, Path] = {}

    def get(suite: str) -> Path:
        if suite not in made:
            made[suite] = engine_root(suite)
        return made[suite]

    return get


def private_root(
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    suite: str,
    version_argv: tuple[str, ...],
    major: int,
    *,
    cgroup2: bool = False,
) -> Iterator[Engine]:
    """An :class:`Engine` for a module fixture: pytest's temp dir (the mock machine, the shim's
    config, images, work dirs) is bound inside at the same path; ``cgroup2``: a cgroup2-only
    ``/sys/fs/cgroup``. Fails unless the engine's version line has `` MAJOR.``."""
    work = tmp_path_factory.mktemp(name)
    binds = [tmp_path_factory.getbasetemp()]
    with PrivateRoot(suite_root(suite), work / "root", binds, cgroup2=cgroup2) as root:
        version = root.version(*version_argv)
        assert f" {major}." in version or f" v{major}." in version, version
        yield Engine(name, suite, root, work, version, major)


@pytest.fixture
def print_version(request: pytest.FixtureRequest) -> Callable[[Engine], None]:
    """``print_version(engine)``: print and record the version of the engine a test runs (in
    the test's user properties: the ``record_property`` fixture warns under CI's JUnit
    report, xunit2, and warnings are errors here)."""

    def show(engine: Engine) -> None:
        print(f"{engine.name} from {engine.suite}: {engine.version}")
        request.node.user_properties.append(("engine", engine.version))

    return show
