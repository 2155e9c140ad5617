"""Doctor checks of the CDI specs: present, valid, and still matching the host."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvhook.settings import Settings
from nvhook.tools.doctor.base import Check, Options, Status, root_flag, shell_quote, under


def check_cdi(opts: Options, settings: Settings | None) -> list[Check]:
    from nvhook.settings import defaults
    from oci.cdi.registry import Registry
    from oci.cdi.validate import validate_file

    values = settings if settings is not None else defaults()
    host_dirs = list(values.cdi_spec_dirs)
    kind = values.cdi_default_kind
    mode = values.runtime_mode
    dirs = [under(opts.root, d) for d in host_dirs]
    target = os.path.join(dirs[-1] if dirs else under(opts.root, "/var/run/cdi"), "nvidia.json")
    generate = "nvhook cdi generate" + root_flag(opts)
    if target != "/var/run/cdi/nvidia.json":
        generate += f" --output {shell_quote(target)}"
    out: list[Check] = []
    registry = Registry(dirs, untrusted=values.cdi_untrusted_specs)
    for path, line in registry.untrusted.items():  # its hooks would run as root
        status: Status = "fail" if values.cdi_untrusted_specs == "refuse" else "warn"
        fix = f"chown root {shell_quote(path)} && chmod go-w {shell_quote(path)}"
        out.append(Check("cdi", status, f"untrusted CDI spec: {line}", fix))
    problems = {
        path: list(messages)
        for path, messages in registry.errors.items()
        if path not in registry.untrusted
    }
    for spec in registry.specs:  # the schema too, as `nvhook cdi validate` checks
        errors = [str(p) for p in validate_file(spec.source) if p.is_error]
        problems.setdefault(spec.source, []).extend(errors)
    for path, messages in problems.items():
        if not messages:
            continue
        if os.path.basename(path).startswith("nvidia") and os.path.isfile(path):
            fix = f"nvhook cdi generate{root_flag(opts)} --output {shell_quote(path)}"
        else:
            fix = f"mv {shell_quote(path)} {shell_quote(path + '.invalid')}"
        out.append(Check("cdi", "fail", f"invalid CDI spec: {messages[0]}", fix))
    devices = [n for n in registry.devices if n.startswith(kind + "=")]
    if not devices:
        # without the driver there is nothing to generate from (the driver check says so)
        loaded = os.path.exists(under(opts.root, "/proc/driver/nvidia/version"))
        status = "fail" if loaded or mode == "cdi" else "warn"
        out.append(
            Check(
                "cdi",
                status,
                f"no CDI spec in {', '.join(dirs)} defines {kind} devices: CDI requests "
                "(podman --device, cdi.k8s.io/ annotations, runtime.mode cdi) find no GPU",
                generate,
            )
        )
    invalid = [p for p, m in problems.items() if m]
    out += cdi_freshness(opts, dirs, invalid=invalid, untrusted=values.cdi_untrusted_specs)
    if devices and not out:
        files = sorted({registry.devices[n].path for n in devices})
        out.append(
            Check("cdi", "ok", f"{len(devices)} {kind} devices in {', '.join(files)}, up to date")
        )
    return out


def cdi_freshness(
    opts: Options, spec_dirs: list[str], invalid: Iterable[str] = (), untrusted: str = "refuse"
) -> list[Check]:
    """Specs that no longer match the host (``nvhook cdi check``, under ``untrusted``, the
    setting ``cdi.untrusted_specs``): one finding per file and fix, the first entry named;
    ``invalid`` and untrusted files are reported by :func:`check_cdi` already."""
    from nvhook.tools.cdicheck import check_specs

    by_fix: dict[tuple[str, str], list[str]] = {}
    for finding in check_specs(spec_dirs, root=opts.root, untrusted=untrusted):
        if finding.file not in invalid and finding.kind != "untrusted":
            by_fix.setdefault((finding.file, finding.fix), []).append(finding.line)
    out = []
    for (_file, fix), lines in by_fix.items():
        more = f" (and {len(lines) - 1} more: `nvhook cdi check`)" if len(lines) > 1 else ""
        out.append(
            Check("cdi", "fail", f"stale CDI spec: {lines[0]}{more}", fix.removeprefix("run: "))
        )
    return out
