"""``nvhook bug-report``: one archive a user can attach to an issue.

:func:`bug_report` writes a ``.tar.gz`` whose members, under ``nvhook-bug-report/``, are:

- ``versions.json``: nvhook, Python, the kernel, and ``runc``, ``containerd``, ``dockerd``,
  ``docker``, ``podman`` where found (their ``--version``, on the live host only);
- ``settings.toml``: nvhook's configuration file as it is, and ``settings.json``: the settings
  it loads to (or the error);
- ``doctor.json`` (``nvhook doctor --json``), ``cdi-check.json`` (``nvhook cdi check``'s
  findings), ``explain.json`` (``nvhook explain --json`` of the bundle, when one is given);
- ``engines/<engine>.diff``: each engine config against the original that ``nvhook runtime
  configure`` kept in its backups (``/var/lib/nvhook/backups``, the records of
  :mod:`nvhook.engines.changes`), and the config itself when there is no backup;
- ``shim-log.txt``: the last :data:`LOG_LINES` lines of the shim's log (``runtime.log_file``);
- ``mig.json``: the GPUs and their MIG GPU and compute instances as ``/proc`` shows them.

Each part is made on its own: one that fails says why in its place, so the archive is
written without the driver loaded. **Secrets**: every value of a key that names a secret
(:data:`SECRET_KEY`: token, password, secret, auth, credential, key…) in the settings and the
engine configs, and every environment value of the bundle but the NVIDIA_/CUDA_/NVHOOK_
variables nvhook reads and the common harmless ones (:data:`KEPT_ENV`), is replaced by
``<redacted>`` wherever it appears in any member, and so is the value of any ``key = value``
or ``"key": value`` whose key names a secret (a comment's too).
**Size**: each member at most :data:`MEMBER_LIMIT` bytes and all of them at most
:data:`TOTAL_LIMIT` (a longer one is cut and says so), so the archive stays under 2 MiB.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import time
from collections.abc import Callable
from typing import Any

from oci._frozen import Frozen
from oci.errors import Error

__all__ = ["LOG_LINES", "MEMBER_LIMIT", "TOTAL_LIMIT", "Report", "bug_report", "redact"]

#: The most bytes one member holds, and all of them together (uncompressed).
MEMBER_LIMIT = 256 * 1024
TOTAL_LIMIT = 2 * 1024 * 1024
#: How many of the shim log's last lines are kept (each cut at 4 KiB).
LOG_LINES = 300
#: A key whose value is a secret.
SECRET_KEY = re.compile(r"(token|passw|secret|auth|credential|private|apikey|api_key|key$)", re.I)
#: The container variables whose values are kept: nvhook's and NVIDIA's requests, and the
#: common ones that name paths and terminals (redacting "/root" would mangle every path).
KEPT_ENV = ("NVIDIA_", "CUDA_", "NVHOOK_", "LC_")
KEPT_ENV_NAMES = frozenset({"PATH", "HOME", "TERM", "HOSTNAME", "LANG", "PWD", "SHELL", "USER"})
REDACTED = "<redacted>"
PREFIX = "nvhook-bug-report"
#: A word in a key that names a secret, and what follows it up to the value: found word by
#: word, so that a long line costs linear time (one pattern for both backtracks on long words).
_SECRET_WORD = re.compile(r"token|passw|secret|auth|credential|apikey|api_key|private", re.I)
_THEN_VALUE = re.compile(r"""[\w.-]*["']?\s*[:=]\s*(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s,}]+)""")


class Report(Frozen):
    """What :func:`bug_report` wrote: the archive, its size, and its members' names."""

    path: str
    size: int
    members: tuple[str, ...]


def redact(text: str, secrets: set[str]) -> str:
    """``text`` with each of ``secrets`` and every ``key = value`` whose key names a secret
    replaced by :data:`REDACTED`."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 3:
            text = text.replace(secret, REDACTED)
    out: list[str] = []
    pos = 0
    for word in _SECRET_WORD.finditer(text):
        if word.start() < pos:
            continue
        then = _THEN_VALUE.match(text, word.end())
        if then is not None:
            out += [text[pos : then.start("value")], REDACTED]
            pos = then.end()
    return "".join(out) + text[pos:]


def _secret_values(data: object, out: set[str], *, under_secret: bool = False) -> None:
    """Every string under a key that names a secret, anywhere in parsed ``data``."""
    if isinstance(data, dict):
        for key, value in data.items():
            _secret_values(value, out, under_secret=under_secret or bool(SECRET_KEY.search(key)))
    elif isinstance(data, list):
        for value in data:
            _secret_values(value, out, under_secret=under_secret)
    elif under_secret and isinstance(data, (str, int)) and not isinstance(data, bool):
        out.add(str(data))


def _parsed(path: str, data: bytes) -> object:
    """The config at ``path`` parsed (TOML or JSON), None when it is neither."""
    try:
        if path.endswith(".json"):
            return json.loads(data)
        import tomllib

        return tomllib.loads(data.decode())
    except (ValueError, UnicodeDecodeError):
        return None


def _read(path: str, limit: int = MEMBER_LIMIT) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit + 1)
    except OSError:
        return None


def _versions(root: str) -> dict[str, Any]:
    import platform
    import shutil
    import subprocess

    from nvhook.constants import VERSION

    out: dict[str, Any] = {"nvhook": VERSION, "python": platform.python_version()}
    kernel = _read(os.path.join(root, "proc/version"), 4096)
    out["kernel"] = kernel.decode(errors="replace").strip() if kernel else platform.uname().release
    tools: dict[str, str] = {}
    for tool in ("runc", "containerd", "dockerd", "docker", "podman"):
        if root not in ("", "/"):
            tools[tool] = "not run: --root is not the live host"
            continue
        found = shutil.which(tool, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin")
        if found is None:
            continue
        try:
            done = subprocess.run(
                [found, "--version"], capture_output=True, timeout=10, check=False
            )
            tools[tool] = (done.stdout or done.stderr).decode(errors="replace").strip()
        except (OSError, subprocess.SubprocessError) as e:
            tools[tool] = f"{found}: {e}"
    out["tools"] = tools
    return out


def _mig(root: str) -> dict[str, Any]:
    from nvhook.devices.procfs import read_driver

    driver = read_driver(root)
    return {
        "driver": driver.version,
        "gpus": [
            {
                "index": g.index,
                "minor": g.minor,
                "bus_id": g.bus_id,
                "uuid": g.uuid,
                "model": g.model,
                "mig_directory": os.path.isdir(
                    os.path.join(root, f"proc/driver/nvidia/capabilities/gpu{g.minor}/mig")
                ),
                "gpu_instances": [
                    {"gi": gi.gi, "compute_instances": [ci.ci for ci in gi.compute_instances]}
                    for gi in g.gpu_instances
                ],
            }
            for g in driver.gpus
        ],
    }


def _engine_diffs(root: str, backup_dir: str, secrets: set[str]) -> dict[str, str]:
    """engine -> its config against configure's recorded original (a unified diff)."""
    import difflib

    from nvhook.engines import DEFAULT_CONFIGS
    from nvhook.engines.changes import record_path
    from nvhook.tools.doctor.base import under

    out: dict[str, str] = {}
    for engine, default in DEFAULT_CONFIGS.items():
        config = under(root, default)
        current = _read(config)
        record_raw = _read(record_path(backup_dir, engine, config))
        if current is None and record_raw is None:
            continue
        original: bytes | None = None
        note = f"# {config}: no backup record in {backup_dir}\n"
        if record_raw is not None:
            try:
                record = json.loads(record_raw)
                entry = record["files"][0]
                name = entry.get("original")
                original = _read(os.path.join(backup_dir, name)) if name else b""
                note = f"# {config} against configure's original ({name or 'no file'})\n"
            except (ValueError, KeyError, IndexError, TypeError):
                note = f"# {record_path(backup_dir, engine, config)}: not a backup record\n"
        for data in (current, original):
            if data:
                _secret_values(_parsed(config, data), secrets)
        old = (original or b"").decode(errors="replace").splitlines(keepends=True)
        new = (current or b"").decode(errors="replace").splitlines(keepends=True)
        if record_raw is None:
            out[engine] = note + "".join(new)
        else:
            diff = difflib.unified_diff(old, new, "original", config)
            out[engine] = note + ("".join(diff) or "# unchanged since configure\n")
    return out


def _log_tail(path: str) -> str:
    """The last :data:`LOG_LINES` lines of ``path`` (read from its end, each cut at 4 KiB)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LOG_LINES * 4096))
            data = f.read()
    except OSError as e:
        return f"# {path}: {e.strerror}\n"
    lines = [line[:4096] + "\n" for line in data.decode(errors="replace").splitlines()]
    kept: list[str] = []
    room = MEMBER_LIMIT - 1024  # the last lines that fit, whatever their length
    for line in reversed(lines[-LOG_LINES:]):
        room -= len(line.encode())
        if room < 0:
            break
        kept.append(line)
    return "".join(reversed(kept))


def _bundle_secrets(bundle: str, secrets: set[str]) -> None:
    config = _read(os.path.join(bundle, "config.json"), 4 * 1024 * 1024)
    try:
        spec = json.loads(config) if config else None
    except ValueError:
        return
    process = spec.get("process") if isinstance(spec, dict) else None
    env = process.get("env") if isinstance(process, dict) else None
    for entry in env if isinstance(env, list) else ():
        if isinstance(entry, str) and "=" in entry:
            name, _, value = entry.partition("=")
            if not name.startswith(KEPT_ENV) and name not in KEPT_ENV_NAMES and value:
                secrets.add(value)
    annotations = spec.get("annotations") if isinstance(spec, dict) else None
    _secret_values(annotations, secrets)


def bug_report(
    output: str,
    *,
    bundle: str | None = None,
    root: str = "/",
    config: str | None = None,
    backup_dir: str = "",
    bin_dir: str = "",
) -> Report:
    """Write the archive to ``output`` (see the module docstring); ``root``, ``config``,
    ``backup_dir`` and ``bin_dir`` as for ``nvhook doctor``."""
    from nvhook.settings import config_path as default_config_path
    from nvhook.tools.doctor.base import under

    root = root or "/"
    backups = backup_dir or under(root, "/var/lib/nvhook/backups")
    settings_file = config if config is not None else default_config_path()[0]
    secrets: set[str] = set()
    members: dict[str, str] = {}

    def part(name: str, make: Callable[[], object]) -> None:
        try:
            value = make()
        except (Error, OSError, ValueError) as e:
            value = {"error": getattr(e, "message", None) or str(e)}
        members[name] = (
            value if isinstance(value, str) else json.dumps(value, indent=2, default=str) + "\n"
        )

    raw = _read(settings_file)
    if raw is not None:
        _secret_values(_parsed(settings_file + ".toml", raw), secrets)
        members["settings.toml"] = f"# {settings_file}\n" + raw.decode(errors="replace")
    else:
        members["settings.toml"] = f"# {settings_file}: absent (nvhook runs on its defaults)\n"
    if bundle is not None:
        _bundle_secrets(bundle, secrets)

    def settings() -> dict[str, Any]:
        from nvhook.settings import load_settings

        loaded = load_settings(settings_file if raw is not None else None)
        return {k: getattr(loaded, k) for k in loaded.__frozen_fields__}

    part("versions.json", lambda: _versions(root))
    part("settings.json", settings)

    def doctor() -> dict[str, Any]:
        from nvhook.tools.doctor import Options, diagnose, to_json

        opts = Options(root=root, config=config, backup_dir=backup_dir, bin_dir=bin_dir)
        return to_json(diagnose(opts))

    def cdi_check() -> list[dict[str, Any]]:
        from nvhook.settings import load_settings
        from nvhook.tools.cdicheck import check_specs
        from nvhook.tools.doctor.base import under as under_root

        loaded = load_settings(settings_file if raw is not None else None)
        dirs = [under_root(root, d) for d in loaded.cdi_spec_dirs]
        return [
            {"file": f.file, "device": f.device, "field": f.field, "what": f.what,
             "message": f.message, "fix": f.fix, "kind": f.kind, "severity": f.severity}
            for f in check_specs(dirs, root=root, untrusted=loaded.cdi_untrusted_specs)
        ]  # fmt: skip

    part("doctor.json", doctor)
    part("cdi-check.json", cdi_check)
    if bundle is not None:
        from nvhook.tools.explain import explain

        part("explain.json", lambda: explain(bundle, config_path=config, root=root))
    for engine, text in _engine_diffs(root, backups, secrets).items():
        members[f"engines/{engine}.diff"] = text

    def log() -> str:
        from nvhook.settings import load_settings

        path = load_settings(settings_file if raw is not None else None).runtime_log_file
        return _log_tail(under(root, path)) if path else "# runtime.log_file is empty\n"

    part("shim-log.txt", log)
    part("mig.json", lambda: _mig(root))
    return _write(output, members, secrets)


def _write(output: str, members: dict[str, str], secrets: set[str]) -> Report:
    total = 0
    names: list[str] = []
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in members.items():
            data = redact(text, secrets).encode()
            room = min(MEMBER_LIMIT, TOTAL_LIMIT - total)
            if room <= 256:
                break
            if len(data) > room:
                cut = f"\n# cut at {room} bytes (of {len(data)})\n".encode()
                data = data[: room - len(cut)] + cut
            info = tarfile.TarInfo(f"{PREFIX}/{name}")
            info.size = len(data)
            info.mtime = int(time.time())
            info.mode = 0o600
            tar.addfile(info, io.BytesIO(data))
            total += len(data)
            names.append(name)
    blob = buffer.getvalue()
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(blob)
    return Report(path=output, size=len(blob), members=tuple(names))
