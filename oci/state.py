"""The OCI container state: what a runtime writes on a hook's stdin.

runtime-spec ``runtime.md`` "State": ``ociVersion``, ``id``, ``status`` and ``bundle``
are required strings, ``pid`` an integer (runc omits it once the container has
stopped, in poststop hooks), ``annotations`` an object of strings. runc 1.1.5 sends,
for example (on one line)::

    {"ociVersion":"1.0.2-dev","id":"c1","status":"creating","pid":4242,
     "bundle":"/run/containerd/io.containerd.runtime.v2.task/k8s.io/c1",
     "annotations":{"io.kubernetes.cri.container-type":"container"}}

Unknown fields are ignored (newer runtimes may add some). ``status`` is any string:
the spec lets runtimes define more values than creating/created/running/stopped.
"""

from __future__ import annotations

from oci import jsoncodec
from oci._frozen import EMPTY_MAPPING, Frozen
from oci.errors import SpecError
from oci.jsoncodec import type_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["STATUSES", "State"]

#: The statuses runtime-spec defines, in lifecycle order.
STATUSES: tuple[str, ...] = ("creating", "created", "running", "stopped")


class State(Frozen, kw_only=True):
    """The state of a container, as a hook reads it on stdin (frozen, slotted value)."""

    annotations: Mapping[str, str] = EMPTY_MAPPING
    bundle: str
    id: str
    oci_version: str
    pid: int | None = None
    status: str

    def __post_init__(self) -> None:
        self._set(annotations=dict(self.annotations))

    @classmethod
    def parse(cls, data: bytes | str, *, source: str = "container state") -> State:
        """Parse and check a state document; raise :class:`SpecError` starting with ``source``.

        ``source`` names where the state came from in messages (e.g. ``"stdin"``).
        """
        try:
            doc = jsoncodec.loadb(data)
        except jsoncodec.JSONError as e:
            raise SpecError(f"{source}: {e}") from None
        if not isinstance(doc, dict):
            raise SpecError(f"{source}: must be a JSON object, not {type_name(doc)}")

        strings = {}
        for key in ("ociVersion", "id", "status", "bundle"):
            if key not in doc:
                raise SpecError(f"{source}: {key} is missing")
            value = doc[key]
            if not isinstance(value, str):
                raise SpecError(f"{source}: {key} must be a string, not {type_name(value)}")
            strings[key] = value
        if not strings["id"]:
            raise SpecError(f"{source}: id must not be empty")
        if not strings["bundle"].startswith("/"):
            raise SpecError(f"{source}: bundle must be an absolute path, not {strings['bundle']!r}")

        pid = doc.get("pid")
        if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or pid < 0):
            raise SpecError(f"{source}: pid must be a non-negative integer, not {_describe(pid)}")

        annotations = doc.get("annotations")
        if annotations is None:
            annotations = {}
        elif not isinstance(annotations, dict):
            raise SpecError(
                f"{source}: annotations must be an object, not {type_name(annotations)}"
            )
        else:
            for key, value in annotations.items():
                if not isinstance(value, str):
                    raise SpecError(
                        f"{source}: annotations[{jsoncodec.dumps(key)}] must be a string,"
                        f" not {type_name(value)}"
                    )

        return cls(
            oci_version=strings["ociVersion"],
            id=strings["id"],
            status=strings["status"],
            pid=pid,
            bundle=strings["bundle"],
            annotations=annotations,
        )

    def to_dict(self) -> dict[str, Any]:
        """The state as runc writes it: ``pid`` omitted when None, ``annotations`` when empty."""
        out: dict[str, Any] = {"ociVersion": self.oci_version, "id": self.id, "status": self.status}
        if self.pid is not None:
            out["pid"] = self.pid
        out["bundle"] = self.bundle
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    def to_json(self) -> str:
        """:meth:`to_dict` as compact JSON (what a test feeds a hook on stdin)."""
        return jsoncodec.dumps(self.to_dict())


def _describe(value: object) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return type_name(value)
