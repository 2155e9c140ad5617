"""The configuration file: defaults, validation, the typed record, the marshal cache."""

from __future__ import annotations

import marshal
import os
import sys
from pathlib import Path

import pytest

from nvhook.errors import ConfigError
from nvhook.settings import (
    KEYS,
    MAX_CONFIG_BYTES,
    PASS_THROUGH_KEYS,
    Settings,
    defaults,
    fallback_settings,
    field_name,
    load_settings,
    render_reference,
)


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
    assert s.runtime_mode == "cdi"
    assert s.runtime_runtimes == ("/opt/runc",)
    assert s.policy_accept_env_unprivileged is False
    assert s.host_root == "/mock"
    assert s.cdi_spec_dirs == ("/etc/cdi", "/var/run/cdi")
    assert s == defaults()._replace(
        runtime_mode="cdi",
        runtime_runtimes=("/opt/runc",),
        policy_accept_env_unprivileged=False,
        host_root="/mock",
    )
    assert load_settings(path) == s  # from the cache: the same record


def test_the_record_has_a_typed_field_per_key() -> None:
    """Settings is declared by hand (so that type checkers see it): it must follow KEYS."""
    assert Settings.__frozen_fields__ == tuple(field_name(k) for k in KEYS)
    types = {"list of strings": "tuple[str, ...]", "boolean": "bool"}
    for key, (default, kind, _allowed, _doc) in KEYS.items():
        assert Settings.__annotations__[field_name(key)] == types.get(kind, "str"), key
        value = getattr(defaults(), field_name(key))
        assert value == (tuple(default) if isinstance(default, list) else default)


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
    assert load_settings(path).runtime_mode == "jit"
    (cached,) = cache_dir.glob("config-*")  # beside it: the native front-end's data
    before = cached.stat().st_mtime_ns
    assert load_settings(path).runtime_mode == "jit"
    assert cached.stat().st_mtime_ns == before  # a hit: not rewritten
    Path(path).write_text('[runtime]\nmode = "cdi"\n')  # size and mtime change
    assert load_settings(path).runtime_mode == "cdi"


def test_corrupt_cache_is_remade(tmp_path: Path, cache_dir: Path) -> None:
    path = write(tmp_path, '[runtime]\nmode = "jit"\n')
    load_settings(path)
    (cached,) = cache_dir.glob("config-*")  # beside it: the native front-end's data
    cached.write_bytes(b"\x00garbage")
    assert load_settings(path).runtime_mode == "jit"


def test_unwritable_cache_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("NVHOOK_CACHE_DIR", str(blocker / "sub"))
    path = write(tmp_path, '[runtime]\nmode = "jit"\n')
    assert load_settings(path).runtime_mode == "jit"


def test_cache_names_the_python_that_wrote_it(tmp_path: Path, cache_dir: Path) -> None:
    load_settings(write(tmp_path, ""))
    (cached,) = cache_dir.glob("config-*")  # beside it: the native front-end's data
    assert cached.name.endswith(f".py{sys.version_info[0]}{sys.version_info[1]}.marshal")
    assert oct(cached.stat().st_mode & 0o777) == oct(0o600)
    assert oct(cache_dir.stat().st_mode & 0o777) == oct(0o700)


def _forge(cached: Path, **changes: object) -> None:
    """Rewrite the cached values in place (same owner and mode, same key)."""
    key, values = marshal.loads(cached.read_bytes())
    fields = list(Settings.__frozen_fields__)
    forged = list(values)
    for name, value in changes.items():
        forged[fields.index(name)] = value
    cached.write_bytes(marshal.dumps((key, tuple(forged))))


def test_cached_values_are_believed_when_valid(tmp_path: Path, cache_dir: Path) -> None:
    """The control for the next tests: a well-formed copy is what load_settings returns."""
    path = write(tmp_path, '[runtime]\nmode = "jit"\n')
    load_settings(path)
    (cached,) = cache_dir.glob("config-*")  # beside it: the native front-end's data
    _forge(cached, runtime_mode="cdi")
    assert load_settings(path).runtime_mode == "cdi"


@pytest.mark.parametrize(
    "forged",
    [
        {"runtime_mode": "turbo"},
        {"runtime_log_file": "relative.log"},
        {"policy_accept_volume_mounts": 1},
        {"cdi_spec_dirs": ("/etc/cdi", "")},
        {"cdi_spec_dirs": "/etc/cdi"},
        {"host_root": None},
    ],
    ids=lambda f: next(iter(f)),
)
def test_a_cached_value_the_validator_rejects_is_discarded(
    tmp_path: Path, cache_dir: Path, forged: dict[str, object]
) -> None:
    path = write(tmp_path, '[runtime]\nmode = "jit"\n')
    expected = load_settings(path)
    (cached,) = cache_dir.glob("config-*")  # beside it: the native front-end's data
    _forge(cached, **forged)
    assert load_settings(path) == expected
    assert load_settings(path) == expected  # and the copy was made afresh
    assert marshal.loads(cached.read_bytes())[1] == expected._values()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_a_cache_owned_by_another_uid_is_ignored(tmp_path: Path, cache_dir: Path) -> None:
    path = write(tmp_path, '[runtime]\nmode = "jit"\n')
    load_settings(path)
    (cached,) = cache_dir.glob("config-*")  # beside it: the native front-end's data
    _forge(cached, runtime_mode="cdi")
    os.chown(cached, 65534, 65534)
    assert load_settings(path).runtime_mode == "jit"
    assert cached.stat().st_uid == 0  # replaced by one of ours


def test_a_cache_directory_others_can_write_is_not_used(tmp_path: Path, cache_dir: Path) -> None:
    path = write(tmp_path, '[runtime]\nmode = "jit"\n')
    load_settings(path)
    (cached,) = cache_dir.glob("config-*")  # beside it: the native front-end's data
    _forge(cached, runtime_mode="cdi")
    files = sorted(p.name for p in cache_dir.iterdir())
    cache_dir.chmod(0o777)
    warnings: list[str] = []
    assert load_settings(path, warnings=warnings).runtime_mode == "jit"
    assert warnings == [
        f"cache directory {cache_dir} is writable by group or others (mode 0777): chmod go-w "
        "it; not using it till then"
    ]
    assert load_settings(path).runtime_mode == "jit"  # no warnings list: still refused
    assert sorted(p.name for p in cache_dir.iterdir()) == files  # nothing written there
    assert marshal.loads(cached.read_bytes())[1][1] == "cdi"


def test_reference_lists_every_key() -> None:
    table = render_reference()
    for key in KEYS:
        assert f"`{key}`" in table


def test_a_file_that_is_not_regular_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    """A FIFO and /dev/zero too, in subprocesses with timeouts: test_shim_failsafe.py."""
    path = tmp_path / "config.toml"
    path.mkdir()
    with pytest.raises(ConfigError) as info:
        load_settings(str(path))
    assert str(info.value) == (
        f"{path}: not a regular file (a directory): replace it with the TOML settings file"
    )


def test_a_file_over_the_cap_is_refused(tmp_path: Path) -> None:
    text = "[runtime]\n" + "#" * (MAX_CONFIG_BYTES - len("[runtime]\n"))
    assert load_settings(write(tmp_path, text)) == defaults()  # exactly the cap: read
    with pytest.raises(ConfigError, match=r"config\.toml: larger than 256 KiB, too big for a"):
        load_settings(write(tmp_path, text + "#"))


def test_invalid_utf8_names_the_byte_offset(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b'[runtime]\nmode = "caf\xe9"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(str(path))
    assert str(info.value) == (
        f"{path}: not UTF-8: invalid byte 0xe9 at byte offset 21: save the file as UTF-8"
    )


def test_fallback_keeps_the_pass_through_keys_of_a_file_that_parses(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[runtime]\nruntimes = ["/opt/runc"]\nlog_file = "/tmp/x.log"\nlog_level = "debug"\n'
        'mode = "turbo"\n[policy]\naccept_volume_mounts = true\nbogus = 1\n',
    )
    with pytest.raises(ConfigError):
        load_settings(path)
    assert PASS_THROUGH_KEYS == ("runtime.runtimes", "runtime.log_file", "runtime.log_level")
    assert fallback_settings(path) == defaults()._replace(
        runtime_runtimes=("/opt/runc",), runtime_log_file="/tmp/x.log", runtime_log_level="debug"
    )  # never the policy, whatever the file says


@pytest.mark.parametrize(
    "content",
    [
        b'[runtime]\nruntimes = ["/opt/runc"\n',  # not TOML
        b'[runtime]\nruntimes = ["/opt/r\xffunc"]\n',  # not UTF-8
        b'[runtime]\nruntimes = "/opt/runc"\nlog_file = "relative.log"\n',  # invalid values
        b"runtime = 1\n",  # not a table
    ],
)
def test_fallback_is_the_defaults_when_the_keys_cannot_be_read_safely(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(content)
    assert fallback_settings(str(path)) == defaults()
    assert fallback_settings(str(tmp_path / "absent.toml")) == defaults()


@pytest.mark.parametrize(
    "text",
    [
        "[runtime]\nlog_file = '/x.log'\nx = " + "[" * 5000 + "]" * 5000,
        "[runtime]\nlog_file = '/x.log'\nx = " + "{a = " * 5000 + "1" + "}" * 5000,
        "[runtime]\nlog_file = '/x.log'\n[" + ".".join(["t"] * 5000) + "]\n",
    ],
    ids=["arrays", "inline tables", "tables"],
)
def test_nesting_too_deep_is_refused_and_fallback_never_raises(tmp_path: Path, text: str) -> None:
    from nvhook.errors import ConfigError
    from oci.nesting import TOML_MAX_DEPTH

    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^{path}: .*nested deeper than {TOML_MAX_DEPTH} levels"):
        load_settings(str(path), cache_dir=str(tmp_path / "cache"))
    assert fallback_settings(str(path)) == defaults()  # the file does not parse: the defaults


def test_fallback_reads_a_file_at_the_nesting_limit(tmp_path: Path) -> None:
    from oci.nesting import TOML_MAX_DEPTH

    inner = TOML_MAX_DEPTH - 2  # the document's table and [runtime] around the arrays
    path = tmp_path / "config.toml"
    path.write_text(f"[runtime]\nlog_file = '/x.log'\nx = {'[' * inner}1{']' * inner}\n")
    assert fallback_settings(str(path)).runtime_log_file == "/x.log"
