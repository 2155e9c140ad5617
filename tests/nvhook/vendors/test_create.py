"""The create path with other vendors' requests: jit on their mocks, both vendors in one
container, explain's verdict; and the native front-end hands such a create to the shim."""

from __future__ import annotations

from typing import Any

import pytest

from nvhook.create import decide_spec
from nvhook.mock.vendors import create
from nvhook.native import triggers
from nvhook.settings import Settings, defaults
from nvhook.tools.explain import verdict
from tests.support.basics import require_root


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The mixed mock with real nodes: jit mode takes a vendor node's numbers from the host's
    node (a regular-file stand-in has none)."""
    require_root()
    root = create("mixed-h100-mi300x", tmp_path_factory.mktemp("mixed") / "m", nodes="char").root
    return defaults()._replace(host_root=str(root))


def _spec(*env: str) -> dict[str, Any]:
    return {
        "ociVersion": "1.0.2",
        "process": {"env": list(env), "args": ["sh"], "cwd": "/"},
        "root": {"path": "rootfs"},
    }


def _paths(decision: Any) -> list[str]:
    return [n.path for n in decision.edits.device_nodes]


def test_one_container_asks_for_nvidia_and_amd(mixed: Settings) -> None:
    d = decide_spec(_spec("NVIDIA_VISIBLE_DEVICES=0", "AMD_VISIBLE_DEVICES=1"), mixed)
    assert d.error is None, d.error
    assert d.mode == "jit" and d.plan is not None
    paths = _paths(d)
    assert "/dev/nvidia0" in paths and "/dev/nvidiactl" in paths
    assert paths[-3:] == ["/dev/dri/card2", "/dev/dri/renderD129", "/dev/kfd"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in d.edits.env  # type: ignore[union-attr]


def test_amd_alone_needs_no_nvidia_plan(mixed: Settings) -> None:
    d = decide_spec(_spec("AMD_VISIBLE_DEVICES=0"), mixed)
    assert d.error is None and d.plan is None
    assert _paths(d) == ["/dev/dri/card1", "/dev/dri/renderD128", "/dev/kfd"]
    assert verdict(d)["text"] == "will get amd.com/gpu=0 (from the host, no NVIDIA GPU)"


def test_an_unknown_amd_device_fails_the_create_in_one_line(mixed: Settings) -> None:
    d = decide_spec(_spec("AMD_VISIBLE_DEVICES=5"), mixed)
    assert d.error is not None and "amd.com/gpu=5: no such amd device" in str(d.error)
    assert "\n" not in str(d.error)


def test_the_front_end_hands_vendor_requests_to_the_shim() -> None:
    found = triggers(defaults())
    assert "AMD_VISIBLE_DEVICES" in found and "ASCEND_VISIBLE_DEVICES" in found


def test_mode_cdi_takes_the_variables_names_from_the_vendors_spec(
    mixed: Settings, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from nvhook.cli import main

    specs = tmp_path_factory.mktemp("cdi")
    argv = ["cdi", "generate", "--root", mixed.host_root, "--vendor", "amd"]
    assert main([*argv, "-o", str(specs / "amd.json")]) == 0
    settings = mixed._replace(runtime_mode="cdi", cdi_spec_dirs=(str(specs),))
    d = decide_spec(_spec("AMD_VISIBLE_DEVICES=1"), settings)
    assert d.error is None, d.error
    assert d.mode == "cdi" and d.cdi_names == ("amd.com/gpu=1",)
    assert set(_paths(d)) == {"/dev/dri/card2", "/dev/dri/renderD129", "/dev/kfd"}
