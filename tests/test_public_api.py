"""Each package re-exports its public API: complete, sorted, resolvable, and lazy."""

from __future__ import annotations

import subprocess
import sys

import pytest

import nvhook
import oci


@pytest.mark.parametrize("package", [oci, nvhook], ids=lambda p: p.__name__)
def test_all_is_sorted_complete_and_resolves(package: object) -> None:
    import pkgutil

    names = package.__all__  # type: ignore[attr-defined]
    assert names == sorted(names)
    submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}  # type: ignore[attr-defined]
    assert not submodules & set(names), "a submodule would shadow the re-exported name"
    assert set(names) == set(package._WHERE)  # type: ignore[attr-defined]
    for name in names:
        value = getattr(package, name)
        assert getattr(value, "__name__", name) == name


@pytest.mark.parametrize("package", ["oci", "nvhook"])
def test_importing_the_package_loads_no_submodule(package: str) -> None:
    code = (
        f"import sys; import {package}; "
        f"print(sorted(m for m in sys.modules if m.startswith('{package}.')))"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = oci.nope  # type: ignore[attr-defined]
