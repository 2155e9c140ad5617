"""The configuration file: defaults, validation, the marshal cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvhook.errors import ConfigError
from nvhook.settings import KEYS, defaults, load_settings, render_reference


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("NVHOOK_CACHE_DIR", str(d))
    monkeypatch.delenv("NVHOOK_CONFIG", raising=False)
    return d


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return str(path)


def test_missing_default_file_means_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nvhook.settings.DEFAULT_CONFIG_PATH", "/nonexistent/nvhook/config.toml")
    assert load_settings() == defaults()


def test_named_file_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVHOOK_CONFIG", str(tmp_path / "absent.toml"))
    with pytest.raises(ConfigError, match=r"absent\.toml: configuration file not found"):
        load_settings()


def test_values_override_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[runtime]\nmode = "cdi"\nruntimes = ["/opt/runc"]\n'
        '[policy]\naccept_env_unprivileged = false\n[host]\nroot = "/mock"\n',
    )
    s = load_settings(path)
    assert s["runtime.mode"] == "cdi"
    assert s["runtime.runtimes"] == ["/opt/runc"]
    assert s["policy.accept_env_unprivileged"] is False
    assert s["host.root"] == "/mock"
    assert s["cdi.spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[runtime\n", "invalid TOML"),
        ("[runtime]\nbogus = 1\n", "runtime.bogus: unknown setting (known keys in [runtime]:"),
        ("[nope]\nx = 1\n", "nope.x: unknown setting"),
        ("runtime = 3\n", "runtime: expected a [runtime] table"),
        ('[runtime]\nmode = "fast"\n', "runtime.mode: 'fast' is not one of auto, cdi, jit"),
        ('[runtime]\nruntimes = "runc"\n', "runtime.runtimes: expected a list of non-empty"),
        ('[policy]\naccept_volume_mounts = "yes"\n', "policy.accept_volume_mounts: expected true"),
        ('[hook]\npath = "nvhook-hook"\n', "hook.path: expected an absolute path"),
    ],
)
def test_invalid_files_name_the_key(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert needle in str(info.value)
    assert str(info.value).startswith(path)


def test_cache_is_used_and_invalidated(tmp_path: Path, cache_dir: Path) -> None:
    path = write(tmp_path, '[runtime]\nmode = "jit"\n')
    assert load_settings(path)["runtime.mode"] == "jit"
    (cached,) = cache_dir.iterdir()
    before = cached.stat().st_mtime_ns
    assert load_settings(path)["runtime.mode"] == "jit"
    assert cached.stat().st_mtime_ns == before  # a hit: not rewritten
    Path(path).write_text('[runtime]\nmode = "cdi"\n')  # size and mtime change
    assert load_settings(path)["runtime.mode"] == "cdi"


def test_corrupt_cache_is_remade(tmp_path: Path, cache_dir: Path) -> None:
    path = write(tmp_path, '[runtime]\nmode = "jit"\n')
    load_settings(path)
    (cached,) = cache_dir.iterdir()
    cached.write_bytes(b"\x00garbage")
    assert load_settings(path)["runtime.mode"] == "jit"


def test_unwritable_cache_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("NVHOOK_CACHE_DIR", str(blocker / "sub"))
    path = write(tmp_path, '[runtime]\nmode = "jit"\n')
    assert load_settings(path)["runtime.mode"] == "jit"


def test_reference_lists_every_key() -> None:
    table = render_reference()
    for key in KEYS:
        assert f"`{key}`" in table
