"""A parsed spec kept as plain data (:mod:`oci.cdi.kept`): the strict parser is the oracle.

Every spec the golden cases and the mocks use, and one that sets every field, must come back
from :func:`spec_data` through :mod:`marshal` equal to what :func:`parse_spec` made, field by
field and of the same types; data of any other shape gives None, never a value.
"""

from __future__ import annotations

import marshal
from pathlib import Path
from typing import Any

import pytest

from oci._frozen import EMPTY_MAPPING, Frozen
from oci.cdi.kept import LAYOUT, spec_data, spec_from_data
from oci.cdi.parse import load_spec, parse_spec
from oci.cdi.spec import Device, Spec
from oci.errors import CdiSpecError

GOLDEN = Path(__file__).parents[2] / "golden"

FULL = {
    "cdiVersion": "1.1.0",
    "kind": "vendor.example/gpu",
    "annotations": {"spec.example/a": "1"},
    "containerEdits": {
        "env": ["A=1", "B=2"],
        "deviceNodes": [
            {
                "path": "/dev/x0",
                "hostPath": "/dev/y0",
                "type": "c",
                "major": 1,
                "minor": 2,
                "fileMode": 0o660,
                "permissions": "rw",
                "uid": 3,
                "gid": 4,
            },
        ],
        "mounts": [
            {"hostPath": "/a", "containerPath": "/b", "type": "bind", "options": ["ro", "nosuid"]}
        ],
        "hooks": [
            {
                "hookName": "createContainer",
                "path": "/bin/h",
                "args": ["h", "x"],
                "env": ["E=1"],
                "timeout": 5,
            }
        ],
        "additionalGids": [44, 45],
        "netDevices": [{"hostInterfaceName": "eth9", "name": "net0"}],
        "intelRdt": {
            "closID": "c1",
            "l3CacheSchema": "L3:0=f",
            "memBwSchema": "MB:0=50",
            "schemata": ["L2:0=3"],
            "enableMonitoring": True,
        },
    },
    "devices": [
        {
            "name": "0",
            "annotations": {"dev.example/b": "2"},
            "containerEdits": {"env": ["G=0"], "deviceNodes": [{"path": "/dev/x1"}]},
        },
        {"name": "1", "containerEdits": {"mounts": [{"hostPath": "/c", "containerPath": "/d"}]}},
    ],
}


def round_trip(spec: Spec) -> Spec | None:
    made = spec_from_data(marshal.loads(marshal.dumps(spec_data(spec))), spec.source)
    if made is None:
        return None
    assert made[1] == tuple(d.name for d in spec.devices)
    return made[0]


def same(a: object, b: object) -> None:
    """Equal, and of the same types all the way down (equality alone would let a list pass
    for a tuple, a dict for the parser's read-only mapping)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, Frozen):
        for name in type(a).__frozen_fields__:
            same(getattr(a, name), getattr(b, name))
    elif isinstance(a, tuple):
        assert len(a) == len(b)  # type: ignore[arg-type]
        for x, y in zip(a, b, strict=True):  # type: ignore[call-overload]
            same(x, y)
    else:
        assert a == b


def golden_specs() -> list[Path]:
    return sorted(p for p in GOLDEN.glob("*/cdi/*") if p.suffix in (".json", ".yaml"))


def test_every_spec_comes_back_as_the_parser_made_it(tmp_path: Path) -> None:
    from nvhook.cli import main
    from nvhook.mock import create

    specs: list[Spec] = [parse_spec(FULL, source="full.json")]
    for path in golden_specs():
        try:
            specs.append(load_spec(path))
        except CdiSpecError:
            continue  # a golden case about a broken spec
    for profile in ("dgx-a100", "h100-pcie"):
        root, out = tmp_path / profile, tmp_path / f"{profile}.json"
        create(profile, root, nodes="file")
        assert main(["cdi", "generate", "--root", str(root), "--output", str(out)]) == 0
        specs.append(load_spec(out))  # the spec every user gets: MIG devices, 23 names
    assert len(specs) > 20
    for spec in specs:
        back = round_trip(spec)
        assert back is not None, spec.source
        same(back, spec)
        assert back == spec and hash(back) == hash(spec) and repr(back) == repr(spec)
    full = round_trip(specs[0])
    assert full is not None and full.annotations is not EMPTY_MAPPING
    last = round_trip(specs[-1])
    assert specs[-1].devices[0].annotations is EMPTY_MAPPING
    assert last is not None and last.devices[0].annotations is EMPTY_MAPPING  # one empty mapping


def test_the_layout_is_every_field_of_every_class_in_order() -> None:
    """What a kept value is checked against: every value class a spec is made of (a class
    added to oci.cdi.edits would need its own shape in kept.py), with its fields in order."""
    from oci.cdi import edits as edits_module

    made_of = {Spec, Device} | {
        c for c in vars(edits_module).values()
        if isinstance(c, type) and issubclass(c, Frozen) and c.__module__ == edits_module.__name__
    }  # fmt: skip
    assert sorted(name for name, _ in LAYOUT) == sorted(c.__name__ for c in made_of)
    for name, fields in LAYOUT:
        cls = next(c for c in made_of if c.__name__ == name)
        assert fields == cls.__frozen_fields__
    full = parse_spec(FULL, source="full.json")
    edits = full.edits
    assert edits.intel_rdt is not None and edits.net_devices and edits.hooks  # all set
    for value in (edits, *edits.device_nodes, *edits.mounts, *edits.hooks, edits.intel_rdt):
        assert all(
            getattr(value, f) not in (None, (), False) for f in type(value).__frozen_fields__
        )


def malformed(data: tuple[Any, ...]) -> list[object]:
    version, kind, vendor, class_name, devices, edits, notes = data
    ((name, device_edits, _device_notes), *rest) = devices
    return [
        None, "spec", (), data[:-1], (*data, 1),
        (version, kind, vendor, class_name, [*devices], edits, notes),  # a list for a tuple
        (version, kind, vendor, class_name, devices, edits, ["a"]),  # annotations not a dict
        (version, kind, vendor, class_name, ((name, device_edits[:-1], {}), *rest), edits, notes),
        (version, kind, vendor, class_name, devices, (("A=1", 2), *edits[1:]), notes),
        (version, kind, vendor, class_name, devices, (*edits[:1], ((1, 2),), *edits[2:]), notes),
        (version, kind, vendor, class_name, devices, (*edits[:6], ("c1",)), notes),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(11))
def test_data_of_another_shape_gives_none(case: int) -> None:
    data = spec_data(parse_spec(FULL, source="full.json"))
    assert spec_from_data(data, "full.json") is not None  # control
    assert spec_from_data(malformed(data)[case], "full.json") is None


def test_only_the_devices_asked_for_are_made() -> None:
    """``wanted``: the spec holds just its kind's devices of those names (in the file's
    order), with the spec's own edits and every device name still returned; names it does
    not define are no error."""
    spec = parse_spec(FULL, source="full.json")
    data = marshal.loads(marshal.dumps(spec_data(spec)))
    made = spec_from_data(data, "full.json", {spec.kind: {"1", "7"}, "other.com/x": {"0"}})
    assert made is not None
    partial, names = made
    assert names == ("0", "1")
    assert [d.name for d in partial.devices] == ["1"]
    same(partial.devices[0], spec.devices[1])
    same(partial.edits, spec.edits)
    assert partial.kind == spec.kind and partial.source == "full.json"
    none = spec_from_data(data, "full.json", {})
    assert none is not None and none[0].devices == () and none[1] == ("0", "1")


def test_a_device_name_that_is_not_a_string_gives_none_even_when_not_asked_for() -> None:
    data = spec_data(parse_spec(FULL, source="full.json"))
    version, kind, vendor, class_name, devices, edits, notes = data
    bad = ((0, *devices[0][1:]), *devices[1:])
    assert (
        spec_from_data((version, kind, vendor, class_name, bad, edits, notes), "f", {kind: {"1"}})
        is None
    )
    assert (
        spec_from_data((version, kind, vendor, class_name, ((),), edits, notes), "f", {kind: {"1"}})
        is None
    )
