"""The checked-in CRI subset: protoc's output regenerated, and the names the client relies on."""

from __future__ import annotations

from pathlib import Path

from nvhook.cri import v1
from nvhook.cri.v1 import api_pb2 as pb
from tests.nvhook.deviceplugin.test_proto import protoc_differences

HERE = Path(v1.__file__).parent


def test_the_generated_modules_are_protoc_s_output(tmp_path: Path) -> None:
    where = "nvhook/cri/v1/SOURCES.md"
    assert protoc_differences(HERE.parents[1], "cri/v1/api.proto", tmp_path, where) == []


def test_the_messages_carry_upstream_s_package_and_field_numbers() -> None:
    """The wire is what containerd reads: package runtime.v1, cri-api's field numbers."""
    assert pb.DESCRIPTOR.package == "runtime.v1"
    service = pb.DESCRIPTOR.services_by_name["RuntimeService"]
    assert service.full_name == "runtime.v1.RuntimeService"
    config = pb.ContainerConfig.DESCRIPTOR.fields_by_name
    assert {n: config[n].number for n in ("envs", "mounts", "devices", "annotations")} == {
        "envs": 6,
        "mounts": 7,
        "devices": 8,
        "annotations": 10,
    }
    assert config["CDI_devices"].number == 17
    assert "LICENSE" in {p.name for p in HERE.iterdir()}
