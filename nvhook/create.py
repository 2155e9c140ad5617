"""The ``create`` path of the runtime shim: one function decides, the shim applies.

:func:`decide` is the one place that decides what a create does to a bundle. It
reads config.json, builds the policy from the settings, parses what the container
asks for, picks the mode, resolves the request in that mode, and applies the edits
to the spec in memory; it writes nothing, and returns a :class:`Decision` (a failure
is part of it: ``decision.error``, with the stages done so far). The runtime shim
calls :func:`prepare`, which is :func:`decide` and then the save of the new
config.json (only when something changed); ``nvhook explain`` is :func:`decide`
and a rendering of the decision (:mod:`nvhook.tools.explain`). Everything that can
fail does so before the write, so a failure leaves config.json byte-identical.

Modes (``runtime.mode``):

- ``cdi``: qualified CDI names are resolved through the CDI registry
  (:func:`oci.cdi.index.resolve`, whose index of the spec files is kept in
  ``$NVHOOK_CACHE_DIR``, default ``/run/nvhook``, beside the settings); plain ids
  from ``NVIDIA_VISIBLE_DEVICES`` become names of ``cdi.default_kind``
  (``0`` → ``nvidia.com/gpu=0``, ``all`` → ``nvidia.com/gpu=all``), the names
  that ``nvhook cdi generate`` writes. Before anything is applied, every bind-mount
  source of the edits, and each device node read from the host, must exist
  (:func:`oci.cdi.hostcheck.missing_host_paths`, a ``stat`` each): a missing one means
  the spec is stale (the driver was upgraded since it was written), and the error names
  the spec and the command that rewrites it (:mod:`nvhook.cdihints`), where runc would
  fail on the mount with a message naming neither;
- ``jit``: the host is discovered directly (:mod:`nvhook.planner`);
- ``auto`` (default): ``cdi`` when every requested device is a qualified CDI
  name (annotations always are), else ``jit``.
"""

from __future__ import annotations

from nvhook.errors import RequestError, RequirementError
from nvhook.requests.ids import All, CdiName, Devices, NoGpus, Requests, VendorName, Void
from nvhook.requests.parse import parse_requests
from nvhook.requests.policy import Policy
from oci._frozen import Frozen
from oci.bundle import Bundle
from oci.errors import Error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from nvhook.planner import Host as PlannerHost
    from nvhook.planner import Plan
    from nvhook.requests.requirements import Requirement
    from nvhook.settings import Settings
    from oci.argv import RuntimeArgs
    from oci.cdi.edits import Edits

__all__ = [
    "DEFAULT_KIND",
    "Decision",
    "Outcome",
    "asks_for_anything",
    "decide",
    "decide_spec",
    "prepare",
]

DEFAULT_KIND = "nvidia.com/gpu"


class Decision(Frozen):
    """What the create path decided for one bundle (:func:`decide`); nothing was written.

    The fields follow the stages. A stage that fails sets ``error`` (the shim's error,
    with its exit code) and leaves the later stages' fields at their defaults:

    - ``bundle``: the bundle's directory; ``settings``: what it was decided with;
    - ``spec``: config.json as loaded;
    - ``policy``: the policy the settings describe;
    - ``requests``: what the container asks for and from where (``requests.sources``),
      and what was found but not honoured, with why (``requests.ignored``);
    - ``mode``: ``"cdi"`` or ``"jit"``, and ``mode_reason``; None when nothing is asked
      for (config.json is left alone);
    - ``cdi_names``: mode cdi, the qualified names resolved; ``plan``: mode jit, what the
      request resolved to on the host (devices, driver files, the facts that the
      requirements were checked against);
    - ``edits``, and ``result``: config.json with them applied, in memory;
    - ``warnings``: what the log should say that does not fail the create (a cache
      directory refused as unsafe).
    """

    bundle: str
    settings: Settings
    spec: dict[str, Any] | None = None
    policy: Policy | None = None
    requests: Requests | None = None
    mode: str | None = None
    mode_reason: str = ""
    cdi_names: tuple[str, ...] = ()
    plan: Plan | None = None
    edits: Edits | None = None
    result: dict[str, Any] | None = None
    error: Error | None = None
    warnings: tuple[str, ...] = ()

    @property
    def changes_config(self) -> bool:
        """Whether config.json would be rewritten: the edits change its value."""
        return self.result is not None and self.result != self.spec

    def requirement_checks(self) -> tuple[tuple[Requirement, str], ...]:
        """Each ``NVIDIA_REQUIRE_*`` requirement of the request and what became of it."""
        requests = self.requests
        if requests is None or not requests.requirements:
            return ()
        error = self.error
        facts = self.plan.facts if self.plan is not None else None
        if self.mode == "cdi":
            status = "not checked: mode cdi does not check requirements"
        elif requests.disable_require:
            status = "not checked: NVIDIA_DISABLE_REQUIRE is set"
        elif facts is not None:
            cuda = (
                f"{facts.cuda_version} from {facts.cuda_from}"
                if facts.cuda_from
                else (facts.cuda_version)
            )
            status = f"met (CUDA {cuda}, driver {facts.driver_version})"
        elif isinstance(error, RequirementError):
            return tuple(
                (
                    r,
                    "NOT MET"
                    if error.message.startswith(f"{r.source} is not met")
                    else "not checked (another is not met)",
                )
                for r in requests.requirements
            )
        else:
            status = "not checked: the create fails before they are"
        return tuple((r, status) for r in requests.requirements)


class Outcome(Frozen):
    """What :func:`prepare` did: the decision it applied, and whether config.json was written."""

    decision: Decision
    written: bool

    def fields(self) -> dict[str, Any]:
        """The shim's log line: mode (None: nothing asked), devices, written."""
        d = self.decision
        devices = str(d.requests.devices) if d.mode is not None and d.requests else ""
        return {"mode": d.mode, "devices": devices, "written": self.written}


def prepare(args: RuntimeArgs, settings: Settings) -> Outcome:
    """Edit ``args.bundle``/config.json for the devices its container asks for.

    Raises the decision's error; then nothing has been written. A prestart hook that
    would inject the same devices again (Docker's ``--gpus`` hook, ``nvhook-hook
    prestart``) is dropped from the spec written (:mod:`nvhook.legacyhook`).
    """
    assert args.bundle is not None
    bundle = Bundle(args.bundle)
    decision = decide(bundle, settings)
    if decision.error is not None:
        raise decision.error
    written = False
    if decision.result is not None:
        from nvhook.legacyhook import without_prestart_hooks  # Docker's --gpus hook: done here

        written = bundle.save(without_prestart_hooks(decision.result))
    return Outcome(decision, written)


def asks_for_anything(bundle: str, settings: Settings) -> bool:
    """Whether the container of ``bundle`` asks for anything under ``settings``' policy.

    Also True when that cannot be told: config.json unreadable or invalid, a request that
    cannot be parsed. Reads config.json; writes nothing. The shim asks this only when the
    settings cannot be loaded, to fail a create that asks for GPUs and pass the rest through.
    """
    try:
        spec = Bundle(bundle).load()
        return parse_requests(spec, Policy.from_settings(settings)).wants_anything
    except Error:
        return True


def decide(bundle: Bundle, settings: Settings) -> Decision:
    """What a create of ``bundle`` does, stage by stage (reads config.json; writes nothing)."""
    try:
        spec = bundle.load()
    except Error as e:
        return Decision(bundle.path, settings, error=e)
    return decide_spec(spec, settings, bundle=bundle.path)


def decide_spec(spec: dict[str, Any], settings: Settings, *, bundle: str = "") -> Decision:
    """:func:`decide` for a config.json already loaded (``bundle``: where it came from)."""
    policy: Policy | None = None
    requests: Requests | None = None
    mode: str | None = None
    reason = ""
    names: tuple[str, ...] = ()
    planned: Plan | None = None
    edits: Edits | None = None
    result: dict[str, Any] | None = None
    error: Error | None = None
    warnings: list[str] = []
    try:
        policy = Policy.from_settings(settings)
        requests = parse_requests(spec, policy)
        if requests.wants_anything:
            mode, reason = choose_mode(settings.runtime_mode, requests)
            if mode == "cdi":
                names = cdi_names(requests, settings.cdi_default_kind)
                edits = _resolve_cdi(names, settings, warnings)
            else:
                from nvhook.planner import Host, plan
                from oci.cdi.edits import Edits

                host = Host.from_settings(settings)
                nvidia: Requests = requests
                vendor_names: tuple[str, ...] = ()
                ids = requests.devices.ids if isinstance(requests.devices, Devices) else ()
                if any(isinstance(i, (VendorName, CdiName)) for i in ids):
                    from nvhook.requests.vendors import split_vendor_names  # only then

                    nvidia, vendor_names = split_vendor_names(requests)
                if nvidia.wants_anything and nvidia.requirements and not nvidia.disable_require:
                    # the compat libcuda's CUDA counts
                    from nvhook.rootfs.spec import container_env, rootfs_path

                    env = container_env(spec)
                    planned = plan(nvidia, host, rootfs=rootfs_path(spec, bundle), env=env)
                elif nvidia.wants_anything:  # else only other vendors' devices: no NVIDIA plan
                    planned = plan(nvidia, host)
                edits = planned.edits if planned is not None else Edits()
                if vendor_names:
                    edits += _vendor_edits(vendor_names, host)
            from oci.cdi.apply import apply  # copy, weakref: not for creates that ask for nothing

            result = apply(edits, spec)
    except Error as e:
        error = e
    return Decision(
        bundle,
        settings,
        spec,
        policy,
        requests,
        mode,
        reason,
        names,
        planned,
        edits,
        result,
        error,
        tuple(warnings),
    )


def _resolve_cdi(names: tuple[str, ...], settings: Settings, warnings: list[str]) -> Edits:
    """The edits of ``names`` from the spec dirs, once every host path they use exists."""
    from nvhook.settings import cache_directory
    from oci.cdi.hostcheck import missing_host_paths
    from oci.cdi.index import resolve
    from oci.errors import CdiResolveError

    spec_dirs = settings.cdi_spec_dirs
    try:
        edits = resolve(
            spec_dirs,
            names,
            cache_dir=cache_directory(),
            warnings=warnings,
            untrusted=settings.cdi_untrusted_specs,
        )
    except CdiResolveError as e:
        from nvhook.cdihints import with_hint

        raise with_hint(e, vendor=settings.cdi_default_kind.partition("/")[0]) from None
    missing = missing_host_paths(edits)
    if missing:  # runc would fail on the first with a message naming neither spec nor cause
        from nvhook.cdihints import stale_spec_error

        raise stale_spec_error(missing, spec_dirs, names, root=settings.host_root)
    from nvhook.gpurecords import gone_gpus, stale_layouts

    gone = gone_gpus(edits.env)
    if gone:  # runc would make the node from its numbers: a GPU that is not there (docs/cdi.md)
        from nvhook.cdihints import gone_gpu_error

        raise gone_gpu_error(gone, spec_dirs, names, root=settings.host_root)
    stale = stale_layouts(edits.env)
    if stale:  # a MIG device name would mean another instance now (docs/cdi.md)
        from nvhook.cdihints import stale_layout_error

        raise stale_layout_error(stale, spec_dirs, names, root=settings.host_root)
    return edits


def _vendor_edits(names: tuple[str, ...], host: PlannerHost) -> Edits:
    """Other vendors' devices from their discovery (:mod:`nvhook.vendors.registry`)."""
    from nvhook.vendors.model import Host as VendorHost
    from nvhook.vendors.registry import resolve

    where = VendorHost(root=host.root, dev_root=host.dev_root)
    return resolve(names, where, hook_path=host.hook_path)


def choose_mode(configured: str, requests: Requests) -> tuple[str, str]:
    """The mode for ``requests`` under ``runtime.mode`` = ``configured``, and why."""
    if configured != "auto":
        return configured, f"runtime.mode is {configured}"
    devices = requests.devices
    if isinstance(devices, Devices) and all(isinstance(i, CdiName) for i in devices.ids):
        return "cdi", "runtime.mode is auto and every requested device is a qualified CDI name"
    return "jit", "runtime.mode is auto and a requested device is not a qualified CDI name"


def cdi_names(requests: Requests, kind: str) -> tuple[str, ...]:
    """The qualified CDI names of a request (plain ids become names of ``kind``)."""
    devices = requests.devices
    if isinstance(devices, All):
        return (f"{kind}=all",)
    if isinstance(devices, (NoGpus, Void)):
        raise RequestError(
            f"runtime mode cdi cannot inject {devices} (driver files without a device): "
            "name a CDI device, or use mode jit or auto"
        )
    return tuple(
        i.value if isinstance(i, (CdiName, VendorName)) else f"{kind}={i}" for i in devices.ids
    )
