"""apply() on big inputs: the same result as the item-by-item reference, in O(n log n).

The reference semantics (docs/architecture.md D2) read as a loop that scans the whole list
for every injected item; a spec anyone can write may hold 100,000 entries, which that loop
takes minutes over. :func:`_reference_apply` is that loop, kept here as the oracle; the
counting tests count the touches of the items (every comparison, hash or search of one),
so a quadratic apply fails them at once, whatever the machine's speed.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oci.cdi import apply as apply_mod
from oci.cdi.apply import apply, mount_depth
from oci.cdi.edits import HOOK_NAMES, DeviceNode, Edits, Hook, Mount
from oci.errors import CdiApplyError


def fake_lstat(path: str) -> os.stat_result:
    """Every host path is the character device 10:<len(path)>."""
    rdev = os.makedev(10, len(path))
    return os.stat_result((0o20666, 0, 0, 1, 0, 0, 0, 0, 0, 0), {"st_rdev": rdev})


# --------------------------------------------------------------------------- the oracle


def _reference_apply(edits: Edits, spec: dict[str, Any]) -> dict[str, Any]:
    """D2 item by item, as the reference reads (and as apply was written before)."""
    out: dict[str, Any] = apply_mod._copy_json(dict(spec))
    if not edits:
        return out
    env = _rlist(_rchild(out, "process"), "env") if edits.env else []
    for entry in edits.env:
        prefix = entry.split("=", 1)[0] + "="
        first = next(
            (i for i, cur in enumerate(env) if isinstance(cur, str) and cur.startswith(prefix)),
            None,
        )
        if first is None:
            env.append(entry)
            continue
        env[first] = entry
        env[first + 1 :] = [
            cur for cur in env[first + 1 :] if not (isinstance(cur, str) and cur.startswith(prefix))
        ]
    for node in edits.device_nodes:
        dev_type, major, minor, file_mode = apply_mod._fill(node, fake_lstat)
        device: dict[str, Any] = {"path": node.path, "type": dev_type, "major": major}
        device["minor"] = minor
        if file_mode is not None:
            device["fileMode"] = file_mode
        user = out.get("process", {}).get("user", {})
        uid = node.uid if node.uid is not None else (user.get("uid") or None)
        gid = node.gid if node.gid is not None else (user.get("gid") or None)
        if uid is not None:
            device["uid"] = uid
        if gid is not None:
            device["gid"] = gid
        devices = _rlist(_rchild(out, "linux"), "devices")
        devices[:] = [
            d for d in devices if not (isinstance(d, dict) and d.get("path") == node.path)
        ]
        devices.append(device)
        if dev_type in ("b", "c"):
            rule: dict[str, Any] = {"allow": True, "type": dev_type, "major": major, "minor": minor}
            if (node.permissions or "rwm") != "none":
                rule["access"] = node.permissions or "rwm"
            rules = _rlist(_rchild(_rchild(out, "linux"), "resources"), "devices")
            if rule not in rules:
                rules.append(rule)
    if edits.mounts:
        mounts = _rlist(out, "mounts")
        for m in edits.mounts:
            mounts[:] = [x for x in mounts if apply_mod._get_dest(x) != m.container_path]
            oci_mount: dict[str, Any] = {"destination": m.container_path}
            if m.type is not None:
                oci_mount["type"] = m.type
            oci_mount["source"] = m.host_path
            if m.options:
                oci_mount["options"] = list(m.options)
            mounts.append(oci_mount)
        mounts.sort(key=lambda x: mount_depth(apply_mod._get_dest(x)))
    for hook in edits.hooks:
        lifecycle = _rlist(_rchild(out, "hooks"), hook.hook_name)
        if hook.to_oci() not in lifecycle:
            lifecycle.append(hook.to_oci())
    gids = [g for g in edits.additional_gids if g != 0]
    if gids:
        existing = _rlist(_rchild(_rchild(out, "process"), "user"), "additionalGids")
        for gid in gids:
            if gid not in existing:
                existing.append(gid)
    return out


def _rchild(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value: dict[str, Any] = parent.setdefault(key, {})
    return value


def _rlist(parent: dict[str, Any], key: str) -> list[Any]:
    value: list[Any] = parent.setdefault(key, [])
    return value


_name = st.sampled_from(["A", "B", "C", "AB", ""])
_value = st.sampled_from(["", "1", "x=y", "="])
_env_item = st.one_of(
    st.tuples(_name, _value).map("=".join),
    _name,  # no "=": replaces, defines nothing
    st.integers(0, 3),  # not a string at all (config.json may hold anything)
)
_path = st.sampled_from(["/", "/a", "/a/b", "/a/../b", "//a", "/a/b/c", "", "/b"])
_node = st.builds(
    DeviceNode,
    path=_path,
    type=st.sampled_from([None, "c", "b", "p"]),
    major=st.none() | st.integers(0, 2),
    minor=st.integers(0, 2),
    permissions=st.sampled_from([None, "r", "rwm", "none"]),
    uid=st.none() | st.integers(0, 2),
    gid=st.none() | st.integers(0, 2),
)
_mount = st.builds(
    Mount,
    host_path=st.sampled_from(["/h", "/i"]),
    container_path=_path,
    type=st.none() | st.just("bind"),
    options=st.lists(st.sampled_from(["ro", "bind"]), max_size=2).map(tuple),
)
_hook = st.builds(
    Hook,
    hook_name=st.sampled_from(HOOK_NAMES[:2]),
    path=st.sampled_from(["/h", "/i"]),
    args=st.lists(st.sampled_from(["a", "b"]), max_size=2).map(tuple),
    timeout=st.none() | st.integers(1, 2),
)
_edits = st.builds(
    Edits,
    env=st.lists(st.one_of(st.tuples(_name, _value).map("=".join), _name), max_size=8).map(tuple),
    device_nodes=st.lists(_node, max_size=6).map(tuple),
    mounts=st.lists(_mount, max_size=6).map(tuple),
    hooks=st.lists(_hook, max_size=6).map(tuple),
    additional_gids=st.lists(st.integers(0, 3), max_size=5).map(tuple),
)


_rule = st.fixed_dictionaries(
    {"allow": st.booleans(), "type": st.sampled_from(["c", "b"]), "major": st.integers(0, 2)},
    optional={"minor": st.integers(0, 2), "access": st.sampled_from(["rwm", "r"])},
)
_existing_hook = st.one_of(
    _hook.map(Hook.to_oci),
    st.fixed_dictionaries({"path": st.just("/h"), "args": st.just([["nested"]])}),
    st.just("not an object"),
)
_spec = st.fixed_dictionaries(
    {
        "process": st.fixed_dictionaries(
            {
                "env": st.lists(_env_item, max_size=8),
                "user": st.fixed_dictionaries(
                    {
                        "uid": st.integers(0, 2),
                        "gid": st.integers(0, 2),
                        "additionalGids": st.lists(st.integers(0, 3), max_size=4),
                    }
                ),
            }
        ),
        "mounts": st.lists(
            st.one_of(
                _mount.map(lambda m: {"destination": m.container_path, "source": m.host_path}),
                st.just({"source": "/no-destination"}),
                st.just("not an object"),
            ),
            max_size=6,
        ),
        "linux": st.fixed_dictionaries(
            {
                "devices": st.lists(
                    st.one_of(
                        _node.map(lambda n: {"path": n.path, "type": "c", "major": 1}),
                        st.just({"type": "c"}),
                        st.just(["not", "an", "object"]),
                    ),
                    max_size=6,
                ),
                "resources": st.fixed_dictionaries({"devices": st.lists(_rule, max_size=6)}),
            }
        ),
        "hooks": st.fixed_dictionaries(
            {name: st.lists(_existing_hook, max_size=4) for name in HOOK_NAMES[:2]}
        ),
    }
)


@pytest.mark.slow  # seconds long: the whole suite runs it, ./dev test quick does not
@settings(max_examples=400, deadline=None)
@given(_edits, _spec)
def test_apply_is_the_item_by_item_reference(edits: Edits, spec: dict[str, Any]) -> None:
    """On random small inputs full of repeats (names, paths, destinations, rules, hooks),
    non-strings and non-objects, the one-pass apply gives exactly the reference's spec,
    list order included."""
    try:
        expected = _reference_apply(edits, spec)
    except CdiApplyError:  # a node's host of another type: apply must refuse it too
        with pytest.raises(CdiApplyError):
            apply(edits, spec, lstat=fake_lstat)
        return
    assert apply(edits, spec, lstat=fake_lstat) == expected


# --------------------------------------------------------------------------- counting


class _Budget(Exception):
    pass


class Counted(str):
    """A string that counts every comparison, hash and search made on it, and stops the
    test (raises) once a budget is spent: a quadratic apply fails in moments."""

    __slots__ = ()
    touches = 0
    budget = sys.maxsize  # armed only around the apply measured

    @classmethod
    def touch(cls) -> None:
        Counted.touches += 1
        if Counted.touches > Counted.budget:
            raise _Budget(f"over {Counted.budget} operations")

    def __eq__(self, other: object) -> bool:
        Counted.touch()
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        Counted.touch()
        return str.__ne__(self, other)

    def __hash__(self) -> int:
        Counted.touch()
        return str.__hash__(self)

    def startswith(self, *args: Any) -> bool:
        Counted.touch()
        return str.startswith(self, *args)

    def partition(self, sep: str) -> tuple[str, str, str]:
        Counted.touch()
        return str.partition(self, sep)

    def split(self, *args: Any, **kwargs: Any) -> list[str]:
        Counted.touch()
        return str.split(self, *args, **kwargs)

    def find(self, *args: Any) -> int:
        Counted.touch()
        return str.find(self, *args)


def _n_log_n(items: int) -> int:
    return items * math.ceil(math.log2(items))


@pytest.fixture
def budget() -> Any:
    def arm(items: int) -> None:
        Counted.touches = 0
        Counted.budget = _n_log_n(items)

    yield arm
    Counted.budget = sys.maxsize


def test_100000_env_entries_take_n_log_n_operations(budget: Any) -> None:
    """100,000 injected entries over an env of 100,000 (every other name set twice, half the
    injected names already there): within n·log2(n) touches of the entries (a quadratic
    apply needs some 10^10)."""
    n = 100_000
    env: list[str] = []
    for i in range(n // 2):
        env += [Counted(f"V{i}=old"), Counted(f"V{i}=dup")]
    injected = tuple(Counted(f"V{i * 2}=new") for i in range(n))
    budget(2 * n)
    out = apply(Edits(env=injected), {"process": {"env": env}})
    spent = Counted.touches
    Counted.budget = sys.maxsize
    result = out["process"]["env"]
    # every injected name once, in place of its first definition; untouched names twice
    assert len(result) == 3 * n // 4 + 3 * n // 4  # the old names, then the new ones
    assert result[:4] == ["V0=new", "V1=old", "V1=dup", "V2=new"]
    assert result[3 * n // 4] == f"V{n // 2}=new"
    assert result[-1] == f"V{2 * n - 2}=new"
    assert spent <= _n_log_n(2 * n), spent


def test_20000_mounts_nodes_and_hooks_take_n_log_n_operations(budget: Any) -> None:
    """The same for mounts (destinations replaced, then the sort), device nodes (paths
    replaced, allow rules not repeated) and hooks (not repeated)."""
    n = 20_000
    spec: dict[str, Any] = {
        "mounts": [{"destination": Counted(f"/m/{i}"), "source": "/s"} for i in range(n)],
        "linux": {
            "devices": [{"path": Counted(f"/dev/d{i}"), "type": "c"} for i in range(n)],
            "resources": {
                "devices": [
                    {"allow": True, "type": Counted("c"), "major": 1, "minor": i, "access": "rwm"}
                    for i in range(n // 2)
                ]
            },
        },
        "hooks": {"prestart": [{"path": Counted(f"/h{i}")} for i in range(n)]},
    }
    edits = Edits(
        mounts=tuple(
            Mount(host_path="/x", container_path=Counted(f"/m/{i * 2}")) for i in range(n)
        ),
        device_nodes=tuple(
            DeviceNode(Counted(f"/dev/d{i * 2}"), type=Counted("c"), major=1, minor=i, file_mode=1)
            for i in range(n)
        ),
        hooks=tuple(Hook(hook_name="prestart", path=Counted(f"/h{i * 2}")) for i in range(n)),
    )
    expected_rules = n  # half of them are there already
    budget(6 * n)
    out = apply(edits, spec, lstat=fake_lstat)
    spent = Counted.touches
    Counted.budget = sys.maxsize
    assert len(out["mounts"]) == n // 2 + n
    assert len(out["linux"]["devices"]) == n // 2 + n
    assert len(out["linux"]["resources"]["devices"]) == expected_rules
    assert len(out["hooks"]["prestart"]) == n + n // 2
    assert spent <= _n_log_n(6 * n)
