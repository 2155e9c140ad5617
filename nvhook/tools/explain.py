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

A stage that fails ends the decision: its error becomes ``outcome.error`` with its
exit code, exactly as the shim would fail. :func:`explain` returns plain data (what
``--json`` prints); :func:`render_text` makes it text.
"""

from __future__ import annotations

import os
from typing import Any

from nvhook.errors import ConfigError
from oci.errors import Error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.create import Decision
    from nvhook.planner import Plan
    from nvhook.requests.ids import Requests
    from nvhook.requests.policy import Policy
    from nvhook.settings import Settings
    from oci.cdi.edits import Edits

__all__ = ["describe", "explain", "render_text"]


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
        return out
    return describe(decide(target, settings), config_file=shown, warnings=warnings)


def describe(
    decision: Decision, *, config_file: str = "", warnings: list[str] | None = None
) -> dict[str, Any]:
    """``decision`` as plain data (``config_file``: how to name the settings' source;
    ``warnings``: more to report, from loading the settings)."""
    out = _empty(decision.bundle)
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
            out["missing_files"] = {k: list(v) for k, v in files.missing.items()}
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
        "cuda_compat": None,
        "driver_params": None,
        "outcome": None,
    }


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
    lines: list[str] = [f"Bundle: {data['bundle']}"]
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
        lines.append(f"Not found for {cap}: {', '.join(missing)}")
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
