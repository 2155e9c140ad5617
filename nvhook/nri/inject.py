"""What the NRI plugin does to one container: the shim's decision, as an NRI adjustment.

NRI hands the plugin a pod and a container being created (``api.proto``'s ``PodSandbox`` and
``Container``: env, mounts, annotations, hooks, device nodes; no bundle and no security
context). :func:`container_spec` makes of them the config.json they stand for, and
:func:`nvhook.create.decide_spec` decides on it exactly as the runtime shim does on the real
file (the settings' policy, mode, planner or CDI registry, :func:`oci.cdi.apply.apply`);
:func:`adjustment` then turns what the applied spec adds into NRI's adjustment: env entries,
device nodes (NRI adds each one's ``rwm`` cgroup rule itself, ``generate.go``'s
``AdjustDevices``), mounts and OCI hooks (the createContainer hook runs as with the shim) or,
where the runtime applies them (NRI 0.8, containerd 2.1 and later) and the decision is in CDI
mode, the CDI device names alone. The applied spec keeps ``NVIDIA_VISIBLE_DEVICES=void``
(docs/architecture.md D1), so a RuntimeClass shim behind the same runtime sees ``void`` and adds
nothing: a container is served once.

What counts as the device plugin's allocation, as it reaches CRI (kubelet copies an
``Allocate`` response into the container's config, not the pod's): the container's annotations
under ``cdi.annotation_prefixes``, and with ``policy.accept_volume_mounts`` its
``/var/run/nvidia-container-devices/`` mounts. What a pod can set itself, and the plugin
enforces (:func:`decide_container`), which no runtime shim can tell apart:

- ``NVIDIA_VISIBLE_DEVICES`` (image or pod env): honoured only under
  ``policy.accept_env_unprivileged``; NRI carries no security context, so every container counts
  as unprivileged (``api.proto`` 0.6.1-0.12.2: ``Container`` has no capabilities);
- ``nvidia.cdi.k8s.io/container.NAME`` pod annotations (what NVIDIA's NRI plugin reads): honoured
  only from ``nri.annotation_namespaces``;
- every GPU (``all``, ``management.nvidia.com/gpu=all``) asked for by the pod itself: only from
  ``nri.management_namespaces``.

A request so refused is, per ``nri.refused``, stripped (the container is created without it,
its env set to ``NVIDIA_VISIBLE_DEVICES=void`` so that no other injector honours it) or
refused (the create fails); either way with one line naming the pod, the container and why.
"""

from __future__ import annotations

from typing import Any

from nvhook.constants import DEVICE_VOID, ENV_VISIBLE_DEVICES
from nvhook.create import Decision, decide_spec

try:
    from nvhook.nri.pb import api_pb2
except ImportError as e:  # protobuf: the kubernetes extra
    from nvhook.errors import MissingExtraError

    raise MissingExtraError("nvhook's NRI plugin", e, "kubernetes") from e
from nvhook.requests.ids import All, CdiName, Devices
from oci._frozen import Frozen

#: protoc's module, untyped (no .pyi: nvhook/nri/pb/SOURCES.md)
api: Any = api_pb2

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.settings import Settings

__all__ = [
    "NVIDIA_POD_ANNOTATION",
    "Verdict",
    "adjustment",
    "container_spec",
    "decide_container",
    "is_nvidia_cdi_name",
    "nvidia_device_paths",
]

#: NVIDIA's NRI plugin's pod annotation: ``nvidia.cdi.k8s.io/container.<container name>``.
NVIDIA_POD_ANNOTATION = "nvidia.cdi.k8s.io/container."
#: CDI names that stand for every GPU of a node.
_ALL_NAMES = ("=all",)

_HOOK_FIELDS = {
    "prestart": "prestart",
    "createRuntime": "create_runtime",
    "createContainer": "create_container",
    "startContainer": "start_container",
    "poststart": "poststart",
    "poststop": "poststop",
}


class Verdict(Frozen):
    """What the plugin answers for one container.

    ``adjust``: the ``ContainerAdjustment`` (empty: nothing to do); ``refused``: the one-line
    reason to fail the create (then ``adjust`` is empty); ``stripped``: the lines logged for
    requests not honoured; ``decision``: the shim's decision (None: nothing was decided);
    ``devices``: what was injected, for the log.
    """

    adjust: Any
    refused: str = ""
    stripped: tuple[str, ...] = ()
    decision: Decision | None = None
    devices: str = ""


def container_spec(
    container: Any, *, extra_annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """The config.json that NRI's ``container`` stands for (what the shim would read)."""
    linux = container.linux
    devices = [
        {"path": d.path, "type": d.type, "major": d.major, "minor": d.minor}
        for d in (linux.devices if container.HasField("linux") else ())
    ]
    hooks: dict[str, list[dict[str, Any]]] = {}
    if container.HasField("hooks"):
        for name, field in _HOOK_FIELDS.items():
            entries = [_hook_dict(h) for h in getattr(container.hooks, field)]
            if entries:
                hooks[name] = entries
    spec: dict[str, Any] = {
        "ociVersion": "1.0.2",
        "process": {"env": list(container.env), "args": list(container.args)},
        "annotations": {**dict(container.annotations), **(extra_annotations or {})},
        "mounts": [
            {
                "destination": m.destination,
                "type": m.type,
                "source": m.source,
                "options": list(m.options),
            }
            for m in container.mounts
        ],
        "linux": {"devices": devices},
    }
    if hooks:
        spec["hooks"] = hooks
    return spec


def _hook_dict(hook: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"path": hook.path, "args": list(hook.args), "env": list(hook.env)}
    if hook.HasField("timeout"):
        out["timeout"] = hook.timeout.value
    return out


def decide_container(pod: Any, container: Any, settings: Settings, *, cdi_capable: bool) -> Verdict:
    """The verdict for ``container`` of ``pod`` under ``settings`` (see the module docstring)."""
    where = f"pod {pod.namespace}/{pod.name} container {container.name}"
    problems: list[str] = []
    extra: dict[str, str] = {}
    prefixes = settings.cdi_annotation_prefixes
    key = NVIDIA_POD_ANNOTATION + container.name
    if key in pod.annotations:
        if pod.namespace in settings.nri_annotation_namespaces:
            extra[key] = pod.annotations[key]
            prefixes = (*prefixes, key)
        else:
            problems.append(
                f"{where}: pod annotation {key} not honoured: namespace {pod.namespace} is "
                "not in nri.annotation_namespaces"
            )
    effective = settings._replace(cdi_annotation_prefixes=prefixes)
    spec = container_spec(container, extra_annotations=extra)
    decided = decide_spec(spec, effective, bundle="")
    decision: Decision | None = decided
    if decided.error is not None:
        return Verdict(api.ContainerAdjustment(), refused=f"{where}: {decided.error.message}")
    requests = decided.requests
    assert requests is not None
    if not requests.sources:  # nothing honoured: the pod's own env asked in vain, if at all
        for ignored in requests.ignored:
            own = ignored.kind == "env" and ignored.name == ENV_VISIBLE_DEVICES
            if own and ignored.value.strip() not in ("", DEVICE_VOID):
                problems.append(
                    f"{where}: {ENV_VISIBLE_DEVICES}={ignored.value} not honoured: {ignored.reason}"
                )
    if decided.mode is not None and _asks_for_every_gpu(decided):
        own = bool(extra) or not any(s.kind in ("annotation", "mount") for s in requests.sources)
        if own and pod.namespace not in settings.nri_management_namespaces:
            problems.append(
                f"{where}: every GPU ({requests.devices}) asked for by the pod itself: "
                f"namespace {pod.namespace} is not in nri.management_namespaces"
            )
            decision = None
    if problems and settings.nri_refused == "refuse":
        return Verdict(api.ContainerAdjustment(), refused=problems[0], stripped=tuple(problems))
    adjust = api.ContainerAdjustment()
    devices = ""
    if decision is not None and decision.result is not None:
        adjust = adjustment(
            decision, cdi_capable=cdi_capable and settings.nri_cdi_devices == "auto"
        )
        devices = str(requests.devices)
    elif problems:
        adjust.env.append(api.KeyValue(key=ENV_VISIBLE_DEVICES, value=DEVICE_VOID))
    return Verdict(adjust, stripped=tuple(problems), decision=decision, devices=devices)


def _asks_for_every_gpu(decision: Decision) -> bool:
    devices = decision.requests.devices if decision.requests else None
    if isinstance(devices, All):
        return True
    if isinstance(devices, Devices):
        return any(isinstance(i, CdiName) and i.value.endswith(_ALL_NAMES) for i in devices.ids)
    return False


def adjustment(decision: Decision, *, cdi_capable: bool) -> Any:
    """What ``decision``'s applied spec adds to its spec, as a ``ContainerAdjustment``."""
    spec, result = decision.spec, decision.result
    assert spec is not None and result is not None
    adjust = api.ContainerAdjustment()
    before = _env_map(spec)
    for name, value in _env_map(result).items():
        if before.get(name) != value:
            adjust.env.append(api.KeyValue(key=name, value=value))
    if cdi_capable and decision.mode == "cdi":
        for name in decision.cdi_names:
            adjust.CDI_devices.append(api.CDIDevice(name=name))
        return adjust
    old_devices = {d["path"] for d in spec["linux"]["devices"]}
    for d in result.get("linux", {}).get("devices", ()):
        if d["path"] in old_devices:
            continue
        device = api.LinuxDevice(path=d["path"], type=d["type"], major=d["major"], minor=d["minor"])
        if d.get("fileMode") is not None:
            device.file_mode.value = d["fileMode"]
        if d.get("uid") is not None:
            device.uid.value = d["uid"]
        if d.get("gid") is not None:
            device.gid.value = d["gid"]
        adjust.linux.devices.append(device)
    old_mounts = [(m["destination"], m["source"]) for m in spec["mounts"]]
    for m in result.get("mounts", ()):
        if (m["destination"], m.get("source", "")) in old_mounts:
            continue
        adjust.mounts.append(
            api.Mount(
                destination=m["destination"],
                type=m.get("type", ""),
                source=m.get("source", ""),
                options=m.get("options", ()),
            )
        )
    old_hooks = spec.get("hooks", {})
    for name, field in _HOOK_FIELDS.items():
        for hook in result.get("hooks", {}).get(name, ()):
            if hook in old_hooks.get(name, ()):
                continue
            entry = api.Hook(path=hook["path"], args=hook.get("args", ()), env=hook.get("env", ()))
            if hook.get("timeout") is not None:
                entry.timeout.value = hook["timeout"]
            getattr(adjust.hooks, field).append(entry)
    return adjust


def _env_map(spec: dict[str, Any]) -> dict[str, str]:
    """The env the process sees: the last entry of a name wins (nvhook.requests.parse)."""
    out: dict[str, str] = {}
    for entry in spec.get("process", {}).get("env", ()):
        name, _, value = entry.partition("=")
        out[name] = value
    return out


def is_nvidia_cdi_name(name: str) -> bool:
    """Whether CDI name ``name`` is of an NVIDIA vendor (``nvidia.com/…``,
    ``management.nvidia.com/…``)."""
    vendor = name.partition("/")[0]
    return vendor == "nvidia.com" or vendor.endswith(".nvidia.com")


def nvidia_device_paths(devices: Any) -> set[str]:
    """The NVIDIA device nodes among NRI ``LinuxDevice`` items (``/dev/nvidia*``)."""
    return {d.path for d in devices if d.path.startswith(("/dev/nvidia", "/dev/dri/"))}
