"""``nvhook-hook prestart`` (hook mode) under plain runc, on the dgx-a100 mock.

The bundle carries the hook exactly as dockerd writes it for ``--gpus``
(``[nvidia-container-runtime-hook, prestart]``, no env: the hook inherits runc's
environment, where the test puts ``NVHOOK_CONFIG``); nothing else of nvhook is in
config.json. What the container sees is checked from inside with the mock
``nvidia-smi -L``, which counts a GPU only when its node exists *and* the device
cgroup allows it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvhook.legacyhook import LEGACY_HOOK
from nvhook.mock import Profile
from tests.e2e.conftest import (
    ELF_MAGIC,
    LIBCUDA,
    NVIDIA_MAJOR,
    Shim,
    expected_smi_uuids,
    parse_probe,
)
from tests.support.containers import Runc, require, unique_id

pytestmark = [pytest.mark.root, pytest.mark.runtime]

GpuBundle = Callable[..., Path]


def legacy_hook_path() -> str:
    """The ``nvidia-container-runtime-hook`` launcher beside this interpreter."""
    path = Path(sys.executable).parent / LEGACY_HOOK
    if not path.is_file():
        pytest.fail(f"{path} missing: run `nvhook install-entrypoints`", pytrace=False)
    return str(path)


def docker_hook() -> dict[str, object]:
    """The prestart hook dockerd adds for ``--gpus`` (daemon/nvidia_linux.go)."""
    return {"path": legacy_hook_path(), "args": [LEGACY_HOOK, "prestart"]}


@pytest.fixture
def hook_runc(shim: Shim, tmp_path: Path) -> Iterator[Runc]:
    """Plain runc whose environment (inherited by env-less hooks) names the shim's config."""
    helper = Runc(tmp_path / "state", binary=require("runc"), env=shim.env)
    try:
        yield helper
    finally:
        helper.cleanup()


def test_two_gpus(hook_runc: Runc, gpu_bundle: GpuBundle, profile: Profile) -> None:
    bundle = gpu_bundle("b", ["NVIDIA_VISIBLE_DEVICES=0,3"])
    _add_hook(bundle)
    before = (bundle / "config.json").read_bytes()
    result = hook_runc.run(bundle, unique_id("pre"))
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [0, 3])
    assert probe.gpu_nodes == {"/dev/nvidia0", "/dev/nvidia3"}
    assert probe.nodes["/dev/nvidia3"] == (NVIDIA_MAJOR, 3)
    assert "/dev/nvidiactl" in probe.nodes
    assert probe.lib_magic == ELF_MAGIC  # bind-mounted, and the SONAME link made
    assert (bundle / "config.json").read_bytes() == before  # hook mode edits no spec


def test_all_and_read_only(hook_runc: Runc, gpu_bundle: GpuBundle, profile: Profile) -> None:
    probe_ro = f"; echo x > {LIBCUDA} 2>/dev/null && echo WRITABLE || echo READONLY"
    bundle = gpu_bundle(
        "b", ["NVIDIA_VISIBLE_DEVICES=all"], args=["sh", "-c", _probe_cmd() + probe_ro]
    )
    _add_hook(bundle)
    result = hook_runc.run(bundle, unique_id("pre"))
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, range(8))
    assert result.stdout.rstrip().endswith("READONLY")


def test_no_request_does_nothing(hook_runc: Runc, gpu_bundle: GpuBundle) -> None:
    bundle = gpu_bundle("b")
    _add_hook(bundle)
    result = hook_runc.run(bundle, unique_id("pre"))
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_nodes == set() and probe.smi_rc != 0


def test_unknown_gpu_fails_with_one_line(hook_runc: Runc, gpu_bundle: GpuBundle) -> None:
    bundle = gpu_bundle("b", ["NVIDIA_VISIBLE_DEVICES=9"])
    _add_hook(bundle)
    cid = unique_id("pre")
    result = hook_runc.run(bundle, cid)
    assert result.returncode != 0
    assert "nvhook-hook prestart:" in result.stderr and "9" in result.stderr, result.stderr
    assert hook_runc.call("list", "-q", check=True).stdout == ""


def test_shim_edited_bundle_is_left_alone(
    shim: Shim, shim_runc: Runc, gpu_bundle: GpuBundle, profile: Profile
) -> None:
    """Through nvhook-runtime the hook is dropped from the spec; run by hand, it does nothing."""
    bundle = gpu_bundle("b", ["NVIDIA_VISIBLE_DEVICES=1"])
    _add_hook(bundle)
    cid = shim_runc.create(bundle)
    spec = json.loads((bundle / "config.json").read_text())
    assert not spec.get("hooks", {}).get("prestart")
    shim_runc.start(cid)
    shim_runc.wait_stopped(cid)
    probe = parse_probe(shim_runc.output(cid))
    assert probe.gpu_uuids == expected_smi_uuids(profile, [1])
    assert probe.env["NVIDIA_VISIBLE_DEVICES"] == "void"  # served
    # the hook given the served bundle does nothing: pid 1 is not runc's child, so an
    # injection attempt would fail the hook
    state = json.dumps({"ociVersion": "1.0.2", "id": cid, "status": "creating", "pid": 1,
                        "bundle": str(bundle)})  # fmt: skip
    import subprocess

    done = subprocess.run(
        [legacy_hook_path(), "prestart"],
        input=state,
        capture_output=True,
        text=True,
        env=shim.env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def _probe_cmd() -> str:
    from tests.e2e.conftest import PROBE

    return PROBE


def _add_hook(bundle: Path) -> None:
    config = bundle / "config.json"
    spec = json.loads(config.read_text())
    spec.setdefault("hooks", {}).setdefault("prestart", []).append(docker_hook())
    config.write_text(json.dumps(spec))
