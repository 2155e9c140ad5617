"""The one table of cost figures that nvhook's code and docs quote.

    .venv/bin/python bench/figures.py [-n RUNS]

Every figure a docstring, ``docs/`` or the README gives for what something costs a process
(the interpreter's start, a standard or third-party import, a hook run, a ``cdi generate``
run) is a row of this table; they cite "bench/figures.py" rather than carry a number of
their own, so that one run here updates them all. The rows, each RUNS runs interleaved
round by round (so a drift of the machine's speed reaches every row alike), as medians
and minima in ms:

- ``python -I -S -c pass``: the floor, this interpreter's start without ``site``;
- ``import X`` for the standard modules the start path keeps out (``typing``, ``json``,
  ``tomllib``, ``dataclasses``, ``re``, ``enum``, ``pathlib``, ``subprocess``), as
  ``python -I -S -c "import X"``, with the difference to the floor;
- ``import X`` for the third-party libraries with one home each (``yaml``, ``pynvml``,
  ``click``, ``pydantic``, ``pyroute2``, ``grpc``), as ``python -I -c "import X"`` (they
  live in site-packages), with the difference to ``python -I -c pass``;
- ``nvhook-hook create-container`` (two links, one ld cache folder) through the native
  hook and through its Python launcher (``bench/hooks.py`` has the variations);
- ``nvhook cdi generate`` for the ``dgx-a100`` mock through its click-free parse and, with
  the ``-oFILE`` form that parse leaves to click, through click
  (``nvhook/cli/cdi_generate_fast.py``; ``bench/cli.py`` has its budget).

The machine is shared and noisy: compare rows of one run, never numbers across runs.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hooks import ENV, LIBDIR, _launcher, _prepare  # bench/hooks.py

from nvhook.mock import create

REPO = Path(__file__).resolve().parents[1]
STDLIB = ("typing", "json", "tomllib", "dataclasses", "re", "enum", "pathlib", "subprocess")
THIRD_PARTY = ("yaml", "pynvml", "click", "pydantic", "pyroute2", "grpc")


class Row:
    """One figure: its command, its stdin, the row it is measured against, its times."""

    def __init__(
        self, name: str, argv: list[str], *, stdin: str = "", env: dict[str, str] | None = None,
        over: str | None = None,
    ) -> None:  # fmt: skip
        self.name, self.argv, self.stdin, self.env, self.over = name, argv, stdin, env, over
        self.times: list[float] = []

    def run(self) -> None:
        start = time.perf_counter()
        proc = subprocess.run(
            self.argv, input=self.stdin, capture_output=True, text=True, env=self.env
        )
        self.times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"{self.name}: {' '.join(self.argv)} failed: {proc.stderr.strip()}")


def rows(work: Path) -> list[Row]:
    python = sys.executable
    out: list[Row] = [
        Row("python -I -S -c pass", [python, "-I", "-S", "-c", "pass"]),
        Row("python -I -c pass", [python, "-I", "-c", "pass"]),
    ]
    for name in STDLIB:
        out.append(
            Row(f"import {name}", [python, "-I", "-S", "-c", f"import {name}"],
                over="python -I -S -c pass")
        )  # fmt: skip
    for name in THIRD_PARTY:
        out.append(
            Row(f"import {name}", [python, "-I", "-c", f"import {name}"], over="python -I -c pass")
        )
    _bundle, state = _prepare(work)
    args = ["create-container", "--link", f"libnvhookbench.so.1::{LIBDIR}/a.so",
            "--link", f"libnvhookbench.so.1::{LIBDIR}/b.so", "--folder", LIBDIR]  # fmt: skip
    native = _launcher(work / "native", python=False)
    with open(native, "rb") as f:
        if f.read(4) == b"\x7fELF":
            out.append(Row("nvhook-hook create-container (native)", [native, *args],
                           stdin=state, env=ENV))  # fmt: skip
    launcher = _launcher(work / "python", python=True)
    out.append(
        Row("nvhook-hook create-container (Python)", [launcher, *args], stdin=state, env=ENV,
            over="python -I -S -c pass")
    )  # fmt: skip
    root = work / "dgx-a100"
    create("dgx-a100", root, nodes="file")
    nvhook = str(Path(python).parent / "nvhook")
    spec = str(work / "nvidia.json")
    generate = [nvhook, "cdi", "generate", "--root", str(root)]
    out += [
        Row("nvhook cdi generate (click-free parse)", [*generate, "-o", spec],
            over="python -I -S -c pass"),
        Row("nvhook cdi generate (click's parse)", [*generate, f"-o{spec}"],
            over="python -I -S -c pass"),
    ]  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=15, help="runs per row (default 15)")
    args = parser.parse_args()
    for package in ("oci", "nvhook"):
        compileall.compile_dir(str(REPO / package), quiet=1)
    with tempfile.TemporaryDirectory(prefix="nvhook-bench-figures-") as tmp:
        table = rows(Path(tmp))
        for row in table:  # once each, untimed: page cache, bytecode
            row.run()
            row.times.clear()
        for _ in range(args.runs):
            for row in table:
                row.run()
    medians = {row.name: statistics.median(row.times) for row in table}
    print("| figure | median ms | min ms | over |\n|---|---:|---:|---:|")
    for row in table:
        med = medians[row.name]
        over = f"{(med - medians[row.over]) * 1e3:+.1f} ({row.over})" if row.over else ""
        print(f"| {row.name} | {med * 1e3:.1f} | {min(row.times) * 1e3:.1f} | {over} |")
    load = os.getloadavg()[0]
    print(f"\n{args.runs} runs each, interleaved; {os.cpu_count()} CPUs, load {load:.1f}; "
          f"Python {sys.version.split()[0]}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
