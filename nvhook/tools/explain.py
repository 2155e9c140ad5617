"""``nvhook explain``: what the shim would do to a bundle, and why, without doing it.

The answer to "why doesn't my container see the GPU". The shim's create path decides
in one function, :func:`nvhook.create.decide`, which writes nothing; :func:`explain`
calls it with the shim's settings and renders the :class:`~nvhook.create.Decision`
it returns, stage by stage:

1. the settings (and any cache directory refused as unsafe);
2. the policy, and what the container asks for, from where (env, annotation,
   device-list mount, legacy image, policy) and what was found but ignored, with why;
3. the requirement checks (``NVIDIA_REQUIRE_*``) and what became of each;
4. the mode, and why (``runtime.mode``; ``auto`` picks ``cdi`` when every device is a
   qualified CDI name);
5. in jit mode the devices the request resolves to and the driver files not found; in
   cdi mode the CDI names resolved;
6. the edits, grouped by kind (device nodes, mounts, hooks, env, additional GIDs,
   network devices), whether they leave ``NVIDIA_VISIBLE_DEVICES=void`` behind (so a
   second injector adds nothing), and whether config.json would change.

Beside them, **injected by**: whether config.json already carries GPU edits, and whose: the
shim's (its log has this container's create, which wrote config.json), or from before the
runtime (:func:`injected_by`). Docker's ``--gpus`` takes one of two paths, chosen by
dockerd at start from the programs on its PATH (moby ``daemon/devices_nvidia_linux.go``): the
``nvidia-container-runtime-hook`` prestart hook (every Docker through 29.1; the
``nvidia.runtime-hook`` driver from 29.2), or, from Docker 29.2 (moby PR #50228) when
``nvidia-cdi-hook`` is on its PATH, the ``nvidia.cdi`` driver, which turns ``--gpus`` into CDI
names ``nvidia.com/gpu=<id>`` and applies the spec itself, as ``--device nvidia.com/gpu=N``,
containerd's CDI and podman's do. The first leaves its hook in config.json, the second the
spec's edits (``/dev/nvidiaN`` nodes, nvhook's createContainer hook).

Before all of it, a one-line **verdict** (:func:`verdict`): what the container will see,
which host GPU appears as which index inside, the CUDA and ``libcuda`` versions, or why it
will not run CUDA although the shim succeeds: a whole GPU in MIG mode (CUDA enumerates only
the MIG devices a container is given, none when it has none) or no ``libcuda`` on the
host. Inside, CUDA and NVML number the GPUs the container can open from 0 in PCI bus order
(the host's order), whatever order the request or config.json names them in (CUDA's
default ``CUDA_DEVICE_ORDER=FASTEST_FIRST`` puts a faster model first on a host of mixed
models); a MIG device counts where its parent GPU would.

A stage that fails ends the decision: its error becomes ``outcome.error`` with its
exit code, exactly as the shim would fail. :func:`explain` returns plain data (what
``--json`` prints); :func:`render_text` makes it text.
"""

from __future__ import annotations

import os
from typing import Any

from nvhook.constants import HOOK_PROGRAM
from nvhook.errors import ConfigError
from nvhook.legacyhook import LEGACY_HOOK
from nvhook.tools.entrypoints import CDI_HOOK_ENTRYPOINT
from oci.errors import Error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.create import Decision
    from nvhook.discover import DriverFiles
    from nvhook.planner import Plan
    from nvhook.requests.ids import Requests
    from nvhook.requests.policy import Policy
    from nvhook.settings import Settings
    from oci.cdi.edits import Edits

__all__ = ["describe", "explain", "injected_by", "render_text", "verdict"]

#: Hook programs whose createContainer hooks come with a CDI spec's edits (nvhook's, NVIDIA's).
CDI_HOOKS = (HOOK_PROGRAM, CDI_HOOK_ENTRYPOINT.name)


def explain(
    bundle: str,
    *,
    config_path: str | None = None,
    root: str | None = None,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """What the shim would do with ``bundle``, with the shim's settings.

    The settings are :func:`nvhook.settings.load_settings` of ``config_path`` (None:
    ``$NVHOOK_CONFIG``, else ``/etc/nvhook/config.toml``), or ``settings`` when given;
    ``root`` replaces ``host.root``. An invalid configuration is an answer too: the
    shim would fail on it.
    """
    from nvhook.create import decide
    from nvhook.settings import config_path as default_config_path
    from nvhook.settings import load_settings
    from oci.bundle import Bundle

    path = config_path if config_path is not None else default_config_path()[0]
    shown = path if settings is not None or os.path.exists(path) else f"{path} (absent: defaults)"
    bundle = os.path.abspath(bundle)
    warnings: list[str] = []
    try:
        if settings is None:
            if config_path is not None and not os.path.exists(config_path):
                raise ConfigError(f"{config_path}: configuration file not found")
            settings = load_settings(config_path, warnings=warnings)
        if root is not None:
            settings = settings._replace(host_root=root)
        target = Bundle(bundle)
    except Error as e:
        out = _empty(bundle)
        out["outcome"] = _failure(e)
        out["verdict"] = _not_starting(e)
        return out
    return describe(decide(target, settings), config_file=shown, warnings=warnings)


def describe(
    decision: Decision, *, config_file: str = "", warnings: list[str] | None = None
) -> dict[str, Any]:
    """``decision`` as plain data (``config_file``: how to name the settings' source;
    ``warnings``: more to report, from loading the settings)."""
    out = _empty(decision.bundle)
    if decision.spec is not None:
        out["injected_by"] = _by_the_shim(decision) or injected_by(decision.spec)
    s = decision.settings
    out["settings"] = {
        "config_file": config_file,
        "mode": s.runtime_mode,
        "host_root": s.host_root,
        "driver_root": s.host_driver_root or s.host_root,
        "dev_root": s.host_dev_root or s.host_root,
        "resolver": s.host_resolver,
        "cdi_spec_dirs": list(s.cdi_spec_dirs),
    }
    out["warnings"] = list(dict.fromkeys([*(warnings or ()), *decision.warnings]))
    if decision.policy is not None:
        out["policy"] = _policy(decision.policy)
    if decision.requests is not None:
        out["requests"] = _requests(decision.requests)
    out["requirements"] = [
        {"source": r.source, "expression": r.expression, "status": status}
        for r, status in decision.requirement_checks()
    ]
    if decision.mode is not None:
        out["mode"] = decision.mode
        out["mode_reason"] = decision.mode_reason
    out["cdi_names"] = list(decision.cdi_names)
    if decision.plan is not None:
        out["devices"] = _devices(decision.plan)
        files = decision.plan.driver_files
        if files is not None:
            out["missing_files"] = _lacking(decision, files)
    if decision.edits is not None:
        out["edits"] = _edits(decision.edits)
        from nvhook.planner import INJECTED_ENV

        if INJECTED_ENV in decision.edits.env:
            out["after_injection"] = (
                f"the container's env says {INJECTED_ENV}: a second injector (a legacy "
                "nvidia-container-runtime-hook, a nested runtime) adds nothing"
            )
        out["cuda_compat"] = _cuda_compat(decision)
        out["driver_params"] = _driver_params(decision)
    out["verdict"] = verdict(decision)
    if decision.error is not None:
        out["outcome"] = _failure(decision.error)
    elif decision.mode is None:
        out["outcome"] = {
            "result": "unchanged",
            "reason": _nothing_asked(decision.requests),
        }
    elif not decision.changes_config:
        out["outcome"] = {
            "result": "unchanged",
            "reason": "config.json already has these edits: the shim would leave it as it is",
        }
    else:
        out["outcome"] = {"result": "edit", "reason": "config.json would be edited"}
    return out


def _lacking(decision: Decision, files: DriverFiles) -> dict[str, list[str]]:
    """The driver files this host lacks: those not found that its GPUs, NVSwitches, IMEX
    channels and driver flavour call for (:meth:`DriverFiles.lacking`)."""
    from nvhook.devices.procfs import read_majors
    from nvhook.discover.nodes import imex_nodes, nvswitch_nodes
    from nvhook.errors import DriverError

    assert decision.plan is not None
    s = decision.settings
    dev_root = s.host_dev_root or s.host_root
    majors = read_majors(s.host_root)
    try:
        switches = nvswitch_nodes(dev_root=dev_root, majors=majors).device_nodes
        channels = imex_nodes(None, dev_root=dev_root, majors=majors).device_nodes
    except DriverError:
        switches = channels = ()
    lacking = files.lacking(
        models=tuple(g.model for g in decision.plan.gpus.gpus),
        nvswitch=any(not n.path.endswith("nvidia-nvswitchctl") for n in switches),
        imex_channels=bool(channels),
    )
    return {k: list(v) for k, v in lacking.items()}


def _nothing_asked(requests: Requests | None) -> str:
    from nvhook.requests.ids import Void

    if requests is not None and isinstance(requests.devices, Void) and requests.sources:
        return (
            "NVIDIA_VISIBLE_DEVICES=void: no device, or the devices were already injected "
            "(nvhook's jit mode and generated CDI specs leave void behind); the shim execs "
            "the runtime and leaves config.json untouched"
        )
    return (
        "nothing asks for a GPU or an IMEX channel: the shim execs the runtime "
        "and leaves config.json untouched"
    )


def _empty(bundle: str) -> dict[str, Any]:
    return {
        "bundle": bundle,
        "settings": None,
        "warnings": [],
        "policy": None,
        "requests": None,
        "mode": None,
        "mode_reason": None,
        "devices": [],
        "cdi_names": [],
        "requirements": [],
        "missing_files": {},
        "edits": None,
        "after_injection": None,
        "injected_by": None,
        "cuda_compat": None,
        "driver_params": None,
        "outcome": None,
        "verdict": None,
    }


def injected_by(spec: dict[str, Any]) -> dict[str, str] | None:
    """Which path GPU edits already in config.json came by (module docstring): ``{"path":
    "hook", ...}`` for Docker's prestart hook, ``{"path": "engine-cdi", ...}`` for an
    engine's CDI injection, each with a ``text`` for people; None when there are none."""
    hooks, linux = _table(spec, "hooks"), _table(spec, "linux")
    for stage in ("prestart", "createRuntime"):
        for hook in _entries(hooks, stage):
            args = hook.get("args") or [hook.get("path", "")]
            if isinstance(args, list) and args and os.path.basename(str(args[0])) == LEGACY_HOOK:
                return {
                    "path": "hook",
                    "text": f"Docker's --gpus, hook mode: dockerd added the {stage} hook "
                    f"{hook.get('path')} ({LEGACY_HOOK}); under nvhook-runtime the shim drops "
                    "it and injects itself, under plain runc that hook injects",
                }
    nodes = [str(d.get("path")) for d in _entries(linux, "devices") if _is_gpu_node(d.get("path"))]
    cdi_hooks = [
        str(h.get("path"))
        for h in _entries(hooks, "createContainer")
        if os.path.basename(str(h.get("path", ""))) in CDI_HOOKS
    ]
    if not nodes and not cdi_hooks:
        return None
    what = ", ".join([*nodes, *(f"hook {h}" for h in cdi_hooks)])
    return {
        "path": "engine-cdi",
        "text": f"the engine applied a CDI spec before the runtime ({what}): Docker's "
        "--device nvidia.com/gpu=N, or --gpus from Docker 29.2 with nvidia-cdi-hook on "
        "dockerd's PATH, or containerd's or podman's CDI",
    }


#: How much of the end of the shim's log is read to find the bundle's create.
LOG_TAIL = 1 << 20


def _by_the_shim(decision: Decision) -> dict[str, str] | None:
    """The shim's own edits, told by its log (they look like an engine's CDI edits in
    config.json: nvhook's spec and the shim make the same): the last ``create`` logged for
    the bundle's container id (the bundle directory's name, as Docker and containerd name
    it) that wrote config.json; read from the last :data:`LOG_TAIL` bytes of the log."""
    path = decision.settings.runtime_log_file
    if not path:
        return None
    cid = os.path.basename(decision.bundle.rstrip("/"))
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - LOG_TAIL))
            lines = f.read().splitlines()
    except OSError:
        return None
    import json

    for line in reversed(lines):
        if cid.encode() not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(record, dict)
            and record.get("id") == cid
            and record.get("command") == "create"
        ):
            if not record.get("written"):
                return None
            return {
                "path": "shim",
                "text": f"nvhook-runtime rewrote config.json at create (its log {path}, "
                f"{record.get('time')}: mode {record.get('mode')}, devices "
                f"{record.get('devices')})",
            }
    return None


def _table(spec: dict[str, Any], key: str) -> dict[str, Any]:
    found = spec.get(key)
    return found if isinstance(found, dict) else {}


def _entries(table: dict[str, Any], key: str) -> list[dict[str, Any]]:
    found = table.get(key)
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


def _is_gpu_node(path: object) -> bool:
    if not isinstance(path, str) or not path.startswith("/dev/"):
        return False
    name = path.removeprefix("/dev/")
    return name.startswith("nvidia") and (name[6:].isdigit() or name.startswith("nvidia-caps/"))


def _hook_option(decision: Decision, option: str) -> str | None:
    """The value of ``option`` in the injected hooks' arguments (None: not there)."""
    assert decision.edits is not None
    return next(
        (
            h.args[i + 1]
            for h in decision.edits.hooks
            for i, a in enumerate(h.args[:-1])
            if a == option
        ),
        None,
    )


def _driver_params(decision: Decision) -> str | None:
    """What the hook's ``--params`` will do in this container (None: not asked)."""
    host = _hook_option(decision, "--params")
    if host is None:
        return None
    return (
        f"the container's /proc/driver/nvidia/params reads ModifyDeviceFiles: 0 (a private "
        f"read-only copy of {host}), so its processes cannot make the driver create nodes "
        "for GPUs it was not given; skipped when the container's procfs has no driver file"
    )


def _cuda_compat(decision: Decision) -> str | None:
    """What the hook's ``--cuda-compat`` will do in this container (None: not asked)."""
    from nvhook.constants import ENV_DISABLE_CUDA_COMPAT
    from nvhook.hook.cuda_compat import Compat, compat_in, disabled_by
    from nvhook.rootfs.spec import container_env

    version = _hook_option(decision, "--cuda-compat")
    if version is None or decision.spec is None:
        return None
    env = container_env(decision.spec)
    if disabled_by(env):
        return f"off: the container sets {ENV_DISABLE_CUDA_COMPAT} (the host's libcuda is used)"
    root = decision.spec.get("root")
    path = root.get("path") if isinstance(root, dict) else None
    if not isinstance(path, str) or not path:
        return "decided by the hook at createContainer (config.json has no root.path)"
    rootfs = os.path.join(decision.bundle, path)
    try:
        found = compat_in(rootfs, env, version)
    except (OSError, Error) as e:
        return f"decided by the hook at createContainer (cannot look into {rootfs} now: {e})"
    if not isinstance(found, Compat):
        return f"not used: {found} (host driver {version})"
    cuda = f", CUDA {found.cuda_version}" if found.cuda_version else ""
    where = f"{found.folder}/{found.library}{cuda}"
    if found.used:
        return f"{where} comes first in the container's ld cache: {found.reason}"
    return f"{where} not used: {found.reason}"


def _failure(error: Error) -> dict[str, Any]:
    return {"result": "fail", "error": error.message, "exit_code": int(error.exit_code)}


def _policy(policy: Policy) -> dict[str, Any]:
    return {
        "accept_env_unprivileged": policy.accept_env_unprivileged,
        "accept_volume_mounts": policy.accept_volume_mounts,
        "annotation_prefixes": list(policy.annotation_prefixes),
        "privileged_gets_all": policy.privileged_gets_all,
        "default_capabilities": list(policy.default_capabilities),
    }


def _devices(plan: Plan) -> list[dict[str, Any]]:
    from nvhook.devices.gpus import Gpu

    out: list[dict[str, Any]] = []
    for device in plan.selected:
        if isinstance(device, Gpu):
            out.append(
                {"name": device.name, "uuid": device.uuid, "node": f"/dev/nvidia{device.minor}"}
            )
        else:
            parent = plan.gpus.gpus[device.gpu_index]
            out.append(
                {
                    "name": device.name,
                    "uuid": device.uuid,
                    "node": f"/dev/nvidia{parent.minor}",
                    "mig": {"gi": device.gi, "ci": device.ci},
                }
            )
    return out


def _requests(requests: Requests) -> dict[str, Any]:
    from nvhook.requests.ids import All

    imex = requests.imex_channels
    features = requests.features
    return {
        "privileged": requests.is_privileged,
        "devices": str(requests.devices),
        "sources": [
            {"kind": s.kind, "name": s.name, "value": s.value, "devices": str(s.devices)}
            for s in requests.sources
        ],
        "ignored": [
            {"kind": i.kind, "name": i.name, "value": i.value, "reason": i.reason}
            for i in requests.ignored
        ],
        "capabilities": list(requests.capabilities),
        "imex_channels": "all" if isinstance(imex, All) else list(imex),
        "features": [
            name for name in ("gds", "mofed", "gdrcopy", "nvswitch") if getattr(features, name)
        ],
        "warnings": list(requests.warnings),
    }


def _edits(edits: Edits) -> dict[str, Any]:
    return {
        "device_nodes": [n.to_dict() for n in edits.device_nodes],
        "mounts": [m.to_dict() for m in edits.mounts],
        "hooks": [h.to_dict() for h in edits.hooks],
        "env": list(edits.env),
        "additional_gids": list(edits.additional_gids),
        "net_devices": [d.to_dict() for d in edits.net_devices],
    }


def render_text(data: dict[str, Any]) -> str:
    """``data`` from :func:`explain` for a person."""
    lines: list[str] = [f"Verdict: {data['verdict']['text']}", f"Bundle: {data['bundle']}"]
    if data["injected_by"] is not None:
        lines.append(f"Injected by: {data['injected_by']['text']}")
    s = data["settings"]
    if s is not None:
        lines.append(
            f"Settings: {s['config_file']}: mode {s['mode']}, host root {s['host_root']}, "
            f"driver root {s['driver_root']}, dev root {s['dev_root']}, resolver {s['resolver']}"
        )
    lines.extend(f"Warning: {w}" for w in data["warnings"])
    policy = data["policy"]
    if policy is not None:
        lines.append("Policy: " + ", ".join(f"{k}={_show(v)}" for k, v in policy.items()))
    r = data["requests"]
    if r is not None:
        lines.append(f"Container: {'privileged' if r['privileged'] else 'unprivileged'}")
        lines.append(f"Asks for: devices {r['devices']}")
        for src in r["sources"]:
            value = f"={src['value']!r}" if src["value"] else ""
            lines.append(f"  from {src['kind']} {src['name']}{value}: {src['devices']}")
        if not r["sources"]:
            lines.append("  from nowhere: no variable, annotation or mount asks for a device")
        for ign in r["ignored"]:
            value = f"={ign['value']!r}" if ign["value"] else ""
            lines.append(f"  ignored {ign['kind']} {ign['name']}{value}: {ign['reason']}")
        if r["capabilities"]:
            lines.append(f"  capabilities: {', '.join(r['capabilities'])}")
        if r["imex_channels"]:
            channels = r["imex_channels"]
            shown = channels if isinstance(channels, str) else ", ".join(map(str, channels))
            lines.append(f"  IMEX channels: {shown}")
        if r["features"]:
            lines.append(f"  features: {', '.join(r['features'])}")
        for warning in r["warnings"]:
            lines.append(f"  warning: {warning}")
    for req in data["requirements"]:
        lines.append(f"Requirement {req['source']}={req['expression']!r}: {req['status']}")
    if data["mode"] is not None:
        lines.append(f"Mode: {data['mode']} ({data['mode_reason']})")
    if data["cdi_names"]:
        lines.append(f"CDI devices: {', '.join(data['cdi_names'])}")
    for d in data["devices"]:
        mig = f", MIG gi {d['mig']['gi']} ci {d['mig']['ci']}" if "mig" in d else ""
        uuid = f" ({d['uuid']})" if d["uuid"] else ""
        lines.append(f"Device {d['name']}{uuid}: {d['node']}{mig}")
    for cap, missing in data["missing_files"].items():
        lines.append(f"Missing for {cap}: {', '.join(missing)}")
    edits = data["edits"]
    if edits is not None:
        lines.append("Edits that would be applied:")
        lines.append(f"  device nodes ({len(edits['device_nodes'])}):")
        for n in edits["device_nodes"]:
            host = n.get("hostPath", n["path"])
            numbers = f"{n.get('type', '?')} {n.get('major', '?')}:{n.get('minor', '?')}"
            lines.append(f"    {n['path']}  {numbers}  (host {host})")
        lines.append(f"  mounts ({len(edits['mounts'])}):")
        for m in edits["mounts"]:
            options = ",".join(m.get("options", []))
            lines.append(f"    {m['containerPath']}  <- {m['hostPath']}  [{options}]")
        lines.append(f"  hooks ({len(edits['hooks'])}):")
        for h in edits["hooks"]:
            lines.append(f"    {h['hookName']}: {h['path']} {' '.join(h.get('args', [])[1:])}")
        lines.append(f"  env ({len(edits['env'])}):")
        lines.extend(f"    {e}" for e in edits["env"])
        if edits["additional_gids"]:
            lines.append(f"  additional GIDs: {', '.join(map(str, edits['additional_gids']))}")
        for d in edits["net_devices"]:
            lines.append(f"  network device {d['hostInterfaceName']} -> {d['name']}")
    if data["driver_params"]:
        lines.append(f"Device files: {data['driver_params']}")
    if data["after_injection"]:
        lines.append(f"After injection: {data['after_injection']}")
    if data["cuda_compat"]:
        lines.append(f"CUDA forward compatibility: {data['cuda_compat']}")
    outcome = data["outcome"]
    if outcome["result"] == "fail":
        lines.append(f"Result: would fail: {outcome['error']} (exit code {outcome['exit_code']})")
    else:
        lines.append(f"Result: {outcome['reason']}")
    return "\n".join(lines) + "\n"


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


# --- the verdict ------------------------------------------------------------------------------


def _verdict(
    text: str,
    *,
    runs_cuda: bool | None,
    gpus: list[dict[str, Any]] | None = None,
    cuda_version: str | None = None,
    libcuda: str | None = None,
    problems: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "text": text,
        "runs_cuda": runs_cuda,
        "gpus": gpus or [],
        "cuda_version": cuda_version,
        "libcuda": libcuda,
        "problems": problems or [],
    }


def _not_starting(error: Error) -> dict[str, Any]:
    return _verdict(f"will NOT start: {error.message}", runs_cuda=False, problems=[error.message])


class _HostState:
    """What the verdict needs beyond the decision: the CUDA version and the GPUs in MIG
    mode, from NVML (loaded from the driver root) when it loads, else the MIG mode from
    ``/proc`` (a GPU in MIG mode has ``capabilities/gpu<minor>/mig``) and no CUDA version."""

    def __init__(self, decision: Decision, plan: Plan) -> None:
        self.cuda_version: str | None = plan.facts.cuda_version if plan.facts else None
        self._mig_by_uuid: dict[str, bool] | None = None
        s = decision.settings
        self._root = s.host_root
        try:
            from nvhook.devices.nvml import open_nvml
            from nvhook.planner import nvml_library_dir

            with open_nvml(nvml_library_dir(s.host_driver_root or s.host_root)) as nvml:
                if not self.cuda_version:
                    self.cuda_version = nvml.driver().cuda_version or None
                self._mig_by_uuid = {g.uuid: g.mig_enabled for g in nvml.gpus()}
        except (Error, OSError):
            pass

    def mig_mode(self, uuid: str, minor: int) -> bool:
        if self._mig_by_uuid is not None and uuid in self._mig_by_uuid:
            return self._mig_by_uuid[uuid]
        caps = os.path.join(self._root, "proc/driver/nvidia/capabilities", f"gpu{minor}", "mig")
        return os.path.isdir(caps)


def _libcuda(plan: Plan) -> tuple[bool, str | None]:
    """Whether compute was asked for, and the version of the host's ``libcuda`` (None:
    not found, or compute not asked)."""
    files = plan.driver_files
    if files is None:
        return False, None
    try:
        compute = files.capability("compute")
    except KeyError:
        return False, None
    for path in compute.libraries:
        name = os.path.basename(path)
        if name.startswith("libcuda.so."):
            version = name[len("libcuda.so.") :]
            return True, version if version.count(".") >= 1 else files.driver_version
    return True, None


def verdict(decision: Decision) -> dict[str, Any]:
    """The one-line answer to "will my container see the GPU", as data: ``text``, ``runs_cuda``
    (None: compute was not asked for), ``gpus`` (each ``host`` name, ``uuid`` and its
    ``inside`` index, in the order CUDA numbers them), ``cuda_version``, ``libcuda`` (its
    version; None: not on the host) and ``problems`` (why CUDA will not use a device, or
    not run at all)."""
    if decision.error is not None:
        return _not_starting(decision.error)
    if decision.mode is None:
        return _verdict(
            f"will see no GPU: {_nothing_asked(decision.requests).partition(':')[0]}",
            runs_cuda=None,
        )
    if decision.mode == "jit" and decision.plan is None and decision.requests is not None:
        from nvhook.requests.vendors import split_vendor_names

        others = ", ".join(split_vendor_names(decision.requests)[1])
        return _verdict(f"will get {others} (from the host, no NVIDIA GPU)", runs_cuda=None)
    if decision.mode == "cdi" or decision.plan is None:
        names = ", ".join(decision.cdi_names)
        return _verdict(f"will get the CDI devices {names} (as their spec says)", runs_cuda=None)
    from nvhook.devices.gpus import Gpu, Mig

    plan = decision.plan
    compute, libcuda = _libcuda(plan)
    state = _HostState(decision, plan)
    problems: list[str] = []
    selected_migs = {d.name for d in plan.selected if isinstance(d, Mig)}
    seen: list[tuple[int, int, Gpu | Mig]] = []  # (parent index, MIG index or -1, device)
    for device in plan.selected:
        if isinstance(device, Mig):
            seen.append((device.gpu_index, device.index, device))
            continue
        if not state.mig_mode(device.uuid, device.minor):
            seen.append((device.index, -1, device))
            continue
        if any(m.name in selected_migs for m in device.migs):
            continue  # its MIG devices are what CUDA sees (as with "all")
        if not device.migs:
            problems.append(
                f"GPU {device.index} is in MIG mode and has no MIG devices; ask for a MIG "
                "device or another GPU"
            )
        else:
            names = ", ".join(m.name for m in device.migs)
            problems.append(
                f"GPU {device.index} is in MIG mode: CUDA sees only its MIG devices "
                f"({names}); ask for one of them"
            )
    seen.sort(key=lambda t: (t[0], t[1]))
    gpus = [{"host": d.name, "uuid": d.uuid, "inside": i} for i, (_, _, d) in enumerate(seen)]
    if compute and libcuda is None:
        root = plan.driver_files.driver_root if plan.driver_files else "/"
        problems.append(
            f"the host has no libcuda.so.1 (looked under {root}): install the driver's CUDA "
            "library (libcuda, in the driver's utils or compute package) or set host.driver_root"
        )
    hosts = _and([d.name for _, _, d in seen])
    insides = _and([str(i) for i in range(len(seen))])
    count = f"{len(gpus)} GPU{'' if len(gpus) == 1 else 's'}"
    where = f" (host {hosts} as {insides})" if gpus else ""
    facts = [f for f in (f"CUDA {state.cuda_version}" if state.cuda_version else "",) if f]
    if not compute:
        caps = ", ".join(plan.requests.capabilities) or "none"
        text = f"will see {count}{where}, no CUDA (capabilities: {caps})"
        return _verdict(text, runs_cuda=None, gpus=gpus, cuda_version=state.cuda_version)
    if libcuda is not None:
        facts.append(f"libcuda {libcuda}")
    if problems and (not gpus or libcuda is None):
        text = f"will NOT run CUDA: {'; '.join(problems)}"
        runs = False
    elif not gpus:
        text = "will see no GPU: the request selects none"
        runs = False
    else:
        text = ", ".join([f"will see {count}{where}", *facts])
        if problems:
            text += f"; but {'; '.join(problems)}"
        runs = True
    return _verdict(
        text,
        runs_cuda=runs,
        gpus=gpus,
        cuda_version=state.cuda_version,
        libcuda=libcuda,
        problems=problems,
    )


def _and(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"
