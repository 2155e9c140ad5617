"""Writing specs: canonical bytes, lowest cdiVersion, dedupe, mode 0644, atomic replacement."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from oci.cdi.edits import DeviceNode, Edits, Hook, IntelRdt, Mount, NetDevice
from oci.cdi.parse import load_spec, parse_spec
from oci.cdi.spec import Device, Spec
from oci.cdi.write import dump_spec, spec_to_dict, write_spec
from oci.errors import CdiSpecError, CdiWriteError, ExitCode


def gpu_spec(n: int = 2, **extra: Any) -> dict[str, Any]:
    return {
        "cdiVersion": "1.1.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {
                "name": f"gpu{i}",
                "containerEdits": {
                    "deviceNodes": [
                        {"path": f"/dev/nvidia{i}", "type": "c", "major": 195, "minor": i}
                    ]
                },
            }
            for i in range(n)
        ],
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]},
        **extra,
    }


def test_json_layout_is_canonical() -> None:
    data = {
        # keys in a scrambled order, a declared version that is too high
        "containerEdits": {
            "mounts": [
                {"type": "bind", "options": ["ro"], "containerPath": "/b", "hostPath": "/a"}
            ],
            "env": ["A=1"],
        },
        "devices": [
            {
                "containerEdits": {"env": ["B=2"]},
                "annotations": {"z": "1", "a": "2"},
                "name": "dev",
            }
        ],
        "annotations": {"y": "1", "b": "2"},
        "kind": "vendor.com/dev",
        "cdiVersion": "1.1.0",
    }
    out = dump_spec(data)
    assert out.decode() == (
        "{\n"
        '  "cdiVersion": "0.6.0",\n'
        '  "kind": "vendor.com/dev",\n'
        '  "annotations": {\n'
        '    "b": "2",\n'
        '    "y": "1"\n'
        "  },\n"
        '  "devices": [\n'
        "    {\n"
        '      "name": "dev",\n'
        '      "annotations": {\n'
        '        "a": "2",\n'
        '        "z": "1"\n'
        "      },\n"
        '      "containerEdits": {\n'
        '        "env": [\n'
        '          "B=2"\n'
        "        ]\n"
        "      }\n"
        "    }\n"
        "  ],\n"
        '  "containerEdits": {\n'
        '    "env": [\n'
        '      "A=1"\n'
        "    ],\n"
        '    "mounts": [\n'
        "      {\n"
        '        "hostPath": "/a",\n'
        '        "containerPath": "/b",\n'
        '        "options": [\n'
        '          "ro"\n'
        "        ],\n"
        '        "type": "bind"\n'
        "      }\n"
        "    ]\n"
        "  }\n"
        "}\n"
    )


def test_edits_keys_follow_the_reference_field_order() -> None:
    edits = {
        "additionalGids": [44],
        "intelRdt": {"enableMonitoring": True, "closID": "c"},
        "mounts": [{"hostPath": "/a", "containerPath": "/a"}],
        "hooks": [{"timeout": 5, "path": "/bin/h", "hookName": "prestart", "args": ["h"]}],
        "netDevices": [{"name": "n", "hostInterfaceName": "h"}],
        "deviceNodes": [{"gid": 1, "path": "/dev/x", "permissions": "rw", "hostPath": "/dev/y"}],
        "env": ["A=1"],
    }
    data = {"kind": "v.com/c", "devices": [{"name": "d", "containerEdits": edits}]}
    out = json.loads(dump_spec(data))
    written = out["devices"][0]["containerEdits"]
    assert list(written) == [
        "env",
        "deviceNodes",
        "netDevices",
        "hooks",
        "mounts",
        "intelRdt",
        "additionalGids",
    ]
    assert list(written["deviceNodes"][0]) == ["path", "hostPath", "permissions", "gid"]
    assert list(written["hooks"][0]) == ["hookName", "path", "args", "timeout"]
    assert list(written["intelRdt"]) == ["closID", "enableMonitoring"]
    assert list(written["netDevices"][0]) == ["hostInterfaceName", "name"]
    assert out["cdiVersion"] == "1.1.0"


@pytest.mark.parametrize(
    ("extra", "version"),
    [
        ({}, "0.3.0"),
        ({"annotations": {"a": "b"}}, "0.6.0"),
        ({"kind": "nvidia.com/gpu.mig"}, "0.6.0"),
        (
            {
                "containerEdits": {
                    "mounts": [{"hostPath": "/a", "containerPath": "/a", "type": "bind"}]
                }
            },
            "0.4.0",
        ),
        ({"containerEdits": {"deviceNodes": [{"path": "/dev/a", "hostPath": "/dev/b"}]}}, "0.5.0"),
        ({"containerEdits": {"additionalGids": [44]}}, "0.7.0"),
        ({"containerEdits": {"intelRdt": {"closID": "x"}}}, "0.7.0"),
        ({"containerEdits": {"netDevices": [{"hostInterfaceName": "a", "name": "b"}]}}, "1.1.0"),
    ],
)
def test_the_lowest_version_is_written_whatever_is_declared(
    extra: dict[str, Any], version: str
) -> None:
    for declared in ("1.1.0", "0.3.0", None):
        data = gpu_spec(**extra)
        if declared is None:
            del data["cdiVersion"]
        else:
            data["cdiVersion"] = declared
        written = json.loads(dump_spec(data))
        assert written["cdiVersion"] == version
        # and the result is a valid spec at that version
        assert parse_spec(written, source="w").version == version


def test_a_digit_device_name_needs_0_5_0() -> None:
    data = gpu_spec()
    data["devices"][0]["name"] = "0"
    assert json.loads(dump_spec(data))["cdiVersion"] == "0.5.0"


def test_same_input_same_bytes_and_round_trip() -> None:
    data = gpu_spec(3, annotations={"b": "1", "a": "2"})
    first = dump_spec(data)
    assert dump_spec(json.loads(json.dumps(data))) == first
    # through a Spec and back: the same bytes again (a fixed point)
    spec = parse_spec(json.loads(first), source="x")
    assert dump_spec(spec) == first
    assert dump_spec(json.loads(first)) == first
    # the annotation order of the input does not matter
    data["annotations"] = {"a": "2", "b": "1"}
    assert dump_spec(data) == first


def test_exact_duplicates_are_dropped_first_kept_order_otherwise_kept() -> None:
    node = {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}
    mount = {"hostPath": "/a", "containerPath": "/a", "options": ["ro"]}
    hook = {"hookName": "createContainer", "path": "/bin/h", "args": ["h", "x"]}
    net = {"hostInterfaceName": "eth1", "name": "net1"}
    edits = {
        "env": ["B=1", "A=1", "B=1", "B=2", "A=1"],
        "deviceNodes": [node, {"path": "/dev/x"}, dict(node)],
        "mounts": [mount, {**mount, "options": ["rw"]}, dict(mount)],
        "hooks": [hook, {**hook, "args": ["h", "y"]}, dict(hook)],
        "additionalGids": [44, 5, 44],
        "netDevices": [net, dict(net)],
    }
    device = {"name": "a", "containerEdits": {"env": ["X=1", "X=1"]}}
    data = {"kind": "v.com/c", "devices": [device, dict(device)], "containerEdits": edits}
    out = json.loads(dump_spec(data))
    written = out["containerEdits"]
    assert written["env"] == ["B=1", "A=1", "B=2"]
    assert written["deviceNodes"] == [node, {"path": "/dev/x"}]
    assert written["mounts"] == [mount, {**mount, "options": ["rw"]}]
    assert written["hooks"] == [hook, {**hook, "args": ["h", "y"]}]
    assert written["additionalGids"] == [44, 5]
    assert written["netDevices"] == [net]
    assert out["devices"] == [{"name": "a", "containerEdits": {"env": ["X=1"]}}]


def test_devices_keep_the_producers_order() -> None:
    data = gpu_spec(3)
    data["devices"].reverse()
    out = json.loads(dump_spec(data))
    assert [d["name"] for d in out["devices"]] == ["gpu2", "gpu1", "gpu0"]


def test_a_spec_built_in_code_is_written() -> None:
    spec = Spec.create(
        "nvidia.com/gpu",
        [
            Device(
                "all",
                Edits(
                    device_nodes=(DeviceNode(path="/dev/nvidia0", type="c", major=195, minor=0),),
                    net_devices=(NetDevice("eth1", "net1"),),
                ),
            )
        ],
        edits=Edits(
            env=("A=1",),
            mounts=(Mount("/h", "/c", type="bind", options=("ro",)),),
            hooks=(Hook("createContainer", "/bin/h", timeout=3),),
            intel_rdt=IntelRdt(clos_id="c"),
            additional_gids=(44,),
        ),
        version="0.3.0",  # ignored: computed
    )
    out = json.loads(dump_spec(spec))
    assert out["cdiVersion"] == "1.1.0"
    assert parse_spec(out, source="x").devices == spec.devices
    assert parse_spec(out, source="x").edits == spec.edits
    assert spec_to_dict(spec)["cdiVersion"] == "0.3.0"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "nvidia"}, '<spec>: kind: invalid kind "nvidia", expected vendor/class'),
        ({"devices": []}, "<spec>: devices: no devices (a spec needs at least one)"),
        ({"bogus": 1}, "<spec>: bogus: unknown field"),
    ],
)
def test_invalid_content_is_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(CdiSpecError) as info:
        dump_spec({**gpu_spec(), **change})
    assert str(info.value) == message


def test_same_name_different_content_is_refused() -> None:
    data = gpu_spec(2)
    data["devices"][1]["name"] = "gpu0"
    with pytest.raises(CdiSpecError, match=r"devices\[1\]\.name: duplicate device name"):
        dump_spec(data)


def test_an_invalid_spec_object_is_refused_too() -> None:
    spec = Spec.create("nvidia.com/gpu", [Device("bad name", Edits(env=("A=1",)))])
    with pytest.raises(CdiSpecError, match=r"^<memory>: devices\[0\]\.name: invalid character"):
        dump_spec(spec)


def test_yaml_output() -> None:
    data = gpu_spec(2, annotations={"k": "v"})
    out = dump_spec(data, format="yaml")
    text = out.decode()
    assert text.startswith(
        "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\nannotations:\n  k: v\ndevices:\n"
    )
    assert yaml.safe_load(text) == json.loads(dump_spec(data))
    assert dump_spec(data, format="yaml") == out
    with pytest.raises(ValueError, match="unknown spec format"):
        dump_spec(data, format="toml")  # type: ignore[arg-type]  # deliberately wrong


def test_dump_needs_a_spec_or_mapping() -> None:
    with pytest.raises(TypeError):
        dump_spec([1, 2])  # type: ignore[arg-type]


# --- files ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nvidia.json", "nvidia.yaml", "nvidia.yml"])
def test_write_spec_by_extension_mode_and_parents(tmp_path: Path, name: str) -> None:
    target = tmp_path / "var" / "run" / "cdi" / name
    old = os.umask(0o077)
    try:
        write_spec(target, gpu_spec())
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    expected = dump_spec(gpu_spec(), format="json" if name.endswith(".json") else "yaml")
    assert target.read_bytes() == expected
    assert load_spec(target).devices == parse_spec(gpu_spec(), source="x").devices
    assert os.listdir(target.parent) == [name]  # no temporary file left


def test_write_spec_explicit_format_and_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "spec.json"
    target.write_text("old")
    target.chmod(0o600)
    write_spec(str(target), gpu_spec(1), format="json")
    assert json.loads(target.read_text())["devices"][0]["name"] == "gpu0"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_write_spec_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(CdiWriteError, match=r"cannot tell the spec format") as info:
        write_spec(tmp_path / "spec.conf", gpu_spec())
    assert info.value.exit_code == ExitCode.IO
    assert not (tmp_path / "spec.conf").exists()


def test_write_failure_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "spec.json"
    target.write_text("keep")
    # the target path taken by a directory: the rename fails
    blocked = tmp_path / "blocked.json"
    (blocked / "child").mkdir(parents=True)
    with pytest.raises(CdiWriteError, match=r"blocked\.json: cannot write"):
        write_spec(blocked, gpu_spec())
    assert sorted(os.listdir(tmp_path)) == ["blocked.json", "spec.json"]
    # an invalid spec: nothing is touched
    with pytest.raises(CdiSpecError):
        write_spec(target, {"kind": "x"})
    assert target.read_text() == "keep"


def test_parent_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "cdi").write_text("")
    with pytest.raises(CdiWriteError, match="cannot create directory"):
        write_spec(tmp_path / "cdi" / "x.json", gpu_spec())


_READER = """
import json, os, sys
from oci.cdi.parse import load_spec
target, stop = sys.argv[1], sys.argv[2]
seen, reads = set(), 0
while not os.path.exists(stop):
    try:
        spec = load_spec(target)
    except Exception as e:  # a partial file fails to parse
        print(json.dumps({"error": str(e)}))
        sys.exit(1)
    seen.add(len(spec.devices))
    reads += 1
    if reads == 1:
        print("ready", flush=True)
print(json.dumps({"reads": reads, "seen": sorted(seen)}))
"""


def test_a_concurrent_reader_never_sees_a_partial_spec(tmp_path: Path) -> None:
    """A reader process parses the file in a loop while it is rewritten with other sizes."""
    target = tmp_path / "cdi" / "nvidia.json"
    stop = tmp_path / "stop"
    sizes = (1, 48, 8, 96)
    contents = [gpu_spec(n) for n in sizes]
    write_spec(target, contents[0])
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(target), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None
    try:
        assert reader.stdout.readline() == "ready\n"  # reading before the first rewrite
        for i in range(200):
            write_spec(target, contents[i % len(contents)])
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=60)
    result = json.loads(out)
    assert reader.returncode == 0, result
    assert result["reads"] > 0
    assert set(result["seen"]) <= set(sizes)
    assert os.listdir(target.parent) == ["nvidia.json"]


def test_the_reader_would_notice_a_partial_spec(tmp_path: Path) -> None:
    """Control for the test above: half a spec file fails to load, so a torn read is caught."""
    data = dump_spec(gpu_spec(64))
    target = tmp_path / "nvidia.json"
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(CdiSpecError, match="invalid JSON"):
        load_spec(target)
