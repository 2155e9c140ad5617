"""The checked-in API: the upstream proto byte for byte, and protoc's output regenerated."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from nvhook.deviceplugin import v1beta1

HERE = Path(v1beta1.__file__).parent
#: sha256 of kubernetes/kubelet pkg/apis/deviceplugin/v1beta1/api.proto at the commit in SOURCES.md
UPSTREAM_SHA256 = "b780bfeac99c93c231dc165ce417f4da88481eececa0c65eeb90f5f2e9b5b65b"


def test_the_proto_is_upstream_s() -> None:
    assert hashlib.sha256((HERE / "api.proto").read_bytes()).hexdigest() == UPSTREAM_SHA256
    assert "Apache License" in (HERE / "LICENSE").read_text()


def protoc_differences(include: Path, proto: str, tmp_path: Path, regenerate: str) -> list[str]:
    """Each checked-in file that differs from protoc's ``--python_out`` and ``--pyi_out`` for
    ``include/proto`` (run with ``-I`` the copy's root, so the descriptor keeps the name
    ``proto``), with what to do about it; empty when they are protoc's output."""
    pytest.importorskip("grpc_tools", reason="grpcio-tools is a test dependency")
    out = tmp_path / "out"
    (out / proto).parent.mkdir(parents=True)
    (out / proto).write_bytes((include / proto).read_bytes())
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{out}", f"--python_out={out}",
         f"--pyi_out={out}", proto],
        check=True, cwd=out,
    )  # fmt: skip
    stem = proto.removesuffix(".proto")
    return [
        f"{name} differs from protoc's output: regenerate it ({regenerate}) and bound "
        "protobuf in pyproject.toml at the new gencode version"
        for name in (f"{stem}_pb2.py", f"{stem}_pb2.pyi")
        if (out / name).read_text() != (include / name).read_text()
    ]


def test_the_generated_modules_are_protoc_s_output(tmp_path: Path) -> None:
    where = "nvhook/deviceplugin/v1beta1/SOURCES.md"
    assert protoc_differences(HERE.parent, "v1beta1/api.proto", tmp_path, where) == []
