"""``nvhook runtime configure --runtime docker``: daemon.json, on files only (no dockerd here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.engines import DEFAULT_CONFIGS, apply_plan, apply_unconfigure, plan_unconfigure
from nvhook.engines.docker import DEFAULT_CONFIG, plan_configure
from nvhook.errors import EngineConfigError

SHIM = "/usr/local/bin/nvhook-runtime"

DAEMON_JSON = """{
  "log-driver": "json-file",
  "log-opts": {
    "max-size": "10m"
  },
  "runtimes": {
    "kata": {
      "path": "/usr/bin/kata-runtime"
    }
  },
  "exec-opts": ["native.cgroupdriver=systemd"]
}
"""


def _new(path: Path, **kwargs: bool) -> str:
    change = plan_configure(str(path), name="nvidia", runtime_path=SHIM, **kwargs).changes[0]
    assert change.new is not None
    return change.new.decode()


def test_default_path_is_the_one_the_cli_uses() -> None:
    assert DEFAULT_CONFIG == DEFAULT_CONFIGS["docker"] == "/etc/docker/daemon.json"


def test_adds_the_runtime_keeping_every_key_and_its_order(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(DAEMON_JSON)
    new = _new(path)
    assert new == (
        "{\n"
        '  "log-driver": "json-file",\n'
        '  "log-opts": {\n'
        '    "max-size": "10m"\n'
        "  },\n"
        '  "runtimes": {\n'
        '    "kata": {\n'
        '      "path": "/usr/bin/kata-runtime"\n'
        "    },\n"
        '    "nvidia": {\n'
        f'      "path": "{SHIM}"\n'
        "    }\n"
        "  },\n"
        '  "exec-opts": [\n'
        '    "native.cgroupdriver=systemd"\n'
        "  ]\n"
        "}\n"
    )


def test_set_as_default_and_an_existing_runtime(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    settings = {
        "default-runtime": "runc",
        "runtimes": {
            "nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": ["-x"]}
        },
        "debug": True,
    }
    path.write_text(json.dumps(settings, indent="\t"))
    new = _new(path, set_as_default=True)
    assert json.loads(new) == {
        "default-runtime": "nvidia",
        "runtimes": {"nvidia": {"path": SHIM, "runtimeArgs": ["-x"]}},
        "debug": True,
    }
    assert list(json.loads(new)) == ["default-runtime", "runtimes", "debug"]
    assert '\n\t"debug": true\n' in new  # the tab indentation is kept


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_missing_or_empty_file(tmp_path: Path, text: str | None) -> None:
    path = tmp_path / "daemon.json"
    if text is not None:
        path.write_text(text)
    assert json.loads(_new(path)) == {"runtimes": {"nvidia": {"path": SHIM}}}


def test_unchanged_settings_keep_the_bytes(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    compact = json.dumps({"runtimes": {"nvidia": {"path": SHIM}}}, separators=(",", ":"))
    path.write_text(compact)  # not how nvhook would write it, but already right: kept
    plan = plan_configure(str(path), name="nvidia", runtime_path=SHIM)
    assert plan.changed == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # CPython 3.13 words a trailing comma differently: the same line on each
        ('{"debug": true,}', "daemon.json: invalid JSON at line 1 column 16: expecting a key "
         "in double quotes"),
        ('{"a": [1, 2 ,\n ]}', "daemon.json: invalid JSON at line 2 column 2: expecting a value"),
        ("[]", "daemon.json: the top level must be a JSON object"),
        ('{"runtimes": []}', 'daemon.json: "runtimes" must be a JSON object'),
        ('{"runtimes": {"nvidia": "x"}}', 'daemon.json: "runtimes"."nvidia" must be a JSON object'),
        ('{"debug": true, "debug": false}', 'daemon.json: key "debug" appears twice'),
    ],
)  # fmt: skip
def test_invalid_files_are_refused_untouched(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(text)
    with pytest.raises(EngineConfigError) as err:
        plan_configure(str(path), name="nvidia", runtime_path=SHIM)
    assert str(err.value) == f"{path.parent}/{message}"
    assert path.read_text() == text


@pytest.mark.parametrize(
    ("text", "features"),
    [
        ("{}", {"cdi": True}),  # Docker 25-28.1: off unless set
        ('{"features": {"cdi": false, "containerd-snapshotter": true}}',
         {"cdi": True, "containerd-snapshotter": True}),  # 28.2+: off only when set false
    ],
)  # fmt: skip
def test_enable_cdi_sets_the_feature(tmp_path: Path, text: str, features: object) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(text)
    settings = json.loads(_new(path, enable_cdi=True))
    assert settings["features"] == features
    assert settings["runtimes"] == {"nvidia": {"path": SHIM}}
    assert json.loads(_new(path)).get("features") == json.loads(text).get("features")


def test_enable_cdi_refuses_features_that_are_no_object(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text('{"features": ["cdi"]}')
    with pytest.raises(EngineConfigError) as err:
        plan_configure(str(path), name="nvidia", runtime_path=SHIM, enable_cdi=True)
    assert str(err.value) == f'{path}: "features" must be a JSON object'


def test_configure_unconfigure_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(DAEMON_JSON)
    backups = str(tmp_path / "backups")
    assert apply_plan(plan_configure(str(path), name="nvidia", runtime_path=SHIM), backups)
    assert apply_plan(plan_configure(str(path), name="nvidia", runtime_path=SHIM), backups) == []
    apply_unconfigure(plan_unconfigure("docker", str(path), backups), backups)
    assert path.read_text() == DAEMON_JSON


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shim = tmp_path / "nvhook-runtime"
    shim.write_text("#!/bin/sh\n")
    shim.chmod(0o755)
    path = tmp_path / "daemon.json"
    args = ["--runtime", "docker", "--config", str(path), "--backup-dir", str(tmp_path / "b")]
    assert main(["runtime", "configure", *args, "--runtime-path", str(shim), "--dry-run"]) == 0
    assert capsys.readouterr().out == (
        f"--- /dev/null\n+++ {path}\n@@ -0,0 +1,7 @@\n"
        '+{\n+    "runtimes": {\n+        "nvidia": {\n'
        f'+            "path": "{shim}"\n'
        "+        }\n+    }\n+}\n"
    )
    assert not path.exists()
    assert main(["runtime", "configure", *args, "--runtime-path", str(shim)]) == 0
    assert "restart dockerd" in capsys.readouterr().out
    assert main(["runtime", "unconfigure", *args]) == 0
    assert capsys.readouterr().out.startswith(f"removed {path}\n")
    assert not path.exists()
