"""``nvhook explain``: what the shim would do to a bundle, and why, without doing it.

The answer to "why doesn't my container see the GPU". :func:`explain` walks the
shim's create path (:func:`nvhook.create.prepare`) with the same settings, stage
by stage, and records what each stage decided instead of writing config.json:

1. the bundle's config.json, loaded as the shim loads it;
2. the policy (from the settings) and what the container asks for, from where
   (env, annotation, device-list mount, legacy image, policy) and what was found
   but ignored, with the reason;
3. the mode (``runtime.mode``; ``auto`` picks ``cdi`` when every device is a
   qualified CDI name);
4. in jit mode the devices the request resolves to, the requirement checks and
   the driver files not found; in cdi mode the CDI names resolved;
5. the edits that would be applied, grouped by kind (device nodes, mounts, hooks,
   env, additional GIDs, network devices), applied in memory to see whether
   config.json would change (and to meet any error applying them would raise).

A stage that fails ends the walk: the error becomes ``outcome.error`` with its exit
code, exactly as the shim would fail. Nothing is written anywhere (the bundle is
only read). :func:`explain` returns plain data; :func:`render_text` makes it text.
"""

from __future__ import annotations

import os
from typing import Any

from nvhook.errors import ConfigError, NvhookError
from oci.errors import OciError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.requests.parse import Requests
    from oci.cdi.edits import Edits

__all__ = ["explain", "render_text"]


def explain(
    bundle: str,
    *,
    config_path: str | None = None,
    root: str | None = None,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the shim would do with ``bundle``, with the shim's settings.

    The settings are :func:`nvhook.settings.load_settings` of ``config_path`` (None:
    ``$NVHOOK_CONFIG``, else ``/etc/nvhook/config.toml``), or ``settings`` when given;
    ``root`` replaces ``host.root``. An invalid configuration is an answer too: the
    shim would fail on it.
    """
    from nvhook.settings import config_path as default_config_path
    from nvhook.settings import load_settings

    path = config_path if config_path is not None else default_config_path()[0]
    shown = path if settings is not None or os.path.exists(path) else f"{path} (absent: defaults)"
    out: dict[str, Any] = {
        "bundle": os.path.abspath(bundle),
        "settings": None,
        "policy": None,
        "requests": None,
        "mode": None,
        "mode_reason": None,
        "devices": [],
        "cdi_names": [],
        "requirements": [],
        "missing_files": {},
        "edits": None,
        "outcome": None,
    }
    try:
        if settings is None:
            if config_path is not None and not os.path.exists(config_path):
                raise ConfigError(f"{config_path}: configuration file not found")
            settings = load_settings(config_path)
        settings = dict(settings)
        if root is not None:
            settings["host.root"] = root
        out["settings"] = {
            "config_file": shown,
            "mode": settings["runtime.mode"],
            "host_root": settings["host.root"],
            "driver_root": settings["host.driver_root"] or settings["host.root"],
            "dev_root": settings["host.dev_root"] or settings["host.root"],
            "resolver": settings["host.resolver"],
            "cdi_spec_dirs": list(settings["cdi.spec_dirs"]),
        }
        _walk(out["bundle"], settings, out)
    except (NvhookError, OciError) as e:
        out["outcome"] = {"result": "fail", "error": e.message, "exit_code": int(e.exit_code)}
    return out


def _walk(bundle: str, settings: dict[str, Any], out: dict[str, Any]) -> None:
    from nvhook.requests.parse import parse_requests
    from nvhook.requests.policy import Policy
    from oci.bundle import Bundle

    policy = Policy.from_settings(settings)
    out["policy"] = {
        "accept_env_unprivileged": policy.accept_env_unprivileged,
        "accept_volume_mounts": policy.accept_volume_mounts,
        "annotation_prefixes": list(policy.annotation_prefixes),
        "privileged_gets_all": policy.privileged_gets_all,
        "default_capabilities": list(policy.default_capabilities),
    }
    spec = Bundle(bundle).load()
    requests = parse_requests(spec, policy)
    out["requests"] = _requests(requests)
    if not requests.wants_anything:
        out["outcome"] = {
            "result": "unchanged",
            "reason": "nothing asks for a GPU or an IMEX channel: the shim execs the runtime "
            "and leaves config.json untouched",
        }
        return
    from nvhook.create import choose_mode

    mode = choose_mode(settings["runtime.mode"], requests)
    out["mode"] = mode
    out["mode_reason"] = _mode_reason(settings["runtime.mode"], mode)
    if mode == "cdi":
        from nvhook.create import cdi_names
        from oci.cdi.registry import Registry

        out["requirements"] = [
            {
                "source": r.source,
                "expression": r.expression,
                "status": "not checked: mode cdi does not check requirements",
            }
            for r in requests.requirements
        ]
        names = cdi_names(requests, settings["cdi.default_kind"])
        out["cdi_names"] = names
        edits = Registry(settings["cdi.spec_dirs"]).resolve(names)
    else:
        edits = _jit(requests, settings, out)
    out["edits"] = _edits(edits)
    from oci.cdi.apply import apply

    if apply(edits, spec) == spec:  # applied in memory only: what the shim would write
        out["outcome"] = {
            "result": "unchanged",
            "reason": "config.json already has these edits: the shim would leave it as it is",
        }
    else:
        out["outcome"] = {"result": "edit", "reason": "config.json would be edited"}


def _jit(requests: Requests, settings: dict[str, Any], out: dict[str, Any]) -> Edits:
    from nvhook.devices.gpus import Gpu
    from nvhook.edits import Host, plan
    from nvhook.errors import RequirementError

    if requests.requirements:
        out["requirements"] = [
            {"source": r.source, "expression": r.expression, "status": "not checked yet"}
            for r in requests.requirements
        ]
    try:
        result = plan(requests, Host.from_settings(settings))
    except RequirementError as e:
        for item in out["requirements"]:
            unmet = e.message.startswith(f"{item['source']} is not met")
            item["status"] = "NOT MET" if unmet else "not checked (another is not met)"
        raise
    for device in result.selected:
        if isinstance(device, Gpu):
            out["devices"].append(
                {"name": device.name, "uuid": device.uuid, "node": f"/dev/nvidia{device.minor}"}
            )
        else:
            parent = result.gpus.gpus[device.gpu_index]
            out["devices"].append(
                {
                    "name": device.name,
                    "uuid": device.uuid,
                    "node": f"/dev/nvidia{parent.minor}",
                    "mig": {"gi": device.gi, "ci": device.ci},
                }
            )
    if requests.requirements:
        if requests.disable_require:
            status = "not checked: NVIDIA_DISABLE_REQUIRE is set"
        elif result.facts is not None:
            status = f"met (CUDA {result.facts.cuda_version}, driver {result.facts.driver_version})"
        else:  # pragma: no cover - plan checks whenever there are requirements
            status = "not checked"
        for item in out["requirements"]:
            item["status"] = status
    if result.driver_files is not None:
        out["missing_files"] = {k: list(v) for k, v in result.driver_files.missing.items()}
    return result.edits


def _mode_reason(configured: str, mode: str) -> str:
    if configured != "auto":
        return f"runtime.mode is {configured}"
    if mode == "cdi":
        return "runtime.mode is auto and every requested device is a qualified CDI name"
    return "runtime.mode is auto and a requested device is not a qualified CDI name"


def _requests(requests: Requests) -> dict[str, Any]:
    from nvhook.requests.parse import All

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
