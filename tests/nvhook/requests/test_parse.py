"""What a container asks for (nvhook/requests/parse.py): every form, every bad input."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvhook.constants import ALL_CAPABILITIES
from nvhook.errors import RequestError
from nvhook.requests.ids import (
    All,
    CdiName,
    DeviceRequest,
    Devices,
    Features,
    Ignored,
    Index,
    LegacyMig,
    MigIndex,
    MigUuid,
    NoGpus,
    Requests,
    Source,
    SourceKind,
    Uuid,
    Void,
)
from nvhook.requests.parse import parse_requests
from nvhook.requests.policy import Policy
from nvhook.requests.requirements import Condition
from nvhook.requests.values import (
    parse_capabilities,
    parse_device_id,
    parse_device_list,
    parse_env,
)

SPECS = Path(__file__).resolve().parents[2] / "data" / "specs"
UUID = "GPU-8c6ae9a5-1d2b-3c4d-5e6f-0123456789ab"
UUID2 = "GPU-FFFFFFFF-0000-1111-2222-333333333333"
MIG = "MIG-5f2b1a4e-aaaa-bbbb-cccc-0123456789ab"
DEFAULT = Policy()
STRICT = Policy(accept_env_unprivileged=False)
NOT_ALLOWED = "the container is not privileged and policy accept_env_unprivileged is false"


def load(name: str) -> dict[str, Any]:
    with open(SPECS / name) as f:
        spec: dict[str, Any] = json.load(f)
    return spec


def spec_with(
    *env: str,
    annotations: dict[str, Any] | None = None,
    mounts: list[Any] | None = None,
    privileged: bool = False,
) -> dict[str, Any]:
    """A minimal runtime spec: the given env after PATH, optional annotations and mounts."""
    bounding = ["CAP_CHOWN", "CAP_KILL"] + (["CAP_SYS_ADMIN"] if privileged else [])
    spec: dict[str, Any] = {
        "ociVersion": "1.0.2-dev",
        "process": {
            "args": ["sh"],
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", *env],
            "capabilities": {"bounding": bounding, "effective": bounding},
        },
        "root": {"path": "rootfs"},
    }
    if annotations is not None:
        spec["annotations"] = annotations
    if mounts is not None:
        spec["mounts"] = mounts
    return spec


def devmount(destination: str, source: str = "/dev/null") -> dict[str, Any]:
    return {"destination": destination, "type": "bind", "source": source, "options": ["ro"]}


def devices(*ids: Any) -> Devices:
    return Devices(tuple(ids))


def check_message(message: str, *fragments: str) -> None:
    """One line a person can act on, naming what is at fault."""
    assert "\n" not in message
    assert len(message) < 400, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


# --- NVIDIA_VISIBLE_DEVICES forms --------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("all", All()),
        ("none", NoGpus()),
        ("void", Void()),
        ("", Void()),
        ("   ", Void()),
        (",", Void()),
        (" , ,\t", Void()),
        (" all ", All()),
        ("all,all", All()),
        ("none, none", NoGpus()),
        ("0", devices(Index(0))),
        ("7", devices(Index(7))),
        ("01", devices(Index(1))),
        ("0,1", devices(Index(0), Index(1))),
        (" 0 ,\t1 ", devices(Index(0), Index(1))),
        ("3,1,2", devices(Index(3), Index(1), Index(2))),  # request order kept
        ("1,0,1", devices(Index(1), Index(0))),  # duplicates collapse, first kept
        ("0,00", devices(Index(0))),  # the same GPU spelled twice
        ("0,,1", devices(Index(0), Index(1))),  # empty items skipped
        ("0,1,", devices(Index(0), Index(1))),
        (UUID, devices(Uuid(UUID))),
        (UUID2, devices(Uuid(UUID2))),
        (f"{UUID},{UUID}", devices(Uuid(UUID))),
        ("0:1", devices(MigIndex(0, 1))),
        ("7:13", devices(MigIndex(7, 13))),
        (MIG, devices(MigUuid(MIG))),
        (f"MIG-{UUID}/1/2", devices(LegacyMig(UUID, 1, 2))),
        ("nvidia.com/gpu=0", devices(CdiName("nvidia.com/gpu=0"))),
        ("nvidia.com/gpu=all", devices(CdiName("nvidia.com/gpu=all"))),
        ("nvidia.com/mig=0:1", devices(CdiName("nvidia.com/mig=0:1"))),
        ("example.com/gpu.class=dev_1.a", devices(CdiName("example.com/gpu.class=dev_1.a"))),
        (
            f"0,{UUID},1:2,{MIG},MIG-{UUID}/0/0,nvidia.com/gpu=3",
            devices(
                Index(0),
                Uuid(UUID),
                MigIndex(1, 2),
                MigUuid(MIG),
                LegacyMig(UUID, 0, 0),
                CdiName("nvidia.com/gpu=3"),
            ),
        ),
    ],
)
def test_device_list_forms(value: str, expected: DeviceRequest) -> None:
    assert parse_device_list(value) == expected
    request = parse_requests(spec_with(f"NVIDIA_VISIBLE_DEVICES={value}"), DEFAULT)
    assert request.devices == expected
    assert request.sources == (Source(SourceKind.ENV, "NVIDIA_VISIBLE_DEVICES", value, expected),)


@pytest.mark.parametrize(
    ("value", "bad", "hint"),
    [
        ("-1", "'-1'", "expected all, none, void, an index"),
        ("1.5", "'1.5'", "an index (0)"),
        ("abc", "'abc'", "a CDI name"),
        ("ALL", "'ALL'", "expected all"),  # values are case-sensitive
        ("All", "'All'", "expected all"),
        ("+1", "'+1'", "an index"),
        ("0x1", "'0x1'", "an index"),
        ("²", "'²'", "an index"),
        ("1 2", "'1 2'", "an index"),
        ("0,abc,1", "'abc'", "an index"),
        ("1048576", "'1048576'", "an index"),  # beyond a 20-bit minor
        ("99999999", "'99999999'", "an index"),
        ("GPU-", "'GPU-'", "expected GPU-<8-4-4-4-12 hex digits>"),
        ("GPU-xyz", "'GPU-xyz'", "GPU-<8-4-4-4-12"),
        (UUID[:-1], repr(UUID[:-1]), "GPU-<8-4-4-4-12"),
        (UUID + "0", repr(UUID + "0"), "GPU-<8-4-4-4-12"),
        (UUID.replace("-", "_"), repr(UUID.replace("-", "_")), "an index"),
        ("GPU-8c6ae9a5-1d2b-3c4d-5e6f-0123456789ag", "789ag'", "GPU-<8-4-4-4-12"),
        ("MIG-", "'MIG-'", "expected MIG-<8-4-4-4-12 hex digits>"),
        ("MIG-GPU-", "'MIG-GPU-'", "expected MIG-GPU-<uuid>/<gi>/<ci>"),
        (f"MIG-{UUID}/1", f"'MIG-{UUID}/1'", "MIG-GPU-<uuid>/<gi>/<ci>"),
        (f"MIG-{UUID}/a/b", f"'MIG-{UUID}/a/b'", "MIG-GPU-<uuid>/<gi>/<ci>"),
        (f"MIG-{UUID}/1/2/3", f"'MIG-{UUID}/1/2/3'", "MIG-GPU-<uuid>/<gi>/<ci>"),
        ("0:x", "'0:x'", "expected <gpu index>:<mig index>"),
        ("x:0", "'x:0'", "<gpu index>:<mig index>"),
        ("0:", "'0:'", "<gpu index>:<mig index>"),
        (":1", "':1'", "<gpu index>:<mig index>"),
        ("0:1:2", "'0:1:2'", "<gpu index>:<mig index>"),
        ("-1:0", "'-1:0'", "<gpu index>:<mig index>"),
        ("nvidia.com/gpu=", '"nvidia.com/gpu="', "unqualified device"),
        ("nvidia.com=0", '"nvidia.com=0"', "no 'vendor/class' before '='"),
        ("=0", '"=0"', "unqualified device"),
        ("/gpu=0", '"/gpu=0"', "unqualified device"),
        ("nvidia.com/gpu=0/1", '"nvidia.com/gpu=0/1"', "invalid character '/'"),
        ("1nvidia.com/gpu=0", '"1nvidia.com/gpu=0"', "should start with letter"),
        ("nvidia.com/gpu=-0", '"nvidia.com/gpu=-0"', "should start with a letter or digit"),
    ],
)
def test_device_list_errors(value: str, bad: str, hint: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_requests(spec_with(f"NVIDIA_VISIBLE_DEVICES={value}"), DEFAULT)
    check_message(str(info.value), "NVIDIA_VISIBLE_DEVICES", bad, hint)
    assert info.value.exit_code == 3


@pytest.mark.parametrize(
    ("value", "special"),
    [
        ("all,0", "'all'"),
        ("0,all", "'all'"),
        ("none,0", "'none'"),
        ("0,void", "'void'"),
        ("all,none", "'all'"),
        (f"void,{UUID}", "'void'"),
    ],
)
def test_special_values_stand_alone(value: str, special: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_device_list(value)
    check_message(str(info.value), "NVIDIA_VISIBLE_DEVICES: ", special, "cannot be combined")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("0\n1", "control character '\\n'"),
        ("0\x00", "control character '\\x00'"),
        ("0,\x1b[31m1", "control character '\\x1b'"),
        ("0\r", "control character '\\r'"),
        ("\x7f", "control character '\\x7f'"),
    ],
)
def test_control_characters_are_refused(value: str, fragment: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_device_list(value)
    check_message(str(info.value), "NVIDIA_VISIBLE_DEVICES contains the ", fragment)


def test_tabs_are_blanks() -> None:
    assert parse_device_list("\t0\t,\t1") == devices(Index(0), Index(1))


def test_huge_value_is_refused_with_a_short_message() -> None:
    value = "0," * 500_000 + "1"  # about 1 MB
    with pytest.raises(RequestError) as info:
        parse_requests(spec_with(f"NVIDIA_VISIBLE_DEVICES={value}"), DEFAULT)
    check_message(
        str(info.value),
        "NVIDIA_VISIBLE_DEVICES is 1000001 characters long, more than 65536",
        "(1000001 characters)",
    )


def test_long_bad_item_is_cut_in_the_message() -> None:
    item = "x" * 5000
    with pytest.raises(RequestError) as info:
        parse_device_list(f"0,{item}")
    check_message(str(info.value), "'xxx", "...' (5000 characters)")


def test_parse_device_id_names_its_origin() -> None:
    assert parse_device_id("3", where="mount x") == Index(3)
    with pytest.raises(RequestError, match=r"^mount x: invalid device 'q'"):
        parse_device_id("q", where="mount x")


@pytest.mark.parametrize(
    ("device_id", "text"),
    [
        (Index(3), "3"),
        (Uuid(UUID), UUID),
        (MigIndex(1, 2), "1:2"),
        (MigUuid(MIG), MIG),
        (LegacyMig(UUID, 1, 2), f"MIG-{UUID}/1/2"),
        (CdiName("nvidia.com/gpu=0"), "nvidia.com/gpu=0"),
    ],
)
def test_device_ids_print_as_requested_and_parse_back(device_id: Any, text: str) -> None:
    assert str(device_id) == text
    assert parse_device_id(text) == device_id


def test_requests_print_as_values() -> None:
    assert [str(r) for r in (All(), NoGpus(), Void())] == ["all", "none", "void"]
    assert str(devices(Index(0), MigIndex(1, 2))) == "0,1:2"


def test_device_ids_of_different_kinds_differ() -> None:
    assert Uuid("x") != MigUuid("x") != CdiName("x")
    assert All() != NoGpus() != Void() != All()
    assert len({All(), All(), NoGpus(), Void()}) == 3


def test_values_pickle_and_copy() -> None:
    request = parse_requests(spec_with("NVIDIA_VISIBLE_DEVICES=0,nvidia.com/gpu=1"), DEFAULT)
    assert pickle.loads(pickle.dumps(request)) == request
    assert copy.deepcopy(request) == request


def test_values_are_frozen() -> None:
    request = parse_requests(spec_with("NVIDIA_VISIBLE_DEVICES=0"), DEFAULT)
    with pytest.raises(AttributeError):
        request.devices = All()
    with pytest.raises(AttributeError):
        Index(0).n = 1


# --- process.env semantics -------------------------------------------------------------------


def test_duplicate_env_last_wins_like_runc() -> None:
    # runc 1.1.5 here: env ["X=first", "X=second"] -> the process sees only X=second.
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=0,1")
    request = parse_requests(spec, DEFAULT)
    assert request.devices == devices(Index(0), Index(1))
    assert request.warnings == (
        "NVIDIA_VISIBLE_DEVICES is set more than once in process.env; "
        "the last value, '0,1', counts (as runc does)",
    )


def test_duplicate_env_with_the_same_value_is_quiet() -> None:
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=0", "FOO=1", "FOO=2", "NVIDIA_VISIBLE_DEVICES=0")
    assert parse_requests(spec, DEFAULT).warnings == ()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (None, {}),
        ([], {}),
        (["A=1", "B="], {"A": "1", "B": ""}),
        (["A=b=c"], {"A": "b=c"}),
        (["A=1", "A=2", "A=3"], {"A": "3"}),
        (["A= spaced "], {"A": " spaced "}),
    ],
)
def test_parse_env(env: list[str] | None, expected: dict[str, str]) -> None:
    assert parse_env(env)[0] == expected


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"A": "1"}, "process.env must be a list of strings, not dict"),
        ("A=1", "process.env must be a list of strings, not str"),
        (7, "process.env must be a list of strings, not int"),
        (["A=1", 5], "process.env[1] must be a string NAME=value, not int"),
        ([None], "process.env[0] must be a string NAME=value, not NoneType"),
        ([["A=1"]], "process.env[0] must be a string NAME=value, not list"),
        (["PATH=/bin", "NOEQUALS"], "process.env[1] has no '=': 'NOEQUALS'"),
        (["=value"], "process.env[0] has an empty name: '=value'"),
        (["A=1\x00B"], "process.env[0] has a NUL: 'A=1\\x00B'"),
        (["X" * 10_000], "(10000 characters)"),
    ],
)
def test_parse_env_errors(env: Any, fragment: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_requests({"process": {"env": env}}, DEFAULT)
    check_message(str(info.value), fragment)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ([], "the runtime spec must be a JSON object"),
        ("{}", "the runtime spec must be a JSON object"),
        ({"process": []}, "process must be an object"),
        ({"process": {"capabilities": ["CAP_SYS_ADMIN"]}}, "process.capabilities must be"),
        ({"process": {"capabilities": {"bounding": "CAP_SYS_ADMIN"}}}, "bounding must be a list"),
        ({"annotations": ["cdi.k8s.io/x"]}, "annotations must be an object"),
        ({"annotations": {"cdi.k8s.io/x": 1}}, "annotation 'cdi.k8s.io/x' must be a string"),
        ({"annotations": {"cdi.k8s.io/x": None}}, "must be a string, not NoneType"),
    ],
)
def test_hostile_spec_shapes(spec: Any, fragment: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_requests(spec, DEFAULT)
    check_message(str(info.value), fragment)


@pytest.mark.parametrize(
    ("mounts", "fragment"),
    [
        ({"destination": "/x"}, "mounts must be a list of objects"),
        (["/var/run/nvidia-container-devices/0"], "mounts[0] must be an object, not str"),
        ([{"source": "/dev/null"}], "mounts[0].destination must be a string"),
        ([{"destination": 0}], "mounts[0].destination must be a string"),
    ],
)
def test_hostile_mounts(mounts: Any, fragment: str) -> None:
    policy = Policy(accept_volume_mounts=True)
    with pytest.raises(RequestError) as info:
        parse_requests(spec_with(mounts=mounts), policy)
    check_message(str(info.value), fragment)


def test_missing_process_and_env_mean_nothing() -> None:
    assert parse_requests({}, DEFAULT) == Requests(Void())
    assert parse_requests({"process": {}}, DEFAULT) == Requests(Void())
    assert parse_requests({"process": None, "annotations": None}, DEFAULT) == Requests(Void())


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
NAMES = st.sampled_from(
    [
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_REQUIRE_CUDA",
        "NVIDIA_DISABLE_REQUIRE",
        "NVIDIA_IMEX_CHANNELS",
        "NVIDIA_GDS",
        "CUDA_VERSION",
        "PATH",
    ]
)
ENV_ITEM = st.one_of(
    st.builds(lambda n, v: f"{n}={v}", NAMES, st.text(max_size=40)),
    st.text(max_size=20),
    JSON,
)


@settings(max_examples=300, deadline=None)
@given(
    env=st.one_of(st.lists(ENV_ITEM, max_size=6), JSON),
    annotations=st.one_of(
        st.dictionaries(st.sampled_from(["cdi.k8s.io/a", "cdi.k8s.io/b", "x"]), JSON), JSON
    ),
    mounts=st.one_of(
        st.lists(
            st.one_of(
                st.fixed_dictionaries(
                    {
                        "destination": st.one_of(
                            st.text(max_size=10).map(
                                lambda s: "/var/run/nvidia-container-devices/" + s
                            ),
                            JSON,
                        ),
                        "source": st.sampled_from(["/dev/null", "/x", None]),
                    }
                ),
                JSON,
            ),
            max_size=3,
        ),
        JSON,
    ),
    privileged=st.booleans(),
    accept_env=st.booleans(),
)
def test_hostile_input_raises_only_request_errors(
    env: Any, annotations: Any, mounts: Any, privileged: bool, accept_env: bool
) -> None:
    spec = {
        "process": {
            "env": env,
            "capabilities": {"bounding": ["CAP_SYS_ADMIN"] if privileged else []},
        },
        "annotations": annotations,
        "mounts": mounts,
    }
    policy = Policy(accept_env_unprivileged=accept_env, accept_volume_mounts=True)
    try:
        request = parse_requests(spec, policy)
    except RequestError as e:
        check_message(str(e))
    else:
        assert isinstance(request, Requests)
        for warning in request.warnings:
            check_message(warning)


# --- annotations ------------------------------------------------------------------------------


def test_annotations_take_precedence_over_env() -> None:
    spec = spec_with(
        "NVIDIA_VISIBLE_DEVICES=all",
        annotations={
            "cdi.k8s.io/gpu": "nvidia.com/gpu=0, nvidia.com/gpu=1",
            "cdi.k8s.io/more": "nvidia.com/gpu=1,nvidia.com/mig=0:1",
            "io.kubernetes.cri.container-type": "container",
        },
    )
    request = parse_requests(spec, DEFAULT)
    assert request.devices == devices(
        CdiName("nvidia.com/gpu=0"), CdiName("nvidia.com/gpu=1"), CdiName("nvidia.com/mig=0:1")
    )
    assert request.sources == (
        Source(
            SourceKind.ANNOTATION,
            "cdi.k8s.io/gpu",
            "nvidia.com/gpu=0, nvidia.com/gpu=1",
            devices(CdiName("nvidia.com/gpu=0"), CdiName("nvidia.com/gpu=1")),
        ),
        Source(
            SourceKind.ANNOTATION,
            "cdi.k8s.io/more",
            "nvidia.com/gpu=1,nvidia.com/mig=0:1",
            devices(CdiName("nvidia.com/gpu=1"), CdiName("nvidia.com/mig=0:1")),
        ),
    )
    assert request.ignored == (
        Ignored(SourceKind.ENV, "NVIDIA_VISIBLE_DEVICES", "all", "annotations request devices"),
    )
    assert request.capabilities == ("compute", "utility")
    assert request.warnings == ()


def test_annotations_override_a_legacy_image() -> None:
    spec = spec_with("CUDA_VERSION=10.0.130", annotations={"cdi.k8s.io/x": "nvidia.com/gpu=0"})
    request = parse_requests(spec, DEFAULT)
    assert request.devices == devices(CdiName("nvidia.com/gpu=0"))
    assert request.ignored == (
        Ignored(SourceKind.LEGACY_IMAGE, "CUDA_VERSION", "10.0.130", "annotations request devices"),
    )


def test_empty_annotation_is_no_request() -> None:
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=0", annotations={"cdi.k8s.io/gpu": " , "})
    request = parse_requests(spec, DEFAULT)
    assert request.devices == devices(Index(0))
    assert request.ignored == ()


def test_annotations_outside_the_prefixes_are_not_requests() -> None:
    # ctr 1.6 copies labels and annotations; "io.example/cdi-devices" is not under a prefix.
    request = parse_requests(load("containerd-1.6-ctr-run-env-gpu.json"), DEFAULT)
    assert request.devices == devices(Index(0), Index(1))
    assert [s.kind for s in request.sources] == [SourceKind.ENV]


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        ("gpu0", ["annotation 'cdi.k8s.io/gpu': unqualified device \"gpu0\""]),
        ("0", ['unqualified device "0"']),
        ("all", ['unqualified device "all"']),
        ("nvidia.com/gpu=0,nvidia.com/gpu", ['"nvidia.com/gpu"']),
        ("nvidia.com/gpu=0\nnvidia.com/gpu=1", ["contains the control character '\\n'"]),
        ("nvidia.com/gpu=" + "0" * 70_000, ["is 70015 characters long"]),
    ],
)
def test_annotation_errors(value: str, fragments: list[str]) -> None:
    spec = spec_with(annotations={"cdi.k8s.io/gpu": value})
    with pytest.raises(RequestError) as info:
        parse_requests(spec, DEFAULT)
    check_message(str(info.value), "annotation 'cdi.k8s.io/gpu'", *fragments)


# --- volume mounts -------------------------------------------------------------------------

MOUNTS = Policy(accept_volume_mounts=True)
ROOT = "/var/run/nvidia-container-devices"


def test_device_list_mounts() -> None:
    spec = spec_with(
        "NVIDIA_VISIBLE_DEVICES=all",
        mounts=[
            {"destination": "/proc", "type": "proc", "source": "proc"},
            devmount(f"{ROOT}/0"),
            devmount(f"{ROOT}/{UUID}/"),  # cleaned
            devmount(f"{ROOT}/1:2"),
            devmount(f"{ROOT}/cdi/nvidia.com/gpu/3"),
            devmount(f"{ROOT}/0"),
        ],
    )
    request = parse_requests(spec, MOUNTS)
    assert request.devices == devices(
        Index(0), Uuid(UUID), MigIndex(1, 2), CdiName("nvidia.com/gpu=3")
    )
    assert [(s.kind, s.name) for s in request.sources] == [
        (SourceKind.MOUNT, f"{ROOT}/0"),
        (SourceKind.MOUNT, f"{ROOT}/{UUID}"),
        (SourceKind.MOUNT, f"{ROOT}/1:2"),
        (SourceKind.MOUNT, f"{ROOT}/cdi/nvidia.com/gpu/3"),
        (SourceKind.MOUNT, f"{ROOT}/0"),
    ]
    assert request.ignored == (
        Ignored(
            SourceKind.ENV, "NVIDIA_VISIBLE_DEVICES", "all", "device-list mounts request devices"
        ),
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [("all", All()), ("none", NoGpus()), (MIG, devices(MigUuid(MIG)))],
)
def test_device_list_mount_forms(name: str, expected: DeviceRequest) -> None:
    request = parse_requests(spec_with(mounts=[devmount(f"{ROOT}/{name}")]), MOUNTS)
    assert request.devices == expected


def test_mounts_outside_the_root_do_not_count() -> None:
    spec = spec_with(
        "NVIDIA_VISIBLE_DEVICES=1",
        mounts=[
            devmount(ROOT),
            devmount(f"{ROOT}/../../etc"),  # cleans to /etc
            devmount("/run/nvidia-container-devices/0"),
            devmount(f"{ROOT}x/0"),
            devmount("var/run/nvidia-container-devices/0"),
        ],
    )
    request = parse_requests(spec, MOUNTS)
    assert request.devices == devices(Index(1))
    assert request.ignored == ()


def test_mount_with_another_source_is_ignored_with_a_warning() -> None:
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=1", mounts=[devmount(f"{ROOT}/0", "/srv/data")])
    request = parse_requests(spec, MOUNTS)
    assert request.devices == devices(Index(1))
    reason = "its source is '/srv/data', not /dev/null"
    assert request.ignored == (Ignored(SourceKind.MOUNT, f"{ROOT}/0", "", reason),)
    assert request.warnings == (f"ignored device-list mount '{ROOT}/0': {reason}",)


@pytest.mark.parametrize(
    ("destination", "fragment"),
    [
        (f"{ROOT}/abc", "invalid device 'abc'"),
        (f"{ROOT}/0/1", f"expected {ROOT}/<device> or {ROOT}/cdi/<vendor>/<class>/<name>"),
        (f"{ROOT}/cdi/nvidia.com/gpu", "expected"),
        (f"{ROOT}/cdi/nvidia.com/gpu/0/1", "expected"),
        (f"{ROOT}/cdi/nvidia.com/-gpu/0", "invalid class"),
        (f"{ROOT}/cdi", "expected"),
        (f"{ROOT}/0\n", "control character '\\n'"),
    ],
)
def test_device_list_mount_errors(destination: str, fragment: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_requests(spec_with(mounts=[devmount(destination)]), MOUNTS)
    check_message(str(info.value), "mount '/var/run/nvidia-container-devices/", fragment)


def test_special_mount_cannot_be_combined() -> None:
    spec = spec_with(mounts=[devmount(f"{ROOT}/all"), devmount(f"{ROOT}/0")])
    with pytest.raises(RequestError) as info:
        parse_requests(spec, MOUNTS)
    check_message(str(info.value), "device-list mounts: all cannot be combined", f"{ROOT}/0")


def test_annotations_take_precedence_over_mounts() -> None:
    spec = spec_with(
        annotations={"cdi.k8s.io/a": "nvidia.com/gpu=0"}, mounts=[devmount(f"{ROOT}/1")]
    )
    request = parse_requests(spec, MOUNTS)
    assert request.devices == devices(CdiName("nvidia.com/gpu=0"))
    assert request.ignored == (
        Ignored(SourceKind.MOUNT, f"{ROOT}/1", "", "annotations request devices"),
    )


# --- legacy CUDA images ------------------------------------------------------------------------


def test_legacy_image_gets_all() -> None:
    request = parse_requests(spec_with("CUDA_VERSION=10.0.130"), DEFAULT)
    assert request.devices == All()
    assert request.sources == (Source(SourceKind.LEGACY_IMAGE, "CUDA_VERSION", "10.0.130", All()),)
    assert request.capabilities == ALL_CAPABILITIES
    assert [(r.source, r.expression) for r in request.requirements] == [
        ("CUDA_VERSION", "cuda>=10.0")
    ]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (["CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"], Void()),  # not legacy
        (["CUDA_VERSION="], Void()),
        (["CUDA_VERSION=10.0", "NVIDIA_VISIBLE_DEVICES=void"], Void()),  # explicit void
        (["CUDA_VERSION=10.0", "NVIDIA_VISIBLE_DEVICES="], Void()),
        (["CUDA_VERSION=10.0", "NVIDIA_VISIBLE_DEVICES=1"], devices(Index(1))),
        (["CUDA_VERSION=10.0", "NVIDIA_REQUIRE_CUDA="], All()),  # empty: still legacy
    ],
)
def test_legacy_image_variants(env: list[str], expected: DeviceRequest) -> None:
    assert parse_requests(spec_with(*env), DEFAULT).devices == expected


def test_legacy_image_with_explicit_capabilities() -> None:
    request = parse_requests(
        spec_with("CUDA_VERSION=10.0", "NVIDIA_DRIVER_CAPABILITIES=utility"), DEFAULT
    )
    assert request.capabilities == ("utility",)


def test_legacy_image_with_bad_cuda_version() -> None:
    with pytest.raises(RequestError, match=r"^CUDA_VERSION: 'ten' is not a dotted number"):
        parse_requests(spec_with("CUDA_VERSION=ten"), DEFAULT)
    request = parse_requests(spec_with("CUDA_VERSION=ten", "NVIDIA_DISABLE_REQUIRE=1"), DEFAULT)
    assert request.devices == All()
    assert request.requirements == ()
    assert request.warnings == (
        "CUDA_VERSION: 'ten' is not a dotted number like 12.4 "
        "(not checked: NVIDIA_DISABLE_REQUIRE is set)",
    )


# --- capabilities ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ("compute", "utility")),
        ("", ("compute", "utility")),
        (" , ", ("compute", "utility")),
        ("compute", ("compute",)),
        ("utility,compute", ("compute", "utility")),  # canonical order
        (" video , graphics ", ("video", "graphics")),
        ("compute,,utility,compute", ("compute", "utility")),
        ("display,ngx,compat32", ("display", "ngx", "compat32")),
        ("all", ALL_CAPABILITIES),
        ("compute,all", ALL_CAPABILITIES),
    ],
)
def test_capabilities(value: str | None, expected: tuple[str, ...]) -> None:
    assert parse_capabilities(value, default=("compute", "utility")) == expected
    env = [] if value is None else [f"NVIDIA_DRIVER_CAPABILITIES={value}"]
    request = parse_requests(spec_with("NVIDIA_VISIBLE_DEVICES=0", *env), DEFAULT)
    assert request.capabilities == expected


@pytest.mark.parametrize(
    ("value", "bad"),
    [
        ("bogus", "'bogus'"),
        ("Compute", "'Compute'"),
        ("compute;utility", "'compute;utility'"),
        ("compute,gpu", "'gpu'"),
        ("compute utility", "'compute utility'"),
    ],
)
def test_unknown_capability(value: str, bad: str) -> None:
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_DRIVER_CAPABILITIES={value}")
    with pytest.raises(RequestError) as info:
        parse_requests(spec, DEFAULT)
    check_message(
        str(info.value),
        f"NVIDIA_DRIVER_CAPABILITIES: unknown capability {bad}",
        "valid: compute, utility, video, graphics, display, ngx, compat32, all",
    )


# --- requirements ------------------------------------------------------------------------------

CUDA_REQUIRE = (
    "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 "
    "brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471"
)


def test_requirements_are_parsed_not_checked() -> None:
    spec = spec_with(
        "NVIDIA_VISIBLE_DEVICES=all",
        f"NVIDIA_REQUIRE_CUDA={CUDA_REQUIRE}",
        "NVIDIA_REQUIRE_DRIVER=driver>=999",
        "NVIDIA_REQUIRE_JETPACK=csv-mode",  # not an expression: skipped, like NVIDIA does
        "NVIDIA_REQUIRE_EMPTY=",
    )
    request = parse_requests(spec, DEFAULT)
    assert [r.source for r in request.requirements] == [
        "NVIDIA_REQUIRE_CUDA",
        "NVIDIA_REQUIRE_DRIVER",
    ]
    assert request.requirements[0].alternatives[0] == (Condition("cuda", ">=", "12.4"),)
    assert len(request.requirements[0].alternatives) == 5
    assert request.disable_require is False


def test_malformed_requirement_is_an_error() -> None:
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=12.4 foo>=1")
    with pytest.raises(RequestError) as info:
        parse_requests(spec, DEFAULT)
    check_message(str(info.value), "NVIDIA_REQUIRE_CUDA: condition 'foo>=1': unknown key 'foo'")


@pytest.mark.parametrize(
    ("value", "disabled", "warns"),
    [
        ("1", True, False),
        ("t", True, False),
        ("T", True, False),
        ("true", True, False),
        ("TRUE", True, False),
        ("True", True, False),
        (" true ", True, False),
        ("0", False, False),
        ("f", False, False),
        ("F", False, False),
        ("false", False, False),
        ("FALSE", False, False),
        ("False", False, False),
        ("", False, True),
        ("yes", False, True),
        ("on", False, True),
        ("tRuE", False, True),
        ("2", False, True),
    ],
)
def test_disable_require_parses_like_go_parsebool(value: str, disabled: bool, warns: bool) -> None:
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_DISABLE_REQUIRE={value}")
    request = parse_requests(spec, DEFAULT)
    assert request.disable_require is disabled
    assert bool(request.warnings) is warns
    if warns:
        check_message(request.warnings[0], "NVIDIA_DISABLE_REQUIRE=", "requirements are checked")


def test_disable_require_turns_malformed_requirements_into_warnings() -> None:
    spec = spec_with(
        "NVIDIA_VISIBLE_DEVICES=0",
        "NVIDIA_DISABLE_REQUIRE=true",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
        "NVIDIA_REQUIRE_X=foo>=1",
    )
    request = parse_requests(spec, DEFAULT)
    assert request.disable_require is True
    assert [r.source for r in request.requirements] == ["NVIDIA_REQUIRE_CUDA"]
    assert request.warnings == (
        "NVIDIA_REQUIRE_X: condition 'foo>=1': unknown key 'foo'; valid: cuda, driver, arch, "
        "brand (not checked: NVIDIA_DISABLE_REQUIRE is set)",
    )


# --- IMEX channels and features ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("all", All()),
        ("0", (0,)),
        ("0, 3,1,3", (0, 3, 1)),
        ("", ()),
        ("void", ()),
        ("none", ()),
    ],
)
def test_imex_channels(value: str, expected: All | tuple[int, ...]) -> None:
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_IMEX_CHANNELS={value}")
    assert parse_requests(spec, DEFAULT).imex_channels == expected


@pytest.mark.parametrize("value", ["x", "-1", "all,0", "0.5", "1048576"])
def test_imex_channel_errors(value: str) -> None:
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_IMEX_CHANNELS={value}")
    with pytest.raises(RequestError) as info:
        parse_requests(spec, DEFAULT)
    check_message(str(info.value), "NVIDIA_IMEX_CHANNELS: invalid channel", "expected all or")


def test_imex_channels_alone_make_a_request() -> None:
    request = parse_requests(spec_with("NVIDIA_IMEX_CHANNELS=0"), DEFAULT)
    assert request.devices == Void()
    assert request.imex_channels == (0,)
    assert request.wants_anything
    assert request.capabilities == ("compute", "utility")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ([], Features()),
        (["NVIDIA_GDS=enabled"], Features(gds=True)),
        (["NVIDIA_MOFED=enabled"], Features(mofed=True)),
        (["NVIDIA_GDRCOPY=enabled"], Features(gdrcopy=True)),
        (["NVIDIA_NVSWITCH=enabled"], Features(nvswitch=True)),
        (["NVIDIA_GDS= enabled ", "NVIDIA_NVSWITCH=enabled"], Features(gds=True, nvswitch=True)),
        (["NVIDIA_GDS=disabled", "NVIDIA_MOFED="], Features()),
    ],
)
def test_features(env: list[str], expected: Features) -> None:
    request = parse_requests(spec_with("NVIDIA_VISIBLE_DEVICES=0", *env), DEFAULT)
    assert request.features == expected


@pytest.mark.parametrize("value", ["true", "1", "Enabled", "on"])
def test_feature_errors(value: str) -> None:
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_GDS={value}")
    with pytest.raises(RequestError) as info:
        parse_requests(spec, DEFAULT)
    check_message(str(info.value), "NVIDIA_GDS must be 'enabled' or 'disabled', not ")


# --- nothing wanted ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "wants"),
    [
        ([], False),
        (["NVIDIA_VISIBLE_DEVICES=void"], False),
        (["NVIDIA_VISIBLE_DEVICES="], False),
        (["NVIDIA_VISIBLE_DEVICES=none"], True),  # driver files and control nodes
        (["NVIDIA_VISIBLE_DEVICES=all"], True),
        (["NVIDIA_VISIBLE_DEVICES=0"], True),
        (["NVIDIA_GDS=enabled"], False),  # a feature alone is not a GPU container
        (["NVIDIA_IMEX_CHANNELS=all"], True),
    ],
)
def test_wants_anything(env: list[str], wants: bool) -> None:
    assert parse_requests(spec_with(*env), DEFAULT).wants_anything is wants


def test_nothing_wanted_parses_nothing_else() -> None:
    # A mistake in capabilities, requirements or features never fails a non-GPU container.
    spec = spec_with(
        "NVIDIA_VISIBLE_DEVICES=void",
        "NVIDIA_DRIVER_CAPABILITIES=bogus",
        "NVIDIA_REQUIRE_CUDA=foo>=1",
        "NVIDIA_GDS=yes",
    )
    request = parse_requests(spec, DEFAULT)
    assert request == Requests(
        Void(),
        sources=(Source(SourceKind.ENV, "NVIDIA_VISIBLE_DEVICES", "void", Void()),),
    )
    assert not request.wants_anything


# --- the real corpus -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "privileged"),
    [
        ("runc-spec.json", False),
        ("runc-spec-rootless.json", False),
        ("crun-spec.json", False),
        ("containerd-1.6-ctr-run.json", False),
        ("containerd-1.6-ctr-run-privileged.json", True),
        ("containerd-1.6-cri-sandbox.json", False),
        ("podman-4.3-run.json", False),
        ("podman-4.3-run-privileged.json", True),
        ("podman-4.3-run-cdi.json", False),
        ("podman-4.3-run-user1000.json", False),
        ("podman-4.3-run-readonly-volumes.json", False),
    ],
)
def test_corpus_without_requests(name: str, privileged: bool) -> None:
    spec = load(name)
    before = copy.deepcopy(spec)
    for policy in (DEFAULT, STRICT, MOUNTS):
        request = parse_requests(spec, policy)
        assert request == Requests(Void(), is_privileged=privileged)
        assert not request.wants_anything
    assert spec == before  # the spec is never modified


def test_corpus_ctr_env_gpu() -> None:
    request = parse_requests(load("containerd-1.6-ctr-run-env-gpu.json"), DEFAULT)
    assert request == Requests(
        devices(Index(0), Index(1)),
        sources=(
            Source(SourceKind.ENV, "NVIDIA_VISIBLE_DEVICES", "0,1", devices(Index(0), Index(1))),
        ),
        capabilities=("compute", "utility"),
    )


def test_corpus_cri_container() -> None:
    request = parse_requests(load("containerd-1.6-cri-container.json"), DEFAULT)
    assert request.devices == All()
    assert request.capabilities == ("compute", "utility")
    assert not request.is_privileged


def test_import_loads_only_light_stdlib_modules() -> None:
    code = (
        "import sys; before = set(sys.modules); import nvhook.requests.parse; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    heavy = {"dataclasses", "inspect", "typing", "json", "re", "pydantic", "click", "pynvml"}
    assert not loaded & heavy, loaded & heavy
    ours = {m for m in loaded if m.split(".")[0] in ("nvhook", "oci")}
    stdlib = set(sys.stdlib_module_names)
    assert {
        m
        for m in loaded - ours
        if m.split(".")[0].lstrip("_") not in stdlib and m.split(".")[0] not in stdlib
    } == set()
