"""A cdi-mode create whose spec is stale, or that finds no spec, says so and names the fix.

Through the real ``nvhook-runtime`` launcher, with a recording stand-in for runc and a
fresh mock machine whose driver is "upgraded" after its spec was generated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.planner import Host
from nvhook.tools.generate import generate_spec
from oci.cdi.write import write_spec
from oci.errors import ExitCode
from tests.support.mockdriver import upgrade_driver

SPECS = Path(__file__).parents[1] / "data" / "specs"
LAUNCHER = Path(sys.executable).parent / "nvhook-runtime"


class Start:
    """``nvhook-runtime create`` in mode cdi against ``root``, with spec dir ``spec_dir``."""

    def __init__(self, tmp: Path, root: Path) -> None:
        if not LAUNCHER.exists():
            pytest.fail(f"{LAUNCHER} is missing: run ./dev setup (nvhook install-entrypoints)")
        self.tmp, self.root = tmp, root
        self.spec_dir = tmp / "cdi"
        self.record = tmp / "runtime-calls"
        fake = tmp / "fake-runc"
        fake.write_text(f'#!/bin/sh\necho "$@" > "{self.record}"\n')
        fake.chmod(0o755)
        self.config = tmp / "config.toml"
        self.config.write_text(
            f'[runtime]\nruntimes = ["{fake}"]\nlog_file = ""\nmode = "cdi"\n'
            f'[host]\nroot = "{root}"\n[cdi]\nspec_dirs = ["{self.spec_dir}"]\n'
        )

    def generate(self) -> Path:
        self.spec_dir.mkdir(exist_ok=True)
        write_spec(self.spec_dir / "nvidia.json", generate_spec(Host(root=str(self.root))).spec)
        return self.spec_dir / "nvidia.json"

    def create(self, devices: str) -> tuple[subprocess.CompletedProcess[str], bool]:
        """The shim's result, and whether config.json was left byte-identical."""
        bundle = self.tmp / "bundle"
        bundle.mkdir(exist_ok=True)
        spec = json.loads((SPECS / "runc-spec.json").read_text())
        spec["process"]["env"].append(f"NVIDIA_VISIBLE_DEVICES={devices}")
        raw = json.dumps(spec).encode()
        (bundle / "config.json").write_bytes(raw)
        env = {
            "NVHOOK_CONFIG": str(self.config),
            "NVHOOK_CACHE_DIR": str(self.tmp / "cache"),
            "PATH": os.environ.get("PATH", ""),
        }
        result = subprocess.run(
            [str(LAUNCHER), "create", "--bundle", str(bundle), "c1"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return result, (bundle / "config.json").read_bytes() == raw


@pytest.fixture
def start(tmp_path: Path, make_mock_machine: Callable[..., Path]) -> Start:
    return Start(tmp_path, make_mock_machine("h100-pcie"))


def test_a_fresh_spec_starts(start: Start) -> None:
    start.generate()
    result, unchanged = start.create("0")
    assert result.returncode == 0, result.stderr
    assert not unchanged and start.record.exists()


def test_after_a_driver_upgrade_the_error_names_the_stale_spec_and_the_command(
    start: Start,
) -> None:
    file = start.generate()
    old = upgrade_driver(start.root, "580.99.01")
    result, unchanged = start.create("0")
    assert result.returncode == ExitCode.DEVICE
    assert unchanged and not start.record.exists()
    (line,) = result.stderr.splitlines()
    prefix = (
        f"nvhook-runtime: CDI spec {file} is stale (the host changed since it was written): mount "
    )
    assert line.startswith(prefix), line
    first, _, rest = line[len(prefix) :].partition(": ")
    assert old in first and not os.path.exists(first)
    assert rest.startswith("host file is missing (and ")
    assert rest.endswith(f"more); run: nvhook cdi generate --root {start.root} --output {file}")


def test_another_tools_stale_spec_is_left_to_that_tool(start: Start) -> None:
    start.spec_dir.mkdir()
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"env": ["A=1"]}}],
        "containerEdits": {
            "mounts": [{"hostPath": "/nonexistent/libcuda.so.1", "containerPath": "/l",
                        "options": ["ro", "bind"]}]
        },
    }  # fmt: skip
    (start.spec_dir / "other.json").write_text(json.dumps(spec))
    result, unchanged = start.create("0")
    assert result.returncode == ExitCode.DEVICE and unchanged
    assert result.stderr == (
        f"nvhook-runtime: CDI spec {start.spec_dir}/other.json is stale (the host changed since "
        "it was written): mount /nonexistent/libcuda.so.1: host file is missing; regenerate it "
        "with the tool that wrote it, or remove it\n"
    )


def test_no_spec_at_all_names_nvhook_cdi_generate(start: Start) -> None:
    result, unchanged = start.create("0")
    assert result.returncode == ExitCode.UNRESOLVED and unchanged
    assert result.stderr == (
        f"nvhook-runtime: unresolvable CDI device 'nvidia.com/gpu=0': no CDI spec in "
        f"{start.spec_dir}; run: nvhook cdi generate\n"
    )
    start.generate()  # a spec without that device: the usual message, no generate hint
    result, _ = start.create("5")
    assert result.returncode == ExitCode.UNRESOLVED
    assert "not defined in any spec" in result.stderr and "generate" not in result.stderr


def test_cdi_untrusted_specs_setting_reaches_the_registry(tmp_path: Path) -> None:
    """cdi.untrusted_specs: refuse (the default) fails the create naming the file and the
    fix; warn injects the device and logs the same line as a warning."""
    from nvhook.create import decide_spec
    from nvhook.settings import defaults

    d = tmp_path / "cdi"
    d.mkdir()
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu"}
    spec["devices"] = [{"name": "1", "containerEdits": {"env": ["G=1"]}}]  # type: ignore[assignment]
    (d / "gpu.json").write_text(json.dumps(spec))
    os.chmod(d / "gpu.json", 0o666)
    settings = defaults()._replace(runtime_mode="cdi", cdi_spec_dirs=(str(d),))
    config = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=1"]}}
    refused = decide_spec(config, settings)
    assert refused.error is not None and "chmod go-w" in str(refused.error)
    warned = decide_spec(config, settings._replace(cdi_untrusted_specs="warn"))
    assert warned.error is None and warned.edits is not None and warned.edits.env == ("G=1",)
    assert any("used anyway" in w for w in warned.warnings)


def test_after_a_mig_relayout_a_mig_name_fails_with_the_change_not_another_instance(
    tmp_path: Path, make_mock_machine: Callable[..., Path]
) -> None:
    """GPU 0 of a DGX A100 re-laid from 3g.40gb + 2x2g.20gb to 7x1g.10gb: the old spec's
    ``0:1`` names nodes that still exist (nvidia-caps nodes stay) but another instance; the
    create fails with the change and the command, config.json untouched. The GPU itself and
    the MIG devices of other GPUs are not affected; a rewritten spec starts again."""
    from nvhook.mock.mutate import relayout_mig

    start = Start(tmp_path, make_mock_machine("dgx-a100"))
    file = start.generate()
    relayout_mig(start.root, 0, ["1g.10gb"] * 7)
    result, unchanged = start.create("nvidia.com/gpu=0:1")
    assert result.returncode == ExitCode.DEVICE and unchanged, result.stderr
    assert not start.record.exists()
    assert result.stderr == (
        f"nvhook-runtime: CDI spec {file} is stale: GPU 0's MIG layout changed since it was "
        "written (GPU.compute instances 2.0,3.0,4.0 then, now 7.0,8.0,9.0,10.0,11.0,12.0,13.0), "
        "so its MIG device names mean other instances; run: nvhook cdi generate --root "
        f"{start.root} --output {file} (nvhook watch rewrites it within a second of the "
        "change), then retry\n"
    )
    assert start.create("nvidia.com/gpu=1")[0].returncode == 0  # whole GPUs: no layout
    start.generate()
    result, _ = start.create("nvidia.com/gpu=0:6")
    assert result.returncode == 0, result.stderr
    relayout_mig(start.root, 0, None)
    result, _ = start.create("nvidia.com/gpu=all")
    assert "MIG mode is off or the GPU is gone" in result.stderr


def test_a_gpu_gone_since_the_spec_fails_even_though_runc_needs_no_host_node(
    tmp_path: Path, make_mock_machine: Callable[..., Path]
) -> None:
    """runc makes /dev/nvidia5 from its numbers, so without the recorded presence a spec
    written before the GPU fell off would still hand it out: the create fails, naming it."""
    from nvhook.mock import load_profile
    from nvhook.mock.mutate import add_gpu, remove_gpu

    gpu = load_profile("dgx-a100").gpus[5]
    start = Start(tmp_path, make_mock_machine("dgx-a100"))
    file = start.generate()
    remove_gpu(start.root, 5)
    result, unchanged = start.create(f"nvidia.com/gpu={gpu.uuid}")
    assert result.returncode == ExitCode.DEVICE and unchanged, result.stderr
    assert not start.record.exists()
    assert result.stderr == (
        f"nvhook-runtime: CDI spec {file} is stale: GPU {gpu.uuid} (minor {gpu.minor}) is gone "
        f"since it was written ({start.root}/proc/driver/nvidia/gpus/{gpu.bus_id} is missing); "
        f"run: nvhook cdi generate --root {start.root} --output {file} (nvhook watch rewrites "
        "it within a second of the change), then retry\n"
    )
    add_gpu(start.root, 5)
    assert start.create(f"nvidia.com/gpu={gpu.uuid}")[0].returncode == 0
