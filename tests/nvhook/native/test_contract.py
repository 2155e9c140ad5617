"""nvhook-contract.h: generated from the Python values, and the C programs copy none of them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from nvhook.native import HOOK_SOURCE, SOURCE
from nvhook.native.contract import HEADER, render

FIX = "regenerate it: python -m nvhook.native.contract"


def test_the_checked_in_header_is_the_generator_s_output() -> None:
    assert Path(HEADER).read_text(encoding="utf-8") == render(), FIX


def test_check_says_the_checked_in_header_is_current() -> None:
    run = [sys.executable, "-m", "nvhook.native.contract", "--check"]
    assert subprocess.run(run, check=False).returncode == 0


def test_both_programs_include_it_and_name_it_beside_them() -> None:
    for source in (SOURCE, HOOK_SOURCE):
        text = Path(source).read_text()
        assert '#include "nvhook-contract.h"' in text, source
        assert Path(source).parent == Path(HEADER).parent


def _header_strings() -> set[str]:
    """Every string literal of the header's values (its comments left out)."""
    text = Path(HEADER).read_text()
    values = [line.split("/*")[0] for line in text.splitlines() if line.startswith("#define")]
    found = {m for line in values for m in re.findall(r'"((?:[^"\\]|\\.)*)"', line)}
    return found - {"", "1", "0"}  # too short to say anything: a digit is also C's own


def test_no_shared_value_is_copied_into_the_c() -> None:
    """A string the header defines spelled again in a C file is a hand copy (comments
    aside)."""
    strings = _header_strings()
    assert len(strings) > 60
    copies = []
    # the hook's own words: the OCI state's and config.json's field names (the spec's), the
    # JSON literals it parses, what its ldconfig child says failed
    own = {SOURCE: set(), HOOK_SOURCE: {"bundle", "root", "true", "false", "exec"}}
    for source in (SOURCE, HOOK_SOURCE):
        code = re.sub(r"/\*.*?\*/", "", Path(source).read_text(), flags=re.S)
        code = re.sub(r"'(?:[^'\\]|\\.)+'", "", code)  # '"' is no string
        code = re.sub(r"^#\s*(error|include).*$", "", code, flags=re.M)
        literals = set(re.findall(r'"((?:[^"\\]|\\.)*)"', code)) - own[source]
        # the whole literal, or inside one (a format, a concatenation) when it is long
        copied = {s for s in strings for lit in literals if s == lit or (len(s) >= 6 and s in lit)}
        copies += [f'{Path(source).name}: "{s}"' for s in sorted(copied)]
    assert copies == []
