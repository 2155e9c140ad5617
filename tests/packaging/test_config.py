"""packaging/config.toml, the /etc/nvhook/config.toml that install.sh and the package install."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from nvhook.settings import KEYS, defaults, load_settings
from tests.packaging.conftest import PACKAGING

CONFIG = PACKAGING / "config.toml"
SETTING = re.compile(r"^#([a-z_]+ = .*)$")


def test_as_shipped_it_means_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVHOOK_CACHE_DIR", str(tmp_path / "cache"))
    assert load_settings(str(CONFIG)) == defaults()


def test_it_lists_every_setting_with_its_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uncommenting every setting line gives a valid file naming each key once, at its default."""
    lines = CONFIG.read_text().splitlines()
    uncommented = [m.group(1) if (m := SETTING.match(line)) else line for line in lines]
    text = "\n".join(uncommented) + "\n"
    listed = {
        f"{section}.{key}": value
        for section, table in tomllib.loads(text).items()
        for key, value in table.items()
    }
    assert list(listed) == list(KEYS)  # every key, in the reference's order
    assert listed == {key: default for key, (default, *_) in KEYS.items()}
    path = tmp_path / "config.toml"
    path.write_text(text)
    monkeypatch.setenv("NVHOOK_CACHE_DIR", str(tmp_path / "cache"))
    assert load_settings(str(path)) == defaults()
