"""Other vendors' request variables through the one parser, policy and split."""

from __future__ import annotations

from typing import Any

import pytest

from nvhook.errors import RequestError
from nvhook.requests.ids import CdiName, Devices, Index, SourceKind, VendorName, Void
from nvhook.requests.parse import parse_requests
from nvhook.requests.policy import Policy
from nvhook.requests.vendors import parse_vendor_list, split_vendor_names

PRIVILEGED = {"bounding": ["CAP_SYS_ADMIN"]}


def _spec(*env: str, privileged: bool = True, **extra: Any) -> dict[str, Any]:
    process: dict[str, Any] = {"env": list(env)}
    if privileged:
        process["capabilities"] = PRIVILEGED
    return {"process": process, **extra}


def _names(value: str, name: str = "AMD_VISIBLE_DEVICES") -> list[str]:
    return [n.value for n in parse_vendor_list(name, value)]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", ["amd.com/gpu=0"]),
        ("1,0-2", ["amd.com/gpu=1", "amd.com/gpu=0", "amd.com/gpu=2"]),
        ("ALL", ["amd.com/gpu=all"]),
        ("0x5F1A4C2E00000001", ["amd.com/gpu=0x5f1a4c2e00000001"]),
        ("5f1a4c2e00000001", ["amd.com/gpu=0x5f1a4c2e00000001"]),
        ("", []),
        ("void", []),
    ],
)
def test_amd_grammar_is_rocm_container_toolkits(value: str, expected: list[str]) -> None:
    assert _names(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("3,0-1", ["0", "1", "3"]),
        ("1,1", ["1"]),
        ("Ascend910-2,Ascend910-0", ["0", "2"]),
    ],
)
def test_ascend_grammar_is_ascend_docker_runtimes(value: str, expected: list[str]) -> None:
    want = [f"huawei.com/npu={n}" for n in expected]
    assert _names(value, "ASCEND_VISIBLE_DEVICES") == want


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("AMD_VISIBLE_DEVICES", "2-1", "2 is more than 1"),
        ("AMD_VISIBLE_DEVICES", "gpu0", "invalid device 'gpu0'"),
        ("AMD_VISIBLE_DEVICES", "all,0", "all stands alone"),
        ("AMD_VISIBLE_DEVICES", "0xzz", "invalid unique id"),
        ("ASCEND_VISIBLE_DEVICES", "0-200", "the most is 128"),
        ("ASCEND_VISIBLE_DEVICES", "Ascend910-0,Ascend310P-1", "more than one chip"),
        ("ASCEND_VISIBLE_DEVICES", "Ascend999-0", "expected Ascend<chip>-<n>"),
    ],
)
def test_bad_values_name_the_variable_and_item(name: str, value: str, message: str) -> None:
    with pytest.raises(RequestError, match=name) as e:
        parse_vendor_list(name, value)
    assert message in str(e.value)


def test_two_vendors_in_one_request_nvidia_first() -> None:
    r = parse_requests(
        _spec("AMD_VISIBLE_DEVICES=1", "NVIDIA_VISIBLE_DEVICES=0", "ASCEND_VISIBLE_DEVICES=2"),
        Policy(),
    )
    assert r.devices == Devices(
        (Index(0), VendorName("amd.com/gpu=1"), VendorName("huawei.com/npu=2"))
    )
    assert [s.name for s in r.sources] == [
        "NVIDIA_VISIBLE_DEVICES",
        "AMD_VISIBLE_DEVICES",
        "ASCEND_VISIBLE_DEVICES",
    ]
    nvidia, names = split_vendor_names(r)
    assert nvidia.devices == Devices((Index(0),))
    assert names == ("amd.com/gpu=1", "huawei.com/npu=2")


def test_vendor_alone_asks_and_leaves_nvidia_nothing() -> None:
    r = parse_requests(_spec("AMD_VISIBLE_DEVICES=0"), Policy(privileged_gets_all=True))
    assert r.wants_anything and r.devices == Devices((VendorName("amd.com/gpu=0"),))
    nvidia, names = split_vendor_names(r)
    assert isinstance(nvidia.devices, Void) and not nvidia.wants_anything
    assert names == ("amd.com/gpu=0",)


def test_vendor_cdi_annotations_split_from_nvidias() -> None:
    spec = _spec(annotations={"cdi.k8s.io/x": "amd.com/gpu=0,nvidia.com/gpu=1"})
    r = parse_requests(spec, Policy())
    nvidia, names = split_vendor_names(r)
    assert nvidia.devices == Devices((CdiName("nvidia.com/gpu=1"),))
    assert names == ("amd.com/gpu=0",)


def test_an_unprivileged_containers_vendor_env_follows_the_policy() -> None:
    spec = _spec("AMD_VISIBLE_DEVICES=0", privileged=False)
    r = parse_requests(spec, Policy(accept_env_unprivileged=False))
    assert isinstance(r.devices, Void)
    assert [(i.name, i.kind) for i in r.ignored] == [("AMD_VISIBLE_DEVICES", SourceKind.ENV)]
    assert any(w.startswith("ignored AMD_VISIBLE_DEVICES=") for w in r.warnings)
    r = parse_requests(spec, Policy(accept_env_unprivileged=True))
    assert r.devices == Devices((VendorName("amd.com/gpu=0"),))


def test_annotations_win_over_vendor_env() -> None:
    spec = _spec("ASCEND_VISIBLE_DEVICES=0", annotations={"cdi.k8s.io/x": "huawei.com/npu=1"})
    r = parse_requests(spec, Policy())
    assert r.devices == Devices((CdiName("huawei.com/npu=1"),))
    assert [i.name for i in r.ignored] == ["ASCEND_VISIBLE_DEVICES"]


def test_nvidia_all_with_a_vendor_is_an_error_naming_both() -> None:
    spec = _spec("NVIDIA_VISIBLE_DEVICES=all", "AMD_VISIBLE_DEVICES=0")
    with pytest.raises(RequestError, match="NVIDIA_VISIBLE_DEVICES=all cannot be combined with"):
        parse_requests(spec, Policy())
