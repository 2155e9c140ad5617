"""``NodePrepareResources``/``NodeUnprepareResources`` without gRPC: claims in, answers out.

:class:`Preparer` owns the checkpoint (:mod:`.state`) and the claims' CDI specs. For each
claim of a prepare, in this order, and nothing written until every check passed:

1. already prepared (its UID in the checkpoint): the same answer again (kubelet retries),
   unless one of its devices is gone or was re-made under its name since (a GPU lost, a MIG
   re-layout: the UUID prepared is kept): then refused, naming the device (kubelet itself
   never asks again for a claim it holds as prepared; a repeat comes from a kubelet that lost
   its state, and must not get a node that now means another device);
2. unprepared before (a tombstone): refused, the claim is gone and its devices may be
   another claim's by now (NVIDIA's driver #1162: a stale prepare retried after unprepare
   left a device allocated);
3. the claim read from the API (``GET …/resourceclaims/<name>``): its UID must be the one
   kubelet sent (a claim deleted and recreated under one name is another claim), it must be
   allocated, and each of its results for this driver must be in this node's pool, name a
   device this node publishes, and not be prepared for another claim: an exclusive device
   held by another claim is refused naming both claims (an ``adminAccess`` result, on
   either side, does not count as an allocation);
4. one transient CDI spec for the claim, ``k8s.gpu.nvidia.com-claim_<uid>.json`` in the CDI
   directory (``k8s.<driver>-claim_<uid>.json`` for another vendor's driver, whose devices'
   edits are ``nvhook cdi generate --vendor``'s: :mod:`nvhook.dra.vendors`) (the CDI
   library's ``GenerateTransientSpecName(vendor, class, uid)``: vendor and class joined
   by ``-``, then ``_`` and the ID, as NVIDIA's driver names its claim specs),
   kind ``k8s.gpu.nvidia.com/claim``, one CDI device ``<uid>-<device>`` per allocated device
   (unique per claim) with that device's nodes, and the GPU spec's spec-level edits (driver
   files, hooks) when the claim has a GPU or MIG device; written atomically
   (:func:`oci.cdi.write.write_spec`: temp file, fsync, mode 0644, rename);
5. the checkpoint, atomically, before the answer; a failure to write it removes the spec.

Unprepare removes the claim's spec file (whatever the checkpoint says: a crash between the
spec and the checkpoint leaves a spec the checkpoint does not know), drops its entry and
records its tombstone; an unknown claim's unprepare succeeds (and is tombstoned too).
:meth:`Preparer.sweep` removes, at start, claim specs of ours the checkpoint does not hold.

Every claim of a request gets an answer: a :class:`Result` with the devices, or an error.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nvhook.dra.errors import PrepareError, StateError
from nvhook.dra.inventory import DRIVER, DraDevice, Inventory
from nvhook.dra.state import PreparedClaim, PreparedDevice, load, save
from nvhook.kubeapi import ApiError
from oci._frozen import Frozen
from oci.cdi.write import write_spec
from oci.errors import Error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.dra.kubeapi import Api
    from nvhook.planner import Host
    from oci.cdi.edits import Edits
    from oci.cdi.spec import Spec

__all__ = [
    "CDI_CLASS",
    "CDI_KIND",
    "CDI_VENDOR",
    "ClaimRef",
    "DeviceEdits",
    "Preparer",
    "Result",
    "cdi_vendor",
    "host_edits",
    "spec_file",
]

#: NVIDIA's claim specs' vendor and class (``cmd/gpu-kubelet-plugin/cdi.go``).
CDI_VENDOR = "k8s." + DRIVER
CDI_CLASS = "claim"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"


def cdi_vendor(driver: str) -> str:
    """The claim specs' CDI vendor of ``driver``: ``k8s.<driver>`` (``k8s.gpu.amd.com``)."""
    return f"k8s.{driver}"


def spec_file(cdi_root: str, uid: str, driver: str = DRIVER) -> str:
    """``<cdi_root>/k8s.<driver>-claim_<uid>.json`` (module docstring, step 4)."""
    name = f"{cdi_vendor(driver)}-{CDI_CLASS}_{uid.replace('/', '_')}.json"
    return os.path.join(cdi_root, name)


class ClaimRef(Frozen):
    """A claim as kubelet names it in a request."""

    namespace: str
    name: str
    uid: str

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name} (uid {self.uid})"


class Result(Frozen):
    """One claim's answer: its devices, or why it failed."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class DeviceEdits(Frozen):
    """The CDI edits of every device the node publishes, and the GPU spec's spec-level ones."""

    by_device: Mapping[str, Edits]
    common: Edits


def host_edits(host: Host, inventory: Inventory) -> DeviceEdits:
    """Each published device's CDI edits (nvhook's generator: the GPU spec by UUID, the IMEX
    channel spec by number), and the GPU spec's spec-level edits; another vendor's: what
    ``nvhook cdi generate --vendor`` writes (:func:`nvhook.dra.vendors.vendor_edits`)."""
    if inventory.vendor != "nvidia":
        from nvhook.dra.vendors import vendor_edits

        return vendor_edits(host, inventory)
    from nvhook.tools.generate import generate_spec

    by_device: dict[str, Edits] = {}
    gpus = [d for d in inventory.devices if d.kind != "channel"]
    channels = [d for d in inventory.devices if d.kind == "channel"]
    common: Edits | None = None
    if gpus:
        spec = generate_spec(host, name_strategies=("uuid",), all_device=False).spec
        common = spec.edits
        for d in gpus:
            found = spec.device(d.uuid)
            if found is not None:
                by_device[d.name] = found.edits
    if channels:
        spec = generate_spec(host, kind="imex-channel", all_device=False).spec
        for d in channels:
            found = spec.device(str(d.channel))
            if found is not None:
                by_device[d.name] = found.edits
    from oci.cdi.edits import Edits

    return DeviceEdits(by_device, common if common is not None else Edits())


class Preparer:
    """Prepares and unprepares claims on ``node`` (module docstring). Thread-safe: one lock
    around each request, as the checkpoint is one file."""

    def __init__(
        self,
        *,
        node: str,
        api: Api,
        state_dir: str,
        cdi_root: str,
        inventory: Inventory,
        edits: DeviceEdits,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.node = node
        self.api = api
        self.state_dir = state_dir
        self.cdi_root = cdi_root
        self.inventory = inventory
        self.edits = edits
        self.log = log
        self._lock = threading.Lock()
        self.checkpoint = load(state_dir)

    def update(self, inventory: Inventory, edits: DeviceEdits) -> None:
        """The node's devices changed (a MIG relayout): new claims see the new devices;
        prepared claims keep what they have."""
        with self._lock:
            self.inventory, self.edits = inventory, edits

    def gone(self) -> dict[str, tuple[PreparedClaim, str]]:
        """The prepared devices the node no longer has as they were prepared (a GPU lost, a
        MIG instance destroyed or re-made under its name): device name → (a claim holding
        it, why). Without the lock (a prepare may be waiting on the API): the checkpoint and
        the inventory are values, each replaced whole."""
        checkpoint, inventory = self.checkpoint, self.inventory
        return {
            name: (claim, why)
            for claim in checkpoint.prepared.values()
            for name, why in self._gone(claim, inventory)
        }

    def _gone(
        self, claim: PreparedClaim, inventory: Inventory | None = None
    ) -> list[tuple[str, str]]:
        out = []
        for d in claim.devices:
            now = (inventory if inventory is not None else self.inventory).device(d.device)
            if now is None:
                out.append((d.device, f"is gone from node {self.node}"))
            elif d.uuid and now.uuid != d.uuid:
                out.append(
                    (d.device, f"was re-created as another device ({now.uuid}, was {d.uuid})")
                )
        return out

    # ------------------------------------------------------------------ prepare

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, Result]:
        with self._lock:
            return {c.uid: self._prepare_one(c) for c in claims}

    def _prepare_one(self, ref: ClaimRef) -> Result:
        done = self.checkpoint.prepared.get(ref.uid)
        if done is not None:
            gone = self._gone(done)
            if gone:
                name, why = gone[0]
                return Result(
                    error=f"claim {ref.ref}: device {name} {why} since the claim was prepared, "
                    "so its devices cannot be given again; unprepare the claim (delete its "
                    "pods) and let the scheduler allocate it anew"
                )
            return Result(done.devices)
        if ref.uid in self.checkpoint.unprepared:
            return Result(
                error=f"claim {ref.ref} was unprepared on this node; a prepare after its "
                "unprepare is refused (a stale retry must not take its devices again)"
            )
        try:
            claim = self.api.get_claim(ref.namespace, ref.name)
            devices = self._check(ref, claim)
            spec = self._spec(ref, devices)
        except (ApiError, PrepareError) as e:
            return Result(error=e.message)
        prepared = PreparedClaim(ref.uid, ref.namespace, ref.name, devices)
        path = spec_file(self.cdi_root, ref.uid, self.inventory.driver)
        if devices:
            try:
                write_spec(path, spec)
            except Error as e:  # CdiWriteError, CdiSpecError
                return Result(error=f"claim {ref.ref}: {e.message}")
        try:
            new = self.checkpoint.with_prepared(prepared)
            save(self.state_dir, new)
        except StateError as e:
            _remove(path)
            return Result(error=f"claim {ref.ref}: {e.message}")
        self.checkpoint = new
        self.log(f"prepared {ref.ref}: {', '.join(d.device for d in devices) or 'no device'}")
        return Result(devices)

    def _check(self, ref: ClaimRef, claim: dict[str, Any]) -> tuple[PreparedDevice, ...]:
        meta = claim.get("metadata") or {}
        if meta.get("uid") != ref.uid:
            raise PrepareError(
                f"claim {ref.namespace}/{ref.name}: the API has uid {meta.get('uid')!r}, "
                f"kubelet asked for {ref.uid}: the claim was deleted and recreated"
            )
        allocation = (claim.get("status") or {}).get("allocation")
        if not isinstance(allocation, dict):
            raise PrepareError(f"claim {ref.ref} is not allocated (status.allocation is unset)")
        results = [
            r
            for r in ((allocation.get("devices") or {}).get("results") or ())
            if isinstance(r, dict) and r.get("driver") == self.inventory.driver
        ]
        taken = {
            (d.pool, d.device): c
            for c in self.checkpoint.prepared.values()
            for d in c.devices
            if not d.admin
        }
        out: list[PreparedDevice] = []
        for r in results:
            pool, name = str(r.get("pool", "")), str(r.get("device", ""))
            if pool != self.node:
                raise PrepareError(
                    f"claim {ref.ref}: device {pool}/{name} is allocated in pool {pool!r}, "
                    f"not on this node ({self.node}): kubelet asked the wrong node"
                )
            device = self.inventory.device(name)
            if device is None or name not in self.edits.by_device:
                raise PrepareError(
                    f"claim {ref.ref}: device {name} is not a device of "
                    f"{self.inventory.driver} on node "
                    f"{self.node} (published: {', '.join(d.name for d in self.inventory.devices)})"
                )
            admin = bool(r.get("adminAccess"))
            other = taken.get((pool, name))
            if other is not None and not admin:
                raise PrepareError(
                    f"claim {ref.ref}: device {name} is prepared for claim {other.ref}; "
                    "an exclusive device serves one claim at a time"
                )
            share = r.get("shareID")
            out.append(
                PreparedDevice(
                    request=str(r.get("request", "")),
                    pool=pool,
                    device=name,
                    cdi_ids=(f"{self._kind_of_claims}={ref.uid}-{name}",),
                    admin=admin,
                    share_id=str(share) if share is not None else None,
                    uuid=device.uuid,
                )
            )
        return tuple(out)

    def _spec(self, ref: ClaimRef, devices: Sequence[PreparedDevice]) -> Spec:
        from oci.cdi.spec import Device, Spec

        cdi = [Device(f"{ref.uid}-{d.device}", self.edits.by_device[d.device]) for d in devices]
        kinds = {self._kind(d.device) for d in devices}
        # the spec-level edits go with any device but an IMEX channel (NVIDIA's GPU spec's
        # driver files; another vendor's /dev/kfd, manager nodes, driver trees)
        common = self.edits.common if kinds - {"channel", ""} else None
        return Spec.create(self._kind_of_claims, cdi, edits=common, source=f"claim {ref.ref}")

    @property
    def _kind_of_claims(self) -> str:
        return f"{cdi_vendor(self.inventory.driver)}/{CDI_CLASS}"

    def _kind(self, name: str) -> str:
        device: DraDevice | None = self.inventory.device(name)
        return device.kind if device is not None else ""

    # ------------------------------------------------------------------ unprepare

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, Result]:
        with self._lock:
            return {c.uid: self._unprepare_one(c) for c in claims}

    def _unprepare_one(self, ref: ClaimRef) -> Result:
        try:
            _remove(spec_file(self.cdi_root, ref.uid, self.inventory.driver))
        except OSError as e:
            return Result(error=f"claim {ref.ref}: cannot remove its CDI spec: {e.strerror}")
        was = ref.uid in self.checkpoint.prepared
        new = self.checkpoint.without(ref.uid)
        try:
            save(self.state_dir, new)
        except StateError as e:
            return Result(error=f"claim {ref.ref}: {e.message}")
        self.checkpoint = new
        self.log(f"unprepared {ref.ref}" + ("" if was else " (it was not prepared here)"))
        return Result()

    # ------------------------------------------------------------------ start

    def sweep(self) -> list[str]:
        """Remove our claim specs that the checkpoint does not hold; the paths removed."""
        prefix = f"{cdi_vendor(self.inventory.driver)}-{CDI_CLASS}_"
        try:
            names = os.listdir(self.cdi_root)
        except FileNotFoundError:
            return []
        removed = []
        for name in sorted(names):
            if not (name.startswith(prefix) and name.endswith(".json")):
                continue
            uid = name[len(prefix) : -len(".json")]
            if uid not in self.checkpoint.prepared:
                path = os.path.join(self.cdi_root, name)
                _remove(path)
                removed.append(path)
        return removed


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    directory = os.path.dirname(path) or "."
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
