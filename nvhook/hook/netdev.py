"""``netdev``: move host network interfaces into the container and rename them.

A createRuntime hook: it runs in the host's namespaces and ``state.pid`` is the
container init's pid on the host. That pid is checked to be the container's init (a child
of the runtime that runs the hook, in a mount namespace of its own:
:func:`nvhook.hook.container_init.check_init`) and held while its network namespace is
opened, so a state naming another process (the host's pid 1, a reused pid) moves nothing.
For each ``HOST=NAME``, the host interface ``HOST`` is
moved there (``RTM_NEWLINK`` with ``IFLA_NET_NS_FD``) and renamed ``NAME`` (the
kernel takes it down on the move; it stays down, and its addresses, which the
kernel flushes on the move, are not restored).

Everything is checked before anything moves: the names, that each host interface
exists, that the container has its own network namespace, and that no ``NAME`` is
taken in it. pyroute2 (the costliest import of ``bench/figures.py``) is imported here only,
when the hook runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

from nvhook.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import Any

__all__ = ["check_ifname", "move_devices", "parse_device"]

_IFNAMSIZ = 16  # including the terminating NUL
_CLONE_NEWNET = 0x40000000
_USE = "run nvhook-hook netdev as a createRuntime hook"


def check_ifname(name: str, *, what: str = "interface name") -> None:
    """Raise :class:`UsageError` unless ``name`` is a valid Linux interface name."""
    from nvhook.errors import UsageError

    if (
        not name
        or len(name.encode()) >= _IFNAMSIZ
        or name in (".", "..")
        or any(c in name for c in "/:\0")
        or any(c.isspace() for c in name)
    ):
        raise UsageError(
            f"invalid {what} {name!r}: 1 to {_IFNAMSIZ - 1} bytes, no '/', ':' or whitespace"
        )


def parse_device(spec: str) -> tuple[str, str]:
    """``HOST=NAME`` -> (host interface, name in the container)."""
    from nvhook.errors import UsageError

    host, sep, name = spec.partition("=")
    if not sep:
        raise UsageError(f"--device must be HOST=NAME, got {spec!r}")
    check_ifname(host, what="host interface name")
    check_ifname(name, what="container interface name")
    return host, name


@contextlib.contextmanager
def _in_netns(fd: int) -> Iterator[None]:
    """Switch this thread into the network namespace ``fd`` for the block."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(ctypes.c_int(fd), ctypes.c_int(_CLONE_NEWNET)) != 0:
            err = ctypes.get_errno()
            raise HookError(f"cannot enter the container's network namespace: {os.strerror(err)}")
        try:
            yield
        finally:
            if libc.setns(ctypes.c_int(own), ctypes.c_int(_CLONE_NEWNET)) != 0:
                err = ctypes.get_errno()
                raise HookError(f"cannot return to the host network namespace: {os.strerror(err)}")
    finally:
        os.close(own)


def _names(ipr: Any) -> set[str]:
    return {str(link.get_attr("IFLA_IFNAME")) for link in ipr.get_links()}


def move_devices(pid: int, devices: Sequence[tuple[str, str]]) -> None:
    """Move each ``(host, name)`` into the network namespace of ``pid`` and rename it ``name``."""
    from nvhook.errors import UsageError

    hosts = [host for host, _ in devices]
    names = [name for _, name in devices]
    for label, values in (("host interface", hosts), ("container name", names)):
        dupes = sorted({v for v in values if values.count(v) > 1})
        if dupes:
            raise UsageError(f"{label} given more than once: {', '.join(dupes)}")

    from nvhook.hook.container_init import check_init

    _pyroute2()  # a missing extra is said before the state is judged
    with check_init(pid, net=True, use=_USE) as init:
        target, own = os.fstat(init.net_ns), os.stat("/proc/self/ns/net")
        if (target.st_dev, target.st_ino) == (own.st_dev, own.st_ino):
            raise HookError(
                f"the container (pid {pid}) shares the host's network namespace; "
                "it needs its own to receive network devices"
            )
        _move(init.net_ns, pid, devices)


def _pyroute2() -> None:
    """Raise :class:`MissingExtraError` unless pyroute2 (the ``netdev`` extra) imports."""
    try:
        import pyroute2  # noqa: F401
    except ImportError as e:
        from nvhook.errors import MissingExtraError

        raise MissingExtraError("nvhook-hook netdev", e, "netdev") from e


def _move(nsfd: int, pid: int, devices: Sequence[tuple[str, str]]) -> None:
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    with IPRoute() as host:
        indices: dict[str, int] = {}
        for name, _ in devices:
            found = host.link_lookup(ifname=name)
            if found:
                indices[name] = int(found[0])
        missing = [name for name, _ in devices if name not in indices]
        if missing:
            raise HookError(f"host network interface not found: {', '.join(missing)}")
        with _in_netns(nsfd):
            inside = IPRoute()
        try:
            taken = sorted(_names(inside) & {name for _, name in devices})
            if taken:
                raise HookError(
                    f"the container (pid {pid}) already has an interface named {', '.join(taken)}"
                )
            for hostname, name in devices:
                try:
                    # the name doubles as the pattern the kernel uses if `hostname` is taken there
                    host.link("set", index=indices[hostname], net_ns_fd=nsfd, ifname=name)
                except NetlinkError as e:
                    raise HookError(
                        f"cannot move host interface {hostname} into the container (pid {pid}): "
                        f"{os.strerror(e.code)}"
                    ) from None
                moved = inside.link_lookup(ifname=name) or inside.link_lookup(ifname=hostname)
                if not moved:
                    raise HookError(f"{hostname} moved into the container (pid {pid}) but is gone")
                try:
                    inside.link("set", index=moved[0], ifname=name)
                except NetlinkError as e:
                    raise HookError(
                        f"cannot rename {hostname} to {name} in the container (pid {pid}): "
                        f"{os.strerror(e.code)}"
                    ) from None
        finally:
            inside.close()
