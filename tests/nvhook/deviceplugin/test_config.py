"""The YAML configuration: its meaning, and errors that name the key path and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.deviceplugin.config import load_config, parse_config
from nvhook.deviceplugin.errors import PluginConfigError
from nvhook.deviceplugin.model import PluginConfig, TimeSlicedResource

FULL = """\
version: v1
flags:
  migStrategy: mixed
  plugin:
    deviceListStrategy: [cdi-annotations, envvar]
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources:
      - name: nvidia.com/gpu
        replicas: 4
        rename: gpu.shared
"""


def test_a_full_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(FULL)
    assert load_config(str(path)) == PluginConfig(
        mig_strategy="mixed",
        device_list_strategies=("cdi-annotations", "envvar"),
        time_slicing=(TimeSlicedResource("nvidia.com/gpu", 4, "nvidia.com/gpu.shared"),),
        fail_requests_greater_than_one=True,
    )
    assert parse_config(None) == PluginConfig() == load_config(None)
    assert parse_config({"flags": {"plugin": {"deviceListStrategy": "volume-mounts"}}}) == (
        PluginConfig(device_list_strategies=("volume-mounts",))
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"flags": {"migStrategy": "all"}},
         "flags.migStrategy: input should be 'none', 'single' or 'mixed' (got 'all')"),
        ({"flags": {"migstrategy": "none"}},
         "flags.migstrategy: unknown key; allowed: migStrategy, failOnInitError, mpsRoot, "),
        ({"flags": {"plugin": {"deviceListStrategy": ["envvar", "env"]}}},
         "flags.plugin.deviceListStrategy[1]: input should be 'envvar', 'volume-mounts', "
         "'cdi-annotations' or 'cdi-cri' (got 'env')"),
        ({"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 0}]}}},
         "sharing.timeSlicing.resources[0].replicas: input should be greater than or equal to 1"),
        ({"sharing": {"timeSlicing": {"resources": [{"replicas": 2}]}}},
         "sharing.timeSlicing.resources[0].name: field required"),
        ({"version": "v2"}, "version: input should be 'v1' (got 'v2')"),
        ([1], "(top level): should be a mapping of keys to values (got list)"),
    ],
)  # fmt: skip
def test_errors_name_the_key_path_and_what_is_allowed(data: object, message: str) -> None:
    with pytest.raises(PluginConfigError) as e:
        parse_config(data, source="f.yaml")
    assert e.value.message.startswith(f"f.yaml: {message}"), e.value.message
    assert "\n" not in e.value.message


def test_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(FULL)
    bad.write_text("flags:\n  migStrategy: [\n")
    assert main(["device-plugin", "--check-config", str(good)]) == 0
    assert "valid device plugin configuration" in capsys.readouterr().out
    assert main(["device-plugin", "--check-config", str(bad)]) == 8
    assert f"{bad}: not valid YAML at line 3" in capsys.readouterr().err
