"""choose_mode: which mode a create uses for what the container asks (nvhook/create.py)."""

from __future__ import annotations

import pytest

from nvhook.create import cdi_names, choose_mode
from nvhook.requests.parse import Requests, parse_requests
from nvhook.requests.policy import Policy


def _asking(visible: str) -> Requests:
    spec = {"process": {"env": [f"NVIDIA_VISIBLE_DEVICES={visible}"]}}
    return parse_requests(spec, Policy())


@pytest.mark.parametrize(
    ("configured", "visible", "mode"),
    [
        ("auto", "nvidia.com/gpu=0", "cdi"),
        ("auto", "nvidia.com/gpu=0,vendor.io/fpga=x", "cdi"),  # every one a CDI name
        ("auto", "nvidia.com/gpu=1,0", "jit"),  # mixed: not every one a CDI name
        ("auto", "0,nvidia.com/gpu=1", "jit"),
        ("auto", "GPU-8d3f6c2a-0d4c-4f5e-9a70-1b2c3d4e5f60,nvidia.com/gpu=1", "jit"),
        ("auto", "0,1", "jit"),
        ("auto", "all", "jit"),
        ("auto", "none", "jit"),
        ("cdi", "nvidia.com/gpu=1,0", "cdi"),  # a configured mode is used as it is
        ("jit", "nvidia.com/gpu=0", "jit"),
    ],
)
def test_choose_mode(configured: str, visible: str, mode: str) -> None:
    assert choose_mode(configured, _asking(visible)) == mode


def test_a_mixed_list_in_cdi_mode_names_each_device_in_request_order() -> None:
    assert cdi_names(_asking("nvidia.com/gpu=1,0"), "nvidia.com/gpu") == [
        "nvidia.com/gpu=1",
        "nvidia.com/gpu=0",
    ]
