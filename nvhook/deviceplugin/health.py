"""Device health: which GPUs are gone or failing, checked the way a node would see it.

:func:`probe` looks at each GPU twice: its directory under ``/proc/driver/nvidia/gpus/``
(the driver still has it: a GPU that fell off the bus disappears there), and NVML (opened
anew from the driver root, every GPU listed by UUID; an NVML call that fails makes every GPU
not yet accounted for unhealthy, with NVML's message). The answer maps each unhealthy GPU's
UUID to one line saying why; an empty map means all is well. Its signature is stable
(another front end, the DRA driver, calls it).

:class:`HealthMonitor` adds XID health (NVML events and the kernel log, the XID policy of
the config's ``health`` section, recovery): the plugin merges its :meth:`~HealthMonitor.unhealthy`
with :func:`probe`'s answer on every tick. NVML counts its initialisations in a process and
reads the GPUs (and, in the mock, everything) at the first: while the event reader holds
NVML, another ``nvmlInit`` in the process sees the node as it was then.
:meth:`HealthMonitor.nvml_released` closes the event reader's NVML for a moment so that
someone else (the node watcher's NVML check) reads the node afresh.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from nvhook.deviceplugin.xid import XidEvent, XidPolicy, XidTracker, meaning, parse_kmsg
from nvhook.errors import DriverError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.planner import Host

__all__ = ["HealthMonitor", "probe"]


def probe(host: Host, gpus: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The unhealthy GPUs among ``gpus`` ((UUID, ``/proc`` bus id) pairs): UUID → why."""
    from nvhook.devices.nvml import open_nvml
    from nvhook.planner import nvml_library_dir

    problems: dict[str, str] = {}
    proc = os.path.join(host.root, "proc/driver/nvidia/gpus")
    for uuid, bus_id in gpus:
        if not os.path.isdir(os.path.join(proc, bus_id)):
            problems[uuid] = f"{proc}/{bus_id} is gone: the driver no longer has this GPU"
    try:
        with open_nvml(nvml_library_dir(host.driver_root)) as nvml:
            seen = {g.uuid for g in nvml.gpus()}
    except DriverError as e:
        for uuid, _ in gpus:
            problems.setdefault(uuid, e.message)
        return problems
    for uuid, _ in gpus:
        if uuid not in seen:
            problems.setdefault(uuid, "NVML no longer lists this GPU")
    return problems


# --------------------------------------------------------------------------- XID health


class HealthMonitor:
    """XID health for ``gpus`` ((UUID, ``/proc`` bus id) pairs) under ``policy``.

    Two reader threads feed one :class:`~nvhook.deviceplugin.xid.XidTracker`: NVML events
    (an event set with ``nvmlEventTypeXidCriticalError`` registered for every GPU that
    supports it, waited on in turns of :data:`WAIT` seconds) and the kernel log
    (``policy.kmsg``, ``/dev/kmsg`` by default, read from its end at start: XIDs already
    logged are history; in tests a plain file appended to). A line is bounded to
    :data:`MAX_LINE` bytes. Every XID that makes a healthy GPU unhealthy calls ``on_change``
    (O(1) per event otherwise, so a flood costs the tracker a counter each) and is logged
    with its number and meaning; ignored and non-fatal XIDs change nothing. The plugin asks
    :meth:`unhealthy` on each health tick, which applies the recovery rule.

    :meth:`nvml_released` makes the NVML reader close its event set and NVML (at the end of
    its current wait, at most :data:`WAIT` seconds) and stay closed while its block runs;
    XIDs that arrive meanwhile reach NVML's next event set only if still pending, so the
    kernel log reader (which does not pause) is what sees them.
    """

    WAIT = 0.5
    MAX_LINE = 8192
    RETRY = 5.0  # seconds before a reader that failed tries again

    def __init__(
        self,
        host: Host,
        gpus: Sequence[tuple[str, str]],
        policy: XidPolicy,
        *,
        on_change: Callable[[], None] = lambda: None,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.host, self.gpus, self.policy = host, tuple(gpus), policy
        self.tracker = XidTracker(policy)
        self.on_change, self.log = on_change, log
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._by_pci = {_pci_key(bus): uuid for uuid, bus in self.gpus}
        self.events = 0  # XIDs seen, fatal or not
        self._nvml = threading.Condition()
        self._released = 0  # nvml_released blocks under way: the NVML reader stays closed
        self.nvml_open = threading.Event()  # set while the NVML reader holds NVML

    def start(self) -> None:
        if not self.policy.enabled:
            return
        readers = [self._read_nvml]
        if self.policy.kmsg:
            readers.append(self._read_kmsg)
        for reader in readers:
            t = threading.Thread(target=reader, daemon=True, name=f"nvhook-{reader.__name__}")
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        with self._nvml:
            self._nvml.notify_all()
        for t in self._threads:
            t.join(5)

    @contextlib.contextmanager
    def nvml_released(self, timeout: float = 5.0) -> Iterator[None]:
        """Run the block with NVML closed by this monitor's reader (see the class docstring);
        after ``timeout`` seconds of waiting for the reader (stuck in NVML) the block runs
        anyway."""
        with self._nvml:
            self._released += 1
            self._nvml.wait_for(lambda: not self.nvml_open.is_set(), timeout)
        try:
            yield
        finally:
            with self._nvml:
                self._released -= 1
                self._nvml.notify_all()

    def unhealthy(self, answering: Sequence[str]) -> dict[str, str]:
        """GPU UUID → why, for the GPUs a fatal XID holds unhealthy now."""
        return self.tracker.unhealthy(time.monotonic(), answering)

    def record(self, uuid: str, xid: int, source: str) -> None:
        self.events += 1
        if self.tracker.record(XidEvent(uuid, xid, source), time.monotonic()):
            self.log(f"GPU {uuid}: XID {xid} ({meaning(xid)}) from {source}: fatal")
            self.on_change()

    def _read_nvml(self) -> None:
        from nvhook.devices.nvml import EVENT_XID, open_nvml
        from nvhook.planner import nvml_library_dir

        said = ""
        told: set[str] = set()
        while not self._stop.is_set():
            with self._nvml:  # not while someone reads the node through NVML afresh
                self._nvml.wait_for(lambda: not self._released or self._stop.is_set())
                if self._stop.is_set():
                    return
                self.nvml_open.set()
            try:
                with open_nvml(nvml_library_dir(self.host.driver_root)) as nvml:
                    events = nvml.events([u for u, _ in self.gpus])
                    for uuid in set(events.unsupported) - told:  # once, not at each reopen
                        self.log(f"GPU {uuid} reports no XID events through NVML")
                        told.add(uuid)
                    try:
                        while not self._stop.is_set() and not self._released:
                            e = events.wait(self.WAIT)
                            if e is not None and e.event_type == EVENT_XID:
                                self.record(e.gpu_uuid, e.data, "NVML events")
                    finally:
                        events.close()
            except DriverError as e:
                if e.message != said:  # once per distinct failure, not every 5 s
                    self.log(f"NVML events: {e.message}; retrying every {self.RETRY:g} s")
                    said = e.message
                self._closed()
                self._stop.wait(self.RETRY)
            else:
                self._closed()

    def _closed(self) -> None:
        with self._nvml:
            self.nvml_open.clear()
            self._nvml.notify_all()

    def _read_kmsg(self) -> None:
        path = self.policy.kmsg
        said = ""
        while not self._stop.is_set():
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as e:
                if e.strerror != said:
                    self.log(f"kernel log {path}: {e.strerror}; retrying every {self.RETRY:g} s")
                    said = e.strerror or ""
                self._stop.wait(self.RETRY)
                continue
            try:
                os.lseek(fd, 0, os.SEEK_END)
                self._follow(fd, path)
            finally:
                os.close(fd)

    def _follow(self, fd: int, path: str) -> None:
        pending = b""
        while not self._stop.is_set():
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                chunk = b""
            except BrokenPipeError:  # /dev/kmsg: records overwritten before we read them
                continue
            if not chunk:
                self._stop.wait(0.1)
                continue
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()[-self.MAX_LINE :]
            for raw in lines:
                found = parse_kmsg(raw[: self.MAX_LINE].decode("utf-8", "replace"))
                if found is None:
                    continue
                uuid = self._by_pci.get(_pci_key(found[0]))
                if uuid is not None:
                    self.record(uuid, found[1], path)


def _pci_key(address: str) -> tuple[int, ...]:
    """``0000:07:00.0`` or ``0000:07:00`` → (domain, bus, device)."""
    parts = address.replace(".", ":").split(":")[:3]
    try:
        return tuple(int(p, 16) for p in parts)
    except ValueError:
        return ()
