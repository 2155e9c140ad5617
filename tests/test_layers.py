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
generated ``nvhook.deviceplugin.v1beta1``, ``nvhook.cri.v1`` and ``nvhook.nri.pb`` (NRI's
ttRPC has no grpc: ``nvhook.nri.ttrpc`` speaks it over a plain socket), pydantic only in
``nvhook.deviceplugin.config``, pyroute2 only in ``nvhook.hook.netdev``, click only in
``nvhook.cli``, tomlkit only in ``nvhook.engines``, jsonschema and referencing only in
``oci.cdi.validate`` (type-only imports included), so what each costs is paid in one place.

Rule D, the start path is a ladder: :data:`RANKS` gives every module the launchers reach
(rule B's closure) a rank, from ``oci`` (0) up to the process entry points (9), and an
import that can execute (module level or inside a function; ``TYPE_CHECKING`` imports are
exempt) may only target a lower rank, or a module of its own package at the same rank (one
entry of the table, such as ``oci`` or ``nvhook.hook``, or one package below the top level). A
module on the start path without a rank fails too, and so does a cycle among the start
path's imports (the packages a module is inside, which Python runs first anyway, do not
count as its imports). A failure prints the chain from an entry point. The ranks are
docs/architecture.md section 2's table.

Each rule is also run on a planted tree with a bad import, to show it fails when violated.
``tests/nvhook/test_shim_imports.py`` checks the other side: what the shim really loads.
"""

from __future__ import annotations

import subprocess
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pytest

from nvhook.tools.importgraph import PACKAGES, Import, discover, executed, imports_of

ROOT = Path(__file__).resolve().parents[1]

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
    # and the DRA driver's (plugin registration, DRA, dra-health; kubelet's side for the stand-ins)
    "grpc": ("nvhook.deviceplugin.server", "nvhook.cri.client", "nvhook.dra.server"),
    # protobuf, through the generated api_pb2 of each
    "google": (
        "nvhook.deviceplugin.v1beta1",
        "nvhook.cri.v1",
        "nvhook.nri.pb",
        "nvhook.dra.kubelet",
    ),
    "pydantic": ("nvhook.deviceplugin.config",),
}

#: Rule D: the ranks of the start path (docs/architecture.md section 2), by module or
#: package (the longest prefix wins). An import may only go down, or sideways within its
#: own package.
RANKS: dict[str, int] = {
    "oci": 0,
    # values and errors: no import above oci ("nvhook" is the package module alone)
    "nvhook": 1,
    "nvhook.constants": 1,
    "nvhook.errors": 1,
    "nvhook.legacyhook": 1,
    "nvhook.toolkit_config": 1,
    # the settings; reading a container's rootfs and spec; the shim server's peer and words
    "nvhook.settings": 2,
    "nvhook.rootfs": 2,
    "nvhook.peer": 2,
    "nvhook.shim_protocol": 2,
    "nvhook.gpurecords": 2,
    # what a container asks for; the hook's steps (each one job over a rootfs)
    "nvhook.requests": 3,
    "nvhook.hook": 3,
    # devices; the native front-end's data file (its triggers come from the requests)
    "nvhook.devices": 4,
    "nvhook.native": 4,
    # driver files, nodes and the hooks to inject
    "nvhook.discover": 5,
    # the jit planner; what to do about a CDI failure
    "nvhook.planner": 6,
    "nvhook.cdihints": 6,
    # other vendors' discovery and edits (beside the planner; discover's hooks below it)
    "nvhook.vendors": 6,
    # the create path: requests, then devices and edits, applied in memory
    "nvhook.create": 7,
    # one runtime call up to its exec: argv, settings, the create, the messages
    "nvhook.call": 8,
    # the process entry points: runtime shim, shim server, hook dispatcher, hook mode
    "nvhook.shim": 9,
    "nvhook.server": 9,
    "nvhook.hook.dispatch": 9,
    "nvhook.hook.prestart": 9,
}


# --------------------------------------------------------------------------- the checker


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
        for module in executed(entry, modules):
            if module not in reached:
                reached[module] = None
                queue.append(module)
    while queue:
        for imp in graph[queue.popleft()]:
            ours = executed(imp.target, modules)
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


def ranked_as(module: str, ranks: dict[str, int] = RANKS) -> str | None:
    """The longest prefix of ``module`` that ``ranks`` holds (None: unranked); ``nvhook``
    ranks its package module alone, so a new module of it needs a rank of its own."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in ranks and (prefix != "nvhook" or prefix == module):
            return prefix
    return None


def rank_of(module: str, ranks: dict[str, int] = RANKS) -> int | None:
    """``module``'s rank: that of :func:`ranked_as` (None: unranked)."""
    unit = ranked_as(module, ranks)
    return None if unit is None else ranks[unit]


def _same_unit(source: str, target: str, modules: dict[str, Path], ranks: dict[str, int]) -> bool:
    """Whether an import between two modules of one rank stays in its own package: both
    ranked by one entry of ``ranks`` (``oci``, ``nvhook.hook``), or in one package below
    the top level (``nvhook.hook.dispatch`` and ``nvhook.hook.prestart``)."""
    if ranked_as(source, ranks) == ranked_as(target, ranks):
        return True
    package = _package_of(source, modules)
    return "." in package and package == _package_of(target, modules)


def _package_of(module: str, modules: dict[str, Path]) -> str:
    path = modules.get(module)
    if path is not None and path.name == "__init__.py":
        return module
    return module.rpartition(".")[0]


def ladder_violations(
    root: Path, entries: Sequence[str], ranks: dict[str, int] = RANKS
) -> list[str]:
    """Rule D's violations for ``entries`` in the tree under ``root``."""
    modules = discover(root)
    reached, _ = start_path(root, entries)
    out: list[str] = []
    graph: dict[str, set[str]] = {}
    for source in sorted(reached):
        rank = rank_of(source, ranks)
        if rank is None:
            out.append(f"{source} has no rank (add it to RANKS): {chain(reached, source)}")
            continue
        graph[source] = set()
        for imp in imports_of(source, modules[source], modules):
            if not imp.runtime:
                continue
            for target in executed(imp.target, modules):
                if target == source or _within(source, target):
                    continue  # itself, or a package it is inside: already running
                graph[source].add(target)
                theirs = rank_of(target, ranks)
                where = f"{source}:{imp.line}" + ("" if imp.module_level else ", in a function")
                if theirs is None or theirs < rank:
                    continue  # unranked targets are reported as modules of their own
                if theirs == rank and _same_unit(source, target, modules, ranks):
                    continue
                how = "up" if theirs > rank else "sideways, out of its package"
                out.append(
                    f"{source} (rank {rank}) imports {target} (rank {theirs}) at {where}: "
                    f"{how}; reached as {chain(reached, source)}"
                )
    out += [f"an import cycle on the start path: {c}" for c in _cycles(graph)]
    return out


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each strongly connected set of more than one module, as ``a -> b -> … -> a``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[str] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the start path is a few dozen deep
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                ring = ", ".join(sorted(members))
                found.append(f"{_cycle_path(graph, set(members))} ({len(members)} modules: {ring})")

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _cycle_path(graph: dict[str, set[str]], members: set[str]) -> str:
    """One cycle through the smallest member of ``members``, by a breadth-first search."""
    start = min(members)
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node] & members):
            if nxt == start:
                steps = [node]
                while steps[-1] != start:
                    steps.append(previous[steps[-1]])
                return " -> ".join([*reversed(steps), start])
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    raise AssertionError("a strongly connected set has a cycle")  # pragma: no cover


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
    assert {"nvhook.shim", "nvhook.hook.dispatch", "nvhook.server"} <= set(entries)
    assert start_path_violations(ROOT, entries) == []


def test_heavy_libraries_have_one_home_each() -> None:
    assert home_violations(ROOT) == []


def test_the_start_path_closure_follows_lazy_imports() -> None:
    """Not vacuous: the closure holds what the entries import only inside functions."""
    reached, libraries = start_path(ROOT, entry_modules(ROOT))
    assert "nvhook.create" in reached  # the shim imports it inside main()
    assert "oci.cdi.registry" in reached
    assert {"pyroute2", "yaml"} <= set(libraries)  # netdev and the CDI registry, lazily


def test_the_start_path_is_a_ladder() -> None:
    assert ladder_violations(ROOT, entry_modules(ROOT)) == []


def entry_point_importers(root: Path, entries: Sequence[str]) -> list[str]:
    """The imports, anywhere in the packages (tools too; types-only exempt), of a module a
    launcher runs (``entries``): nothing imports a process entry point."""
    return [
        f"{imp.source} (line {imp.line}) imports the entry point {imp.target}"
        for imp in all_imports(root)
        if imp.runtime and imp.target in entries and imp.source not in entries
    ]


def test_nothing_imports_a_process_entry_point() -> None:
    from nvhook.tools.entrypoints import ENTRYPOINTS

    entries = [e.module for e in ENTRYPOINTS]
    assert set(entries) == {"nvhook.shim", "nvhook.hook.dispatch", "nvhook.server"}
    assert entry_point_importers(ROOT, entries) == []


def test_an_import_of_an_entry_point_is_caught(tmp_path: Path) -> None:
    root = plant(
        tmp_path, {**START, "nvhook/tools/report.py": "def f():\n    import nvhook.shim\n"}
    )
    assert entry_point_importers(root, ENTRIES) == [
        "nvhook.tools.report (line 2) imports the entry point nvhook.shim"
    ]


def test_every_rank_names_a_module_that_exists() -> None:
    modules = discover(ROOT)
    assert [name for name in RANKS if name not in modules] == []


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
        "only nvhook.deviceplugin.server or nvhook.cri.client or nvhook.dra.server may",
        "nvhook.devices.gpus (line 2) imports pynvml: only nvhook.devices.nvml may",
        "nvhook.tools.generate (line 1) imports click: only nvhook.cli may",
    ]


LADDER = {
    "nvhook/shim.py": "def main():\n    from nvhook.create import prepare\n",
    "nvhook/create.py": (
        "from nvhook import errors\nfrom nvhook.devices import gpus\n"
        "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from nvhook import shim\n"  # types only
    ),
    "nvhook/errors.py": "import os\n",
    "nvhook/devices/__init__.py": "",
    "nvhook/devices/gpus.py": "from . import procfs\nfrom nvhook.errors import x\n",
    "nvhook/devices/procfs.py": "from nvhook.devices import gpus as _g\nimport nvhook.errors\n",
    "nvhook/hook/__init__.py": "",
    "nvhook/hook/dispatch.py": "def main():\n    from nvhook.hook import prestart, step\n",
    "nvhook/hook/prestart.py": (
        "from nvhook.create import prepare\nfrom nvhook.hook.step import run\n"
    ),
    "nvhook/hook/step.py": "from nvhook.errors import HookError\n",
}
LADDER_ENTRIES = ["nvhook.shim", "nvhook.hook.dispatch"]
LADDER_RANKS = {
    "nvhook": 1,
    "nvhook.errors": 1,
    "nvhook.hook": 2,
    "nvhook.devices": 3,
    "nvhook.create": 4,
    "nvhook.shim": 5,
    "nvhook.hook.dispatch": 5,
    "nvhook.hook.prestart": 5,
}


def test_rule_d_passes_a_clean_ladder(tmp_path: Path) -> None:
    """Down, sideways in one package (devices.gpus <-> procfs is a cycle, though: below),
    a package a module is inside, and a types-only import up are all fine."""
    files = {**LADDER, "nvhook/devices/procfs.py": "import nvhook.errors\n"}
    assert ladder_violations(plant(tmp_path, files), LADDER_ENTRIES, LADDER_RANKS) == []


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        (  # up, inside a function: the chain names how the start path gets there
            {"nvhook/errors.py": "def f():\n    from nvhook.create import prepare\n"},
            "nvhook.errors (rank 1) imports nvhook.create (rank 4) at nvhook.errors:2, in a "
            "function: up; reached as nvhook.shim -> nvhook.create (nvhook.shim:2, in a "
            "function) -> nvhook.errors (nvhook.create:1)",
        ),
        (  # a step importing the dispatcher's package module at a higher rank
            {"nvhook/hook/step.py": "from nvhook.hook.prestart import x\n"},
            "nvhook.hook.step (rank 2) imports nvhook.hook.prestart (rank 5) at "
            "nvhook.hook.step:1: up",
        ),
        (  # an entry point importing another: same rank, another package
            {"nvhook/hook/prestart.py": "from nvhook.shim import main\n"},
            "nvhook.hook.prestart (rank 5) imports nvhook.shim (rank 5) at "
            "nvhook.hook.prestart:1: sideways, out of its package",
        ),
        (  # a module with no rank
            {"nvhook/create.py": "from nvhook import extra\n", "nvhook/extra.py": ""},
            "nvhook.extra has no rank (add it to RANKS): nvhook.shim -> nvhook.create",
        ),
        (  # a cycle inside one package: allowed by rank, refused as a ring
            {},
            "an import cycle on the start path: nvhook.devices.gpus -> nvhook.devices.procfs "
            "-> nvhook.devices.gpus",
        ),
        (  # the executed branch of `if not TYPE_CHECKING` counts
            {"nvhook/errors.py": "if not TYPE_CHECKING:\n    import nvhook.devices.gpus\n"},
            "nvhook.errors (rank 1) imports nvhook.devices (rank 3) at nvhook.errors:2: up",
        ),
    ],
)
def test_rule_d_fails_on_a_planted_import(
    tmp_path: Path, planted: dict[str, str], expected: str
) -> None:
    root = plant(tmp_path, {**LADDER, **planted})
    violations = ladder_violations(root, LADDER_ENTRIES, LADDER_RANKS)
    assert violations, "the planted import went unnoticed"
    assert any(v.startswith(expected) for v in violations), violations


def report(root: Path = ROOT, ranks: dict[str, int] = RANKS) -> str:
    """The start path's shape, for a person: modules, those on a cycle, imports going up."""
    entries = entry_modules(root)
    reached, _ = start_path(root, entries)
    violations = ladder_violations(root, entries, ranks)
    rings = [v for v in violations if v.startswith("an import cycle")]
    on_ring = {m for v in rings for m in v.rpartition(" modules: ")[2].rstrip(")").split(", ")}
    up = [v for v in violations if ": up;" in v or "sideways, out of its package" in v]
    lines = [
        f"start path: {len(reached)} modules from {len(entries)} entry modules",
        f"on an import cycle: {len(on_ring)} modules in {len(rings)} cycles",
        *(f"  {v}" for v in rings),
        f"imports against the ranks: {len(up)}",
        *(f"  {v}" for v in up),
        f"unranked: {sum('has no rank' in v for v in violations)}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":  # python -m tests.test_layers: the ladder's report for this tree
    print(report())
