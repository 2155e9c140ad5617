"""Grant a created container the devices the prestart hook gives it: the device cgroup.

In hook mode the device nodes are not in config.json, so runc's device cgroup denies
them; the hook adds allow rules for exactly those nodes (docs/architecture.md D3 names
the cost: an engine or systemd that re-applies the cgroup from the spec drops them).

The process is the one :func:`nvhook.hook.container_init.check_init` checked and holds:
its ``/proc/<pid>/cgroup`` is the text read then (the hook runs in the host's cgroup
namespace, so the paths are absolute), never looked up by pid again.

- **cgroup v1** (also the "hybrid" layout, where the devices controller stays on v1):
  the container's ``devices`` cgroup is its line of that text, the controller's mount from
  ``/proc/self/mountinfo``, and each rule written to its ``devices.allow``
  (``c 195:0 rwm``), one write per rule, as the kernel parses them.
- **cgroup v2** (unified only: no v1 ``devices`` controller for the pid, or none mounted
  where this hook can see it) controls devices with eBPF programs that runc attaches to the
  container's cgroup: each is replaced by one that allows exactly the new nodes, then runs
  the old program's own instructions (:mod:`nvhook.hook.cgroup_bpf`, imported only on this
  path). The cgroup is the pid's ``0::`` line under the ``cgroup2`` mount of
  ``/proc/self/mountinfo``.

Only mounts this hook can see count (:func:`_visible`): a mount made later on the same point
or on one of its ancestors hides it. That is how a host whose kernel still has v1 hierarchies
gives an engine a cgroup2-only view (``mount -t cgroup2 none /sys/fs/cgroup`` over the v1
tmpfs, in the engine's mount namespace): the pid still has a ``devices`` line in its
``/proc/<pid>/cgroup`` (the kernel lists every hierarchy), and the v1 mounts are still in
``mountinfo``, but runc decides by what ``/sys/fs/cgroup`` is (``statfs``: cgroup2, so its
eBPF filter) and the hidden ``devices`` directory cannot be opened.
"""

from __future__ import annotations

import os

from nvhook.errors import HookError
from nvhook.hook.update_ldcache import unescape_mountinfo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from nvhook.hook.container_init import ContainerInit

__all__ = ["allow_devices", "devices_cgroup", "rule_line", "unified_cgroup"]


def rule_line(rule: dict[str, Any]) -> str:
    """A ``linux.resources.devices`` allow rule as ``devices.allow`` reads it: ``c 195:0 rwm``."""
    kind = rule.get("type") or "a"
    if kind not in ("a", "c", "b"):
        raise HookError(f"device cgroup rule {rule!r}: unknown type {kind!r}")
    access = rule.get("access") or "rwm"
    if not access or any(c not in "rwm" for c in access):
        raise HookError(f"device cgroup rule {rule!r}: access must be letters of rwm")
    if kind == "a":
        return f"a *:* {access}"
    major, minor = rule.get("major"), rule.get("minor")
    majors = "*" if major is None or major < 0 else str(int(major))
    minors = "*" if minor is None or minor < 0 else str(int(minor))
    return f"{kind} {majors}:{minors} {access}"


def _cgroup_paths(pid: int, cgroup: str) -> dict[str, str]:
    """Each v1 controller, and ``""`` for the unified one -> its path, from ``pid``'s
    ``/proc/<pid>/cgroup`` text ``cgroup``."""
    paths: dict[str, str] = {}
    for line in cgroup.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            raise HookError(f"/proc/{pid}/cgroup: unexpected line {line!r}")
        _, controllers, path = fields
        for controller in controllers.split(","):
            paths.setdefault(controller, path)
    return paths


def devices_cgroup(pid: int, cgroup: str, *, proc: str = "/proc") -> str:
    """The directory of ``pid``'s v1 ``devices`` cgroup (``cgroup``: its /proc/<pid>/cgroup)."""
    relative = _cgroup_paths(pid, cgroup).get("devices")
    if relative is None:
        raise HookError(
            f"pid {pid} has no cgroup v1 devices controller: its device cgroup is cgroup "
            "v2 (eBPF) or absent"
        )
    found = _devices_mount(proc)
    if found is None:
        raise HookError(
            "no cgroup v1 devices hierarchy is mounted on this host: cannot grant the GPUs "
            "in hook mode; use nvhook-runtime as the runtime"
        )
    mount_root, mount_point = found
    if mount_root != "/":
        if relative != mount_root and not relative.startswith(mount_root.rstrip("/") + "/"):
            raise HookError(
                f"the devices cgroup {relative} of pid {pid} is outside the devices "
                f"hierarchy mounted at {mount_point} (root {mount_root})"
            )
        relative = relative[len(mount_root) :]
    parts = [p for p in relative.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise HookError(f"unexpected devices cgroup path {relative!r} of pid {pid}")
    return os.path.join(mount_point, *parts)


def unified_cgroup(pid: int, cgroup: str, *, proc: str = "/proc") -> str:
    """The directory of ``pid``'s cgroup v2 (its ``0::`` line under the cgroup2 mount)."""
    relative = _cgroup_paths(pid, cgroup).get("")
    if relative is None:
        raise HookError(f"pid {pid} is in no cgroup v1 devices controller nor cgroup v2")
    point = None
    for fields in _visible(_mountinfo(proc), lambda f: _fstype(f) == "cgroup2" and f[3] == "/"):
        point = unescape_mountinfo(fields[4])
        break
    if point is None:
        raise HookError("no cgroup2 hierarchy is mounted on this host")
    parts = [p for p in relative.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise HookError(f"unexpected cgroup v2 path {relative!r} of pid {pid}")
    return os.path.join(point, *parts)


def _mountinfo(proc: str) -> list[list[str]]:
    try:
        with open(f"{proc}/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise HookError(f"cannot read {proc}/self/mountinfo: {e.strerror}") from None
    return [fields for fields in (line.split(" ") for line in lines) if "-" in fields]


def _visible(entries: list[list[str]], wanted: Callable[[list[str]], bool]) -> list[list[str]]:
    """The ``mountinfo`` entries that are ``wanted`` and whose mount is not hidden: by a later
    entry (the kernel lists a namespace's mounts in the order they were made) on the same
    mount point or on an ancestor of it, unless that entry is one of its own parent mounts.
    Linear in the entries for each wanted one (a node may have thousands of mounts)."""
    parent = {fields[0]: fields[1] for fields in entries}
    visible = []
    for i, fields in enumerate(entries):
        if not wanted(fields):
            continue
        ancestors, mount_id = set(), fields[1]
        while mount_id in parent and mount_id not in ancestors:
            ancestors.add(mount_id)
            mount_id = parent[mount_id]
        point = unescape_mountinfo(fields[4])
        if not any(
            later[0] not in ancestors and _covers(unescape_mountinfo(later[4]), point)
            for later in entries[i + 1 :]
        ):
            visible.append(fields)
    return visible


def _covers(outer: str, inner: str) -> bool:
    """Whether a mount on ``outer`` covers the path ``inner`` (equal, or an ancestor)."""
    return outer == inner or inner.startswith(outer.rstrip("/") + "/")


def _fstype(fields: list[str]) -> str:
    return fields[fields.index("-") + 1]


def _devices_mount(proc: str) -> tuple[str, str] | None:
    """(root, mount point) of the visible cgroup v1 hierarchy with the devices controller."""

    def devices(fields: list[str]) -> bool:
        options = fields[fields.index("-") + 3]
        return _fstype(fields) == "cgroup" and "devices" in options.split(",")

    for fields in _visible(_mountinfo(proc), devices):
        return unescape_mountinfo(fields[3]), unescape_mountinfo(fields[4])
    return None


def allow_devices(
    init: ContainerInit, rules: Sequence[dict[str, Any]], *, proc: str = "/proc"
) -> str:
    """Allow each allow rule in ``init``'s device cgroup; return the cgroup directory.

    cgroup v1: one write per rule to ``devices.allow``. cgroup v2: the device programs
    attached to the cgroup are extended (:func:`nvhook.hook.cgroup_bpf.extend`). ``proc``
    is where this hook's own ``self/mountinfo`` is read."""
    pid, cgroup = init.pid, init.cgroup
    if "devices" not in _cgroup_paths(pid, cgroup) or _devices_mount(proc) is None:
        directory = unified_cgroup(pid, cgroup, proc=proc)
        from nvhook.hook.cgroup_bpf import extend

        extend(directory, rules)
        return directory
    directory = devices_cgroup(pid, cgroup, proc=proc)
    lines = [rule_line(r) for r in rules if r.get("allow")]
    if not lines:
        return directory
    path = os.path.join(directory, "devices.allow")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as e:
        raise HookError(f"cannot open {path}: {e.strerror}") from None
    try:
        for line in lines:
            try:
                os.write(fd, line.encode())
            except OSError as e:
                raise HookError(f"{path}: cannot allow {line}: {e.strerror}") from None
    finally:
        os.close(fd)
    return directory
