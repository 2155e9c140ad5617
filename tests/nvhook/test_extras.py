"""A part whose extra is not installed says so in one line, with the pip command that adds it.

``pyproject.toml`` keeps the libraries only some deployments need in extras (``netdev``:
pyroute2; ``kubernetes``: grpcio, protobuf, pydantic). Each library is hidden here as if
not installed (``None`` in ``sys.modules``, what the import system reads as "not
there"), the modules that import it are forgotten, and the part is run as a user runs it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.errors import MissingExtraError
from oci.errors import ExitCode


def hide(monkeypatch: pytest.MonkeyPatch, library: str, *forget: str) -> None:
    """Make ``import library`` fail, and drop what imported it so that it imports again."""
    for name in list(sys.modules):
        if name == library or name.startswith(library + "."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, library, None)
    for prefix in forget:
        for name in list(sys.modules):
            if name == prefix or name.startswith(prefix + "."):
                monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize(
    ("library", "argv", "part", "shown"),
    [
        ("pydantic", ["device-plugin", "--check-config", "{config}"],
         "nvhook's device plugin configuration", "pydantic"),
        ("grpc", ["device-plugin", "--device-plugin-path", "{tmp}"], "nvhook's device plugin",
         "grpcio"),
        ("google", ["device-plugin", "--device-plugin-path", "{tmp}"], "nvhook's device plugin",
         "protobuf"),
    ],
)  # fmt: skip
def test_the_device_plugin_names_its_missing_extra(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    library: str,
    argv: list[str],
    part: str,
    shown: str,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    hide(monkeypatch, library, "nvhook.deviceplugin", "nvhook.cli.deviceplugin")
    code = main([a.format(config=config, tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == ExitCode.CONFIG
    assert err == (
        f"nvhook: {part} needs {shown}, which is not installed: pip install "
        "'nvhook[kubernetes]' (nvhook's packages and installer image include every extra)\n"
    )


def test_the_cri_client_names_its_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    hide(monkeypatch, "grpc", "nvhook.cri.client")
    with pytest.raises(MissingExtraError, match=r"CRI client .* needs grpcio, .*\[kubernetes\]"):
        importlib.import_module("nvhook.cri.client")
