"""The imports of ``oci`` and ``nvhook``, read statically from the source (``ast``).

One reader for the two that need it: the layer rules (``tests/test_layers.py``) and the start
image (:mod:`nvhook.tools.startimage`, which runs the start path's modules ahead of their
imports). :func:`discover` finds every importable module under a root; :func:`imports_of`
lists one module's import statements with their resolved targets, whether each can execute
(not under ``if TYPE_CHECKING:``) and whether it runs at module level or inside a function.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PACKAGES", "Import", "discover", "executed", "imports_of"]

PACKAGES = ("oci", "nvhook")


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


def executed(target: str, modules: dict[str, Path]) -> list[str]:
    """The modules of ours that importing ``target`` executes: its packages, then itself."""
    parts = target.split(".")
    prefixes = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return [p for p in prefixes if p in modules]
