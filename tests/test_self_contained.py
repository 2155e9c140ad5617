"""The repository explains itself: no file refers to material outside the checkout.

The project grew from a design card, house style and runtime notes kept beside the
checkout (``../shared/``); their content now lives in docs/architecture.md, and test
data copied from there lives under ``tests/data/`` with a SOURCES.md naming its origin.
A clone of the repository alone must build, test and explain itself.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.containers import require

ROOT = Path(__file__).resolve().parents[1]
#: How outside material used to be cited: the folder, and the names of its documents.
OUTSIDE = re.compile(
    rb"\.\./shared/|\bshared/(?:cdi|specs|k8s)\b|\b(?:DESIGN|STYLE|RUNTIMES|DRIVER-FILES)\.md\b"
)


def tracked_files() -> list[Path]:
    if not (ROOT / ".git").exists():  # a copy of the files (tests/packaging/test_pythons.py)
        pytest.skip(f"{ROOT} is not a git checkout")
    out = subprocess.run(
        [require("git"), "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout
    return [ROOT / name.decode() for name in out.split(b"\0") if name]


def test_no_tracked_file_cites_material_outside_the_checkout() -> None:
    me = Path(__file__).resolve()
    offenders = []
    for path in tracked_files():
        if path == me or not path.is_file():
            continue
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(
                    f"{path.relative_to(ROOT)}:{number}: {line.decode(errors='replace').strip()}"
                )
    assert offenders == [], "cite docs/architecture.md instead:\n" + "\n".join(offenders)


def test_the_pattern_catches_each_old_citation() -> None:
    for text in (b"see ../shared/DESIGN.md", b"(RUNTIMES.md)", b"DRIVER-FILES.md is the source",
                 b"STYLE.md says", b"copied from shared/cdi/testdata"):  # fmt: skip
        assert OUTSIDE.search(text), text
    assert not OUTSIDE.search(b"docs/architecture.md D5; the shared cache; shared_dir")


def test_copied_test_data_names_its_source() -> None:
    for folder in ("tests/data/specs", "tests/data/cdi/schema-testdata", "oci/cdi/schema"):
        sources = ROOT / folder / "SOURCES.md"
        assert sources.is_file(), f"{folder} has no SOURCES.md"
        assert sources.read_text().strip(), f"{sources} is empty"
