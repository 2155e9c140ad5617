"""One watcher of a node's GPU facts, and the refresh of what is derived from them.

A :class:`Watcher` takes :class:`Snapshot`\\ s of what the driver says about the node and
tells its subscribers what changed (:func:`diff`: a tuple of :class:`Change`):

- the driver: version and kind (``/proc/driver/nvidia/version``), or not loaded;
- the GPUs (``/proc/driver/nvidia/gpus/*/information``), each GPU's MIG mode (whether
  ``capabilities/gpu<minor>/mig`` exists) and layout (its ``gi<g>/ci<c>`` entries), and,
  through NVML, each MIG device's UUID;
- the IMEX channels (``/dev/nvidia-caps-imex-channels``), the NVIDIA majors of
  ``/proc/devices``;
- the driver files a spec names (each host path's inode and mtime: a library replaced by an
  upgrade is a new inode).

How it is observed: procfs cannot be watched with inotify (its files change without a write
event), so the procfs and ``/dev`` facts are **polled**, every :data:`DEFAULT_INTERVAL`
seconds by default: a directory listing per GPU and per GPU instance, one small read per GPU,
a ``stat`` per spec path. NVML is asked only when that view changed (so a MIG re-layout's new
UUIDs come with the re-layout) and every :data:`DEFAULT_NVML_INTERVAL` seconds (a layout
re-made with the same instance ids, which procfs cannot tell apart); NVML's initialisation is
the costly part on a real GPU, and this keeps it off the poll. What that costs and how fast a
change is seen: ``bench/watch.py`` (docs/watch.md). NVML counts its initialisations in a
process and reads the GPU list at the first: a process that holds NVML open elsewhere (the
device plugin's XID event reader) passes ``nvml_gate``, a context its NVML check runs in with
that hold released (:meth:`nvhook.deviceplugin.health.HealthMonitor.nvml_released`).

Subscribers are called in the order they subscribed, on the watcher's thread, with one
:class:`Update` (old and new snapshot, the changes); one that raises is logged and the
others still run. The device plugin and the DRA driver subscribe where they run
(``--follow-gpus``); ``nvhook watch`` runs a watcher with a :class:`Refresher`, for the spec.

A :class:`Refresher` brings derived state up to date on each update, in order, logging each
step with what changed: the generated CDI spec (rewritten by ``nvhook cdi generate``'s
generator, replaced by rename, so never absent or half-written; a device that no longer
exists is no longer in it), then the node's labels file (``nvhook labels``' NFD feature
file) where one is configured; then the watcher is told the spec's new driver files.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from nvhook.devices.miglayout import caps_directory, read_layout
from nvhook.devices.procfs import read_driver, read_majors
from nvhook.errors import DriverError, NvhookError
from nvhook.planner import Host
from oci._frozen import Frozen

__all__ = [
    "DEFAULT_INTERVAL",
    "DEFAULT_NVML_INTERVAL",
    "Change",
    "Followed",
    "GpuFacts",
    "Refresher",
    "Snapshot",
    "Update",
    "Watcher",
    "diff",
    "follow",
    "names_text",
    "snapshot",
    "spec_paths",
]

DEFAULT_INTERVAL = 0.5  # seconds between procfs polls: a change is seen within this
DEFAULT_NVML_INTERVAL = 30.0  # seconds between NVML checks when procfs shows no change


class GpuFacts(Frozen, kw_only=True):
    uuid: str
    bus_id: str
    minor: int
    model: str
    mig: bool  # MIG mode on (the driver's capabilities/gpu<minor>/mig exists)
    layout: str  # "2.0,3.0,4.0": the gi.ci of each MIG device (miglayout)
    mig_uuids: tuple[str, ...] | None = None  # in layout order, from NVML; None: not asked


class Snapshot(Frozen, kw_only=True):
    driver: str | None  # the version; None: the kernel module is not loaded
    open_module: bool = False
    gpus: tuple[GpuFacts, ...] = ()  # by bus id (NVML's order)
    imex_channels: tuple[int, ...] = ()
    majors: tuple[tuple[str, int], ...] = ()  # the NVIDIA names of /proc/devices, sorted
    files: tuple[tuple[str, int, int], ...] = ()  # (path, inode or 0: missing, mtime_ns)
    nvml: str = ""  # "" not asked, "ok", or why NVML could not be asked
    nvml_gpus: tuple[str, ...] | None = None  # the UUIDs NVML lists; None: not asked

    def procfs_part(self) -> Snapshot:
        """This snapshot without what NVML added."""
        gpus = tuple(g._replace(mig_uuids=None) for g in self.gpus)
        return self._replace(gpus=gpus, nvml="", nvml_gpus=None)


class Change(Frozen):
    kind: (
        str  # driver, gpu-added, gpu-removed, mig-mode, mig-layout, mig-uuids, imex, majors, files
    )
    subject: str  # "driver", "GPU 0000:07:00.0 (GPU-…)", …
    detail: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.detail}"


class Update(Frozen):
    old: Snapshot
    new: Snapshot
    changes: tuple[Change, ...]


def _imex(dev_root: str) -> tuple[int, ...]:
    try:
        names = os.listdir(os.path.join(dev_root, "dev/nvidia-caps-imex-channels"))
    except OSError:
        return ()
    return tuple(sorted(int(n[7:]) for n in names if n.startswith("channel") and n[7:].isdigit()))


def _files(paths: Iterable[str]) -> tuple[tuple[str, int, int], ...]:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((path, st.st_ino, st.st_mtime_ns))
        except OSError:
            out.append((path, 0, 0))
    return tuple(out)


def snapshot(host: Host, *, files: Iterable[str] = (), nvml: bool = False) -> Snapshot:
    """The node's facts now (``nvml``: with the MIG UUIDs NVML reports).

    A view torn by a change under way (a GPU's entry gone between the listing and its read)
    is read again, up to three times, then reported as it stands."""
    for attempt in range(3):
        try:
            driver = read_driver(host.root)
            break
        except DriverError:
            if not os.path.exists(os.path.join(host.root, "proc/driver/nvidia/version")):
                majors = _nvidia_majors(read_majors(host.root))
                return Snapshot(driver=None, majors=majors, files=_files(files))
            if attempt == 2:
                raise
    gpus = []
    for g in driver.gpus:
        directory = caps_directory(host.root, g.minor)
        layout = read_layout(directory)
        gpus.append(
            GpuFacts(
                uuid=g.uuid,
                bus_id=g.bus_id,
                minor=g.minor,
                model=g.model,
                mig=layout is not None,
                layout=layout or "",
            )
        )
    snap = Snapshot(
        driver=driver.version,
        open_module=driver.open_module,
        gpus=tuple(gpus),
        imex_channels=_imex(host.dev_root),
        majors=_nvidia_majors(driver.majors),
        files=_files(files),
    )
    return _with_nvml(host, snap) if nvml else snap


def _nvidia_majors(majors: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((n, m) for n, m in majors.items() if n.startswith("nvidia")))


def _with_nvml(host: Host, snap: Snapshot) -> Snapshot:
    from nvhook.devices.nvml_ctypes import mig_ids
    from nvhook.planner import nvml_library_dir

    try:
        found = {g.uuid: g for g in mig_ids(nvml_library_dir(host.driver_root))}
    except (DriverError, OSError) as e:
        return snap._replace(nvml=str(e))
    gpus = []
    for g in snap.gpus:
        ids = found.get(g.uuid)
        uuids = None
        if ids is not None:
            uuids = tuple(m.uuid for m in sorted(ids.migs, key=lambda m: (m.gi, m.ci)))
        gpus.append(g._replace(mig_uuids=uuids))
    return snap._replace(gpus=tuple(gpus), nvml="ok", nvml_gpus=tuple(sorted(found)))


def _gpu_name(g: GpuFacts) -> str:
    return f"GPU {g.bus_id} ({g.uuid}, minor {g.minor})"


def _layout_text(layout: str) -> str:
    return layout or "no instances"


def diff(old: Snapshot, new: Snapshot) -> tuple[Change, ...]:
    """What changed from ``old`` to ``new``, in the order a refresh handles it."""
    out: list[Change] = []
    if (old.driver, old.open_module) != (new.driver, new.open_module):
        if new.driver is None:
            out.append(Change("driver", "driver", f"{old.driver} unloaded"))
        elif old.driver is None:
            out.append(Change("driver", "driver", f"{new.driver} loaded"))
        else:
            kind = " (open kernel module)" if new.open_module else ""
            out.append(Change("driver", "driver", f"{old.driver} -> {new.driver}{kind}"))
    before = {g.uuid: g for g in old.gpus}
    after = {g.uuid: g for g in new.gpus}
    for uuid, g in before.items():
        if uuid not in after:
            out.append(Change("gpu-removed", _gpu_name(g), "gone"))
    for uuid, g in after.items():
        if uuid not in before:
            out.append(Change("gpu-added", _gpu_name(g), f"added ({g.model})"))
            continue
        o = before[uuid]
        if o.mig != g.mig:
            state = "on" if g.mig else "off"
            out.append(Change("mig-mode", _gpu_name(g), f"MIG mode {state}"))
        if o.layout != g.layout and (o.mig or g.mig):
            out.append(
                Change(
                    "mig-layout",
                    _gpu_name(g),
                    f"MIG layout {_layout_text(o.layout)} -> {_layout_text(g.layout)} (gi.ci)",
                )
            )
        elif o.mig_uuids is not None and g.mig_uuids is not None and o.mig_uuids != g.mig_uuids:
            out.append(Change("mig-uuids", _gpu_name(g), "MIG devices re-created (new UUIDs)"))
    if old.nvml_gpus is not None and new.nvml_gpus is not None and old.nvml_gpus != new.nvml_gpus:
        lost = sorted(set(old.nvml_gpus) - set(new.nvml_gpus))
        back = sorted(set(new.nvml_gpus) - set(old.nvml_gpus))
        detail = "; ".join(
            [f"no longer lists {', '.join(lost)}"] * bool(lost)
            + [f"lists {', '.join(back)}"] * bool(back)
        )
        out.append(Change("nvml-gpus", "NVML", detail))
    if old.imex_channels != new.imex_channels:
        out.append(
            Change("imex", "IMEX channels", f"{len(old.imex_channels)} -> {len(new.imex_channels)}")
        )
    if old.majors != new.majors:
        out.append(Change("majors", "/proc/devices", f"{dict(old.majors)} -> {dict(new.majors)}"))
    if old.files != new.files:
        was = dict((p, (i, m)) for p, i, m in old.files)
        changed = [p for p, i, m in new.files if p in was and was[p] != (i, m)]
        if changed:
            more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
            out.append(Change("files", "driver files", f"{changed[0]} changed{more}"))
    return tuple(out)


def spec_paths(spec_file: str) -> tuple[str, ...]:
    """The host paths ``spec_file`` names (mounts, device nodes, hooks); none if unreadable."""
    from oci.cdi.parse import parse_spec, read_spec_data
    from oci.errors import OciError

    try:
        spec = parse_spec(read_spec_data(spec_file), source=spec_file)
    except OciError:
        return ()
    paths: dict[str, None] = {}
    for edits in (spec.edits, *(d.edits for d in spec.devices)):
        for mount in edits.mounts:
            paths[mount.host_path] = None
        for node in edits.device_nodes:
            paths[node.host_path or node.path] = None
        for hook in edits.hooks:
            paths[hook.path] = None
    return tuple(paths)


Subscriber = Callable[[Update], None]


def _stderr(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} nvhook watch: {line}", file=sys.stderr, flush=True)


class Watcher:
    """Polls ``host``'s GPU facts and calls each subscriber with every :class:`Update`."""

    def __init__(
        self,
        host: Host,
        *,
        interval: float = DEFAULT_INTERVAL,
        nvml_interval: float = DEFAULT_NVML_INTERVAL,
        nvml: bool = True,
        files: Iterable[str] = (),
        log: Callable[[str], None] = _stderr,
        clock: Callable[[], float] = time.monotonic,
        nvml_gate: Callable[[], contextlib.AbstractContextManager[object]] | None = None,
    ) -> None:
        if interval <= 0 or nvml_interval <= 0:
            raise NvhookError("watch intervals must be positive (seconds)")
        self.host, self.interval, self.nvml_interval = host, interval, nvml_interval
        self.use_nvml, self.log, self.clock = nvml, log, clock
        self._files = tuple(files)
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()
        self._gate = nvml_gate or contextlib.nullcontext
        self.current = snapshot(host, files=self._files, nvml=nvml)
        self._nvml_at = clock()

    def subscribe(self, callback: Subscriber) -> None:
        """Call ``callback(update)`` on every change from now on."""
        with self._lock:
            self._subscribers.append(callback)

    def watch_files(self, paths: Iterable[str]) -> None:
        """Watch ``paths`` (a spec's host paths) instead of the files watched so far."""
        with self._lock:
            self._files = tuple(paths)
            self.current = self.current._replace(files=_files(self._files))

    def poll(self) -> Update | None:
        """One look at the node; the update it found (subscribers called), or None."""
        with self._lock:
            files = self._files
        new = snapshot(self.host, files=files)
        due = self.use_nvml and self.clock() - self._nvml_at >= self.nvml_interval
        if self.use_nvml and (due or new != self.current.procfs_part()):
            with self._gate():
                new = _with_nvml(self.host, new)
            self._nvml_at = self.clock()
        elif self.current.nvml:  # keep what NVML said until it is asked again
            by_uuid = {g.uuid: g.mig_uuids for g in self.current.gpus}
            gpus = tuple(g._replace(mig_uuids=by_uuid.get(g.uuid)) for g in new.gpus)
            new = new._replace(gpus=gpus, nvml=self.current.nvml, nvml_gpus=self.current.nvml_gpus)
        changes = diff(self.current, new)
        old, self.current = self.current, new
        if not changes:
            return None
        update = Update(old, new, changes)
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(update)
            except Exception as e:  # one subscriber's failure must not stop the others
                self.log(f"a subscriber failed on {', '.join(map(str, changes))}: {e!r}")
        return update

    def run(self, stop: threading.Event) -> None:
        """Poll every :attr:`interval` seconds until ``stop`` is set."""
        while not stop.wait(self.interval):
            try:
                self.poll()
            except NvhookError as e:  # a torn view that did not settle: look again next time
                self.log(f"cannot read the node's GPU facts: {e}")


class Followed:
    r"""A daemon's inbox of the changes of ``kinds`` a watcher handed over: subscribed, it is
    called on the watcher's thread; the daemon's loop :meth:`take`\ s them on its own."""

    def __init__(self, kinds: frozenset[str]) -> None:
        self.kinds = kinds
        self._lock = threading.Lock()
        self._changes: list[Change] = []

    def __call__(self, update: Update) -> None:
        changes = [c for c in update.changes if c.kind in self.kinds]
        if changes:
            with self._lock:
                self._changes.extend(changes)

    def take(self) -> list[Change]:
        """The changes handed over since the last take, oldest first."""
        with self._lock:
            changes, self._changes = self._changes, []
        return changes


def follow(
    host: Host,
    interval: float,
    subscriber: Subscriber,
    log: Callable[[str], None],
    *,
    nvml_interval: float = DEFAULT_NVML_INTERVAL,
    nvml_gate: Callable[[], contextlib.AbstractContextManager[object]] | None = None,
) -> Watcher | None:
    """A daemon's watcher of the node's GPUs (``--follow-gpus``), ``subscriber`` subscribed,
    not yet running; None, with the warning logged, where it cannot start (the daemon runs on
    without following)."""
    try:
        watcher = Watcher(
            host, interval=interval, nvml_interval=nvml_interval, log=log, nvml_gate=nvml_gate
        )
    except NvhookError as e:
        log(f"warning: the node's GPUs are not followed (restart to see a change): {e}")
        return None
    watcher.subscribe(subscriber)
    log(f"following the node's GPUs (every {interval:g} s)")
    return watcher


class Refresher:
    """On each update: rewrite the generated spec, then the labels file (where configured),
    each step logged; then point ``watcher`` at the new spec's files."""

    def __init__(
        self,
        host: Host,
        *,
        output: str,
        labels_output: str | None = None,
        labels_config: str | None = None,
        watcher: Watcher | None = None,
        log: Callable[[str], None] = _stderr,
        vendor: str | None = None,
    ) -> None:
        self.host, self.output, self.log, self.watcher = host, output, log, watcher
        self.labels_output, self.labels_config = labels_output, labels_config
        self.vendor = vendor  # the spec's vendor (``cdi generate --vendor``); None: nvidia.com

    def __call__(self, update: Update) -> None:
        self.log("changed: " + "; ".join(map(str, update.changes)))
        self.refresh()

    def refresh(self) -> bool:
        """Bring the spec (and labels) up to date now; whether the spec was rewritten."""
        written = self._spec()
        if self.labels_output is not None:
            self._labels()
        if self.watcher is not None:
            self.watcher.watch_files(spec_paths(self.output))
        return written

    def _spec(self) -> bool:
        from nvhook.tools.generate import generate_spec
        from oci.cdi.write import dump_spec, write_spec
        from oci.errors import OciError

        try:
            if self.vendor is None:
                spec = generate_spec(self.host).spec
            else:
                spec = generate_spec(self.host, vendor=self.vendor).spec
        except NvhookError as e:
            self.log(f"{self.output} kept: cannot generate a spec now: {e}")
            return False
        data = dump_spec(spec, format="yaml" if self.output.endswith(".yaml") else "json")
        before = _device_names(self.output)
        try:
            with open(self.output, "rb") as f:
                if f.read() == data:
                    self.log(f"{self.output} already up to date")
                    return False
        except OSError:
            pass
        try:
            write_spec(self.output, spec)
        except OciError as e:
            self.log(f"{self.output} kept: {e}")
            return False
        after = [d.name for d in spec.devices]
        added = [n for n in after if n not in before]
        removed = [n for n in before if n not in after]
        self.log(
            f"{self.output} rewritten ({len(after)} devices; added {names_text(added)}; "
            f"removed {names_text(removed)})"
        )
        return True

    def _labels(self) -> None:
        assert self.labels_output is not None
        try:
            from nvhook.deviceplugin.config import load_config
            from nvhook.deviceplugin.labels import node_labels, read_node, write_feature_file

            config = load_config(self.labels_config)
            driver, gpus = read_node(self.host)
            labels = node_labels(driver, gpus, config)
            write_feature_file(self.labels_output, labels)
        except NvhookError as e:
            self.log(f"{self.labels_output} kept: {e}")
            return
        count = labels.get("nvidia.com/gpu.count", "0")
        self.log(f"{self.labels_output} rewritten ({len(labels)} labels, gpu.count {count})")


def _device_names(path: str) -> list[str]:
    from oci.cdi.parse import parse_spec, read_spec_data
    from oci.errors import OciError

    with contextlib.suppress(OciError, OSError):
        return [d.name for d in parse_spec(read_spec_data(path), source=path).devices]
    return []


def names_text(names: Sequence[str]) -> str:
    """``a, b, c``: at most eight names, then how many more (``none`` for none)."""
    if not names:
        return "none"
    shown = ", ".join(names[:8])
    return shown + (f" and {len(names) - 8} more" if len(names) > 8 else "")
