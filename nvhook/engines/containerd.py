"""containerd: a CRI runtime handler that runs ``nvhook-runtime`` (``runtime_handler = NAME``).

The runtime is ``plugins.<CRI>.containerd.runtimes.<NAME>`` with ``runtime_type =
"io.containerd.runc.v2"`` and ``options.BinaryName`` = nvhook-runtime, where ``<CRI>`` depends
on the config's ``version``:

==========  ==========================================  ===================================
version     CRI runtime plugin                          read by
==========  ==========================================  ===================================
absent, 1   ``cri``                                     containerd 1.x (2.x migrates it)
2           ``"io.containerd.grpc.v1.cri"``             containerd 1.x (2.x migrates it)
3           ``"io.containerd.cri.v1.runtime"``          containerd 2.x
==========  ==========================================  ===================================

A missing ``version`` means 1, as containerd itself reads it. Other versions are refused.
A new runtime copies the ``runc`` runtime's table (else the default runtime's, when that is
a runc one), so it keeps ``SystemdCgroup``, ``Root``, annotations…; an existing one of that
name keeps its settings, gains the ones it lacks from that table, and gets the runtime type
and BinaryName set. ``--set-as-default`` sets ``containerd.default_runtime_name``.
``--enable-cdi`` sets ``enable_cdi = true`` in the CRI runtime plugin's table (``<CRI>``
itself): containerd's own CDI, which applies the specs in its ``cdi_spec_dirs`` to a CRI
``CDIDevices`` request (kubelet's, from a device plugin's ``cdi_devices``), off by default in
containerd 1.7 and on in 2.x; 1.6 has none and ignores the key. ``--nri`` sets
``plugins."io.containerd.nri.v1.nri".disable = false``: NRI, off by default in 1.7 (its
``config default`` says ``disable = true``) and on in 2.x, which ``nvhook nri-plugin`` needs.

The runtime's ``container_annotations`` gains ``"cdi.k8s.io/*"`` (kept with any patterns it
had): containerd's CRI copies a container's annotations into config.json only when a pattern
of its runtime lists them, and ``cdi.k8s.io/`` annotations are how a device plugin with
``deviceListStrategy: cdi-annotations`` names a container's GPUs to nvhook-runtime. This is
container annotations only (set by kubelet from the device plugin); ``pod_annotations`` is
never touched, since any pod's author sets those.

containerd 1.x (checked with 1.6.20) decodes a plugin's table *onto* its defaults but
replaces maps: a config whose ``runtimes`` table is absent has the default ``runc`` runtime,
one that lists only ``nvidia`` has no ``runc`` any more, and CRI then fails with its
default runtime missing. So when the file has no runtimes at all, ``runc`` is written too.

Imports. containerd loads the main file, then its ``imports``, breadth-first: a relative
entry is relative to the importing file, one with ``*`` a glob (sorted matches) -- except
that containerd 1.x globs a relative pattern from its working directory (``/`` under
systemd; checked), so such an entry is never where nvhook puts a drop-in. containerd 1.x
merges each imported file by replacing every plugin table it names *whole* (checked: an
imported file that only adds a runtime resets ``sandbox_image`` and drops ``runc``);
containerd 2.x merges plugin tables key by key. So a config with ``imports`` is left alone
and gets a drop-in, loaded after every other file that configures the CRI plugin:

- its path is ``99-nvhook.toml`` (or ``zz-nvhook``; ``.toml``, ``.conf`` or no suffix:
  what the glob accepts) in the directory of an existing ``imports`` glob, the last one that
  works; failing that, ``conf.d/99-nvhook.toml`` beside the main file, whose ``imports``
  then gain that one entry (the only edit of the main file);
- for version 1 and 2 (containerd 1.x) it holds the CRI plugin's whole table as the other
  files make it, plus the runtime; configure rewrites it from them each time it runs (so
  run it again after editing the CRI settings elsewhere), keeping the runtimes it added
  (and ``enable_cdi``, the default runtime name);
- for version 3 it holds only the runtime (and the default runtime name, ``enable_cdi``).

No file: a new one with ``version = 2`` when ``containerd --version`` says 1.x, else 3.
"""

from __future__ import annotations

import copy
import fnmatch
import glob
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from nvhook.engines import _toml
from nvhook.engines.changes import FileChange, Plan, read_file
from nvhook.errors import EngineConfigError

__all__ = [
    "CDI_ANNOTATIONS",
    "CRI_PLUGIN",
    "DEFAULT_CONFIG",
    "RUNC_RUNTIME_TYPE",
    "installed_containerd_major",
    "plan_configure",
]

DEFAULT_CONFIG = "/etc/containerd/config.toml"
RUNC_RUNTIME_TYPE = "io.containerd.runc.v2"
#: the ``container_annotations`` pattern nvhook's runtime gets (see the module docstring)
CDI_ANNOTATIONS = "cdi.k8s.io/*"
#: config version -> the plugin whose table holds ``containerd.runtimes``
CRI_PLUGIN: dict[int, str] = {
    1: "cri",
    2: "io.containerd.grpc.v1.cri",
    3: "io.containerd.cri.v1.runtime",
}
#: drop-in names, by preference; the first whose name the import glob accepts and that
#: containerd loads after every other file configuring the CRI plugin is taken
DROP_IN_NAMES = tuple(f"{p}-nvhook{s}" for p in ("99", "zz") for s in (".toml", ".conf", ""))
_MARK = "# Written by `nvhook runtime configure --runtime containerd`"

Json = dict[str, Any]


def installed_containerd_major(binary: str = "containerd") -> int | None:
    """The major version ``binary --version`` reports, or None (not installed, unreadable)."""
    path = shutil.which(binary)
    if path is None:
        return None
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for token in out.split()[1:]:
        match = re.match(r"v?(\d+)\.\d+", token)
        if match:
            return int(match.group(1))
    return None


def plan_configure(
    config: str = DEFAULT_CONFIG,
    *,
    name: str,
    runtime_path: str,
    set_as_default: bool = False,
    enable_cdi: bool = False,
    enable_nri: bool = False,
    containerd_major: int | None = None,
) -> Plan:
    """The changes that add runtime ``name`` (running ``runtime_path``) to ``config``, and
    with ``enable_cdi`` switch containerd's own CDI on.

    ``containerd_major`` (what :func:`installed_containerd_major` says) only matters when
    ``config`` does not exist.
    """
    config = os.path.abspath(config)
    data = read_file(config)
    if data is None:
        version = 2 if containerd_major == 1 else 3
        edits: list[_toml.Edit] = [(("version",), version)]
        if set_as_default:
            edits.append(((*_containerd_path(version), "default_runtime_name"), name))
        if enable_cdi:
            edits.append((_enable_cdi_path(version), True))
        if enable_nri:
            edits.append((NRI_DISABLE, False))
        edits += _runtime_edits(config, version, {}, name, runtime_path)
        header = [
            f"{_MARK[2:]}: runtime {name!r} (nvhook-runtime).",
            "`nvhook runtime unconfigure --runtime containerd` removes this file.",
        ]
        text = _toml.edit(config, "", edits, header=header)
        return Plan("containerd", config, (FileChange(config, None, text.encode()),))
    main = _toml.parse(config, data)
    version = _version(config, main)
    if not main.get("imports"):
        edits = []
        if set_as_default:
            edits.append(((*_containerd_path(version), "default_runtime_name"), name))
        if enable_cdi:
            edits.append((_enable_cdi_path(version), True))
        if enable_nri:
            edits.append((NRI_DISABLE, False))
        edits += _runtime_edits(config, version, main, name, runtime_path)
        text = _toml.edit(config, data.decode(), edits)
        return Plan("containerd", config, (FileChange(config, data, text.encode()),))
    return _plan_drop_in(
        config, data, main, version, name, runtime_path, set_as_default, enable_cdi, enable_nri
    )


def _version(path: str, data: Mapping[str, Any]) -> int:
    version = data.get("version", 1)
    if isinstance(version, bool) or version not in CRI_PLUGIN:
        raise EngineConfigError(
            f"{path}: containerd config version {version!r} is not supported "
            "(nvhook knows 1 and 2, read by containerd 1.x, and 3, read by containerd 2.x)"
        )
    return int(version)


def _containerd_path(version: int) -> tuple[str, ...]:
    return ("plugins", CRI_PLUGIN[version], "containerd")


#: NRI's switch (``containerd config default``: ``disable = true`` in 1.7, false in 2.1); the
#: plugin's id is the same in every config version.
NRI_DISABLE = ("plugins", "io.containerd.nri.v1.nri", "disable")


def _enable_cdi_path(version: int) -> tuple[str, ...]:
    return ("plugins", CRI_PLUGIN[version], "enable_cdi")


def _runtime_edits(
    where: str, version: int, effective: Mapping[str, Any], name: str, runtime_path: str
) -> list[_toml.Edit]:
    """Edits adding runtime ``name`` to a config whose data is ``effective`` (``where``)."""
    base = _containerd_path(version)
    section = _toml.plain_get(effective, base) or {}
    if not isinstance(section, Mapping):
        raise EngineConfigError(f"{where}: {_toml.dotted(base)} is not a table")
    runtimes = section.get("runtimes") or {}
    if not isinstance(runtimes, Mapping):
        raise EngineConfigError(f"{where}: {_toml.dotted((*base, 'runtimes'))} is not a table")
    existing = runtimes.get(name)
    if existing is not None and not isinstance(existing, Mapping):
        raise EngineConfigError(
            f"{where}: {_toml.dotted((*base, 'runtimes', name))} is not a table"
        )
    if existing is not None and not isinstance(existing.get("options", {}), Mapping):
        options = _toml.dotted((*base, "runtimes", name, "options"))
        raise EngineConfigError(f"{where}: {options} is not a table")
    annotations = (existing or {}).get("container_annotations", [])
    if not isinstance(annotations, list) or not all(isinstance(a, str) for a in annotations):
        key = _toml.dotted((*base, "runtimes", name, "container_annotations"))
        raise EngineConfigError(f"{where}: {key} is not an array of strings")
    edits: list[_toml.Edit] = []
    if not runtimes:  # containerd's own runc would be gone once `runtimes` lists ours
        edits.append(((*base, "runtimes", "runc"), {"runtime_type": RUNC_RUNTIME_TYPE}))
    template = _template(section, runtimes, name)
    edits.append(((*base, "runtimes", name), _runtime_table(existing, template, runtime_path)))
    return edits


def _template(section: Mapping[str, Any], runtimes: Mapping[str, Any], name: str) -> Json:
    """The runtime table to copy: ``runc``'s, else the default runtime's if it is runc."""
    candidates = ["runc", section.get("default_runtime_name")]
    for candidate in candidates:
        table = runtimes.get(candidate) if isinstance(candidate, str) else None
        if candidate == name or not isinstance(table, Mapping):
            continue
        if candidate == "runc" or table.get("runtime_type") == RUNC_RUNTIME_TYPE:
            return copy.deepcopy(dict(table))
    return {}


def _runtime_table(existing: Mapping[str, Any] | None, template: Json, binary: str) -> Json:
    table: Json = copy.deepcopy(dict(existing)) if existing is not None else {}
    for key, value in template.items():
        if key != "options":
            table.setdefault(key, value)
    table["runtime_type"] = RUNC_RUNTIME_TYPE
    options = table.setdefault("options", {})
    for key, value in (template.get("options") or {}).items():
        options.setdefault(key, value)
    options["BinaryName"] = binary
    annotations = list(table.get("container_annotations") or [])
    if CDI_ANNOTATIONS not in annotations:
        table["container_annotations"] = [*annotations, CDI_ANNOTATIONS]
    return table


# --------------------------------------------------------------------------- imports


def _plan_drop_in(
    config: str,
    data: bytes,
    main: Json,
    version: int,
    name: str,
    runtime_path: str,
    set_as_default: bool,
    enable_cdi: bool,
    enable_nri: bool = False,
) -> Plan:
    cri = CRI_PLUGIN[version]
    drop_in, new_entry = _place_drop_in(config, main, version)
    old = read_file(drop_in)
    if old is not None and not old.startswith(_MARK.encode()):
        raise EngineConfigError(
            f"{drop_in} exists and was not written by nvhook; move it away or import "
            f"a directory of your own"
        )
    ours = _toml.parse(drop_in, old) if old is not None else {}
    files = [(p, d) for p, d in _load_order(config, main, version) if p != drop_in]
    for path, file_data in files[1:]:
        if file_data.get("version", version if version < 3 else 1) != version:
            raise EngineConfigError(
                f"{path}: containerd config version {file_data.get('version', 1)} differs "
                f"from {config}'s {version}; nvhook does not merge mixed versions"
            )
    replace = version < 3
    effective = _merge_replace(files) if replace else _merge_deep(files)
    base = _containerd_path(version)
    edits: list[_toml.Edit] = []
    if version > 1:
        edits.append((("version",), version))
    if replace:
        edits.append((("plugins", cri), _toml.plain_get(effective, ("plugins", cri)) or {}))
        edits += _carried_over(ours, effective, version)
    if set_as_default:
        edits.append(((*base, "default_runtime_name"), name))
    if enable_cdi:
        edits.append((_enable_cdi_path(version), True))
    if enable_nri:
        edits.append((NRI_DISABLE, False))
    view = _merged_view(effective, edits)
    edits += _runtime_edits(config, version, view, name, runtime_path)
    header = [
        f"{_MARK[2:]} for {config}.",
        "`nvhook runtime unconfigure --runtime containerd` removes it.",
    ]
    if replace:
        header += [
            "containerd 1.x replaces a plugin's whole table with the one an imported file",
            "gives, so this file repeats the CRI plugin's settings of the files loaded before",
            "it: run `nvhook runtime configure` again after changing them there.",
        ]
    # 1.x: made afresh from the other files each time; 2.x: ours, edited like any config
    start = old.decode() if old is not None and not replace else ""
    text = _toml.edit(drop_in, start, edits, header=header)
    changes = [FileChange(drop_in, old, text.encode())]
    if new_entry is not None:
        main_text = _toml.append_to_array(config, data.decode(), ("imports",), new_entry)
        changes.insert(0, FileChange(config, data, main_text.encode()))
    missing: list[str] = []
    directory = os.path.dirname(drop_in)
    while not os.path.isdir(directory):
        missing.insert(0, directory)
        directory = os.path.dirname(directory)
    note = f"{config} has imports: the runtime goes to the drop-in {drop_in}"
    return Plan("containerd", config, tuple(changes), notes=(note,), dirs=tuple(missing))


def _carried_over(ours: Json, effective: Json, version: int) -> list[_toml.Edit]:
    """What an earlier drop-in of ours added (runtimes, default, ``enable_cdi``) and the
    others lack."""
    base = _containerd_path(version)
    edits: list[_toml.Edit] = []
    cdi = _enable_cdi_path(version)
    if _toml.plain_get(ours, cdi) is True and _toml.plain_get(effective, cdi) is not True:
        edits.append((cdi, True))
    if _toml.plain_get(ours, NRI_DISABLE) is False and _toml.plain_get(effective, NRI_DISABLE):
        edits.append((NRI_DISABLE, False))
    mine = _toml.plain_get(ours, base) or {}
    theirs = _toml.plain_get(effective, base) or {}
    their_runtimes = theirs.get("runtimes") or {}
    for rname, table in (mine.get("runtimes") or {}).items():
        if table != their_runtimes.get(rname):
            edits.append(((*base, "runtimes", rname), table))
    default = mine.get("default_runtime_name")
    if default is not None and default != theirs.get("default_runtime_name"):
        edits.append(((*base, "default_runtime_name"), default))
    return edits


def _merged_view(effective: Json, edits: Sequence[_toml.Edit]) -> Json:
    view = copy.deepcopy(effective)
    for keys, value in edits:
        node = view
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        if isinstance(value, Mapping) and isinstance(node.get(keys[-1]), dict):
            node[keys[-1]] = _deep(node[keys[-1]], value)
        else:
            node[keys[-1]] = copy.deepcopy(value)
    return view


def _place_drop_in(config: str, main: Json, version: int) -> tuple[str, str | None]:
    """Where the drop-in goes, and the ``imports`` entry to add for it (None: covered)."""
    imports = main.get("imports")
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise EngineConfigError(f"{config}: imports must be an array of strings")
    fallback = os.path.join(os.path.dirname(config), "conf.d", DROP_IN_NAMES[0])
    candidates: list[str] = []
    for entry in reversed(imports):
        if version < 3 and "*" in entry and not os.path.isabs(entry):
            continue  # globbed from containerd's working directory: not ours to guess
        pattern = _resolve(config, entry, version)
        if pattern == fallback:  # added by an earlier configure
            candidates.append(fallback)
        directory, base = os.path.split(pattern)
        if "*" not in pattern or glob.has_magic(directory):
            continue
        candidates += [
            os.path.join(directory, name)
            for name in DROP_IN_NAMES
            if fnmatch.fnmatchcase(name, base)
        ]
    ours = [c for c in candidates if (read_file(c) or b"").startswith(_MARK.encode())]
    for candidate in [*ours, *candidates]:  # an earlier drop-in first: never two of them
        if _loaded_last(config, main, candidate, version):
            return candidate, None
    with_entry = {**main, "imports": [*imports, fallback]}
    if not _loaded_last(config, with_entry, fallback, version):
        raise EngineConfigError(
            f"{config}: no place for a drop-in that containerd loads after every other file "
            f"configuring plugins.{CRI_PLUGIN[version]} (see `containerd config dump`); "
            "add the runtime by hand"
        )
    return fallback, fallback


def _loaded_last(config: str, main: Json, drop_in: str, version: int) -> bool:
    order = [p for p, _ in _load_order(config, main, version, virtual=drop_in)]
    if drop_in not in order:
        return False
    after = order[order.index(drop_in) + 1 :]
    return not any(_defines(p, CRI_PLUGIN[version]) for p in after)


def _defines(path: str, cri: str) -> bool:
    data = read_file(path)
    parsed = _toml.parse(path, data) if data is not None else {}
    return _toml.plain_get(parsed, ("plugins", cri)) is not None


def _resolve(parent: str, entry: str, version: int) -> str:
    """The absolute path (or glob) an ``imports`` entry of ``parent`` names.

    containerd 2.x reads a relative entry relative to the importing file. containerd 1.x
    does so only for an entry without ``*``: it globs a relative pattern from its own
    working directory, ``/`` under systemd, which is what this assumes.
    """
    if version < 3 and "*" in entry:
        return entry if os.path.isabs(entry) else os.path.join("/", entry)
    path = os.path.normpath(entry)
    if not os.path.isabs(path):
        path = os.path.join(os.path.dirname(parent), path)
    return path


def _load_order(
    config: str, main: Json, version: int, *, virtual: str | None = None
) -> list[tuple[str, Json]]:
    """The files containerd loads, in its order, with their data (``virtual``: a file to be).

    Breadth-first from the main file; an import is relative to the importing file, one with
    ``*`` is a glob (sorted matches), a file loaded once only.
    """
    order: list[tuple[str, Json]] = []
    seen: set[str] = set()
    pending = [config]
    while pending:
        path, pending = pending[0], pending[1:]
        if path in seen:
            continue
        seen.add(path)
        if path == config:
            data = main
        elif path == virtual and not os.path.lexists(path):
            data = {}
        else:
            raw = read_file(path)
            if raw is None:
                raise EngineConfigError(f"{path} (imported by containerd's config) does not exist")
            data = _toml.parse(path, raw)
        order.append((path, data))
        for entry in data.get("imports") or []:
            resolved = _resolve(path, entry, version)
            if "*" in resolved:
                matches = set(glob.glob(resolved, include_hidden=True))
                if virtual is not None and _glob_matches(resolved, virtual):
                    matches.add(virtual)
                pending += sorted(matches)
            else:
                pending.append(resolved)
    return order


def _glob_matches(pattern: str, path: str) -> bool:
    directory, base = os.path.split(pattern)
    return os.path.dirname(path) == directory and fnmatch.fnmatchcase(os.path.basename(path), base)


def _merge_replace(files: Sequence[tuple[str, Json]]) -> Json:
    """containerd 1.x: later files replace top-level keys and whole plugin tables."""
    out: Json = {}
    for _, data in files:
        for key, value in data.items():
            if key == "plugins" and isinstance(value, Mapping):
                out.setdefault("plugins", {}).update(copy.deepcopy(dict(value)))
            else:
                out[key] = copy.deepcopy(value)
    return out


def _merge_deep(files: Sequence[tuple[str, Json]]) -> Json:
    """containerd 2.x: tables merged key by key, later files win."""
    out: Json = {}
    for _, data in files:
        out = _deep(out, data)
    return out


def _deep(a: Mapping[str, Any], b: Mapping[str, Any]) -> Json:
    out = copy.deepcopy(dict(a))
    for key, value in b.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
