"""``nvhook cdi generate --vendor amd|intel|ascend|auto``: other vendors' CDI specs.

One spec per vendor, of the kind and device names that vendor's own generator writes
(:mod:`nvhook.vendors.amd`, :mod:`~nvhook.vendors.intel`, :mod:`~nvhook.vendors.ascend`
cite them): ``amd.com/gpu`` ``0``…``N-1`` and ``all`` (``amd-ctk cdi generate``),
``intel.com/gpu`` named by Intel's resource-driver UIDs, ``huawei.com/npu`` by davinci
number, each with ``all``. Each device holds its own nodes (and, Intel's, the hook making
its ``by-path`` links); the spec's own edits hold what every device of it needs
(``/dev/kfd``; Ascend's manager nodes and driver trees), so a container asking for any of
them gets the same edits as jit mode gives it (:mod:`nvhook.vendors.registry`,
docs/architecture.md D1). Nodes restricted to a group put it in ``additionalGids``
(``cdiVersion`` 0.7.0 then, else the lowest the content allows, D10).

``auto`` writes a spec for every vendor present, each to ``<dir>/<vendor>.json`` (``dir``:
``/var/run/cdi``, or the ``--output`` directory).
"""

from __future__ import annotations

import os
import sys

from nvhook.errors import UnknownDeviceError
from nvhook.vendors.model import Host, Vendor
from nvhook.vendors.registry import VENDORS, by_name, device_edits, shared_edits
from oci.cdi.edits import Edits
from oci.cdi.spec import Device, Spec

__all__ = ["OTHER_VENDORS", "default_path", "vendor_spec", "write_vendor_specs"]

#: The ``--vendor`` values that mean another vendor's spec (not NVIDIA's vendor part).
OTHER_VENDORS = (*(v.name for v in VENDORS), "auto")
DEFAULT_DIR = "/var/run/cdi"


def default_path(vendor: str, fmt: str, directory: str = DEFAULT_DIR) -> str:
    return os.path.join(directory, f"{vendor}.{fmt}")


def vendor_spec(vendor: Vendor, host: Host, *, hook_path: str) -> Spec | None:
    """``vendor``'s spec for ``host``; None when the host has none of its devices."""
    found = vendor.discover(host)
    if not found:
        return None
    devices = []
    every = Edits()
    links: list[tuple[str, str]] = []
    for d in found:
        devices.append(Device(d.name, device_edits(host, d, hook_path=hook_path)))
        every += device_edits(host, d, hook_path=hook_path, links=False)
        links += d.links
    if links:
        from nvhook.discover.hooks import create_container_hook

        every = every._replace(
            hooks=(create_container_hook(device_links=links, hook_path=hook_path),)
        )
    every = every._replace(
        device_nodes=tuple(dict.fromkeys(every.device_nodes)),
        additional_gids=tuple(sorted(set(every.additional_gids))),
    )
    devices.append(Device("all", every))
    return Spec.create(vendor.kind, devices, edits=shared_edits(host, vendor))


def write_vendor_specs(
    which: str, host: Host, *, output: str | None, fmt: str, hook_path: str
) -> list[str]:
    """Write the spec of vendor ``which`` (or of each present, ``auto``); the summary lines.

    ``output``: a file (``-``: stdout) for one vendor, a directory for ``auto``; None: the
    default. A vendor asked for by name that the host lacks is an
    :class:`UnknownDeviceError`; ``auto`` on a host with none writes nothing and says so."""
    from oci.cdi.version import minimum_version
    from oci.cdi.write import Format, dump_spec, write_spec

    form: Format = "json" if fmt == "json" else "yaml"
    vendors = list(VENDORS) if which == "auto" else [by_name(which)]
    lines: list[str] = []
    for vendor in vendors:
        spec = vendor_spec(vendor, host, hook_path=hook_path)
        if spec is None:
            if which != "auto":
                raise UnknownDeviceError(
                    f"no {vendor.name} device on this host (under {host.root}): nothing to "
                    f"write for {vendor.kind}; is its driver loaded?"
                )
            continue
        if output == "-":
            sys.stdout.buffer.write(dump_spec(spec, format=form))
            sys.stdout.flush()
            continue
        if which == "auto":
            path = default_path(vendor.name, fmt, output or DEFAULT_DIR)
        else:
            path = output or default_path(vendor.name, fmt)
        write_spec(path, spec, format=form)
        count = len(spec.devices) - 1
        lines.append(
            f"wrote {path}: {count} {vendor.name} device(s) of {vendor.kind} and all, "
            f"cdiVersion {minimum_version(spec)}"
        )
    if which == "auto" and not lines and output != "-":
        lines.append("no AMD, Intel or Ascend device on this host: no spec written")
    return lines
