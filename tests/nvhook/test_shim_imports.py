"""What the runtime shim has imported when it execs runc (on every start path: architecture D5).

Each case runs the shim in a fresh isolated interpreter (``python -I``, as the launcher
does) whose ``os.execv`` is replaced, before the shim is imported, by a function that
prints ``sorted(sys.modules)`` and exits: so we see exactly what the shim loaded up to the
moment it would hand over to runc. The probe itself imports only ``os`` and ``sys``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

#: Never on the shim's path, whatever the call (each costs 60-250 ms to import here).
HEAVY = ("pydantic", "pynvml", "click", "yaml", "pyroute2")
#: Not on the pass-through and request-free create paths once the settings cache is warm.
LIGHT = ("json", "dataclasses", "tomllib", "typing")

PROBE = """\
import os, sys
def _execv(path, argv):
    sys.stdout.write(repr([path, list(argv), sorted(sys.modules)]) + "\\n")
    sys.stdout.flush()
    os._exit(0)
os.execv = _execv
sys.argv = ["nvhook-runtime", *sys.argv[1:]]
from nvhook.shim import main
raise SystemExit(main())
"""

CONFIG_JSON = (
    b'{"ociVersion": "1.0.2", "process": {"args": ["sh"], "cwd": "/", '
    b'"env": ["PATH=/usr/bin:/bin"]}, "root": {"path": "rootfs"}}\n'
)


def loaded(name: str, modules: list[str]) -> list[str]:
    """``name`` and its submodules among ``modules``."""
    return [m for m in modules if m == name or m.startswith(name + ".")]


class Shim:
    """Runs the shim under the probe with a config of its own."""

    def __init__(self, directory: Path, host_root: str = "/") -> None:
        self.directory = directory
        self.config = directory / "config.toml"
        self.config.write_text(
            f'[runtime]\nruntimes = ["/bin/sh"]\nlog_file = ""\n[host]\nroot = "{host_root}"\n'
        )
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "NVHOOK_CONFIG": str(self.config),
            "NVHOOK_CACHE_DIR": str(directory / "cache"),
        }

    def modules_at_exec(self, *argv: str) -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", PROBE, *argv],
            env=self.env,
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        path, args, modules = ast.literal_eval(proc.stdout)
        assert path == "/bin/sh" and args == ["/bin/sh", *argv], "the shim did not exec runc"
        assert isinstance(modules, list)
        return modules

    def bundle(self, name: str, config: bytes = CONFIG_JSON) -> Path:
        bundle = self.directory / name
        bundle.mkdir()
        (bundle / "config.json").write_bytes(config)
        return bundle


@pytest.fixture
def shim(tmp_path: Path) -> Shim:
    return Shim(tmp_path)


def test_pass_through_imports_nothing_heavy(shim: Shim) -> None:
    cold = shim.modules_at_exec("--root", "/run/x", "state", "c1")
    assert "tomllib" in cold  # the probe sees imports: a cold cache parses the TOML
    warm = shim.modules_at_exec("--root", "/run/x", "state", "c1")
    for name in (*HEAVY, *LIGHT):
        assert not loaded(name, warm), f"pass-through imported {loaded(name, warm)}"
    assert "nvhook.shim" in warm


def test_create_without_request_imports_nothing_heavy(shim: Shim) -> None:
    bundle = shim.bundle("b")
    argv = ("--root", "/run/x", "create", "--bundle", str(bundle), "--pid-file", "p", "c1")
    shim.modules_at_exec(*argv)  # warms the settings cache
    warm = shim.modules_at_exec(*argv)
    for name in (*HEAVY, *LIGHT):
        assert not loaded(name, warm), f"create without request imported {loaded(name, warm)}"
    assert "nvhook.create" in warm  # the create path did run: the bundle was read
    assert (bundle / "config.json").read_bytes() == CONFIG_JSON


def test_create_with_gpus_imports_no_heavy_library(
    mock_machine: Callable[..., Path], tmp_path: Path
) -> None:
    """jit mode with the procfs resolver: no NVML, pydantic, click, yaml or pyroute2."""
    shim = Shim(tmp_path, host_root=str(mock_machine("dgx-a100")))
    config = CONFIG_JSON.replace(b'"PATH', b'"NVIDIA_VISIBLE_DEVICES=0,3", "PATH')
    bundle = shim.bundle("b", config)
    before = (bundle / "config.json").read_bytes()
    shim.modules_at_exec("create", "--bundle", str(bundle), "c1")  # warms the caches
    assert (bundle / "config.json").read_bytes() != before  # the request was served
    # a second bundle (the first now says NVIDIA_VISIBLE_DEVICES=void), with warm caches
    second = shim.bundle("b2", config)
    modules = shim.modules_at_exec("create", "--bundle", str(second), "c2")
    assert (second / "config.json").read_bytes() != config
    for name in HEAVY:
        assert not loaded(name, modules), f"create with GPUs imported {loaded(name, modules)}"
    assert "nvhook.planner" in modules


def test_create_from_a_kept_cdi_spec_imports_no_parser(tmp_path: Path) -> None:
    """cdi mode: once a settled spec's parsed value is kept (oci.cdi.index), a create reads
    neither the file nor imports the strict parser; YAML costs no PyYAML either."""
    import time

    from oci.cdi.index import RACY_NS

    specs = tmp_path / "cdi"
    specs.mkdir()
    (specs / "gpu.yaml").write_text(
        'cdiVersion: 0.5.0\nkind: vendor.example/gpu\ndevices:\n  - name: "0"\n'
        "    containerEdits:\n      env: [G=0]\n"
    )
    shim = Shim(tmp_path)
    shim.config.write_text(
        shim.config.read_text().replace("[runtime]\n", '[runtime]\nmode = "cdi"\n')
        + f'[cdi]\nspec_dirs = ["{specs}"]\n'
    )
    config = CONFIG_JSON.replace(b'"PATH', b'"NVIDIA_VISIBLE_DEVICES=vendor.example/gpu=0", "PATH')
    time.sleep(RACY_NS / 1e9 + 0.1)  # settled: a spec changed in the last 2 s is parsed again
    first = shim.modules_at_exec("create", "--bundle", str(shim.bundle("b", config)), "c1")
    assert "oci.cdi.parse" in first and "yaml" in first  # control: parsed, then kept
    second = shim.bundle("b2", config)
    modules = shim.modules_at_exec("create", "--bundle", str(second), "c2")
    assert b"G=0" in (second / "config.json").read_bytes()
    for name in ("oci.cdi.parse", "oci.cdi.decode", "yaml", *LIGHT):
        assert not loaded(name, modules), f"a kept cdi create imported {loaded(name, modules)}"
