"""Writing CDI specs: deterministic bytes, the lowest ``cdiVersion`` that fits, atomic files.

:func:`dump_spec` normalizes a spec (a :class:`~oci.cdi.spec.Spec` or a CDI
dict) before it serializes it (docs/architecture.md D10):

- exact duplicate entries are dropped, the first kept (env entries, device
  nodes, mounts, hooks, additional GIDs, net devices; whole devices too);
  entries that differ keep their order, since the order of env and mounts
  carries meaning;
- devices keep the producer's order (a producer makes its order deterministic,
  e.g. by index); annotation keys are sorted;
- keys come in the CDI field order (``specs-go/config.go``): ``cdiVersion``,
  ``kind``, ``annotations``, ``devices`` (``name``, ``annotations``,
  ``containerEdits``), ``containerEdits``; empty fields are left out;
- ``cdiVersion`` is the lowest version whose features the content uses
  (:func:`oci.cdi.version.minimum_version`), whatever the input declares, so
  older engines accept the file (podman 4.3 reads at most 0.5.0);
- the result is validated with the same rules as a loaded spec
  (:class:`CdiSpecError` otherwise).

:func:`write_spec` writes those bytes atomically: a temporary file in the same
directory, fsync, mode 0644 whatever the umask, rename over the target, fsync of
the directory. A reader sees the old spec or the new one, never a part.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from oci.cdi.edits import DeviceNode, Edits, Hook, IntelRdt, Mount, NetDevice
from oci.cdi.parse import check_spec
from oci.cdi.spec import Spec
from oci.cdi.version import minimum_version
from oci.errors import CdiSpecError, CdiWriteError
from oci.jsoncodec import dumps_canonical, dumps_indented

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal

    Format = Literal["json", "yaml"]
else:
    Format = str  # no typing at run time (bench/figures.py): nvhook cdi generate has a budget

__all__ = ["Format", "dump_spec", "spec_to_dict", "write_spec"]

SPEC_MODE = 0o644


def _node_to_dict(node: DeviceNode) -> dict[str, Any]:
    return node.to_dict()  # path, hostPath, type, major, minor, fileMode, permissions, uid, gid


def _mount_to_dict(mount: Mount) -> dict[str, Any]:
    out: dict[str, Any] = {"hostPath": mount.host_path, "containerPath": mount.container_path}
    if mount.options:
        out["options"] = list(mount.options)
    if mount.type:
        out["type"] = mount.type
    return out


def _hook_to_dict(hook: Hook) -> dict[str, Any]:
    return hook.to_dict()  # hookName, path, args, env, timeout


def _net_device_to_dict(dev: NetDevice) -> dict[str, Any]:
    return dev.to_dict()  # hostInterfaceName, name


def _intel_rdt_to_dict(rdt: IntelRdt) -> dict[str, Any]:
    return rdt.to_dict()  # closID, l3CacheSchema, memBwSchema, schemata, enableMonitoring


def _edits_to_dict(edits: Edits) -> dict[str, Any]:
    """``containerEdits`` in the reference's field order, empty fields omitted."""
    out: dict[str, Any] = {}
    if edits.env:
        out["env"] = list(edits.env)
    if edits.device_nodes:
        out["deviceNodes"] = [_node_to_dict(n) for n in edits.device_nodes]
    if edits.net_devices:
        out["netDevices"] = [_net_device_to_dict(d) for d in edits.net_devices]
    if edits.hooks:
        out["hooks"] = [_hook_to_dict(h) for h in edits.hooks]
    if edits.mounts:
        out["mounts"] = [_mount_to_dict(m) for m in edits.mounts]
    if edits.intel_rdt is not None:
        out["intelRdt"] = _intel_rdt_to_dict(edits.intel_rdt)
    if edits.additional_gids:
        out["additionalGids"] = list(edits.additional_gids)
    return out


def spec_to_dict(spec: Spec, *, version: str | None = None) -> dict[str, Any]:
    """The CDI JSON object of ``spec`` in canonical key order (``version`` overrides its own)."""
    out: dict[str, Any] = {"cdiVersion": version or spec.version, "kind": spec.kind}
    if spec.annotations:
        out["annotations"] = dict(sorted(spec.annotations.items()))
    devices = []
    for device in spec.devices:
        d: dict[str, Any] = {"name": device.name}
        if device.annotations:
            d["annotations"] = dict(sorted(device.annotations.items()))
        d["containerEdits"] = _edits_to_dict(device.edits)
        devices.append(d)
    out["devices"] = devices
    edits = _edits_to_dict(spec.edits)
    if edits:
        out["containerEdits"] = edits
    return out


def _canonical(value: object) -> str:
    try:
        return dumps_canonical(value)
    except (TypeError, ValueError):  # keys of mixed types: the checker reports them
        return repr(value)


def _unique(items: Iterable[Any]) -> list[Any]:
    """Items without exact repeats, first occurrence kept, order otherwise unchanged."""
    seen: set[str] = set()
    out = []
    for item in items:
        key = _canonical(item)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


_LIST_FIELDS = ("env", "deviceNodes", "netDevices", "hooks", "mounts", "additionalGids")


def _dedupe_edits(edits: object) -> object:
    if not isinstance(edits, Mapping):
        return edits  # left for the checker to report
    out = dict(edits)
    for key in _LIST_FIELDS:
        if isinstance(out.get(key), list | tuple):
            out[key] = _unique(out[key])
    return out


def _dedupe(data: Mapping[str, Any]) -> dict[str, Any]:
    """Drop exact duplicate edits entries and devices from a raw CDI dict."""
    out = dict(data)
    if "containerEdits" in out:
        out["containerEdits"] = _dedupe_edits(out["containerEdits"])
    devices = out.get("devices")
    if isinstance(devices, list | tuple):
        cleaned = []
        for device in devices:
            if isinstance(device, Mapping) and "containerEdits" in device:
                device = {**device, "containerEdits": _dedupe_edits(device["containerEdits"])}
            cleaned.append(device)
        out["devices"] = _unique(cleaned)
    return out


def _normalized(spec_or_dict: Spec | Mapping[str, Any]) -> tuple[Spec, str]:
    """Validate and normalize; return the spec (declaring its minimum version) and that version."""
    if isinstance(spec_or_dict, Spec):
        raw = spec_to_dict(spec_or_dict)
        source = spec_or_dict.source
    elif isinstance(spec_or_dict, Mapping):
        raw = dict(spec_or_dict)
        source = "<spec>"
    else:
        raise TypeError(f"dump_spec needs a Spec or a mapping, not {type(spec_or_dict).__name__}")
    raw.pop("cdiVersion", None)
    checked = check_spec(_dedupe(raw), source=source, check_version=False)
    if checked.spec is None:
        first = checked.errors[0]
        where = f"{first.path}: " if first.path else ""
        more = f" (and {len(checked.errors) - 1} more)" if len(checked.errors) > 1 else ""
        raise CdiSpecError(f"{source}: {where}{first.message}{more}")
    version = minimum_version(checked.spec)
    return checked.spec, version


def dump_spec(spec_or_dict: Spec | Mapping[str, Any], *, format: Format = "json") -> bytes:
    """Deterministic bytes of a spec: normalized, validated, at its lowest ``cdiVersion``.

    JSON is indented by two spaces with a final newline; YAML is PyYAML's
    ``safe_dump`` in the same key order.
    """
    spec, version = _normalized(spec_or_dict)
    data = spec_to_dict(spec, version=version)
    if format == "json":
        return (dumps_indented(data) + "\n").encode("utf-8")
    if format == "yaml":
        import yaml

        text = yaml.safe_dump(
            data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1 << 16
        )
        return text.encode("utf-8")
    raise ValueError(f"unknown spec format {format!r} (json or yaml)")


def _format_for(path: str) -> Format:
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".json":
        return "json"
    if suffix in (".yaml", ".yml"):
        return "yaml"
    raise CdiWriteError(
        f"{path}: cannot tell the spec format from the extension (use .json, .yaml or .yml)"
    )


def write_spec(
    path: str | os.PathLike[str],
    spec: Spec | Mapping[str, Any],
    *,
    format: Format | None = None,
) -> None:
    """Write ``spec`` to ``path`` atomically with mode 0644 (format from the extension by default).

    The parent directory is created when missing. Failures raise
    :class:`CdiWriteError` (or :class:`CdiSpecError` for an invalid spec) and
    leave any existing file untouched.
    """
    target = os.fspath(path)
    data = dump_spec(spec, format=format or _format_for(target))
    directory = os.path.dirname(target) or "."
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    except OSError as e:
        raise CdiWriteError(f"{directory}: cannot create directory: {e.strerror or e}") from e
    name = os.path.basename(target)
    try:
        fd, tmp = _create_temporary(directory, name)
    except OSError as e:
        raise CdiWriteError(f"{target}: cannot create a temporary file: {e.strerror or e}") from e
    try:
        try:
            os.fchmod(fd, SPEC_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as e:
        try:  # noqa: SIM105 - not contextlib.suppress: its import costs generate ~1 ms
            os.unlink(tmp)
        except OSError:
            pass
        raise CdiWriteError(f"{target}: cannot write: {e.strerror or e}") from e
    _fsync_directory(directory)


def _create_temporary(directory: str, name: str) -> tuple[int, str]:
    """A new file ``.<name>.<random>.tmp`` in ``directory``, open, mode 0600: what
    ``tempfile.mkstemp`` makes, without importing ``tempfile`` (``shutil``, ``random``: ~3 ms).
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        path = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"{directory}: no unused temporary name in 100 tries")


def _fsync_directory(directory: str) -> None:
    """Make the rename durable; some filesystems refuse a directory fsync, which is fine."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
