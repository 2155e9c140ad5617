"""Do a CDI spec's host paths still match the host? Its mounts, device nodes and hooks.

A spec names host files: each mount's ``hostPath``, each device node's ``hostPath``
(``path`` when unset) and each hook's ``path``. A spec written for a driver goes
stale when the host changes under it (a driver upgrade renames its libraries, a GPU
goes away): runc then fails on a missing bind-mount source with a message that
names neither the spec nor the cause.

- :func:`missing_host_paths` is the cheap check on the container-start path: what
  would make the start fail, and nothing else. One ``stat`` per bind mount (links
  followed, as the kernel's bind mount does: runc fails on a missing source) and one
  ``lstat`` per device node that leaves its type or major to the host (which
  :func:`oci.cdi.apply.apply` reads from it). A node the spec gives in full is not
  looked at: runc creates it from the spec's numbers.
- :func:`check_edits` is the thorough one (``nvhook cdi check``): also a mount whose
  host file is another kind of file than its name implies (:func:`expected_kind`), a
  node that is not a device node or has another type, major or minor than the spec
  gives, and a hook path that is not an executable file.

Both take ``host_path``, which maps a path of the spec to where it is looked up
(identity on the host itself; under a root directory for a mock machine).

Stdlib only (``os``, ``stat``): the runtime shim imports this in mode cdi.
"""

from __future__ import annotations

import os
import stat as stat_mod

from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from oci.cdi.edits import DeviceNode, Edits, Mount

__all__ = [
    "HostProblem",
    "check_edits",
    "expected_kind",
    "is_bind_mount",
    "missing_host_paths",
    "node_host_path",
]

#: File name suffixes of regular files (libraries are matched by ``.so`` separately).
_FILE_SUFFIXES = (".json", ".icd", ".bin", ".conf", ".dll", ".yaml", ".yml", ".xml", ".txt")
_SOCKET_SUFFIXES = (".sock", ".socket")


class HostProblem(Frozen):
    """One host path of a spec's edits that does not match the host.

    ``what`` names the edit as a person finds it in the spec (``mount /usr/lib/…``,
    ``device node /dev/nvidia0``, ``hook /usr/bin/nvhook-hook``), ``path`` is where it
    was looked up, ``problem`` says what is wrong (``host file is missing``), and
    ``missing`` whether the path does not exist at all (as opposed to a wrong kind).
    """

    what: str
    path: str
    problem: str
    missing: bool


def _same(path: str) -> str:
    return path


def is_bind_mount(mount: Mount) -> bool:
    """Whether runc bind-mounts ``mount``'s ``hostPath`` (type ``bind``, or a ``bind``/``rbind``
    option): only then is ``hostPath`` a host file (``tmpfs``, ``proc``… name no file)."""
    return mount.type == "bind" or "bind" in mount.options or "rbind" in mount.options


def node_host_path(node: DeviceNode) -> str:
    """The host device a node stands for: ``hostPath``, else ``path`` (the CDI rule)."""
    return node.host_path or node.path


def missing_host_paths(
    edits: Edits, *, host_path: Callable[[str], str] = _same
) -> list[HostProblem]:
    """The bind-mount sources of ``edits``, and its device nodes that take their type or
    major from the host, that do not exist on the host."""
    problems: list[HostProblem] = []
    for mount in edits.mounts:
        if not is_bind_mount(mount):
            continue
        path = host_path(mount.host_path)
        try:
            os.stat(path)
        except OSError as e:
            problems.append(_missing(f"mount {mount.host_path}", path, e))
    for node in edits.device_nodes:
        if node.type and (node.major or node.type == "p"):  # minimally specified: not read
            continue
        path = host_path(node_host_path(node))
        try:
            os.lstat(path)
        except OSError as e:
            problems.append(_missing(f"device node {node.path}", path, e, noun="device"))
    return problems


def _missing(what: str, path: str, error: OSError, *, noun: str = "file") -> HostProblem:
    """The problem of a host path that ``stat`` failed on (``noun``: file or device)."""
    if isinstance(error, FileNotFoundError):
        if os.path.islink(path):
            return HostProblem(
                what, path, f"host {noun} is a dangling link to {os.readlink(path)}", True
            )
        return HostProblem(what, path, f"host {noun} is missing", True)
    return HostProblem(what, path, f"cannot inspect host {noun}: {error.strerror or error}", False)


def expected_kind(path: str) -> str | None:
    """The kind of file a mount's host path names: ``socket`` (``socket``, ``*.sock``,
    ``*.socket``), ``regular file`` (a library ``*.so*``, a name with a data or config
    suffix, anything in a ``bin`` or ``sbin`` directory), ``directory`` (a path ending
    in ``/``), or None when the name does not tell (any kind is then accepted)."""
    if path.endswith("/"):
        return "directory"
    directory, name = os.path.split(path)
    if name == "socket" or name.endswith(_SOCKET_SUFFIXES):
        return "socket"
    if (
        name.endswith(".so")
        or ".so." in name
        or name.endswith(_FILE_SUFFIXES)
        or os.path.basename(directory) in ("bin", "sbin")
    ):
        return "regular file"
    return None


def _kind(mode: int) -> str:
    if stat_mod.S_ISREG(mode):
        return "regular file"
    if stat_mod.S_ISDIR(mode):
        return "directory"
    if stat_mod.S_ISSOCK(mode):
        return "socket"
    if stat_mod.S_ISCHR(mode):
        return "character device"
    if stat_mod.S_ISBLK(mode):
        return "block device"
    if stat_mod.S_ISFIFO(mode):
        return "fifo"
    return "special file"  # pragma: no cover - links are followed; nothing else exists


_NODE_TYPES = {"c": "character device", "u": "character device", "b": "block device", "p": "fifo"}


def check_edits(edits: Edits, *, host_path: Callable[[str], str] = _same) -> list[HostProblem]:
    """Every mount, device node and hook of ``edits`` that does not match the host, in that
    order (see the module docstring for what is checked)."""
    problems: list[HostProblem] = []
    for mount in edits.mounts:
        if not is_bind_mount(mount):
            continue
        what = f"mount {mount.host_path}"
        path = host_path(mount.host_path)
        try:
            st = os.stat(path)
        except OSError as e:
            problems.append(_missing(what, path, e))
            continue
        expected, found = expected_kind(mount.host_path), _kind(st.st_mode)
        if expected is not None and expected != found:
            problems.append(
                HostProblem(what, path, f"host file is a {found}, not a {expected}", False)
            )
    for node in edits.device_nodes:
        problem = _check_node(node, host_path(node_host_path(node)))
        if problem is not None:
            problems.append(problem)
    for hook in edits.hooks:
        what = f"hook {hook.path}"
        path = host_path(hook.path)
        try:
            st = os.stat(path)
        except OSError as e:
            problems.append(_missing(what, path, e))
            continue
        if not stat_mod.S_ISREG(st.st_mode):
            problems.append(
                HostProblem(what, path, f"is a {_kind(st.st_mode)}, not a program", False)
            )
        elif not os.access(path, os.X_OK):
            problems.append(HostProblem(what, path, "is not executable", False))
    return problems


def _check_node(node: DeviceNode, path: str) -> HostProblem | None:
    what = f"device node {node.path}"
    try:
        st = os.lstat(path)
    except OSError as e:
        return _missing(what, path, e, noun="device")
    found = _kind(st.st_mode)
    if found not in ("character device", "block device", "fifo"):
        return HostProblem(what, path, f"host file is a {found}, not a device node", False)
    if node.type and _NODE_TYPES.get(node.type) != found:
        return HostProblem(
            what, path, f"host file is a {found}; the spec says type {node.type!r}", False
        )
    if found == "fifo":
        return None
    host = (os.major(st.st_rdev), os.minor(st.st_rdev))
    if node.major and (node.major, node.minor or 0) != host:
        return HostProblem(
            what,
            path,
            f"host device is {host[0]}:{host[1]}; the spec says {node.major}:{node.minor or 0}",
            False,
        )
    return None
