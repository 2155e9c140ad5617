"""Docker: ``runtimes.<NAME>.path`` in ``daemon.json`` (``docker run --runtime NAME``).

``--set-as-default`` sets ``default-runtime``. ``--enable-cdi`` sets ``features.cdi`` to true,
which switches dockerd's own CDI on (``docker run --device nvidia.com/gpu=0`` with the specs of
``cdi-spec-dirs``, default ``/etc/cdi`` and ``/var/run/cdi``): off unless set in Docker 25-28.1
(moby v26.1.5 cmd/dockerd/daemon.go: the CDI driver is registered only when
``Features["cdi"]``), on unless set to false from 28.2 (v28.5.2 ``cdiEnabled``). Every other
key keeps its value and its place; the file is written back with the indentation it had (4
spaces for a new file), and not at all when the settings are there already. An existing
runtime of that name keeps its other keys (``runtimeArgs``). An empty file counts as ``{}``.
Invalid JSON (as
:func:`oci.jsoncodec.loads` reads it, Go's rules, the same message on every Python), a
duplicated key (one of the two would be lost), a top level that is not an object or nesting
deeper than :data:`oci.jsoncodec.MAX_DEPTH`: an error, nothing written. dockerd reads the file at
start: restart it afterwards.
"""

from __future__ import annotations

import json
import os
from typing import Any

from nvhook.engines.changes import FileChange, Plan, read_file
from nvhook.errors import EngineConfigError
from oci import jsoncodec

__all__ = ["DEFAULT_CONFIG", "plan_configure"]

DEFAULT_CONFIG = "/etc/docker/daemon.json"


def plan_configure(
    config: str = DEFAULT_CONFIG,
    *,
    name: str,
    runtime_path: str,
    set_as_default: bool = False,
    enable_cdi: bool = False,
) -> Plan:
    """The change that adds runtime ``name`` (running ``runtime_path``) to ``config`` (and
    with ``enable_cdi`` sets ``features.cdi``)."""
    config = os.path.abspath(config)
    data = read_file(config)
    settings, indent = _load(config, data)
    before = json.loads(json.dumps(settings))
    runtimes = settings.setdefault("runtimes", {})
    if not isinstance(runtimes, dict):
        raise EngineConfigError(f'{config}: "runtimes" must be a JSON object')
    entry = runtimes.setdefault(name, {})
    if not isinstance(entry, dict):
        raise EngineConfigError(f'{config}: "runtimes"."{name}" must be a JSON object')
    entry["path"] = runtime_path
    if set_as_default:
        settings["default-runtime"] = name
    if enable_cdi:
        features = settings.setdefault("features", {})
        if not isinstance(features, dict):
            raise EngineConfigError(f'{config}: "features" must be a JSON object')
        features["cdi"] = True
    if data is not None and settings == before:
        return Plan("docker", config, (FileChange(config, data, data),))
    text = json.dumps(settings, indent=indent, ensure_ascii=False) + "\n"
    return Plan("docker", config, (FileChange(config, data, text.encode()),))


def _load(path: str, data: bytes | None) -> tuple[dict[str, Any], int | str]:
    """The settings in ``data`` and the indentation to write them back with."""
    if data is None:
        return {}, 4
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EngineConfigError(f"{path}: not UTF-8 (byte {e.start})") from e
    if not text.strip():
        return {}, 4
    try:  # oci.jsoncodec: the same messages on every Python (3.13 rewords a trailing comma)
        settings = jsoncodec.loads(
            text, object_pairs_hook=lambda pairs: _no_duplicates(path, pairs)
        )
    except jsoncodec.JSONError as e:  # deeper than MAX_DEPTH too: json.dumps(indent=...)
        raise EngineConfigError(f"{path}: {e}") from None  # recurses in Python, once a level
    if not isinstance(settings, dict):
        raise EngineConfigError(f"{path}: the top level must be a JSON object")
    return settings, _indent(text)


def _no_duplicates(path: str, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise EngineConfigError(f'{path}: key "{key}" appears twice')
        out[key] = value
    return out


def _indent(text: str) -> int | str:
    """The indentation of the first indented line (a tab, or a number of spaces); 4."""
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            lead = line[: len(line) - len(stripped)]
            return lead if "\t" in lead else len(lead)
    return 4
