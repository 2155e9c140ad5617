"""``nvhook dra-plugin`` without the kubernetes extra: one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvhook.cli import main
from oci.errors import ExitCode
from tests.nvhook.test_extras import hide


@pytest.mark.parametrize(("library", "shown"), [("grpc", "grpcio"), ("google", "protobuf")])
def test_the_dra_driver_names_its_missing_extra(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    library: str,
    shown: str,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        '{"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k"}}],'
        ' "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:1"}}]}'
    )
    hide(monkeypatch, library, "nvhook.dra", "nvhook.deviceplugin", "nvhook.cli.draplugin")
    code = main(["dra-plugin", "--node-name", "n", "--kubeconfig", str(kubeconfig)])
    err = capsys.readouterr().err
    assert code == ExitCode.CONFIG
    assert err == (
        f"nvhook: nvhook's DRA driver needs {shown}, which is not installed: pip install "
        "'nvhook[kubernetes]' (nvhook's packages and installer image include every extra)\n"
    )
