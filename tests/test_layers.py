"""The layer rules, checked statically from the source (``ast``), so they hold on every path.

Every module under ``oci/`` and ``nvhook/`` is found by walking the tree (no list to keep
up to date) and parsed; all its imports are collected: at module level, inside functions
and classes, and under ``if TYPE_CHECKING:`` (marked as never executed). Relative imports
are resolved, and ``from package import name`` counts as importing ``package.name`` where
that is a module.

Rule A, ``oci`` is vendor-neutral: no module in ``oci/`` imports, anywhere (type-only
imports included), anything but the standard library, ``oci`` itself and the three
libraries its CDI edge needs (PyYAML for YAML specs, jsonschema and referencing for
``validate``). So never ``nvhook``, click, pynvml, pyroute2, pydantic or tomlkit. Those
three are imported where they are used (inside a function, or for types only), never at
module level: the runtime shim imports ``oci`` modules on every container start.

Rule B, the start path stays small: the static closure of the modules that the launchers
run (``ENTRYPOINTS``: ``nvhook.shim``, ``nvhook.hook``) and of every module of those that
are packages (the hook's commands), following every import that can execute (module level
and inside functions, not ``TYPE_CHECKING``) and the packages each import executes, never
reaches ``nvhook.cli``, ``nvhook.engines``, ``nvhook.mock`` or ``nvhook.tools``, nor click
or pydantic. A failure names the chain of imports that gets there.

Rule C, heavy libraries have one home each: pynvml only in ``nvhook.devices.nvml``, grpc only
in ``nvhook.deviceplugin.server`` and ``nvhook.cri.client`` (the two gRPC APIs, the device
plugin's and CRI's, each with one module that speaks it), protobuf (``google``) only in the
generated ``nvhook.deviceplugin.v1beta1`` and ``nvhook.cri.v1``, pydantic only in
``nvhook.deviceplugin.config``, pyroute2 only in ``nvhook.hook.netdev``, click only in
``nvhook.cli``, tomlkit only in ``nvhook.engines``, jsonschema and referencing only in
``oci.cdi.validate`` (type-only imports included), so what each costs is paid in one place.

Each rule is also run on a planted tree with a bad import, to show it fails when violated.
``tests/nvhook/test_shim_imports.py`` checks the other side: what the shim really loads.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("oci", "nvhook")

#: Third-party libraries oci may import (lazily): its CDI edge (YAML specs, JSON Schema).
OCI_THIRD_PARTY = frozenset({"yaml", "jsonschema", "referencing"})
#: Named in rule A's failures: what oci must never import even lazily.
OCI_NEVER = ("nvhook", "click", "pynvml", "pyroute2", "pydantic", "tomlkit")
#: What the start path (rule B) must never reach: packages of nvhook, and libraries.
START_PATH_NEVER = ("nvhook.cli", "nvhook.engines", "nvhook.mock", "nvhook.tools")
START_PATH_NEVER_LIBRARIES = ("click", "pydantic", "grpc", "google")
#: Rule C: library -> the modules or packages that alone may import it.
HOMES: dict[str, tuple[str, ...]] = {
    "pynvml": ("nvhook.devices.nvml",),
    "pyroute2": ("nvhook.hook.netdev",),
    "click": ("nvhook.cli",),
    "tomlkit": ("nvhook.engines",),
    "jsonschema": ("oci.cdi.validate",),
    "referencing": ("oci.cdi.validate",),
    # the two gRPC APIs: the device plugin's (and kubelet's side of it), and CRI's client
    "grpc": ("nvhook.deviceplugin.server", "nvhook.cri.client"),
    # protobuf, through the generated api_pb2 of each
    "google": ("nvhook.deviceplugin.v1beta1", "nvhook.cri.v1"),
    "pydantic": ("nvhook.deviceplugin.config",),
}


# --------------------------------------------------------------------------- the checker


@dataclass(frozen=True)
class Import:
    """One import statement's target, in module ``source``."""

    source: str
    target: str  # absolute dotted name (a module, or a package with the name then looked up)
    line: int
    runtime: bool  # False: under TYPE_CHECKING, never executed
    module_level: bool  # False: inside a function (executed only when it is called)


def discover(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``: dotted name -> file."""
    modules: dict[str, Path] = {}
    for package in packages:
        top = root / package
        for path in sorted(top.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            folders = [root.joinpath(*parts[:i]) for i in range(1, len(parts))]
            if not all((folder / "__init__.py").is_file() for folder in folders):
                continue  # not importable (data, C sources, scripts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


class _Collector(ast.NodeVisitor):
    def __init__(self, source: str, is_package: bool) -> None:
        self.source = source
        self.package = source if is_package else source.rpartition(".")[0]
        self.runtime = True
        self.depth = 0  # functions we are inside
        self.found: list[tuple[str, tuple[str, ...], int, bool, bool]] = []

    def _add(self, module: str, names: tuple[str, ...], line: int) -> None:
        self.found.append((module, names, line, self.runtime, self.depth == 0))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, (), node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            base = self.package.split(".")
            if node.level - 1 >= len(base):
                raise ValueError(f"{self.source}: relative import beyond the top package")
            base = base[: len(base) - (node.level - 1)]
            module = ".".join([*base, module] if module else base)
        self._add(module, tuple(a.name for a in node.names), node.lineno)

    def _in_function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _in_function

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        if negated:
            assert isinstance(test, ast.UnaryOp)
            test = test.operand
        if not _is_type_checking(test):
            self.generic_visit(node)
            return
        saved = self.runtime
        self.runtime = saved and negated  # `if TYPE_CHECKING:` body: types only
        for child in node.body:
            self.visit(child)
        self.runtime = saved and not negated
        for child in node.orelse:
            self.visit(child)
        self.runtime = saved


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """The imports in module ``name`` (at ``path``), targets resolved against ``modules``."""
    collector = _Collector(name, is_package=path.name == "__init__.py")
    collector.visit(ast.parse(path.read_bytes(), filename=str(path)))
    out = []
    for module, names, line, runtime, module_level in collector.found:
        targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules] or [module]
        out += [Import(name, t, line, runtime, module_level) for t in targets]
    return out


def all_imports(root: Path, packages: Iterable[str] = PACKAGES) -> Iterator[Import]:
    modules = discover(root, packages)
    for name, path in modules.items():
        yield from imports_of(name, path, modules)


def oci_violations(root: Path) -> list[str]:
    """Rule A's violations in the tree under ``root``."""
    out = []
    for imp in all_imports(root, ["oci"]):
        top = imp.target.split(".")[0]
        where = f"{imp.source} (line {imp.line}) imports {imp.target}"
        if top == "oci" or top in sys.stdlib_module_names:
            continue
        if top not in OCI_THIRD_PARTY:
            never = " (never in oci)" if top in OCI_NEVER else ""
            out.append(f"{where}: not the stdlib, oci, or {sorted(OCI_THIRD_PARTY)}{never}")
        elif imp.runtime and imp.module_level:
            out.append(f"{where} at module level: import it where it is used")
    return out


def _executed(target: str, modules: dict[str, Path]) -> list[str]:
    """The modules of ours that importing ``target`` executes: its packages, then itself."""
    parts = target.split(".")
    prefixes = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return [p for p in prefixes if p in modules]


def start_path(
    root: Path, entries: Sequence[str], packages: Iterable[str] = PACKAGES
) -> tuple[dict[str, Import | None], dict[str, Import]]:
    """The static closure of ``entries``: each module reached -> the import that first
    reached it (None for the entries and their packages); and each outside top-level
    module imported on the way -> one import of it."""
    modules = discover(root, packages)
    graph: dict[str, list[Import]] = {
        name: [i for i in imports_of(name, path, modules) if i.runtime]
        for name, path in modules.items()
    }
    reached: dict[str, Import | None] = {}
    libraries: dict[str, Import] = {}
    queue: deque[str] = deque()
    for entry in entries:
        for module in _executed(entry, modules):
            if module not in reached:
                reached[module] = None
                queue.append(module)
    while queue:
        for imp in graph[queue.popleft()]:
            ours = _executed(imp.target, modules)
            if not ours:
                libraries.setdefault(imp.target.split(".")[0], imp)
            for module in ours:
                if module not in reached:
                    reached[module] = imp
                    queue.append(module)
    return reached, libraries


def chain(reached: dict[str, Import | None], module: str) -> str:
    """How ``module`` was reached: ``a -> b (a:12) -> c (b:40, in a function)``."""
    steps = [module]
    while (imp := reached[module]) is not None:
        where = f"{imp.source}:{imp.line}" + ("" if imp.module_level else ", in a function")
        steps[-1] += f" ({where})"
        module = imp.source
        steps.append(module)
    return " -> ".join(reversed(steps))


def start_path_violations(root: Path, entries: Sequence[str]) -> list[str]:
    """Rule B's violations for ``entries`` in the tree under ``root``."""
    reached, libraries = start_path(root, entries)
    out = [
        f"the start path reaches {module}: {chain(reached, module)}"
        for module in reached
        if any(_within(module, p) for p in START_PATH_NEVER)
    ]
    for library in START_PATH_NEVER_LIBRARIES:
        if library in libraries:
            imp = libraries[library]
            out.append(
                f"the start path imports {library} at {imp.source}:{imp.line}: "
                f"{chain(reached, imp.source)}"
            )
    return out


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def home_violations(root: Path) -> list[str]:
    """Rule C's violations in the tree under ``root``."""
    out = []
    for imp in all_imports(root):
        homes = HOMES.get(imp.target.split(".")[0])
        if homes is not None and not any(_within(imp.source, h) for h in homes):
            only = " or ".join(homes)
            out.append(f"{imp.source} (line {imp.line}) imports {imp.target}: only {only} may")
    return out


def entry_modules(root: Path) -> list[str]:
    """The launchers' modules (``ENTRYPOINTS``) and, for a package, all its modules."""
    from nvhook.tools.entrypoints import ENTRYPOINTS

    modules = discover(root)
    entries = [e.module for e in ENTRYPOINTS]
    return sorted({m for m in modules for e in entries if _within(m, e)})


# --------------------------------------------------------------------------- the rules, here


def test_oci_imports_only_the_stdlib_itself_and_its_cdi_libraries() -> None:
    assert oci_violations(ROOT) == []


def test_the_start_path_never_reaches_the_tools() -> None:
    entries = entry_modules(ROOT)
    assert {"nvhook.shim", "nvhook.hook"} <= set(entries)
    assert start_path_violations(ROOT, entries) == []


def test_heavy_libraries_have_one_home_each() -> None:
    assert home_violations(ROOT) == []


def test_the_start_path_closure_follows_lazy_imports() -> None:
    """Not vacuous: the closure holds what the entries import only inside functions."""
    reached, libraries = start_path(ROOT, entry_modules(ROOT))
    assert "nvhook.create" in reached  # the shim imports it inside main()
    assert "oci.cdi.registry" in reached
    assert {"pyroute2", "yaml"} <= set(libraries)  # netdev and the CDI registry, lazily


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_a_package_runs_no_submodule(package: str) -> None:
    """``import nvhook`` (done for ``import nvhook.shim``) costs nothing: neither package
    re-exports its submodules' names (docs/architecture.md, D5)."""
    code = f"import sys, {package}; print([m for m in sys.modules if m.startswith('{package}.')])"
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=False
    )
    assert out.stdout.strip() == "[]", out.stderr


# --------------------------------------------------------------------------- planted trees


def plant(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> source) under ``root``, packages' ``__init__`` too."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        for folder in [root / package, *(root / package).rglob("*")]:
            if folder.is_dir() and not (folder / "__init__.py").exists():
                (folder / "__init__.py").write_text("")
    return root


GOOD_OCI = {
    "oci/argv.py": "import os\nfrom oci import errors\nfrom . import errors as e\n",
    "oci/errors.py": "import enum\n",
    "oci/cdi/spec.py": (
        "TYPE_CHECKING = False\n"
        "if TYPE_CHECKING:\n    import yaml\n"
        "def load():\n    import yaml\n    from ..errors import x\n"
    ),
}


def test_rule_a_passes_a_clean_tree(tmp_path: Path) -> None:
    assert oci_violations(plant(tmp_path, GOOD_OCI)) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import nvhook.errors\n", "imports nvhook.errors: not the stdlib"),
        ("def f():\n    from nvhook import errors\n", "imports nvhook: not the stdlib"),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import click\n", "click"),
        ("import typing\nif typing.TYPE_CHECKING:\n    import pynvml\n", "pynvml"),
        ("def f():\n    import pyroute2.netlink\n", "pyroute2.netlink: not the stdlib"),
        ("from pydantic import BaseModel\n", "(never in oci)"),
        ("import requests\n", "imports requests: not the stdlib"),
        ("import yaml\n", "imports yaml at module level"),
        ("TYPE_CHECKING = False\nif not TYPE_CHECKING:\n    import jsonschema\n", "module level"),
        ("try:\n    import yaml\nexcept ImportError:\n    pass\n", "module level"),
    ],
)
def test_rule_a_fails_on_a_planted_import(tmp_path: Path, source: str, expected: str) -> None:
    root = plant(tmp_path, {**GOOD_OCI, "oci/cdi/bad.py": source})
    [violation] = oci_violations(root)
    assert violation.startswith("oci.cdi.bad (line ")
    assert expected in violation


START = {
    "nvhook/shim.py": (
        "TYPE_CHECKING = False\n"
        "if TYPE_CHECKING:\n    from nvhook.tools import generate\n"  # types only: fine
        "def main():\n    from nvhook.create import prepare\n"
    ),
    "nvhook/create.py": "from . import errors\nimport yaml\n",
    "nvhook/errors.py": "",
    "nvhook/hook/__init__.py": "def main():\n    from .update import run\n",
    "nvhook/hook/update.py": "import os\n",
    "nvhook/tools/generate.py": "import click\n",
    "nvhook/cli/__init__.py": "import click\nfrom nvhook.tools import generate\n",
    "nvhook/devices/__init__.py": "",
    "nvhook/devices/gpus.py": "",
}
ENTRIES = ["nvhook.shim", "nvhook.hook"]


def test_rule_b_passes_a_clean_tree(tmp_path: Path) -> None:
    root = plant(tmp_path, START)
    assert start_path_violations(root, ENTRIES) == []
    reached, libraries = start_path(root, ENTRIES)
    assert set(reached) == {
        "nvhook",
        "nvhook.shim",
        "nvhook.create",
        "nvhook.errors",
        "nvhook.hook",
        "nvhook.hook.update",
    }
    assert set(libraries) == {"yaml", "os"}


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        (  # inside a function, through a relative import in the hook's command
            {"nvhook/hook/update.py": "def run():\n    from ..tools.generate import spec\n"},
            "the start path reaches nvhook.tools: nvhook.hook -> nvhook.hook.update "
            "(nvhook.hook:2, in a function) -> nvhook.tools (nvhook.hook.update:2, in a function)",
        ),
        (  # `from package import submodule`
            {"nvhook/errors.py": "from nvhook import mock\n", "nvhook/mock/__init__.py": ""},
            "nvhook.mock (nvhook.errors:1)",
        ),
        (  # a package's __init__ runs when one of its modules is imported
            {
                "nvhook/create.py": "import nvhook.devices.gpus\n",
                "nvhook/devices/__init__.py": "import nvhook.engines.x\n",
                "nvhook/engines/x.py": "",
            },
            "nvhook.shim -> nvhook.create (nvhook.shim:5, in a function) -> nvhook.devices "
            "(nvhook.create:1) -> nvhook.engines (nvhook.devices:1)",
        ),
        (  # the executed branch of `if not TYPE_CHECKING`
            {"nvhook/errors.py": "TYPE_CHECKING = 0\nif not TYPE_CHECKING:\n    import click\n"},
            "the start path imports click at nvhook.errors:3: nvhook.shim -> nvhook.create",
        ),
        (  # the else branch of `if TYPE_CHECKING`
            {"nvhook/errors.py": "if TYPE_CHECKING:\n    pass\nelse:\n    import nvhook.cli\n"},
            "the start path reaches nvhook.cli: ",
        ),
    ],
)
def test_rule_b_fails_on_a_planted_import(
    tmp_path: Path, planted: dict[str, str], expected: str
) -> None:
    root = plant(tmp_path, {**START, **planted})
    violations = start_path_violations(root, ENTRIES)
    assert violations, "the planted import went unnoticed"
    assert any(expected in v for v in violations), violations


def test_rule_c_fails_on_a_planted_import(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            **START,
            "nvhook/devices/nvml.py": "def f():\n    import pynvml\n",
            "nvhook/cli/info.py": "import click\n",
            "nvhook/devices/gpus.py": "if TYPE_CHECKING:\n    import pynvml\n",  # types only
            "nvhook/cri/client.py": "import grpc\n",  # one of grpc's two homes: fine
            "nvhook/cri/v1/api_pb2.py": "from google.protobuf import descriptor\n",
            "nvhook/cri/images.py": "import grpc\n",
        },
    )
    assert home_violations(root) == [
        "nvhook.cri.images (line 1) imports grpc: "
        "only nvhook.deviceplugin.server or nvhook.cri.client may",
        "nvhook.devices.gpus (line 2) imports pynvml: only nvhook.devices.nvml may",
        "nvhook.tools.generate (line 1) imports click: only nvhook.cli may",
    ]
