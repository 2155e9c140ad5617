"""The version table: each predicate of specs-go/version.go, and minimum_version over them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from oci.cdi.parse import check_spec, parse_spec
from oci.cdi.version import (
    CURRENT,
    EARLIEST,
    KNOWN_VERSIONS,
    VERSION_TABLE,
    is_known_version,
    minimum_version,
    normalize_version,
    required_version,
    version_key,
)
from oci.cdi.write import write_spec
from oci.errors import CdiSpecError

BASE: dict[str, Any] = {
    "cdiVersion": CURRENT,
    "kind": "vendor.com/device",
    "devices": [{"name": "dev", "containerEdits": {"env": ["A=1"]}}],
}


def spec_with(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return data


def device(name: str = "dev", **edits: Any) -> dict[str, Any]:
    return {"name": name, "containerEdits": edits or {"env": ["A=1"]}}


# (expected minimum, field named, spec data)
CASES: list[tuple[str, str | None, dict[str, Any]]] = [
    ("0.3.0", None, BASE),
    (
        "0.4.0",
        "devices[0].containerEdits.mounts[0].type",
        spec_with(
            devices=[device(mounts=[{"hostPath": "/a", "containerPath": "/a", "type": "bind"}])]
        ),
    ),
    (
        "0.4.0",
        "containerEdits.mounts[1].type",
        spec_with(
            containerEdits={
                "mounts": [
                    {"hostPath": "/a", "containerPath": "/a"},
                    {"hostPath": "/b", "containerPath": "/b", "type": "tmpfs"},
                ]
            }
        ),
    ),
    ("0.5.0", "devices[1].name", spec_with(devices=[device("a"), device("0")])),
    (
        "0.5.0",
        "containerEdits.deviceNodes[0].hostPath",
        spec_with(containerEdits={"deviceNodes": [{"path": "/dev/x", "hostPath": "/host/dev/x"}]}),
    ),
    (
        "0.5.0",
        "devices[0].containerEdits.deviceNodes[0].hostPath",
        spec_with(devices=[device(deviceNodes=[{"path": "/dev/x", "hostPath": "/h/x"}])]),
    ),
    # hostPath is a 0.5.0 field whatever its value: the same as path still needs 0.5.0
    (
        "0.5.0",
        "containerEdits.deviceNodes[0].hostPath",
        spec_with(containerEdits={"deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/x"}]}),
    ),
    (
        "0.5.0",
        "devices[0].containerEdits.deviceNodes[1].hostPath",
        spec_with(
            devices=[
                device(deviceNodes=[{"path": "/dev/a"}, {"path": "/dev/b", "hostPath": "/dev/b"}])
            ]
        ),
    ),
    ("0.6.0", "annotations", spec_with(annotations={"a": "b"})),
    (
        "0.6.0",
        "devices[0].annotations",
        spec_with(devices=[{**device(), "annotations": {"a": "b"}}]),
    ),
    ("0.6.0", "kind", spec_with(kind="vendor.com/gpu.mig")),
    ("0.7.0", "containerEdits.intelRdt", spec_with(containerEdits={"intelRdt": {"closID": "c"}})),
    ("0.7.0", "devices[0].containerEdits.intelRdt", spec_with(devices=[device(intelRdt={})])),
    ("0.7.0", "containerEdits.additionalGids", spec_with(containerEdits={"additionalGids": [44]})),
    (
        "0.7.0",
        "devices[0].containerEdits.additionalGids",
        spec_with(devices=[device(additionalGids=[5])]),
    ),
    (
        "1.1.0",
        "containerEdits.netDevices",
        spec_with(containerEdits={"netDevices": [{"hostInterfaceName": "eth1", "name": "net1"}]}),
    ),
    (
        "1.1.0",
        "devices[0].containerEdits.netDevices",
        spec_with(devices=[device(netDevices=[{"hostInterfaceName": "eth1", "name": "net1"}])]),
    ),
    (
        "1.1.0",
        "containerEdits.intelRdt.schemata",
        spec_with(containerEdits={"intelRdt": {"schemata": ["L3:0=f"]}}),
    ),
    (
        "1.1.0",
        "devices[0].containerEdits.intelRdt.enableMonitoring",
        spec_with(devices=[device(intelRdt={"enableMonitoring": True})]),
    ),
    # the highest feature wins, whatever the order it appears in
    (
        "0.7.0",
        "containerEdits.additionalGids",
        spec_with(
            annotations={"a": "b"},
            devices=[device("0", mounts=[{"hostPath": "/a", "containerPath": "/a", "type": "x"}])],
            containerEdits={"additionalGids": [1]},
        ),
    ),
    # features that do not raise the version
    ("0.3.0", None, spec_with(kind="vendor.com/gpu", devices=[device("a0")])),
    ("0.3.0", None, spec_with(devices=[device(deviceNodes=[{"path": "/dev/x"}])])),
    (  # an empty hostPath is no hostPath
        "0.3.0",
        None,
        spec_with(containerEdits={"deviceNodes": [{"path": "/dev/x", "hostPath": ""}]}),
    ),
    ("0.3.0", None, spec_with(containerEdits={"intelRdt": None, "additionalGids": []})),
    (
        "0.7.0",
        "containerEdits.intelRdt",
        spec_with(containerEdits={"intelRdt": {"enableMonitoring": False}}),
    ),
]


@pytest.mark.parametrize(("expected", "where", "data"), CASES)
def test_minimum_version_and_the_field_that_needs_it(
    expected: str, where: str | None, data: dict[str, Any]
) -> None:
    checked = check_spec(data, source="t.json", check_version=False)
    assert checked.errors == ()
    assert checked.spec is not None
    assert minimum_version(checked.spec) == expected
    assert required_version(checked.spec) == (expected, where)


@pytest.mark.parametrize(("expected", "where", "data"), [c for c in CASES if c[0] != EARLIEST])
def test_declaring_less_than_needed_is_an_error_naming_the_field(
    expected: str, where: str | None, data: dict[str, Any]
) -> None:
    below = KNOWN_VERSIONS[KNOWN_VERSIONS.index(expected) - 1]
    with pytest.raises(CdiSpecError) as info:
        parse_spec({**data, "cdiVersion": below}, source="/etc/cdi/x.json")
    assert str(info.value) == (
        f"/etc/cdi/x.json: {where}: "
        f'needs cdiVersion {expected} or later, the spec declares "{below}"'
    )
    # ...and declaring exactly the minimum (or more) is fine
    assert parse_spec({**data, "cdiVersion": expected}, source="x").version == expected
    assert parse_spec({**data, "cdiVersion": CURRENT}, source="x").version == CURRENT


def test_an_empty_schemata_list_still_needs_1_1_0() -> None:
    # The reference tests ``Schemata != nil``: a present empty list counts.
    data = spec_with(cdiVersion="1.0.0", containerEdits={"intelRdt": {"schemata": []}})
    with pytest.raises(
        CdiSpecError, match=r"containerEdits\.intelRdt\.schemata: needs cdiVersion 1\.1\.0"
    ):
        parse_spec(data, source="x.json")
    assert parse_spec({**data, "cdiVersion": "1.1.0"}, source="x.json").edits.intel_rdt is not None


def test_the_table_is_newest_first_and_covers_every_version_above_the_earliest() -> None:
    versions = [v for v, _ in VERSION_TABLE]
    assert versions == sorted(versions, key=version_key, reverse=True)
    assert set(versions) == set(KNOWN_VERSIONS[KNOWN_VERSIONS.index(EARLIEST) + 1 :])
    assert KNOWN_VERSIONS == (
        "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
    )  # fmt: skip


@pytest.mark.parametrize(
    "version", ["0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"]
)
def test_every_released_version_parses(version: str) -> None:
    assert parse_spec({**BASE, "cdiVersion": version}, source="x").version == version


def test_leading_v_is_accepted_like_the_reference() -> None:
    assert normalize_version("v0.6.0") == "0.6.0"
    assert is_known_version("v1.1.0")
    spec = parse_spec({**BASE, "cdiVersion": "v0.5.0"}, source="x")
    assert spec.version == "v0.5.0"
    with pytest.raises(CdiSpecError, match=r'declares "v0\.5\.0"'):
        parse_spec(spec_with(cdiVersion="v0.5.0", annotations={"a": "b"}), source="x")


@pytest.mark.parametrize("version", ["2.0.0", "1.1", "0.3", "1.1.0-rc1", "", "latest", "vv1.0.0"])
def test_unknown_versions_are_errors(version: str) -> None:
    with pytest.raises(CdiSpecError) as info:
        parse_spec({**BASE, "cdiVersion": version}, source="s.yaml")
    assert str(info.value).startswith(f's.yaml: cdiVersion: invalid version "{version}"')


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0"])
def test_versions_before_the_earliest_are_known_but_unsupported(version: str) -> None:
    assert is_known_version(version)
    with pytest.raises(CdiSpecError) as info:
        parse_spec({**BASE, "cdiVersion": version}, source="s.json")
    assert str(info.value) == (
        f's.json: cdiVersion: version "{version}" is no longer supported, the earliest is 0.3.0'
    )


def test_version_key_orders_and_rejects_unknown() -> None:
    assert version_key("1.0.0") > version_key("0.8.0") > version_key("0.7.0")
    assert version_key("v0.4.0") == version_key("0.4.0")
    with pytest.raises(ValueError):
        version_key("9.9.9")


@pytest.mark.parametrize(
    ("host_path", "version"), [(None, "0.3.0"), ("/dev/x", "0.5.0"), ("/host/dev/x", "0.5.0")]
)
def test_writing_a_node_declares_the_version_its_host_path_needs(
    tmp_path: Path, host_path: str | None, version: str
) -> None:
    node = {"path": "/dev/x"} | ({"hostPath": host_path} if host_path is not None else {})
    data = spec_with(cdiVersion=CURRENT, devices=[device(deviceNodes=[node])])
    write_spec(tmp_path / "x.json", data)
    written = json.loads((tmp_path / "x.json").read_text())
    assert written["cdiVersion"] == version
    assert written["devices"][0]["containerEdits"]["deviceNodes"] == [node]
