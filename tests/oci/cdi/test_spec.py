"""The strict spec parser: values it yields, every rule with the exact field path, loading."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oci.cdi.decode import decode_spec
from oci.cdi.edits import DeviceNode, Edits, Hook, IntelRdt, Mount, NetDevice
from oci.cdi.parse import check_spec, load_spec, parse_spec
from oci.cdi.spec import Device, Issue, Spec
from oci.errors import CdiSpecError, ExitCode
from tests.support.unprivileged import call_unprivileged

GOOD: dict[str, Any] = {
    "cdiVersion": "1.1.0",
    "kind": "nvidia.com/gpu",
    "annotations": {"nvidia.com/driver": "550.54.15"},
    "devices": [
        {
            "name": "0",
            "annotations": {"uuid": "GPU-0"},
            "containerEdits": {
                "deviceNodes": [
                    {
                        "path": "/dev/nvidia0",
                        "hostPath": "/dev/nvidia0",
                        "type": "c",
                        "major": 195,
                        "minor": 0,
                        "fileMode": 0o666,
                        "permissions": "rw",
                        "uid": 0,
                        "gid": 44,
                    }
                ]
            },
        },
        {
            "name": "all",
            "containerEdits": {
                "env": ["NVIDIA_VISIBLE_DEVICES=all", "EMPTY="],
                "netDevices": [{"hostInterfaceName": "eth1", "name": "net1"}],
                "intelRdt": {
                    "closID": "gpu",
                    "l3CacheSchema": "L3:0=f",
                    "memBwSchema": "MB:0=50",
                    "schemata": ["L2:0=3"],
                    "enableMonitoring": True,
                },
                "additionalGids": [44, 0],
            },
        },
    ],
    "containerEdits": {
        "env": ["NVIDIA_DRIVER_CAPABILITIES=all"],
        "deviceNodes": [{"path": "/dev/nvidiactl"}],
        "mounts": [
            {
                "hostPath": "/usr/lib/libcuda.so.1",
                "containerPath": "/usr/lib/libcuda.so.1",
                "options": ["ro", "bind"],
                "type": "bind",
            }
        ],
        "hooks": [
            {
                "hookName": "createContainer",
                "path": "/usr/bin/nvhook-hook",
                "args": ["nvhook-hook", "update-ldcache"],
                "env": ["PATH=/usr/bin"],
                "timeout": 10,
            }
        ],
    },
}


def test_a_full_spec_becomes_light_values() -> None:
    spec = parse_spec(GOOD, source="/etc/cdi/nvidia.json")
    assert spec.version == "1.1.0"
    assert (spec.kind, spec.vendor, spec.class_name) == ("nvidia.com/gpu", "nvidia.com", "gpu")
    assert spec.source == "/etc/cdi/nvidia.json"
    assert dict(spec.annotations) == {"nvidia.com/driver": "550.54.15"}
    assert [d.name for d in spec.devices] == ["0", "all"]
    gpu0 = spec.devices[0]
    assert dict(gpu0.annotations) == {"uuid": "GPU-0"}
    assert gpu0.edits == Edits(
        device_nodes=(
            DeviceNode(
                path="/dev/nvidia0",
                host_path="/dev/nvidia0",
                type="c",
                major=195,
                minor=0,
                file_mode=0o666,
                permissions="rw",
                uid=0,
                gid=44,
            ),
        )
    )
    assert spec.devices[1].edits == Edits(
        env=("NVIDIA_VISIBLE_DEVICES=all", "EMPTY="),
        net_devices=(NetDevice(host_interface_name="eth1", name="net1"),),
        intel_rdt=IntelRdt(
            clos_id="gpu",
            l3_cache_schema="L3:0=f",
            mem_bw_schema="MB:0=50",
            schemata=("L2:0=3",),
            enable_monitoring=True,
        ),
        additional_gids=(44, 0),
    )
    assert spec.edits == Edits(
        env=("NVIDIA_DRIVER_CAPABILITIES=all",),
        device_nodes=(DeviceNode(path="/dev/nvidiactl"),),
        mounts=(
            Mount(
                host_path="/usr/lib/libcuda.so.1",
                container_path="/usr/lib/libcuda.so.1",
                type="bind",
                options=("ro", "bind"),
            ),
        ),
        hooks=(
            Hook(
                hook_name="createContainer",
                path="/usr/bin/nvhook-hook",
                args=("nvhook-hook", "update-ldcache"),
                env=("PATH=/usr/bin",),
                timeout=10,
            ),
        ),
    )
    # the same values as Edits.from_dict gives for the same JSON
    assert spec.edits == Edits.from_dict(GOOD["containerEdits"])
    for i, device in enumerate(spec.devices):
        assert device.edits == Edits.from_dict(GOOD["devices"][i]["containerEdits"])


def test_spec_helpers() -> None:
    spec = parse_spec(GOOD, source="x")
    assert spec.qualified_name("0") == "nvidia.com/gpu=0"
    assert spec.device("all") is spec.devices[1]
    assert spec.device("7") is None
    hash(spec)  # frozen values: usable as keys
    assert spec == parse_spec(copy.deepcopy(GOOD), source="x")


def test_spec_create_for_producers() -> None:
    spec = Spec.create("vendor.com/dev", [Device("a", Edits(env=("A=1",)))], annotations={"k": "v"})
    assert (spec.vendor, spec.class_name, spec.version) == ("vendor.com", "dev", "0.3.0")
    assert dict(spec.annotations) == {"k": "v"}
    assert spec.edits == Edits()


def test_spec_level_edits_may_be_empty_or_absent() -> None:
    base = {"cdiVersion": "0.3.0", "kind": "v.com/c", "devices": [GOOD["devices"][0]]}
    base["devices"] = [{"name": "a", "containerEdits": {"env": ["A=1"]}}]
    assert parse_spec(base, source="x").edits == Edits()
    assert parse_spec({**base, "containerEdits": {}}, source="x").edits == Edits()
    assert parse_spec({**base, "containerEdits": None}, source="x").edits == Edits()


def test_null_is_the_zero_value_like_go() -> None:
    data = {
        "cdiVersion": "0.3.0",
        "kind": "v.com/c",
        "annotations": None,
        "devices": [
            {
                "name": "a",
                "annotations": None,
                "containerEdits": {
                    "env": None,
                    "deviceNodes": [
                        {"path": "/dev/a", "hostPath": None, "type": None, "major": None}
                    ],
                    "mounts": None,
                    "hooks": None,
                    "intelRdt": None,
                },
            }
        ],
    }
    spec = parse_spec(data, source="x")
    assert spec.devices[0].edits == Edits(device_nodes=(DeviceNode(path="/dev/a"),))
    assert spec.version == "0.3.0"  # no hostPath, no intelRdt: 0.3.0 suffices


def _with(path: str, value: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of GOOD (or base) with the dotted/indexed ``path`` set to ``value`` (or removed)."""
    data = copy.deepcopy(base if base is not None else GOOD)
    parts: list[str | int] = []
    for token in path.replace("[", ".[").split("."):
        parts.append(int(token[1:-1]) if token.startswith("[") else token)
    target: Any = data
    for part in parts[:-1]:
        target = target[part]
    if value is _REMOVE:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value
    return data


_REMOVE = object()

E0 = "devices[0].containerEdits"
HOOKS = "(one of prestart, createRuntime, createContainer, startContainer, poststart, poststop)"
E1 = "devices[1].containerEdits"

# (where to change, the new value, the field path the error names, the message)
BAD: list[tuple[str, Any, str, str]] = [
    # top level
    ("cdiVersion", _REMOVE, "cdiVersion", "missing required field"),
    ("cdiVersion", 1.1, "cdiVersion", "expected a string, got number"),
    ("cdiVersion", "1.2.0", "cdiVersion", 'invalid version "1.2.0" (known: 0.3.0 to 1.1.0)'),
    ("kind", _REMOVE, "kind", "missing required field"),
    ("kind", "nvidia.com", "kind", 'invalid kind "nvidia.com", expected vendor/class'),
    ("kind", "nvidia.com/", "kind", 'invalid kind "nvidia.com/", expected vendor/class'),
    ("kind", "1nvidia.com/gpu", "kind", 'invalid vendor. "1nvidia.com", should start with letter'),
    ("kind", "nvidia.com/gpu-", "kind", 'invalid class. "gpu-", should end with a letter or digit'),
    ("kind", "nvidia.com/g=pu", "kind", "invalid class. invalid character '=' in name \"g=pu\""),
    ("kind", ["x"], "kind", "expected a string, got array"),
    ("devices", _REMOVE, "devices", "missing required field"),
    ("devices", [], "devices", "no devices (a spec needs at least one)"),
    ("devices", None, "devices", "no devices (a spec needs at least one)"),
    ("devices", {"name": "a"}, "devices", "expected an array, got object"),
    ("annotations", ["a"], "annotations", "expected an object, got array"),
    ("annotations", {"a": 1}, 'annotations["a"]', "expected a string, got integer"),
    ("annotations", {"a.b": True}, 'annotations["a.b"]', "expected a string, got boolean"),
    ("containerEdits", [], "containerEdits", "expected an object, got array"),
    ("extra", 1, "extra", "unknown field"),
    ("CDIVersion", "1.1.0", "CDIVersion", 'unknown field, did you mean "cdiVersion"?'),
    # devices
    ("devices[0]", "gpu0", "devices[0]", "expected an object, got string"),
    ("devices[0].name", _REMOVE, "devices[0].name", "missing required field"),
    ("devices[0].name", "", "devices[0].name", "invalid (empty) device name"),
    ("devices[0].name", 0, "devices[0].name", "expected a string, got integer"),
    (
        "devices[0].name",
        "gpu 0",
        "devices[0].name",
        "invalid character ' ' in device name \"gpu 0\"",
    ),
    (
        "devices[0].name",
        "_0",
        "devices[0].name",
        'invalid device name "_0", should start with a letter or digit',
    ),
    ("devices[1].name", "0", "devices[1].name", 'duplicate device name "0" (also devices[0])'),
    (
        "devices[0].annotations",
        {"k": ["v"]},
        'devices[0].annotations["k"]',
        "expected a string, got array",
    ),
    ("devices[0].containerEdits", _REMOVE, E0, "missing required field"),
    ("devices[0].containerEdits", {}, E0, "empty container edits (a device needs at least one)"),
    ("devices[0].containerEdits", None, E0, "empty container edits (a device needs at least one)"),
    (
        "devices[0].containerEdits",
        {"env": []},
        E0,
        "empty container edits (a device needs at least one)",
    ),
    ("devices[0].containerEdits", "x", E0, "expected an object, got string"),
    ("devices[0].edits", {}, "devices[0].edits", "unknown field"),
    ("devices[0].Name", "x", "devices[0].Name", 'unknown field, did you mean "name"?'),
    # env
    (f"{E1}.env", "A=1", f"{E1}.env", "expected an array, got string"),
    (f"{E1}.env[1]", "NOVALUE", f"{E1}.env[1]", 'invalid environment variable "NOVALUE"'),
    (f"{E1}.env[1]", "=x", f"{E1}.env[1]", 'invalid environment variable "=x"'),
    (f"{E1}.env[1]", "", f"{E1}.env[1]", 'invalid environment variable ""'),
    (f"{E1}.env[0]", 5, f"{E1}.env[0]", "expected a string, got integer"),
    # device nodes
    (f"{E0}.deviceNodes", {}, f"{E0}.deviceNodes", "expected an array, got object"),
    (f"{E0}.deviceNodes[0]", "/dev/x", f"{E0}.deviceNodes[0]", "expected an object, got string"),
    (
        f"{E0}.deviceNodes[0].path",
        _REMOVE,
        f"{E0}.deviceNodes[0].path",
        "invalid (empty) device path",
    ),
    (f"{E0}.deviceNodes[0].path", "", f"{E0}.deviceNodes[0].path", "invalid (empty) device path"),
    (f"{E0}.deviceNodes[0].path", 7, f"{E0}.deviceNodes[0].path", "expected a string, got integer"),
    (
        f"{E0}.deviceNodes[0].type",
        "x",
        f"{E0}.deviceNodes[0].type",
        'invalid type "x" (one of b, c, u, p, or empty)',
    ),
    (
        f"{E0}.deviceNodes[0].type",
        "cc",
        f"{E0}.deviceNodes[0].type",
        'invalid type "cc" (one of b, c, u, p, or empty)',
    ),
    (
        f"{E0}.deviceNodes[0].major",
        -1,
        f"{E0}.deviceNodes[0].major",
        "invalid (negative) device number -1",
    ),
    (
        f"{E0}.deviceNodes[0].minor",
        -5,
        f"{E0}.deviceNodes[0].minor",
        "invalid (negative) device number -5",
    ),
    (
        f"{E0}.deviceNodes[0].major",
        "195",
        f"{E0}.deviceNodes[0].major",
        "expected an integer, got string",
    ),
    (
        f"{E0}.deviceNodes[0].major",
        195.0,
        f"{E0}.deviceNodes[0].major",
        "expected an integer, got number",
    ),
    (
        f"{E0}.deviceNodes[0].major",
        True,
        f"{E0}.deviceNodes[0].major",
        "expected an integer, got boolean",
    ),
    (
        f"{E0}.deviceNodes[0].major",
        1 << 63,
        f"{E0}.deviceNodes[0].major",
        f"{1 << 63} is out of range [{-(1 << 63)}, {(1 << 63) - 1}]",
    ),
    (
        f"{E0}.deviceNodes[0].permissions",
        "rx",
        f"{E0}.deviceNodes[0].permissions",
        'invalid permissions "rx" (letters r, w, m)',
    ),
    (
        f"{E0}.deviceNodes[0].permissions",
        "none",
        f"{E0}.deviceNodes[0].permissions",
        'invalid permissions "none" (letters r, w, m)',
    ),
    (
        f"{E0}.deviceNodes[0].permissions",
        "RW",
        f"{E0}.deviceNodes[0].permissions",
        'invalid permissions "RW" (letters r, w, m)',
    ),
    (
        f"{E0}.deviceNodes[0].uid",
        -1,
        f"{E0}.deviceNodes[0].uid",
        "-1 is out of range [0, 4294967295]",
    ),
    (
        f"{E0}.deviceNodes[0].gid",
        1 << 32,
        f"{E0}.deviceNodes[0].gid",
        f"{1 << 32} is out of range [0, 4294967295]",
    ),
    (
        f"{E0}.deviceNodes[0].fileMode",
        "0666",
        f"{E0}.deviceNodes[0].fileMode",
        "expected an integer, got string",
    ),
    (
        f"{E0}.deviceNodes[0].hostPath",
        1,
        f"{E0}.deviceNodes[0].hostPath",
        "expected a string, got integer",
    ),
    (f"{E0}.deviceNodes[0].devicePath", "/x", f"{E0}.deviceNodes[0].devicePath", "unknown field"),
    # mounts
    (
        "containerEdits.mounts[0].hostPath",
        "",
        "containerEdits.mounts[0].hostPath",
        "invalid mount, empty host path",
    ),
    (
        "containerEdits.mounts[0].hostPath",
        _REMOVE,
        "containerEdits.mounts[0].hostPath",
        "invalid mount, empty host path",
    ),
    (
        "containerEdits.mounts[0].containerPath",
        "",
        "containerEdits.mounts[0].containerPath",
        "invalid mount, empty container path",
    ),
    (
        "containerEdits.mounts[0].options",
        "ro",
        "containerEdits.mounts[0].options",
        "expected an array, got string",
    ),
    (
        "containerEdits.mounts[0].options",
        ["ro", 1],
        "containerEdits.mounts[0].options[1]",
        "expected a string, got integer",
    ),
    (
        "containerEdits.mounts[0].type",
        1,
        "containerEdits.mounts[0].type",
        "expected a string, got integer",
    ),
    (
        "containerEdits.mounts[0].readOnly",
        True,
        "containerEdits.mounts[0].readOnly",
        "unknown field",
    ),
    # hooks
    (
        "containerEdits.hooks[0].hookName",
        "prestart2",
        "containerEdits.hooks[0].hookName",
        f'invalid hook name "prestart2" {HOOKS}',
    ),
    (
        "containerEdits.hooks[0].hookName",
        "CreateContainer",
        "containerEdits.hooks[0].hookName",
        f'invalid hook name "CreateContainer" {HOOKS}',
    ),
    (
        "containerEdits.hooks[0].hookName",
        _REMOVE,
        "containerEdits.hooks[0].hookName",
        f'invalid hook name "" {HOOKS}',
    ),
    (
        "containerEdits.hooks[0].path",
        "",
        "containerEdits.hooks[0].path",
        'invalid hook "createContainer" with empty path',
    ),
    (
        "containerEdits.hooks[0].env",
        ["PATH"],
        "containerEdits.hooks[0].env[0]",
        'invalid environment variable "PATH"',
    ),
    (
        "containerEdits.hooks[0].args",
        [1],
        "containerEdits.hooks[0].args[0]",
        "expected a string, got integer",
    ),
    (
        "containerEdits.hooks[0].timeout",
        "10",
        "containerEdits.hooks[0].timeout",
        "expected an integer, got string",
    ),
    # additional gids
    (
        f"{E1}.additionalGids",
        [1, -1],
        f"{E1}.additionalGids[1]",
        "-1 is out of range [0, 4294967295]",
    ),
    (f"{E1}.additionalGids", ["44"], f"{E1}.additionalGids[0]", "expected an integer, got string"),
    # net devices
    (
        f"{E1}.netDevices[0].hostInterfaceName",
        "",
        f"{E1}.netDevices[0].hostInterfaceName",
        "invalid linux net device, empty host interface name",
    ),
    (
        f"{E1}.netDevices[0].name",
        _REMOVE,
        f"{E1}.netDevices[0].name",
        "invalid linux net device, empty interface name",
    ),
    (
        f"{E1}.netDevices",
        [{"hostInterfaceName": "a", "name": "x"}, {"hostInterfaceName": "a", "name": "y"}],
        f"{E1}.netDevices[1].hostInterfaceName",
        'duplicate host interface name "a" (also devices[1].containerEdits.netDevices[0])',
    ),
    (
        f"{E1}.netDevices",
        [{"hostInterfaceName": "a", "name": "x"}, {"hostInterfaceName": "b", "name": "x"}],
        f"{E1}.netDevices[1].name",
        'duplicate interface name "x" (also devices[1].containerEdits.netDevices[0])',
    ),
    (f"{E1}.netDevices[0].mac", "x", f"{E1}.netDevices[0].mac", "unknown field"),
    # intel rdt
    (f"{E1}.intelRdt", "gpu", f"{E1}.intelRdt", "expected an object, got string"),
    (f"{E1}.intelRdt.closID", "a/b", f"{E1}.intelRdt.closID", 'invalid closID "a/b"'),
    (f"{E1}.intelRdt.closID", "..", f"{E1}.intelRdt.closID", 'invalid closID ".."'),
    (f"{E1}.intelRdt.closID", ".", f"{E1}.intelRdt.closID", 'invalid closID "."'),
    (f"{E1}.intelRdt.closID", "a\nb", f"{E1}.intelRdt.closID", 'invalid closID "a\\nb"'),
    (
        f"{E1}.intelRdt.closID",
        "x" * 4096,
        f"{E1}.intelRdt.closID",
        f'invalid closID "{"x" * 4096}"',
    ),
    (
        f"{E1}.intelRdt.enableMonitoring",
        "yes",
        f"{E1}.intelRdt.enableMonitoring",
        "expected a boolean, got string",
    ),
    (f"{E1}.intelRdt.schemata", "L3", f"{E1}.intelRdt.schemata", "expected an array, got string"),
    (
        f"{E1}.intelRdt.enableCMT",
        True,
        f"{E1}.intelRdt.enableCMT",
        "unknown field: removed in CDI 1.1.0 (use enableMonitoring)",
    ),
    (
        f"{E1}.intelRdt.enableMBM",
        False,
        f"{E1}.intelRdt.enableMBM",
        "unknown field: removed in CDI 1.1.0 (use enableMonitoring)",
    ),
    (
        f"{E1}.intelRdt.closid",
        "x",
        f"{E1}.intelRdt.closid",
        'unknown field, did you mean "closID"?',
    ),
    (f"{E1}.cgroups", {}, f"{E1}.cgroups", "unknown field"),
]


@pytest.mark.parametrize(
    ("where", "value", "path", "message"), BAD, ids=[f"{b[2]}:{b[3][:40]}" for b in BAD]
)
def test_each_bad_input_names_its_field(where: str, value: Any, path: str, message: str) -> None:
    data = _with(where, value)
    with pytest.raises(CdiSpecError) as info:
        parse_spec(data, source="/etc/cdi/x.json")
    assert str(info.value).split(" (and ")[0] == f"/etc/cdi/x.json: {path}: {message}"
    assert info.value.exit_code == ExitCode.INVALID_CDI
    # check_spec reports the same problem (among all others) and no spec
    checked = check_spec(data, source="/etc/cdi/x.json")
    assert checked.spec is None
    assert Issue(path, message) in checked.errors


def test_the_closid_of_the_root_clos_is_fine() -> None:
    spec = parse_spec(_with(f"{E1}.intelRdt.closID", "/"), source="x")
    assert spec.devices[1].edits.intel_rdt == IntelRdt(
        clos_id="/",
        l3_cache_schema="L3:0=f",
        mem_bw_schema="MB:0=50",
        schemata=("L2:0=3",),
        enable_monitoring=True,
    )


@pytest.mark.parametrize("permissions", ["", "r", "w", "m", "rw", "rwm", "mwr", "rr"])
def test_permission_strings_made_of_rwm_are_fine(permissions: str) -> None:
    spec = parse_spec(_with(f"{E0}.deviceNodes[0].permissions", permissions), source="x")
    assert spec.devices[0].edits.device_nodes[0].permissions == (permissions or None)


@pytest.mark.parametrize("node_type", ["", "b", "c", "u", "p"])
def test_device_node_types(node_type: str) -> None:
    spec = parse_spec(_with(f"{E0}.deviceNodes[0].type", node_type), source="x")
    assert spec.devices[0].edits.device_nodes[0].type == (node_type or None)


def test_a_device_with_only_net_devices_is_not_empty() -> None:
    data = _with(E1, {"netDevices": [{"hostInterfaceName": "eth1", "name": "net1"}]})
    assert parse_spec(data, source="x").devices[1].edits.net_devices


def test_all_errors_are_collected_and_the_first_is_raised() -> None:
    data = _with("kind", "bad")
    data = _with(f"{E0}.deviceNodes[0].permissions", "x", data)
    data = _with("containerEdits.hooks[0].hookName", "nope", data)
    checked = check_spec(data, source="f.json")
    # in the reference's order: version, kind, annotations, the spec's edits, devices
    assert [i.path for i in checked.errors] == [
        "kind",
        "containerEdits.hooks[0].hookName",
        f"{E0}.deviceNodes[0].permissions",
    ]
    with pytest.raises(CdiSpecError) as info:
        parse_spec(data, source="f.json")
    assert str(info.value) == (
        'f.json: kind: invalid kind "bad", expected vendor/class'
        " (and 2 more; `nvhook cdi validate` lists them all)"
    )


@pytest.mark.parametrize("data", [None, [], "spec", 3])
def test_the_top_level_must_be_an_object(data: object) -> None:
    with pytest.raises(CdiSpecError, match=r"^s\.json: (empty spec|expected an object)"):
        parse_spec(data, source="s.json")


def test_warnings_for_what_only_the_spec_text_requires() -> None:
    data = _with(f"{E0}.deviceNodes[0].path", "dev/nvidia0")
    data = _with("containerEdits.mounts[0].containerPath", "usr/lib/x", data)
    data = _with("containerEdits.hooks[0].path", "nvhook-hook", data)
    data = _with("containerEdits.hooks[0].timeout", 0, data)
    data = _with("annotations", {"Bad Key": "v", "ok.example.com/fine": "v"}, data)
    # the reference accepts all of these: so does the parser
    parse_spec(data, source="x")
    checked = check_spec(data, source="x", warnings=True)
    assert checked.errors == ()
    assert [i.path for i in checked.warnings] == [
        'annotations["Bad Key"]',
        "containerEdits.hooks[0].path",
        "containerEdits.hooks[0].timeout",
        "containerEdits.mounts[0].containerPath",
        f"{E0}.deviceNodes[0].path",
    ]
    assert checked.warnings[1].message == 'hook path "nvhook-hook" is not absolute'
    assert checked.warnings[2].message == "hook timeout 0 is not greater than zero"
    assert checked.warnings[3].message == 'container path "usr/lib/x" is not absolute'
    assert checked.warnings[4].message == 'device path "dev/nvidia0" is not absolute'
    assert check_spec(data, source="x").warnings == ()  # not collected unless asked


@pytest.mark.parametrize(
    "key",
    ["a", "A.b-c_d", "example.com/name", "1234/5678", "x" * 63, "a.b/" + "x" * 63],
)
def test_kubernetes_qualified_annotation_keys_give_no_warning(key: str) -> None:
    checked = check_spec(_with("annotations", {key: "v"}), source="x", warnings=True)
    assert checked.warnings == ()


@pytest.mark.parametrize(
    "key", ["", "-a", "a-", "a/b/c", "/a", "a/", "x" * 64, "Ex_ample.com/a", "a b", "é"]
)
def test_other_annotation_keys_give_a_warning(key: str) -> None:
    checked = check_spec(_with("annotations", {key: "v"}), source="x", warnings=True)
    assert [i.path for i in checked.warnings] == [f'annotations["{key}"]']


def test_annotation_total_size_warning() -> None:
    checked = check_spec(_with("annotations", {"a": "x" * (256 * 1024)}), source="x", warnings=True)
    assert [i.path for i in checked.warnings] == ["annotations"]
    assert "over the 262144 limit" in checked.warnings[0].message


# --- decoding and loading -------------------------------------------------------------


def test_duplicate_json_keys_are_errors_at_their_path() -> None:
    text = (
        '{"cdiVersion": "0.3.0", "kind": "v.com/c", "kind": "v.com/c", '
        '"devices": [{"name": "a", "containerEdits": {"env": ["A=1"], "env": ["B=2"]}}]}'
    )
    data = decode_spec(text.encode(), suffix=".json")
    checked = check_spec(data, source="d.json")
    assert checked.errors == (
        Issue("kind", "duplicate field"),
        Issue("devices[0].containerEdits.env", "duplicate field"),
    )


def test_duplicate_yaml_keys_are_errors_at_their_path() -> None:
    text = (
        "cdiVersion: 0.6.0\nkind: v.com/c\n"
        "devices:\n- name: a\n  name: b\n  containerEdits:\n    env: [A=1]\n"
        "annotations: {x: '1', x: '2'}\n"
    )
    data = decode_spec(text.encode(), suffix=".yaml")
    checked = check_spec(data, source="d.yaml")
    assert set(checked.errors) == {
        Issue("devices[0].name", "duplicate field"),
        Issue('annotations["x"]', "duplicate key"),
    }


@pytest.mark.parametrize(
    ("raw", "suffix", "message"),
    [
        (b"", ".json", "empty file (a CDI spec needs cdiVersion, kind and devices)"),
        (b"  \n", ".json", "empty file (a CDI spec needs cdiVersion, kind and devices)"),
        (b"", ".yaml", "empty file (a CDI spec needs cdiVersion, kind and devices)"),
        (
            b"# only a comment\n",
            ".yml",
            "empty file (a CDI spec needs cdiVersion, kind and devices)",
        ),
        (
            b"{",
            ".json",
            "invalid JSON: unexpected end of the text (line 1, column 2)",
        ),
        (b'{"a" 1}', ".json", "invalid JSON: expecting ':' after a key (line 1, column 6)"),
        (b"\xff\xfe", ".json", "not UTF-8 text: invalid start byte at byte 0"),
        (b"a: [1, 2\n", ".yaml", "invalid YAML:"),
        (b"{}", ".toml", 'unsupported file extension ".toml" (a CDI spec is .json or .yaml)'),
        (b"{}", "", "unsupported file extension none (a CDI spec is .json or .yaml)"),
    ],
)
def test_decode_errors(raw: bytes, suffix: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        decode_spec(raw, suffix=suffix)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_load_json_and_yaml_give_the_same_spec(tmp_path: Path) -> None:
    import yaml

    (tmp_path / "a.json").write_text(json.dumps(GOOD))
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(GOOD))
    (tmp_path / "a.yml").write_text(yaml.safe_dump(GOOD))
    from_json = load_spec(tmp_path / "a.json")
    assert from_json.source == str(tmp_path / "a.json")
    for name in ("a.yaml", "a.yml"):
        from_yaml = load_spec(str(tmp_path / name))
        assert from_yaml.devices == from_json.devices
        assert from_yaml.edits == from_json.edits
        assert from_yaml.annotations == from_json.annotations


def test_yaml_scalars_of_the_wrong_type_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "cdiVersion: 1.0\nkind: v.com/c\ndevices: [{name: a, containerEdits: {env: [A=1]}}]\n"
    )
    with pytest.raises(CdiSpecError, match=r"s\.yaml: cdiVersion: expected a string, got number$"):
        load_spec(path)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.json", None, "cannot read: No such file or directory"),
        ("empty.json", b"", "empty file (a CDI spec needs cdiVersion, kind and devices)"),
        ("spec.txt", b"{}", 'unsupported file extension ".txt"'),
        ("broken.json", b"[1,", "invalid JSON:"),
        ("list.json", b"[]", "expected an object, got array"),
    ],
)
def test_load_errors_name_the_file(
    tmp_path: Path, name: str, content: bytes | None, message: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(CdiSpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_unreadable_file(unprivileged_tmp: Path) -> None:
    path = unprivileged_tmp / "a.json"
    device = {"name": "x", "containerEdits": {"env": ["A=1"]}}
    path.write_text(json.dumps({"cdiVersion": "0.3.0", "kind": "vendor.io/a", "devices": [device]}))
    assert call_unprivileged(lambda: load_spec(path).kind) == "vendor.io/a"  # reachable
    path.chmod(0)
    with pytest.raises(CdiSpecError) as info:
        call_unprivileged(lambda: load_spec(path))
    assert str(info.value) == f"{path}: cannot read: Permission denied"


def test_a_directory_is_not_a_spec(tmp_path: Path) -> None:
    (tmp_path / "d.json").mkdir()
    with pytest.raises(CdiSpecError, match=r"d\.json: cannot read: Is a directory"):
        load_spec(tmp_path / "d.json")


def test_the_schema_examples_load(tmp_path: Path) -> None:
    data = Path(__file__).parents[2] / "data" / "cdi" / "schema-testdata"
    assert load_spec(data / "good" / "minimal.json").devices[0].name == "myDevice"
    example = load_spec(data / "good" / "spec-example.json")
    assert example.edits.hooks[1] == Hook(hook_name="startContainer", path="/usr/bin/ldconfig")
    for bad in sorted((data / "bad").iterdir()):
        with pytest.raises(CdiSpecError):
            load_spec(bad)


def test_importing_the_parser_pulls_no_heavy_modules(tmp_path: Path) -> None:
    """The registry runs this in the shim (architecture D5): loading a JSON spec is stdlib-only."""
    spec_file = tmp_path / "s.json"
    spec_file.write_text(json.dumps(GOOD))
    heavy = ["pydantic", "yaml", "jsonschema", "referencing", "click", "pynvml", "nvhook"]
    code = (
        "import sys\n"
        "from oci.cdi.parse import load_spec\n"
        f"load_spec({str(spec_file)!r})\n"
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""
