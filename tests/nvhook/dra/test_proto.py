"""The checked-in kubelet plugin APIs: upstream's protos byte for byte, protoc's output anew."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from nvhook.dra import kubelet
from tests.nvhook.deviceplugin.test_proto import protoc_differences

HERE = Path(kubelet.__file__).parent
#: sha256 of each proto at the kubernetes/kubelet commit of SOURCES.md (pkg/apis/<api>/<v>/)
UPSTREAM_SHA256 = {
    "pluginregistration/v1/api.proto": (
        "7a67a0000a1a167c155286834bc9ccb489f8bcdb394e006daba270189c272afa"
    ),
    "dra/v1/api.proto": "b3066ad7f6abcfd0003c47b06ceb801d76997d78d6be505597478d3905b9cc57",
    "dra/v1beta1/api.proto": "7900b11793ad897d0375d67b3bbae675869b574e21dfb1bf5334cc1556138c42",
    "dra_health/v1/api.proto": "a088e44962719a5184f183ef2fff4b017585434ff4f0cbad13ef8f8c782bc004",
}


@pytest.mark.parametrize("proto", sorted(UPSTREAM_SHA256))
def test_the_protos_are_upstream_s(proto: str) -> None:
    assert hashlib.sha256((HERE / proto).read_bytes()).hexdigest() == UPSTREAM_SHA256[proto]


def test_the_licence_is_there() -> None:
    assert "Apache License" in (HERE / "LICENSE").read_text()


@pytest.mark.parametrize("proto", sorted(UPSTREAM_SHA256))
def test_the_generated_modules_are_protoc_s_output(proto: str, tmp_path: Path) -> None:
    where = "nvhook/dra/kubelet/SOURCES.md"
    assert protoc_differences(HERE.parent, f"kubelet/{proto}", tmp_path, where) == []


def test_the_method_paths_are_upstream_s() -> None:
    """kubelet calls these paths: the protobuf packages must stay upstream's."""
    from nvhook.dra.kubelet.dra.v1 import api_pb2 as v1
    from nvhook.dra.kubelet.dra.v1beta1 import api_pb2 as v1beta1
    from nvhook.dra.kubelet.dra_health.v1 import api_pb2 as health
    from nvhook.dra.kubelet.pluginregistration.v1 import api_pb2 as reg

    names = {
        m.services_by_name[s].full_name
        for m, s in (
            (reg.DESCRIPTOR, "Registration"),
            (v1.DESCRIPTOR, "DRAPlugin"),
            (v1beta1.DESCRIPTOR, "DRAPlugin"),
            (health.DESCRIPTOR, "DRAResourceHealth"),
        )
    }
    assert names == {
        "pluginregistration.Registration",
        "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
    }
    assert v1.Device.DESCRIPTOR.fields_by_name["share_id"].number == 5
