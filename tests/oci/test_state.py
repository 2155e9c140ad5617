"""oci.state: the container state a hook reads on stdin."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest

from oci.errors import ExitCode, SpecError
from oci.state import State

# What runc 1.1.5 writes for a createRuntime hook (one line on stdin).
RUNC_STATE = (
    b'{"ociVersion":"1.0.2-dev","id":"c1","status":"creating","pid":4242,'
    b'"bundle":"/run/containerd/io.containerd.runtime.v2.task/k8s.io/c1",'
    b'"annotations":{"io.kubernetes.cri.container-type":"container","x\\u003cy":"\\u00e9"}}'
)


def test_parse_runc_state() -> None:
    state = State.parse(RUNC_STATE)
    assert state == State(
        oci_version="1.0.2-dev",
        id="c1",
        status="creating",
        pid=4242,
        bundle="/run/containerd/io.containerd.runtime.v2.task/k8s.io/c1",
        annotations={"io.kubernetes.cri.container-type": "container", "x<y": "é"},
    )
    assert State.parse(RUNC_STATE.decode()) == state


def test_poststop_state_has_no_pid_nor_annotations() -> None:
    state = State.parse('{"ociVersion":"1.0.2","id":"c1","status":"stopped","bundle":"/b"}')
    assert (state.pid, dict(state.annotations), state.status) == (None, {}, "stopped")


def test_unknown_fields_and_statuses_are_accepted() -> None:
    text = '{"ociVersion":"1.3.0","id":"c","status":"paused","bundle":"/b","future":[1]}'
    assert State.parse(text).status == "paused"


def test_to_dict_round_trips_in_runc_order() -> None:
    state = State.parse(RUNC_STATE)
    assert list(state.to_dict()) == ["ociVersion", "id", "status", "pid", "bundle", "annotations"]
    assert State.parse(state.to_json()) == state
    assert json.loads(state.to_json()) == json.loads(RUNC_STATE)
    bare = State(oci_version="1.0.2", id="c", status="stopped", bundle="/b")
    assert bare.to_json() == '{"ociVersion":"1.0.2","id":"c","status":"stopped","bundle":"/b"}'


def with_field(**changes: Any) -> bytes:
    doc = json.loads(RUNC_STATE)
    for key, value in changes.items():
        if value is ...:
            del doc[key]
        else:
            doc[key] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "invalid JSON: no value: the text is empty or only whitespace"),
        (
            b'{"id": "c1",\n "status"}',
            "invalid JSON at line 2 column 10: expecting ':' after a key",
        ),
        (b'{"id": "\xff"}', "invalid UTF-8 at byte offset 8 (byte 0xff)"),
        (b"[]", "must be a JSON object, not array"),
        (with_field(ociVersion=...), "ociVersion is missing"),
        (with_field(id=...), "id is missing"),
        (with_field(status=...), "status is missing"),
        (with_field(bundle=...), "bundle is missing"),
        (with_field(id=7), "id must be a string, not number"),
        (with_field(status=None), "status must be a string, not null"),
        (with_field(ociVersion=["1"]), "ociVersion must be a string, not array"),
        (with_field(bundle={}), "bundle must be a string, not object"),
        (with_field(id=""), "id must not be empty"),
        (with_field(bundle="rel/b"), "bundle must be an absolute path, not 'rel/b'"),
        (with_field(pid="4242"), "pid must be a non-negative integer, not string"),
        (with_field(pid=-1), "pid must be a non-negative integer, not -1"),
        (with_field(pid=1.5), "pid must be a non-negative integer, not 1.5"),
        (with_field(pid=True), "pid must be a non-negative integer, not boolean"),
        (with_field(annotations=[]), "annotations must be an object, not array"),
        (with_field(annotations={"a/b": 1}), 'annotations["a/b"] must be a string, not number'),
    ],
)
def test_invalid_state_is_refused_with_a_clear_message(data: bytes, message: str) -> None:
    with pytest.raises(SpecError) as info:
        State.parse(data, source="stdin")
    assert str(info.value) == f"stdin: {message}"
    assert info.value.exit_code == ExitCode.INVALID_SPEC


def test_default_source_in_messages() -> None:
    with pytest.raises(SpecError, match=r"^container state: id is missing$"):
        State.parse(with_field(id=...))


def test_a_frozen_value() -> None:
    state = State.parse(RUNC_STATE)
    with pytest.raises(AttributeError, match="cannot assign to field 'pid'"):
        state.pid = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del state.id
    assert copy.deepcopy(state) == state
    assert pickle.loads(pickle.dumps(state)) == state
    assert state != State.parse(with_field(pid=1))
    assert repr(state).startswith("State(annotations={")


def test_annotations_are_copied() -> None:
    given = {"a": "1"}
    state = State(oci_version="1", id="c", status="created", bundle="/b", annotations=given)
    given["a"] = "2"
    assert state.annotations == {"a": "1"}


def test_nesting_beyond_the_json_limit_is_one_line() -> None:
    """The state on a hook's stdin: 256 levels read, deeper refused naming the limit."""
    from oci.jsoncodec import MAX_DEPTH

    base = '{"ociVersion":"1","id":"x","status":"creating","bundle":"/b","x":%s}'
    inner = MAX_DEPTH - 1  # the state's object, then these arrays around the 1
    assert State.parse(base % ("[" * inner + "1" + "]" * inner)).id == "x"
    for depth in (inner + 1, 100_000):
        with pytest.raises(SpecError, match=f"^stdin: .*nested deeper than {MAX_DEPTH} levels"):
            State.parse(base % ("[" * depth + "1" + "]" * depth), source="stdin")
