"""``nvhook config import`` and the settings loader's word on NVIDIA toolkit files."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.errors import ConfigError
from nvhook.settings import KEYS, load_settings
from nvhook.toolkit_config import TOOLKIT_KEYS
from nvhook.tools.toolkit_import import import_toolkit_config, render_toml

#: nvidia-container-runtime's config.toml as the toolkit's packages install it, every key set
TOOLKIT = """\
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
swarm-resource = "DOCKER_RESOURCE_GPU"
accept-nvidia-visible-devices-envvar-when-unprivileged = false
accept-nvidia-visible-devices-as-volume-mounts = true

[nvidia-container-cli]
root = "/run/nvidia/driver"
path = "/usr/bin/nvidia-container-cli"
environment = []
debug = "/var/log/nvidia-container-toolkit.log"
ldcache = "/etc/ld.so.cache"
load-kmods = true
no-pivot = false
no-cgroups = false
user = "root:video"
ldconfig = "@/sbin/ldconfig.real"

[nvidia-container-runtime]
debug = "/dev/null"
log-level = "warn"
mode = "legacy"
runtimes = ["docker-runc", "runc", "crun"]
experimental = false
discover-mode = "legacy"

[nvidia-container-runtime.modes.cdi]
default-kind = "nvidia.com/gpu"
annotation-prefixes = ["cdi.k8s.io/", "nvidia.cdi.k8s.io/"]
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "ldconfig"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"

[features]
allow-ldconfig-from-container = false
"""


@pytest.fixture
def toolkit(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(TOOLKIT)
    return path


def test_every_toolkit_key_is_mapped_or_refused_with_a_reason(toolkit: Path) -> None:
    imported = import_toolkit_config(str(toolkit))
    sources = [source for _key, _value, source in imported.settings]
    refused = [key for key, _value, _reason in imported.unsupported]
    assert sorted(sources + refused) == sorted(
        [*TOOLKIT_KEYS, "features.allow-ldconfig-from-container"]
    )
    assert all(reason for _key, _value, reason in imported.unsupported)
    for mapping in TOOLKIT_KEYS.values():
        assert mapping.target is None or mapping.target in KEYS
        assert mapping.target is not None or mapping.reason


def test_the_printed_settings_load_and_mean_the_same(toolkit: Path, tmp_path: Path) -> None:
    out = tmp_path / "nvhook.toml"
    out.write_text(render_toml(import_toolkit_config(str(toolkit))))
    settings = load_settings(str(out), cache_dir=str(tmp_path / "cache"))
    assert settings.policy_accept_env_unprivileged is False
    assert settings.policy_accept_volume_mounts is True
    assert settings.host_driver_root == "/run/nvidia/driver"
    assert settings.hook_ldconfig == "/sbin/ldconfig.real"
    assert settings.runtime_log_file == ""  # the toolkit's /dev/null: no log
    assert settings.runtime_log_level == "warning"
    assert settings.runtime_mode == "jit"
    assert settings.runtime_runtimes == ("docker-runc", "runc", "crun")
    assert settings.cdi_annotation_prefixes == ("cdi.k8s.io/", "nvidia.cdi.k8s.io/")
    text = out.read_text()
    assert "# nvidia-container-cli.load-kmods = true: nvhook never loads kernel modules" in text
    assert 'mode = "jit"  # from nvidia-container-runtime.mode' in text


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('[nvidia-container-runtime]\nmode = "csv"', "csv is Tegra's mode"),
        ('[nvidia-container-cli]\nldconfig = "/sbin/ldconfig"', "inside the container"),
        ('[nvidia-container-runtime]\nlog-level = "loud"', "unknown log level 'loud'"),
        ("[nvidia-container-runtime]\nruntimes = [1]", "runtime.runtimes: expected a list"),
        ("[nvidia-container-runtime]\nfrobnicate = 1", "not a key of nvidia-container-runtime"),
    ],
)
def test_values_nvhook_cannot_take_are_listed_with_the_reason(
    tmp_path: Path, line: str, reason: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(line + "\n")
    imported = import_toolkit_config(str(path))
    assert imported.settings == ()
    [(_key, _value, why)] = imported.unsupported
    assert reason in why


def test_the_settings_loader_names_the_import(toolkit: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(str(toolkit), cache_dir=str(tmp_path / "cache"))
    message = caught.value.message
    assert "this looks like nvidia-container-runtime's config.toml" in message
    assert "nvidia-container-runtime.mode -> runtime.mode" in message
    assert f"`nvhook config import {toolkit}`" in message


def test_a_plain_typo_gets_no_toolkit_note(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[runtime]\nmdoe = "cdi"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(str(path), cache_dir=str(tmp_path / "cache"))
    assert "nvhook config import" not in caught.value.message


def test_the_command(toolkit: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "import", str(toolkit)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# nvhook settings equivalent to {toolkit}\n")
    assert "[policy]\naccept_env_unprivileged = false" in out
    assert main(["config", "import", str(toolkit.parent / "missing.toml")]) == 8


def test_a_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    """A toolkit config in another encoding: a ConfigError naming the file and the offset,
    not a UnicodeDecodeError traceback."""
    path = tmp_path / "config.toml"
    path.write_bytes(b'[nvidia-container-cli]\nldconfig = "\xe9"\n')
    with pytest.raises(ConfigError) as caught:
        import_toolkit_config(str(path))
    assert str(caught.value) == f"{path}: not UTF-8 at byte offset 35: save it as UTF-8"
