"""OCI bundles for real runc: a static-busybox rootfs and config.json from ``runc spec``.

The rootfs is built once per process from the host's ``/usr/bin/busybox``, which must be
statically linked (Debian's busybox-static), by :func:`nvhook.tools.images.busybox_rootfs`
(the demo's images have the same tree), and copied for each bundle.
"""

from __future__ import annotations

import atexit
import copy
import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from nvhook.tools import images
from tests.support.basics import Json, missing, require

__all__ = ["allow_device", "busybox_rootfs", "char_device", "make_bundle"]

_BUSYBOX = "/usr/bin/busybox"
_template: Path | None = None


def _build_template() -> Path:
    require(_BUSYBOX)
    if not images.is_static(_BUSYBOX):
        missing(f"{_BUSYBOX} is dynamically linked (install busybox-static)")
    top = Path(tempfile.mkdtemp(prefix="nvhook-busybox-"))
    atexit.register(shutil.rmtree, top, True)
    return images.busybox_rootfs(top / "rootfs", busybox=_BUSYBOX)


def busybox_rootfs(dest: Path) -> Path:
    """Lay out a static-busybox rootfs at ``dest`` (created if missing) and return ``dest``.

    ``/bin`` holds busybox and a link per applet (also at its usual full path, e.g.
    ``/usr/bin/awk``); ``/etc/passwd`` and ``/etc/group`` have root; ``/dev``, ``/proc``,
    ``/sys``, ``/tmp`` exist. The tree is built once per process and copied (``cp -a``).
    """
    global _template
    if _template is None or not _template.is_dir():
        _template = _build_template()
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", f"{_template}/.", str(dest)], check=True)
    return dest


# --------------------------------------------------------------------------- bundles


_spec_cache: Json | None = None


def _runc_spec() -> Json:
    global _spec_cache
    if _spec_cache is None:
        runc_path = require("runc")
        with tempfile.TemporaryDirectory(prefix="nvhook-spec-") as d:
            subprocess.run([runc_path, "spec", "--bundle", d], check=True, capture_output=True)
            _spec_cache = json.loads(Path(d, "config.json").read_text())
    return copy.deepcopy(_spec_cache)


def char_device(
    path: str,
    major: int,
    minor: int,
    *,
    file_mode: int = 0o666,
    uid: int = 0,
    gid: int = 0,
    type: str = "c",
) -> Json:
    """A ``linux.devices`` entry: runc mknods it in the container."""
    return {
        "path": path,
        "type": type,
        "major": major,
        "minor": minor,
        "fileMode": file_mode,
        "uid": uid,
        "gid": gid,
    }


def allow_device(major: int, minor: int, access: str = "rwm", *, type: str = "c") -> Json:
    """A ``linux.resources.devices`` allow rule for one node."""
    return {"allow": True, "type": type, "major": major, "minor": minor, "access": access}


def make_bundle(
    directory: Path,
    args: Sequence[str],
    env: Sequence[str] | None = None,
    *,
    rootfs: Path | None = None,
    readonly: bool | None = None,
    devices: Sequence[Json] = (),
    device_rules: Sequence[Json] = (),
    mounts: Sequence[Json] = (),
    annotations: Mapping[str, str] | None = None,
    hooks: Mapping[str, Sequence[Json]] | None = None,
    edit: Callable[[Json], None] | None = None,
) -> Path:
    """Write an OCI bundle at ``directory`` and return it.

    config.json is real ``runc spec`` output, then edited: ``process.terminal=false``,
    ``process.args=args``, ``env`` appended to ``process.env``; ``readonly`` sets
    ``root.readonly``; ``devices`` go to ``linux.devices``, ``device_rules`` are appended to
    ``linux.resources.devices`` (after runc's deny-all), ``mounts`` appended, ``annotations``
    merged, ``hooks`` appended per stage; finally ``edit(spec)`` may change anything.
    The rootfs is a fresh busybox one at ``directory/rootfs`` unless ``rootfs`` names one.
    """
    spec = _runc_spec()
    directory.mkdir(parents=True, exist_ok=True)
    if rootfs is None:
        busybox_rootfs(directory / "rootfs")
    else:
        spec["root"]["path"] = str(rootfs.resolve())
    process = spec["process"]
    process["terminal"] = False
    process["args"] = list(args)
    process["env"] = [*process.get("env", []), *(env or [])]
    if readonly is not None:
        spec["root"]["readonly"] = readonly
    linux = spec.setdefault("linux", {})
    if devices:
        linux.setdefault("devices", []).extend(copy.deepcopy(list(devices)))
    if device_rules:
        resources = linux.setdefault("resources", {})
        resources.setdefault("devices", []).extend(copy.deepcopy(list(device_rules)))
    if mounts:
        spec.setdefault("mounts", []).extend(copy.deepcopy(list(mounts)))
    if annotations:
        spec.setdefault("annotations", {}).update(annotations)
    if hooks:
        for stage, items in hooks.items():
            spec.setdefault("hooks", {}).setdefault(stage, []).extend(copy.deepcopy(list(items)))
    if edit is not None:
        edit(spec)
    (directory / "config.json").write_text(json.dumps(spec, indent=2) + "\n")
    return directory
