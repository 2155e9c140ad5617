"""The declared bounds hold where the tests run, so a CI machine outside them fails loudly.

``pyproject.toml`` bounds the interpreter and the libraries whose private APIs the code
drives (see the comment there). The tests that exercise those private APIs pass only for
the versions they run on; this checks that those are the versions the bounds allow, and
that the bounds are there at all. And the dependencies are exactly what ``oci`` and
``nvhook`` import: none declared and never imported, none imported and not declared.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.test_layers import ROOT, all_imports

PYPROJECT = ROOT / "pyproject.toml"

#: Driven through private APIs: each must have an upper bound. Where, and which tests show
#: that it works with the installed version:
PRIVATE_APIS = {
    # nvhook/engines/_toml.py: containers, trivia, bodies (tests/nvhook/engines/)
    "tomlkit",
    # nvhook/devices/nvml.py: pynvml._nvmlGetFunctionPointer_cache
    # (tests/nvhook/devices/test_nvml.py)
    "nvidia-ml-py",
}


def _project() -> dict[str, Any]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert isinstance(project, dict)
    return project


#: The extras of optional parts, each a home of its libraries (``nvhook[all]`` is them all).
EXTRAS = ("netdev", "kubernetes")


def _requirements(group: str | None) -> list[Requirement]:
    """The requirements of ``group`` (None: the dependencies), nvhook's own extras expanded."""
    project = _project()
    texts = project["dependencies"] if group is None else project["optional-dependencies"][group]
    out: list[Requirement] = []
    for text in texts:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) == "nvhook":
            for extra in sorted(requirement.extras):
                out += _requirements(extra)
        else:
            out.append(requirement)
    return out


def _runtime_requirements() -> list[Requirement]:
    """Every library oci and nvhook may import: the dependencies and every extra's."""
    return [r for group in (None, *EXTRAS) for r in _requirements(group)]


def _has_upper_bound(specifier: SpecifierSet) -> bool:
    return any(s.operator in ("<", "<=", "==", "~=") for s in specifier)


def test_the_interpreter_is_within_requires_python() -> None:
    """oci/jsoncodec.py drives CPython's _json (tests/oci/test_jsoncodec.py)."""
    requires = SpecifierSet(_project()["requires-python"])
    assert _has_upper_bound(requires), "requires-python needs an upper bound"
    running = ".".join(map(str, sys.version_info[:3]))
    assert requires.contains(running), (
        f"Python {running} is outside requires-python {requires}: run the tests on a "
        "supported interpreter, or raise the bound once they pass on this one"
    )
    assert sys.implementation.name == "cpython"


def test_the_dependencies_are_what_the_packages_import() -> None:
    """Each runtime dependency is imported by oci or nvhook, and each library they import
    (outside the stdlib) is a declared dependency."""
    distributions = packages_distributions()
    imported: dict[str, str] = {}  # distribution -> one module importing it
    for imp in all_imports(ROOT):
        top = imp.target.split(".")[0]
        if top in sys.stdlib_module_names or top in ("oci", "nvhook"):
            continue
        for dist in distributions.get(top, [f"<no distribution installs {top}>"]):
            imported.setdefault(canonicalize_name(dist), f"{imp.source}:{imp.line}")
    declared = {canonicalize_name(r.name) for r in _runtime_requirements()}
    assert sorted(declared - set(imported)) == [], "declared and never imported"
    undeclared = {d: where for d, where in imported.items() if d not in declared}
    assert undeclared == {}, "imported and not declared"


def test_the_extras_are_all_of_them_and_the_tests_install_them() -> None:
    """``all`` is every extra, the tests install ``all``, and no library is both a dependency
    and an extra's."""
    extras = _project()["optional-dependencies"]
    assert set(extras) == {*EXTRAS, "all", "test"}
    assert {canonicalize_name(r.name) for r in _requirements("all")} == {
        canonicalize_name(r.name) for group in EXTRAS for r in _requirements(group)
    }
    assert "nvhook[all]" in extras["test"]
    core = {canonicalize_name(r.name) for r in _requirements(None)}
    assert core.isdisjoint(canonicalize_name(r.name) for g in EXTRAS for r in _requirements(g))


def test_private_api_dependencies_have_upper_bounds() -> None:
    declared = {canonicalize_name(r.name): r for r in _runtime_requirements()}
    for name in PRIVATE_APIS:
        requirement = declared[canonicalize_name(name)]
        assert _has_upper_bound(requirement.specifier), f"{requirement} needs an upper bound"


@pytest.mark.parametrize("group", [None, *EXTRAS, "test"], ids=["dependencies", *EXTRAS, "test"])
def test_installed_versions_are_within_the_declared_bounds(group: str | None) -> None:
    outside = []
    for requirement in _requirements(group):
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            outside.append(f"{requirement.name} is not installed ({requirement})")
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            outside.append(f"{requirement.name} {installed} is outside {requirement}")
    assert outside == [], "pip install -e '.[test]' (./dev setup) was not obeyed: " + "; ".join(
        outside
    )


def test_a_version_outside_the_bounds_is_caught() -> None:
    """The checks above can fail: the next minor of tomlkit, and Python 3.15, are refused."""
    declared = {canonicalize_name(r.name): r for r in _requirements(None)}
    tomlkit = declared["tomlkit"].specifier
    upper = next(s.version for s in tomlkit if s.operator == "<")
    assert not tomlkit.contains(upper)
    assert not SpecifierSet(_project()["requires-python"]).contains("3.15.0")
    assert not _has_upper_bound(SpecifierSet(">=1"))


def _minors(text: str) -> list[str]:
    return re.findall(r"3\.\d+", text)


def _one(pattern: str, path: str) -> str:
    found = re.findall(pattern, (ROOT / path).read_text(), re.MULTILINE)
    assert len(found) >= 1, f"{path}: no line matching {pattern!r}"
    assert len(set(found)) == 1, f"{path}: lines that differ: {found}"
    return str(found[0])


def test_every_list_of_supported_pythons_is_requires_python_and_each_is_run() -> None:
    """The interpreters ``requires-python`` admits are the ones the packages and installers
    accept and carry wheels for, and the README names; CI runs each: this machine's, or a
    Debian root's (tests/packaging/test_pythons.py), or it is named as run nowhere."""
    from tests.packaging.conftest import PY_VERSIONS
    from tests.packaging.test_pythons import HOST_PYTHON, NOT_RUN, SUITES

    requires = SpecifierSet(_project()["requires-python"])
    supported = [f"3.{m}" for m in range(30) if requires.contains(f"3.{m}.0")]
    newest_first = list(reversed(supported))
    lists = {
        "tests/packaging/conftest.py PY_VERSIONS": list(PY_VERSIONS),
        "packaging/wheels.sh SUPPORTED_PY": _minors(
            _one(r'^SUPPORTED_PY="(.*)"', "packaging/wheels.sh")
        ),
        "packaging/python-bundle.sh": _minors(
            _one(r'" (3\.[0-9. ]+) " ==', "packaging/python-bundle.sh")
        ),
        "README.md": _minors(_one(r"^CPython \*\*([0-9., or]+)\*\*", "README.md")),
    }
    newest_first_lists = {
        "packaging/setup SUPPORTED": _minors(_one(r'^SUPPORTED="(.*)"', "packaging/setup")),
        "packaging/deb/preinst": _minors(_one(r"for v in (.*); do", "packaging/deb/preinst")),
        "packaging/rpm/pre": _minors(_one(r"for v in (.*); do", "packaging/rpm/pre")),
        "packaging/nfpm.yaml deb": _minors(_one(r"^ *- (python3\.1\d.*)$", "packaging/nfpm.yaml")),
        "packaging/nfpm.yaml rpm": _minors(
            _one(r"^ *- \((/usr/bin/python.*)\)$", "packaging/nfpm.yaml")
        ),
    }
    for where, found in lists.items():
        assert found == supported, where
    for where, found in newest_first_lists.items():
        assert found == newest_first, where
    check = re.search(
        r"sys\.exit\(not \(3, (\d+)\) <= sys\.version_info\[:2\] <= \(3, (\d+)\)\)",
        (ROOT / "packaging/install.sh").read_text(),
    )
    assert check is not None, "packaging/install.sh: no interpreter check"
    assert [f"3.{m}" for m in check.groups()] == [supported[0], supported[-1]]
    assert len({HOST_PYTHON, *SUITES, *NOT_RUN}) == 1 + len(SUITES) + len(NOT_RUN)
    unproven = set(supported) - set(SUITES) - set(NOT_RUN) - {HOST_PYTHON}
    assert unproven == set(), f"no test runs Python {sorted(unproven)}"
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if os.environ.get("CI") and running not in SUITES:  # CI's own run: the host's Python
        assert running == HOST_PYTHON, f"CI runs Python {running}, not {HOST_PYTHON}"
