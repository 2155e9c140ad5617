"""``nvhook labels`` on its own Node through the API (the stand-in of tests/support/kubeapi.py
on loopback): nvhook's labels set, its stale ones removed, nobody else's touched, nothing
sent when nothing changed, the API's refusals in one line; and the host roots from nvhook's
settings when --root is not given, as nvhook device-plugin takes them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.deviceplugin.nodeapi import label_node, label_patch
from nvhook.kubeapi import ApiError, Client
from tests.support.kubeapi import KubeApiServer


@pytest.fixture
def api() -> Iterator[KubeApiServer]:
    labels = {
        "kubernetes.io/hostname": "gpu-1",
        "nvidia.com/gpu.count": "3",
        "nvidia.com/gpu.stale": "x",  # ours, no longer given: removed
        "nvidia.com/device-plugin.config": "big",  # not ours: kept
    }
    with KubeApiServer(token="t0ken") as server:
        server.put("nodes", {"metadata": {"name": "gpu-1", "labels": labels}})
        yield server


def test_the_patch_sets_ours_and_removes_only_ours() -> None:
    current = {"nvidia.com/gpu.count": "3", "nvidia.com/gpu.stale": "x", "a/b": "c"}
    assert label_patch(
        current, {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.present": "true"}
    ) == {
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.stale": None,
    }
    assert label_patch({"nvidia.com/gpu.count": "8"}, {"nvidia.com/gpu.count": "8"}) == {}


def test_labels_reach_the_node(
    api: KubeApiServer, mock_machine: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = mock_machine("dgx-a100")
    argv = ["labels", "--root", str(root), "--node", "gpu-1", "--api-server", api.url]
    assert main(argv) == 9  # no token: the API's 401, in one line
    assert "/api/v1/nodes/gpu-1: 401 Unauthorized: Unauthorized" in capsys.readouterr().err
    api.token = ""
    assert main(argv) == 0
    labels = api.get("nodes", "gpu-1")["metadata"]["labels"]
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert "nvidia.com/gpu.stale" not in labels
    assert labels["nvidia.com/device-plugin.config"] == "big"
    assert labels["kubernetes.io/hostname"] == "gpu-1"
    assert "labels set, 1 removed" in capsys.readouterr().err
    sent = len(api.requests)
    assert main(argv) == 0  # nothing changed: a GET, no PATCH
    assert api.requests[sent:] == [("GET", "/api/v1/nodes/gpu-1")]
    assert main([*argv[:3], "--node", "gpu-9", "--api-server", api.url]) == 9
    assert 'nodes "gpu-9" not found' in capsys.readouterr().err


def test_a_refused_label_names_the_reason(api: KubeApiServer) -> None:
    api.token = ""
    with pytest.raises(
        ApiError, match=r"PATCH http://.*/api/v1/nodes/gpu-1: 422 .*a label value must"
    ):
        label_node(Client(api.url), "gpu-1", {"nvidia.com/gpu.product": "NVIDIA A100"})
    with pytest.raises(ApiError, match="is not a node name"):
        label_node(Client(api.url), "../x", {})


def test_roots_come_from_nvhooks_settings(
    mock_machine: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = tmp_path / "config.toml"
    settings.write_text(f'[host]\nroot = "{mock_machine("h100-pcie")}"\n')
    monkeypatch.setenv("NVHOOK_CONFIG", str(settings))
    assert main(["labels"]) == 0
    assert "nvidia.com/gpu.product=NVIDIA-H100-PCIe\n" in capsys.readouterr().out
