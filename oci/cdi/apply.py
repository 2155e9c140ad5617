"""``apply(edits, spec)``: CDI container edits onto an OCI runtime spec.

Follows the reference semantics of tags.cncf.io/container-device-interface
(``ContainerEdits.Apply``), as docs/architecture.md D2 lists them, on the spec as a plain
JSON value (a ``dict`` in its original key order, unknown fields kept):

- env: injected entries in order; an entry whose name is already set (in the
  container's env or by an earlier injected entry) replaces the first
  definition in place and later duplicates of that name are dropped, so the
  injected value is the one ``getenv`` sees (the reference appends a duplicate
  that ``getenv`` never returns: a deliberate difference);
- device nodes: ``hostPath`` defaults to ``path``; a node that is not
  "minimally specified" (a type and a non-zero major, or a fifo) takes its
  type/major/minor from ``lstat(hostPath)``; every node without a ``fileMode``
  takes the host node's permission bits when ``hostPath`` is a device node (a
  minimally specified one without error when it is not); an existing ``linux.devices``
  entry with the same path is replaced; ``b``/``c`` nodes add a
  ``linux.resources.devices`` allow rule (default access ``rwm``); without an
  explicit uid/gid a node takes ``process.user`` uid/gid when > 0;
- net devices: ``linux.netDevices[hostName] = {"name": name}``, last wins;
- mounts: an existing mount with the same destination is replaced; if any
  mount was added the whole list is stable-sorted by the depth of the cleaned
  destination (parents before children);
- hooks: appended to their lifecycle; intelRdt replaces ``linux.intelRdt``;
  additionalGids: set-union without 0;
- the one deliberate difference besides env: a hook or a cgroup rule identical
  to one already present is not added again, so ``apply(e, apply(e, s)) ==
  apply(e, s)``.

The input spec is never modified; a new one is returned. Missing parents
(``process.env``, ``linux.resources.devices``, ``mounts``, ``hooks`` …) are
created as needed.

Depth: the copy of the spec recurses once per level of it (two frames on CPython 3.11),
and nothing here checks the depth: it relies on the spec having been decoded by
:mod:`oci.bundle` (:func:`oci.jsoncodec.loads`), which refuses one nested deeper than
:data:`oci.jsoncodec.MAX_DEPTH` (256 levels: ~520 frames here), as both callers
(:mod:`nvhook.create`, :mod:`oci.cdi.inject`) do; the edits are flat values of the strict
CDI parser, whose files are bounded the same way (:mod:`oci.nesting`).
"""

from __future__ import annotations

import os
import stat as stat_mod

from oci.cdi.edits import HOOK_NAMES, DeviceNode, Edits
from oci.errors import CdiApplyError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeAlias

    StatFn: TypeAlias = Callable[[str], os.stat_result]
    _Json: TypeAlias = dict[str, Any]

__all__ = ["apply", "clean_path", "mount_depth"]


def apply(edits: Edits, spec: Mapping[str, Any], *, lstat: StatFn = os.lstat) -> _Json:
    """Return a new spec: ``spec`` with ``edits`` applied (CDI reference semantics, D2).

    ``lstat`` is how host device nodes are inspected for the fields a node
    leaves out (injectable so that tests and mock machines need no real nodes).
    Raises :class:`~oci.errors.CdiApplyError` when a node's host device is
    missing or of another type, or a hook names an unknown lifecycle.
    """
    out: _Json = _copy_json(dict(spec))
    if not edits:
        return out
    if edits.env:
        _apply_env(out, edits.env)
    if edits.device_nodes:
        _apply_devices(out, edits.device_nodes, lstat)
    for net in edits.net_devices:
        _child(_child(out, "linux"), "netDevices")[net.host_interface_name] = {"name": net.name}
    if edits.mounts:
        _apply_mounts(out, edits)
    if edits.hooks:
        _apply_hooks(out, edits)
    if edits.intel_rdt is not None:
        _child(out, "linux")["intelRdt"] = edits.intel_rdt.to_dict()
    gids = [g for g in edits.additional_gids if g != 0]
    if gids:
        existing = _list(_child(_child(out, "process"), "user"), "additionalGids")
        present = {g for g in existing if _hashable(g)}
        for gid in gids:
            if gid not in present:
                present.add(gid)
                existing.append(gid)
    return out


# Each list edit below does in one pass what the reference does item by item (a scan of
# the list per injected item: quadratic, and the lists come from files anyone may write
# big); the result is the same, item for item (tests/oci/cdi/test_apply.py's oracle).

_GONE = object()  # a removed list item, dropped when the list is compacted


def _apply_env(spec: _Json, entries: tuple[str, ...]) -> None:
    """Each entry replaces the first definition of its name in place and drops the later
    ones, or is appended. A definition is a ``str`` item with a ``=``: its name is what
    comes before the first one (an entry without ``=`` replaces, but defines nothing)."""
    env: list[Any] = _list(_child(spec, "process"), "env")
    where: dict[str, list[int]] = {}  # name -> positions of its live definitions, in order
    for i, cur in enumerate(env):
        if isinstance(cur, str):
            name, sep, _ = cur.partition("=")
            if sep:
                where.setdefault(name, []).append(i)
    removed = False
    for entry in entries:
        name, sep, _ = entry.partition("=")
        places = where.get(name)
        if places:
            first = places[0]
            env[first] = entry
            if len(places) > 1:
                removed = True
                for later in places[1:]:
                    env[later] = _GONE
            where[name] = [first] if sep else []
        else:
            env.append(entry)
            if sep:
                where[name] = [len(env) - 1]
    if removed:
        env[:] = [cur for cur in env if cur is not _GONE]


def _apply_devices(spec: _Json, nodes: tuple[DeviceNode, ...], lstat: StatFn) -> None:
    """Each node replaces the ``linux.devices`` entries of its path (appended last) and adds
    its allow rule unless an equal one is there."""
    added: list[_Json] = []
    devices: list[Any] = []
    rules: list[Any] | None = None
    rule_keys: set[object] = set()
    for node in nodes:
        dev_type, major, minor, file_mode = _fill(node, lstat)
        device: _Json = {"path": node.path, "type": dev_type, "major": major, "minor": minor}
        if file_mode is not None:
            device["fileMode"] = file_mode
        uid, gid = node.uid, node.gid
        process = spec.get("process")
        user = process.get("user", {}) if isinstance(process, dict) else {}
        if uid is None and isinstance(user.get("uid"), int) and user["uid"] > 0:
            uid = user["uid"]
        if gid is None and isinstance(user.get("gid"), int) and user["gid"] > 0:
            gid = user["gid"]
        if uid is not None:
            device["uid"] = uid
        if gid is not None:
            device["gid"] = gid
        devices = _list(_child(spec, "linux"), "devices")
        added.append(device)
        if dev_type in ("b", "c"):
            access = node.permissions or "rwm"
            rule: _Json = {"allow": True, "type": dev_type, "major": major, "minor": minor}
            if access != "none":
                rule["access"] = access
            if rules is None:
                rules = _list(_child(_child(spec, "linux"), "resources"), "devices")
                rule_keys = {key for r in rules if (key := _flat_key(r)) is not None}
            key = _flat_key(rule)
            if key not in rule_keys:
                rule_keys.add(key)
                rules.append(rule)
    paths = {node.path for node in nodes}
    last = {device["path"]: i for i, device in enumerate(added)}
    devices[:] = [
        d
        for d in devices
        if not (isinstance(d, dict) and isinstance(p := d.get("path"), str) and p in paths)
    ] + [device for i, device in enumerate(added) if last[device["path"]] == i]


def _apply_mounts(spec: _Json, edits: Edits) -> None:
    """Each mount replaces those of its destination (appended last); then the whole list is
    stable-sorted by depth."""
    mounts = _list(spec, "mounts")
    dests = {m.container_path for m in edits.mounts}
    last = {m.container_path: i for i, m in enumerate(edits.mounts)}
    kept = [x for x in mounts if _get_dest(x) not in dests]
    for i, m in enumerate(edits.mounts):
        if last[m.container_path] != i:
            continue
        oci_mount: _Json = {"destination": m.container_path}
        if m.type is not None:
            oci_mount["type"] = m.type
        oci_mount["source"] = m.host_path
        if m.options:
            oci_mount["options"] = list(m.options)
        kept.append(oci_mount)
    kept.sort(key=lambda x: mount_depth(_get_dest(x)))
    mounts[:] = kept


def _apply_hooks(spec: _Json, edits: Edits) -> None:
    """Each hook is appended to its lifecycle unless an equal one is there."""
    seen: dict[str, set[object]] = {}
    for hook in edits.hooks:
        if hook.hook_name not in HOOK_NAMES:
            raise CdiApplyError(
                f"hook {hook.path!r}: unknown hook name {hook.hook_name!r} "
                f"(valid: {', '.join(HOOK_NAMES)})"
            )
        lifecycle = _list(_child(spec, "hooks"), hook.hook_name)
        keys = seen.get(hook.hook_name)
        if keys is None:
            keys = seen[hook.hook_name] = {
                key for x in lifecycle if (key := _flat_key(x)) is not None
            }
        item = hook.to_oci()
        key = _flat_key(item)
        if key not in keys:
            keys.add(key)
            lifecycle.append(item)


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _flat_key(value: object) -> object:
    """A key equal for two values exactly when they are ``==``, for an object whose values
    are scalars or lists of scalars (what apply adds: a cgroup rule, a hook); None for any
    other value (which cannot be ``==`` to such an object)."""
    if not isinstance(value, dict):
        return None
    items = []
    for k, v in value.items():
        if isinstance(v, list):
            v = (list, *v)  # marked: a list is never == a scalar
        items.append((k, v))
    try:
        return frozenset(items)
    except TypeError:  # an object or a list of them inside: not one apply makes
        return None


def _fill(node: DeviceNode, lstat: StatFn) -> tuple[str, int, int, int | None]:
    """type, major, minor and fileMode of a node, as the reference's ``fillMissingInfo``
    completes them from ``lstat(hostPath)``.

    A minimally specified node (a type and a non-zero major, or a fifo) keeps its type and
    numbers, and a host path that cannot be stat'ed, or is no device node, is no error for
    it; but a missing ``fileMode`` is still taken from the host node when there is one
    (for rootless engines that bind-mount nodes). Any other node is completed from the
    host, which must then be a node of the given type.
    """
    host_path = node.host_path or node.path
    given_type = node.type or ""
    major = node.major or 0
    minor = node.minor or 0
    if given_type and (major != 0 or given_type == "p"):
        if node.file_mode is not None:
            return given_type, major, minor, node.file_mode
        try:
            mode = lstat(host_path).st_mode
        except OSError:
            return given_type, major, minor, None
        is_node = stat_mod.S_ISBLK(mode) or stat_mod.S_ISCHR(mode) or stat_mod.S_ISFIFO(mode)
        return given_type, major, minor, stat_mod.S_IMODE(mode) if is_node else None
    try:
        st = lstat(host_path)
    except OSError as e:
        raise CdiApplyError(
            f"device {node.path!r}: cannot stat host device {host_path!r}: {e.strerror or e}"
        ) from e
    mode = st.st_mode
    if stat_mod.S_ISBLK(mode):
        host_type = "b"
    elif stat_mod.S_ISCHR(mode):
        host_type = "c"
    elif stat_mod.S_ISFIFO(mode):
        host_type = "p"
    else:
        raise CdiApplyError(f"device {node.path!r}: host path {host_path!r} is not a device node")
    if given_type and given_type != host_type:
        raise CdiApplyError(
            f"device {node.path!r}: type {given_type!r} does not match host device "
            f"{host_path!r} of type {host_type!r}"
        )
    file_mode = node.file_mode if node.file_mode is not None else stat_mod.S_IMODE(mode)
    if major == 0 and host_type != "p":
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    return host_type, major, minor, file_mode


def _copy_json(value: Any) -> Any:
    """A deep copy of a JSON value (dicts and lists; the rest is immutable).

    Not ``copy.deepcopy``: that is several times slower on a spec and imports
    ``copy`` and ``weakref``, on the shim's path.
    """
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value


def clean_path(path: str) -> str:
    """Go's ``filepath.Clean`` (POSIX): like ``normpath`` but ``//x`` becomes ``/x``."""
    if path[:1] == "/" and "//" not in path and "/." not in path and path[-1] != "/":
        return path  # already clean (no empty, ".", ".." or trailing part): most paths
    if not path:
        return "."
    cleaned = os.path.normpath(path)
    if cleaned.startswith("//"):
        cleaned = "/" + cleaned.lstrip("/")
    return cleaned


def mount_depth(destination: str) -> int:
    """Sort key of a mount: the number of separators in its cleaned destination."""
    return clean_path(destination).count("/")


def _get_dest(mount: object) -> str:
    if isinstance(mount, dict):
        dest = mount.get("destination")
        if isinstance(dest, str):
            return dest
    return ""


def _child(parent: _Json, key: str) -> _Json:
    value = parent.get(key)
    if value is None:
        value = parent[key] = {}
    elif not isinstance(value, dict):
        raise CdiApplyError(f"config.json: {key}: expected an object, found {type(value).__name__}")
    return value


def _list(parent: _Json, key: str) -> list[Any]:
    value = parent.get(key)
    if value is None:
        value = parent[key] = []
    elif not isinstance(value, list):
        raise CdiApplyError(f"config.json: {key}: expected a list, found {type(value).__name__}")
    return value
