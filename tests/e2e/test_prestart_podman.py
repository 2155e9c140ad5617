"""The packaged ``oci-hooks.d`` file: podman (plain runc) runs ``nvhook-hook prestart``.

The test's hooks directory holds the packaged JSON with two test-only changes: the
launcher beside this interpreter instead of ``/usr/bin/nvhook-hook``, and
``NVHOOK_CONFIG`` in the hook's env (the package's hook reads /etc/nvhook/config.toml).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nvhook.hook.mountns import INJECT_TIMEOUT_S
from nvhook.mock import Profile
from tests.e2e.conftest import PROBE_ARGS, Shim, expected_smi_uuids, parse_probe
from tests.support.containers import Podman

pytestmark = [pytest.mark.root, pytest.mark.runtime]

PACKAGED = Path(__file__).parents[2] / "packaging/oci-hooks.d/oci-nvhook-hook.json"


def test_packaged_hook_file(podman: Podman, shim: Shim, profile: Profile, tmp_path: Path) -> None:
    hook = json.loads(PACKAGED.read_text())
    assert hook["stages"] == ["prestart"] and hook["hook"]["args"] == ["nvhook-hook", "prestart"]
    # the runtime kills the hook after `timeout` s: above the hook's own bound on its work
    assert hook["hook"]["timeout"] > INJECT_TIMEOUT_S
    hook["hook"]["path"] = str(Path(sys.executable).parent / "nvhook-hook")
    hook["hook"]["env"] = [*hook["hook"]["env"], f"NVHOOK_CONFIG={shim.config}"]
    hooks_dir = tmp_path / "hooks.d"
    hooks_dir.mkdir()
    (hooks_dir / PACKAGED.name).write_text(json.dumps(hook))
    result = podman.cmd(
        "--hooks-dir", str(hooks_dir), "run", "--rm", "--pull=never",
        "-e", "NVIDIA_VISIBLE_DEVICES=2", "localhost/busybox:latest", *PROBE_ARGS,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [2])
    assert probe.gpu_nodes == {"/dev/nvidia2"}
    # a container asking for nothing runs as before
    plain = podman.cmd(
        "--hooks-dir", str(hooks_dir), "run", "--rm", "--pull=never",
        "localhost/busybox:latest", *PROBE_ARGS, timeout=60,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    assert parse_probe(plain.stdout).gpu_nodes == set()
