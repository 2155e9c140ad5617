"""bench/build-anchor.sh: what it refuses before building (the build itself is the user's
business: it needs NVIDIA's source tree and a Go toolchain, bench/README.md "The anchor")."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "build-anchor.sh"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip


def test_usage_without_a_source_and_an_output() -> None:
    done = run()
    assert done.returncode == 2 and done.stderr.startswith("usage: ")


def test_a_tree_that_does_not_vendor_its_modules_is_named(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "go.mod").write_text("module example.com/x\n")
    done = run(str(tmp_path / "src"), str(tmp_path / "out"))
    assert done.returncode == 2
    why = "not a vendored nvidia-container-toolkit tree (no go.mod or vendor/)"
    assert done.stderr == f"{tmp_path / 'src'}: {why}\n"


def test_a_go_root_without_go_is_named(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "vendor").mkdir(parents=True)
    (src / "go.mod").write_text("module github.com/NVIDIA/nvidia-container-toolkit\n")
    (src / "versions.mk").write_text("LIB_VERSION := 1.20.0\nLIB_TAG :=\n")
    (tmp_path / "root").mkdir()
    done = run(str(src), str(tmp_path / "out"), str(tmp_path / "root"))
    assert done.returncode == 2
    assert done.stderr == f"{tmp_path / 'root'}: no usr/bin/go (install golang-go there)\n"
