"""bench/start.py --server: the server reads the node's config, as a node's server does: the
cases' spec directories, once their files have settled, so that it parses them ahead."""

from __future__ import annotations

import os
import time
import tomllib
from pathlib import Path

import pytest

from bench.start import server_config
from oci.cdi import index


def test_the_server_config_names_each_case_s_spec_directory_once_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "RACY_NS", 300_000_000)  # 0.3 s instead of 2 s
    for profile in ("h100-pcie", "dgx-a100"):
        (tmp_path / f"cdi-{profile}").mkdir()
        (tmp_path / f"cdi-{profile}" / "nvidia.json").write_text("{}")
    written = time.time_ns()
    names = ["h100-pcie 1 GPU cdi", "dgx-a100 1 GPU cdi", "dgx-a100 all jit"]
    config = server_config(tmp_path, names, None)
    assert time.time_ns() - written >= index.RACY_NS  # a fresher file is parsed per call
    dirs = tomllib.loads(config.read_text())["cdi"]["spec_dirs"]
    assert dirs == [str(tmp_path / "cdi-h100-pcie"), str(tmp_path / "cdi-dgx-a100")]
    given = tmp_path / "given"
    given.mkdir()
    os.utime(tmp_path / "cdi-h100-pcie" / "nvidia.json")  # not read: --spec-dir replaces them
    started = time.monotonic()
    config = server_config(tmp_path, names, given)
    assert time.monotonic() - started < 0.3  # nothing to wait for in an empty directory
    assert tomllib.loads(config.read_text())["cdi"]["spec_dirs"] == [str(given)]
