"""The DRA driver's checkpoint: which claims are prepared with what, and which were unprepared.

One JSON file (``<state dir>/checkpoint.json``), rewritten whole on every change: a temporary
file in the same directory, fsync, rename over, fsync of the directory, so a crash leaves the
old or the new file, never a mix. What it holds:

- ``prepared``: claim UID → its namespace, name and devices (request, pool, device, CDI ids,
  admin access, the UUID the device had): the answer a repeated prepare gets, and what
  unprepare undoes, also in a new process;
- ``unprepared``: the UIDs of claims unprepared (or unprepared before they were ever
  prepared), newest last, at most :data:`MAX_TOMBSTONES`: a prepare of one of them is
  refused (a stale, retried prepare must not resurrect a claim: NVIDIA's driver issue
  #1162). Claim UIDs are never reused, so refusing is always right.

:func:`lock` takes the directory's lock file (``flock``): a second driver process on one
state directory would race the first; it is refused at start.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Mapping
from typing import Any

from nvhook.dra.errors import StateError
from oci._frozen import Frozen

__all__ = [
    "CHECKPOINT",
    "MAX_TOMBSTONES",
    "Checkpoint",
    "PreparedClaim",
    "PreparedDevice",
    "load",
    "lock",
    "save",
]

CHECKPOINT = "checkpoint.json"
MAX_TOMBSTONES = 4096
_VERSION = 1


class PreparedDevice(Frozen):
    request: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    admin: bool = False
    share_id: str | None = None
    #: the GPU's or MIG device's UUID when it was prepared ("" for an IMEX channel, or a
    #: checkpoint written before it was kept): a MIG device re-made under the same name is
    #: another device, told apart by it
    uuid: str = ""


class PreparedClaim(Frozen):
    uid: str
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name} (uid {self.uid})"


class Checkpoint(Frozen):
    prepared: Mapping[str, PreparedClaim]
    unprepared: tuple[str, ...] = ()

    def with_prepared(self, claim: PreparedClaim) -> Checkpoint:
        return Checkpoint({**self.prepared, claim.uid: claim}, self.unprepared)

    def without(self, uid: str) -> Checkpoint:
        prepared = {k: v for k, v in self.prepared.items() if k != uid}
        tombs = (*(u for u in self.unprepared if u != uid), uid)
        return Checkpoint(prepared, tombs[-MAX_TOMBSTONES:])


def _encode(cp: Checkpoint) -> bytes:
    doc = {
        "version": _VERSION,
        "prepared": {
            uid: {
                "namespace": c.namespace,
                "name": c.name,
                "devices": [
                    {
                        "request": d.request,
                        "pool": d.pool,
                        "device": d.device,
                        "cdiIDs": list(d.cdi_ids),
                        "admin": d.admin,
                        **({"shareID": d.share_id} if d.share_id is not None else {}),
                        **({"uuid": d.uuid} if d.uuid else {}),
                    }
                    for d in c.devices
                ],
            }
            for uid, c in sorted(cp.prepared.items())
        },
        "unprepared": list(cp.unprepared),
    }
    return (json.dumps(doc, indent=1) + "\n").encode()


def _decode(doc: Any, path: str) -> Checkpoint:
    try:
        if doc.get("version") != _VERSION:
            raise StateError(
                f"{path}: checkpoint version {doc.get('version')!r}, this driver reads "
                f"{_VERSION}; move the file away only once no claim is prepared"
            )
        prepared = {
            uid: PreparedClaim(
                uid=uid,
                namespace=str(c["namespace"]),
                name=str(c["name"]),
                devices=tuple(
                    PreparedDevice(
                        request=str(d["request"]),
                        pool=str(d["pool"]),
                        device=str(d["device"]),
                        cdi_ids=tuple(str(i) for i in d["cdiIDs"]),
                        admin=bool(d.get("admin", False)),
                        share_id=d.get("shareID"),
                        uuid=str(d.get("uuid", "")),
                    )
                    for d in c["devices"]
                ),
            )
            for uid, c in doc["prepared"].items()
        }
        return Checkpoint(prepared, tuple(str(u) for u in doc["unprepared"]))
    except (AttributeError, KeyError, TypeError) as e:
        raise StateError(f"{path}: not a checkpoint of this driver ({e!r})") from None


def load(directory: str) -> Checkpoint:
    """The checkpoint in ``directory`` (empty when there is none yet)."""
    path = os.path.join(directory, CHECKPOINT)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return Checkpoint({})
    except OSError as e:
        raise StateError(f"{path}: cannot read the checkpoint: {e.strerror}") from None
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise StateError(f"{path}: the checkpoint is not JSON ({e})") from None
    return _decode(doc, path)


def save(directory: str, cp: Checkpoint) -> None:
    """Write ``cp`` atomically and durably (module docstring)."""
    path = os.path.join(directory, CHECKPOINT)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(_encode(cp))
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        try:  # noqa: SIM105
            os.unlink(tmp)
        except OSError:
            pass
        raise StateError(f"{path}: cannot write the checkpoint: {e.strerror}") from None


def lock(directory: str) -> int:
    """Hold ``directory``'s lock for the process's life (the open descriptor is returned)."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise StateError(f"{directory}: cannot create the state directory: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StateError(
            f"{directory}/lock is held: another nvhook dra-plugin uses this state directory"
        ) from None
    return fd
