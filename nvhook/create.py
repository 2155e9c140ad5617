"""The ``create`` path of the runtime shim: requests → edits → config.json, atomically.

:func:`prepare` reads the bundle's config.json, parses what the container asks
for, resolves it in the configured mode, applies the edits and writes the file
back (only when something changed). Everything that can fail does so before the
write, so a failure leaves config.json byte-identical.

Modes (``runtime.mode``):

- ``cdi``: qualified CDI names are resolved through the CDI registry
  (:func:`oci.cdi.registry.resolve`, whose index of the spec files is kept in
  ``$NVHOOK_CACHE_DIR``, default ``/run/nvhook``, beside the settings); plain ids
  from ``NVIDIA_VISIBLE_DEVICES`` become names of ``cdi.default_kind``
  (``0`` → ``nvidia.com/gpu=0``, ``all`` → ``nvidia.com/gpu=all``), the names
  that ``nvhook cdi generate`` writes. Before anything is applied, every bind-mount
  source of the edits, and each device node read from the host, must exist
  (:func:`oci.cdi.hostcheck.missing_host_paths`, a ``stat`` each): a missing one means
  the spec is stale (the driver was upgraded since it was written), and the error names
  the spec and the command that rewrites it (:mod:`nvhook.cdihints`), where runc would
  fail on the mount with a message naming neither;
- ``jit``: the host is discovered directly (:mod:`nvhook.edits`);
- ``auto`` (default): ``cdi`` when every requested device is a qualified CDI
  name (annotations always are), else ``jit``.
"""

from __future__ import annotations

from nvhook.errors import RequestError
from nvhook.requests.parse import All, CdiName, Devices, NoGpus, Requests, Void, parse_requests
from nvhook.requests.policy import Policy
from oci._frozen import Frozen
from oci.bundle import Bundle

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from oci.argv import RuntimeArgs
    from oci.cdi.edits import Edits

__all__ = ["DEFAULT_KIND", "Outcome", "choose_mode", "edits_for", "prepare"]

DEFAULT_KIND = "nvidia.com/gpu"


class Outcome(Frozen):
    """What a create did: the mode used (None: nothing asked), the devices, whether it wrote."""

    __slots__ = ("devices", "mode", "written")
    mode: str | None
    devices: str
    written: bool

    def __init__(self, mode: str | None, devices: str, written: bool) -> None:
        self._set(mode=mode, devices=devices, written=written)

    def fields(self) -> dict[str, Any]:
        return {"mode": self.mode, "devices": self.devices, "written": self.written}


def prepare(args: RuntimeArgs, settings: dict[str, Any]) -> Outcome:
    """Edit ``args.bundle``/config.json for the devices its container asks for."""
    assert args.bundle is not None
    bundle = Bundle(args.bundle)
    spec = bundle.load()
    requests = parse_requests(spec, Policy.from_settings(settings))
    if not requests.wants_anything:
        return Outcome(None, "", False)
    mode, edits = edits_for(requests, settings)
    from oci.cdi.apply import apply  # copy, weakref: not for creates that ask for nothing

    written = bundle.save(apply(edits, spec))
    return Outcome(mode, str(requests.devices), written)


def choose_mode(configured: str, requests: Requests) -> str:
    if configured != "auto":
        return configured
    devices = requests.devices
    if isinstance(devices, Devices) and all(isinstance(i, CdiName) for i in devices.ids):
        return "cdi"
    return "jit"


def edits_for(requests: Requests, settings: dict[str, Any]) -> tuple[str, Edits]:
    """The mode chosen for ``requests`` and the edits it gives."""
    mode = choose_mode(settings["runtime.mode"], requests)
    if mode == "cdi":
        import os

        from nvhook.settings import CACHE_ENV, DEFAULT_CACHE_DIR
        from oci.cdi.hostcheck import missing_host_paths
        from oci.cdi.registry import resolve
        from oci.errors import CdiResolveError

        names = cdi_names(requests, settings["cdi.default_kind"])
        cache_dir = os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR
        try:
            edits = resolve(settings["cdi.spec_dirs"], names, cache_dir=cache_dir)
        except CdiResolveError as e:
            from nvhook.cdihints import with_hint

            raise with_hint(e, vendor=settings["cdi.default_kind"].partition("/")[0]) from None
        missing = missing_host_paths(edits)
        if missing:  # runc would fail on the first with a message naming neither spec nor cause
            from nvhook.cdihints import stale_spec_error

            spec_dirs, root = settings["cdi.spec_dirs"], settings["host.root"]
            raise stale_spec_error(missing, spec_dirs, names, root=root)
        return mode, edits
    from nvhook.edits import Host, plan

    return mode, plan(requests, Host.from_settings(settings)).edits


def cdi_names(requests: Requests, kind: str) -> list[str]:
    """The qualified CDI names of a request (plain ids become names of ``kind``)."""
    devices = requests.devices
    if isinstance(devices, All):
        return [f"{kind}=all"]
    if isinstance(devices, (NoGpus, Void)):
        raise RequestError(
            f"runtime mode cdi cannot inject {devices} (driver files without a device): "
            "name a CDI device, or use mode jit or auto"
        )
    return [i.value if isinstance(i, CdiName) else f"{kind}={i}" for i in devices.ids]
