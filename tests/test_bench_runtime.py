"""bench/runtime.py ``--anchor``: NVIDIA's runtime beside nvhook's rows, configured as its
README says (``$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml``)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from bench.runtime import ANCHORED, CDI_YAML, Case, Setup, anchor_cases


def test_anchor_rows_read_their_own_config_over_the_same_spec_directory(tmp_path: Path) -> None:
    setup = Setup(tmp_path, "/x/nvhook-runtime.py", None, None, "/x/noop", "noop", None,
                  tmp_path / "machine", {}, {})  # fmt: skip
    bundle = tmp_path / "bundle1"
    bundle.mkdir()
    (bundle / "pristine.json").write_text("{}")
    argv = ["create", "--bundle", str(bundle), "bench"]
    cases = [
        Case("create 1 GPU, cdi, YAML spec", argv, 30, CDI_YAML, bundle, "1", 1),
        Case("create 1 GPU, jit", argv, 30, "jit", bundle, "1", 1),  # no anchor row
        Case("pass-through state", ["state", "bench"], 15, "auto"),
    ]
    out = anchor_cases(setup, cases, "/opt/nvidia-container-runtime")
    assert [c.name for c in out] == ["anchor: create 1 GPU, cdi, YAML spec",
                                     "anchor: pass-through state"]  # fmt: skip
    yaml_row, state_row = out
    assert set(ANCHORED) >= {c.name.removeprefix("anchor: ") for c in out}
    assert yaml_row.program == "/opt/nvidia-container-runtime" and yaml_row.anchor
    assert yaml_row.bundle == tmp_path / "anchor-bundle1"
    assert (yaml_row.bundle / "pristine.json").read_text() == "{}"
    assert yaml_row.argv == ["create", "--bundle", str(tmp_path / "anchor-bundle1"), "bench"]
    home = Path(yaml_row.env_extra["XDG_CONFIG_HOME"])
    config = tomllib.loads((home / "nvidia-container-runtime" / "config.toml").read_text())
    assert config == {
        "nvidia-container-runtime": {
            "runtimes": ["/x/noop"],
            "mode": "cdi",
            "debug": str(tmp_path / "anchor.log"),
            "modes": {
                "cdi": {
                    "spec-dirs": [str(tmp_path / "cdi-yaml")],
                    "default-kind": "nvidia.com/gpu",
                    "annotation-prefixes": ["cdi.k8s.io/"],
                }
            },
        }
    }
    assert state_row.bundle is None and state_row.argv == ["state", "bench"]
