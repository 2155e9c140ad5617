"""bench/runtime.py: ``--anchor`` (NVIDIA's runtime beside nvhook's rows, configured as its
README says: ``$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml``) and the CDI spec its
cdi rows read (shaped like ``nvhook cdi generate``'s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from bench.runtime import CDI_YAML, Case, Setup, anchor_cases, cdi_spec
from nvhook.mock import create
from tests.support.basics import require_root

REPO = Path(__file__).resolve().parent.parent


def test_anchor_rows_read_their_own_config_over_the_same_spec_directory(tmp_path: Path) -> None:
    setup = Setup(tmp_path, "/x/nvhook-runtime.py", None, None, "/x/noop", "noop", None,
                  tmp_path / "machine", {}, {})  # fmt: skip
    bundle = tmp_path / "bundle1"
    bundle.mkdir()
    (bundle / "pristine.json").write_text("{}")
    argv = ["create", "--bundle", str(bundle), "bench"]
    other = tmp_path / "bundle2"
    other.mkdir()
    (other / "pristine.json").write_text("{}")
    cases = [
        Case("create 1 GPU, cdi, YAML spec", argv, 30, CDI_YAML, bundle, "1", 1),
        Case("create all (8), jit", ["create"], 30, "jit", other, "all", 8),
        Case("pass-through state", ["state", "bench"], 15, "auto"),
        Case("front-end: pass-through state", ["state", "bench"], 2, "auto", program="/x/f"),
    ]
    out = anchor_cases(setup, cases, "/opt/nvidia-container-runtime")
    assert [c.name for c in out] == ["anchor: create 1 GPU, cdi, YAML spec",
                                     "anchor: create all (8), jit",
                                     "anchor: pass-through state"]  # fmt: skip
    yaml_row, jit_row, state_row = out
    assert yaml_row.program == "/opt/nvidia-container-runtime" and yaml_row.anchor
    assert yaml_row.bundle == tmp_path / "anchor-bundle1"
    assert (yaml_row.bundle / "pristine.json").read_text() == "{}"
    assert yaml_row.argv == ["create", "--bundle", str(tmp_path / "anchor-bundle1"), "bench"]
    assert yaml_row.expect_gpus == 1
    assert jit_row.expect_gpus is None  # NVIDIA's all: its own count (no MIG GPU without MIGs)

    def config(case: Case) -> dict[str, object]:
        home = Path(case.env_extra["XDG_CONFIG_HOME"])
        return tomllib.loads((home / "nvidia-container-runtime" / "config.toml").read_text())

    assert config(yaml_row) == {
        "nvidia-container-cli": {"root": str(tmp_path / "machine")},
        "nvidia-container-runtime": {
            "runtimes": ["/x/noop"],
            "mode": "cdi",
            "log-level": "info",
            "modes": {
                "cdi": {
                    "spec-dirs": [str(tmp_path / "cdi-yaml")],
                    "default-kind": "nvidia.com/gpu",
                    "annotation-prefixes": ["cdi.k8s.io/"],
                }
            },
        },
        "nvidia-ctk": {"path": "/opt/nvidia-ctk"},
    }
    assert config(jit_row)["nvidia-container-runtime"]["mode"] == "jit-cdi"  # type: ignore[index]
    assert state_row.bundle is None and state_row.argv == ["state", "bench"]


def test_the_bench_spec_keeps_only_each_devices_own_edits_in_the_device(tmp_path: Path) -> None:
    """As ``nvhook cdi generate`` does: the driver's mounts and hooks once, at the spec's level;
    each GPU its node and its env entry (the bench's spec was 7x generate's before)."""
    create("dgx-a100", tmp_path / "machine", nodes="file")
    spec = cdi_spec(tmp_path / "machine", "dgx-a100")
    assert spec["containerEdits"]["mounts"]
    gpu = next(d for d in spec["devices"] if d["name"] == "2")["containerEdits"]
    assert sorted(gpu) == ["deviceNodes", "env"]
    assert [n["path"] for n in gpu["deviceNodes"]] == ["/dev/nvidia2"]
    assert len(json.dumps(spec)) < 80_000


def test_nvidia_tools_see_the_mocks_mig_minors_and_no_driver_params(tmp_path: Path) -> None:
    """``--anchor``: in the bench's private mount namespace ``/proc/driver/nvidia-caps`` is the
    mock's (NVIDIA's toolkit reads the MIG minors there only), and ``/proc/driver/nvidia`` is
    not there (its params would make NVIDIA's disable-device-node-modification hook mount a
    copy over a file the container's procfs lacks); the host's ``/proc`` is left as it was."""
    require_root()
    create("dgx-a100", tmp_path / "machine", nodes="file")
    code = (
        "import os, sys; from pathlib import Path; from bench.runtime import private_proc_driver;"
        "private_proc_driver(Path(sys.argv[1]));"
        "print(open('/proc/driver/nvidia-caps/mig-minors').read() =="
        " open(sys.argv[1] + '/proc/driver/nvidia-caps/mig-minors').read(),"
        " os.path.exists('/proc/driver/nvidia'))"
    )
    before = sorted(os.listdir("/proc/driver"))
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                           "-c", code, str(tmp_path / "machine")], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]
    assert sorted(os.listdir("/proc/driver")) == before
