"""``nvhook cdi check``: is every CDI spec on this host still true to the host?

:func:`check_specs` reads every spec file of the spec directories (ours and other
vendors') and compares it with the host (:func:`oci.cdi.hostcheck.check_edits`):
each bind mount's host file exists and is the kind of file its name says, each
device node exists with the spec's type, major and minor, each hook path is an
executable. A file that does not parse is a finding too. It returns one
:class:`Finding` per problem, each with the line that fixes it; ``nvhook doctor``
calls it as ``nvhook cdi check`` does.

**Untrusted spec files.** The files are listed and judged as the registry lists and
judges them (:func:`oci.cdi.registry.judged_spec_files`, :mod:`oci.cdi.trust`), and a
file the runtime would not trust (another owner, writable by group or others, a
symbolic link, or in a directory that is) is a finding of kind ``untrusted``: the
trust module's line, with the words the registry adds. With ``untrusted="refuse"``
(``cdi.untrusted_specs``' default) it is an error and the file is not read further, as
the runtime would not read it; with ``"warn"`` it is a warning and the spec is checked
like any other.

**The driver version a spec was generated for.** A spec ``nvhook cdi generate``
wrote is recognised by its hooks (``args[0]`` is ``nvhook-hook``). The version is
not written into it as a field: spec-level ``annotations`` would raise its
``cdiVersion`` to 0.6.0, which podman 4.3 and containerd before 1.7.12 refuse, and
a generated spec stays at the lowest version its content needs (0.5.0). The spec
records the version anyway, in the names of the driver libraries it mounts: every
driver library is installed as ``<stem>.<driver version>``
(``libnvidia-ml.so.550.54.15``). :func:`recorded_driver_version` reads it from the
first of :data:`nvhook.discover.catalog.VERSION_ANCHORS` the spec mounts (NVML
first, then ``libcuda``…), else from the GSP firmware directory
(``/lib/firmware/nvidia/<version>/``). When it differs from the loaded driver's
(``<root>/proc/driver/nvidia/version``), that is a finding of its own, and each
missing file that carries the old version says which driver replaced it.

**Paths and ``root``.** A spec's paths are host paths, as the runtime opens them.
With ``root`` other than ``/`` (a node's root mounted into a pod at ``/host``), they
are looked up under ``root``, except in a spec written for that root: one whose
mounts or device nodes already lie under it, as ``nvhook cdi generate --root R``
writes them for a mock machine (its hook, the real launcher, is outside ``R``).
Such a spec's paths are right as they are.
"""

from __future__ import annotations

import os

from nvhook.cdihints import generated_by_nvhook, regenerate_command, under_root
from nvhook.discover.catalog import FIRMWARE_DIR, VERSION_ANCHORS
from nvhook.discover.hooks import HOOK_PROGRAM
from oci._frozen import Frozen
from oci.cdi.hostcheck import HostProblem, check_edits
from oci.cdi.parse import load_spec, parse_spec
from oci.cdi.registry import DEFAULT_SPEC_DIRS, judged_spec_files, read_checked, untrusted_line
from oci.cdi.spec import Spec
from oci.cdi.trust import MODES, REFUSE, fix_of
from oci.errors import CdiError, CdiTrustError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from oci.cdi.edits import Edits

__all__ = [
    "Finding",
    "check_specs",
    "generated_by_nvhook",
    "loaded_driver_version",
    "recorded_driver_version",
    "regenerate_command",
    "spec_files",
    "under_root",
]


class Finding(Frozen):
    """One way a CDI spec file and the host disagree.

    ``device`` is the qualified name of the device whose edits are at fault, None for
    the spec's own edits (``field`` ``containerEdits``) or for the whole file (``field``
    empty: the driver version, a file that does not parse). ``what`` names the entry
    (``mount /usr/lib/…/libcuda.so.550.54.15``), ``message`` the problem, ``fix`` the
    line that mends it (``run: nvhook cdi generate``). ``kind`` is ``stale`` (the spec and
    the host disagree), ``invalid`` (the file does not parse) or ``untrusted`` (the
    runtime would not trust the file); ``severity`` is ``error`` or ``warning`` (an
    untrusted file under ``cdi.untrusted_specs = "warn"``), which does not fail the check.
    """

    file: str
    device: str | None
    field: str
    what: str
    message: str
    fix: str
    kind: str = "stale"
    severity: str = "error"

    @property
    def line(self) -> str:
        """``FILE: device 'nvidia.com/gpu=0': mount …: host file is missing …`` (a warning:
        ``FILE: warning: …``)."""
        where = f"device {self.device!r}" if self.device is not None else self.field
        warning = "warning" if self.severity == "warning" else ""
        parts = (self.file, warning, where, self.what, self.message)
        return ": ".join(part for part in parts if part)


def spec_files(spec_dirs: Iterable[str]) -> list[str]:
    """The spec files of ``spec_dirs`` in scan order, as the registry lists them (each file
    once, links followed; a missing or unreadable directory holds none: ``nvhook cdi list``
    reports those)."""
    return [path for _, path, _ in judged_spec_files(spec_dirs)]


def _is_version(text: str) -> bool:
    parts = text.split(".")
    return len(parts) >= 2 and all(p.isdigit() and p.isascii() for p in parts)


def recorded_driver_version(spec: Spec) -> str | None:
    """The driver version ``spec`` was generated for, from the names of the files it mounts
    (see the module docstring); None when it mounts no versioned driver file."""
    paths = [m.host_path for m in spec.edits.mounts]
    for device in spec.devices:
        paths += [m.host_path for m in device.edits.mounts]
    names = [os.path.basename(p) for p in paths]
    for stem in VERSION_ANCHORS:
        for name in names:
            if name.startswith(stem + ".") and _is_version(name[len(stem) + 1 :]):
                return name[len(stem) + 1 :]
    marker = FIRMWARE_DIR + "/"
    for path in paths:
        at = path.find(marker)
        if at >= 0:
            version = path[at + len(marker) :].partition("/")[0]
            if _is_version(version):
                return version
    return None


def loaded_driver_version(root: str = "/") -> str | None:
    """The loaded driver's version (``<root>/proc/driver/nvidia/version``); None when no
    NVIDIA kernel module is loaded or the file cannot be read."""
    from nvhook.devices.procfs import read_driver
    from nvhook.errors import DriverError

    try:
        return read_driver(root).version
    except DriverError:
        return None


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _driver_change(recorded: str, loaded: str | None) -> str:
    """``driver upgraded to 560.35.03``, ``… downgraded …``, or ``no NVIDIA driver is loaded``."""
    if loaded is None:
        return "no NVIDIA driver is loaded"
    way = "upgraded" if _version_key(loaded) > _version_key(recorded) else "downgraded"
    return f"driver {way} to {loaded}"


def check_specs(
    spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS, *, root: str = "/", untrusted: str = REFUSE
) -> list[Finding]:
    """Every way the CDI specs of ``spec_dirs`` disagree with the host at ``root``, file by
    file in scan order; empty when every spec is true to the host (or there is none).

    ``untrusted`` is ``cdi.untrusted_specs``: what an untrusted file is (see the module
    docstring), :data:`~oci.cdi.trust.REFUSE` or :data:`~oci.cdi.trust.WARN`.
    """
    if untrusted not in MODES:
        raise ValueError(f"untrusted must be one of {', '.join(MODES)}, not {untrusted!r}")
    refuse = untrusted == REFUSE
    files = judged_spec_files(spec_dirs)
    loaded = loaded_driver_version(root) if files else None
    findings: list[Finding] = []
    for directory, file, verdict in files:
        if verdict is not None:
            findings.append(_untrusted(directory, file, verdict, untrusted))
            if refuse:
                continue
        try:  # refusing, opened as the registry opens it: judged again by what is read
            spec = parse_spec(read_checked(file), source=file) if refuse else load_spec(file)
        except CdiTrustError as e:  # changed since it was listed
            findings.append(_untrusted(directory, file, str(e), untrusted))
            continue
        except CdiError as e:
            message = str(e).removeprefix(f"{file}: ")
            fix = f"run: nvhook cdi validate {file}"
            findings.append(Finding(file, None, "", "", message, fix, kind="invalid"))
            continue
        findings += _check_spec(file, spec, root, loaded)
    return findings


def _untrusted(directory: str, file: str, verdict: str, untrusted: str) -> Finding:
    """The finding of the untrusted spec file ``file`` of ``directory`` (``verdict``: its
    line from :mod:`oci.cdi.trust`), in the words the registry reports it with."""
    message = untrusted_line(verdict, untrusted).removeprefix(f"{file}: ")
    severity = "error" if untrusted == REFUSE else "warning"
    fix = fix_of(verdict, file, directory)
    return Finding(file, None, "", "", message, fix, kind="untrusted", severity=severity)


def _check_spec(file: str, spec: Spec, root: str, loaded: str | None) -> list[Finding]:
    """The findings of one spec that loaded (``loaded``: the loaded driver's version)."""
    ours = generated_by_nvhook(spec)
    if ours:
        fix = f"run: {regenerate_command(file, spec, root)}"
    else:
        fix = f"regenerate {file} with the tool that wrote it, or remove it"
    recorded = recorded_driver_version(spec)
    change = None if recorded is None or recorded == loaded else _driver_change(recorded, loaded)
    findings: list[Finding] = []
    if ours and change is not None:
        where = os.path.join(root, "proc/driver/nvidia/version")
        now = f"the loaded driver is {loaded}" if loaded else "no NVIDIA driver is loaded"
        message = f"generated for driver {recorded} (its library names say so), {now} ({where})"
        findings.append(Finding(file, None, "", "driver version", message, fix))
    lookup = under_root(root, spec)
    edits: list[tuple[str | None, str, Edits]] = [(None, "containerEdits", spec.edits)]
    edits += [
        (spec.qualified_name(d.name), f"devices[{i}]", d.edits) for i, d in enumerate(spec.devices)
    ]
    for device, field, entries in edits:
        for problem in check_edits(entries, host_path=lookup):
            message = problem.problem
            if problem.missing and change is not None and str(recorded) in problem.what:
                message += f" ({change}?)"
            findings.append(
                Finding(file, device, field, problem.what, message, _fix(problem, ours, fix))
            )
    findings += _layout_findings(file, spec, lookup, fix)
    return findings


def _layout_findings(
    file: str, spec: Spec, lookup: Callable[[str], str], fix: str
) -> list[Finding]:
    """One finding per GPU the spec records that is gone, or whose MIG layout differs from
    the one the spec records
    (:mod:`nvhook.devices.miglayout`: the check a cdi-mode create makes)."""
    from nvhook.devices.miglayout import gone_gpus, stale_layouts

    entries: dict[str, None] = {}
    for d in spec.devices:
        for entry in d.edits.env:
            layout, at, directory = entry.partition("@")
            if at:
                entries[f"{layout}@{lookup(directory)}"] = None
    out = []
    for minor, uuid, where in gone_gpus(entries):
        message = f"records GPU {uuid}, which is gone ({where} is missing)"
        out.append(Finding(file, None, "", f"GPU {minor}", message, fix))
    for minor, then, now in stale_layouts(entries):
        state = "MIG mode is off or the GPU is gone" if now is None else f"now {now or 'none'}"
        message = f"written for GPU.compute instances {then}, {state}: its MIG names mean others"
        out.append(Finding(file, None, "", f"MIG layout of GPU {minor}", message, fix))
    return out


def _fix(problem: HostProblem, ours: bool, regenerate: str) -> str:
    """The fix of one problem: regenerate the spec, except for a missing nvhook-hook launcher,
    which ``nvhook install-entrypoints`` writes again (regenerating would not bring it back)."""
    if ours and problem.what.startswith("hook ") and os.path.basename(problem.path) == HOOK_PROGRAM:
        return f"run: nvhook install-entrypoints --bin-dir {os.path.dirname(problem.what[5:])}"
    return regenerate
