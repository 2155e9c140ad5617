"""Per-node configurations: one of several named configs, chosen by the node's label.

NVIDIA's plugin takes a ConfigMap with several named configs and a default, and its
config-manager sidecar follows the node label ``nvidia.com/device-plugin.config``
(``NODE_LABEL``) to choose one, restarting the plugin on a change. Here the plugin does it
itself, without a restart: :class:`ConfigSelector` is called on every turn of the plugin's
configuration check and answers the configuration to serve:

- the name is the node's label, else ``default``, else the directory's only config
  (NVIDIA's fallback strategies ``named`` then ``single``). The label is followed by a watch
  of the Node (:class:`nvhook.kubeapi.ObjectWatch`: list, then watch with resume, re-list on
  410, reconnect with backoff), so a change is seen as it is made and the plugin, which asks
  every :data:`ASK_INTERVAL`, applies it within about a second; where the API server
  refuses the watch (RBAC without ``list``/``watch`` on nodes) or before the first list
  answered, the label is polled instead (``GET /api/v1/nodes/NAME``,
  :func:`nvhook.deviceplugin.nodeapi.node_labels`, at most once per ``poll_interval``);
- the config is the file of that name in ``directory`` (a mounted ConfigMap: one file per
  key; ``NAME`` or ``NAME.yaml``), read again when the name or the file's identity (inode,
  size, mtime: kubelet swaps a ConfigMap's files by renaming its ``..data`` link) changes;
  or, with ``config_map`` (``NAMESPACE/NAME``), the ConfigMap's key of that name read through
  the API (:class:`ConfigMapConfigs`: watched as the Node is, polled where the watch is
  refused; RBAC ``get``/``list``/``watch`` on that one ConfigMap by ``resourceNames``), so a
  change is applied within a second, not after kubelet's sync of a mounted one (a minute or
  more); its ``data`` is bounded (:data:`MAX_CONFIG_MAP`, the API's own limit);
- a name with no config, a config that does not load (the message names the file, or the
  ConfigMap and key), or an API that does not answer are logged once each and change
  nothing: the plugin keeps serving what it serves.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from nvhook.deviceplugin.config import Override, load_config, load_config_text
from nvhook.deviceplugin.errors import PluginConfigError
from nvhook.deviceplugin.model import PluginConfig
from nvhook.deviceplugin.nodeapi import node_labels
from nvhook.kubeapi import ApiError, Client, ObjectWatch

__all__ = ["ASK_INTERVAL", "DEFAULT_LABEL", "MAX_CONFIG_MAP", "ConfigMapConfigs", "ConfigSelector"]

#: NVIDIA's label (its config-manager's ``NODE_LABEL`` default)
DEFAULT_LABEL = "nvidia.com/device-plugin.config"
#: seconds between the plugin's questions to a selector: a watched label or ConfigMap costs
#: nothing to ask, so a change is applied within this plus the old servers' stop (0.5 s)
ASK_INTERVAL = 0.5
#: the most ``data`` of a ConfigMap read (the API refuses a ConfigMap over 1 MiB)
MAX_CONFIG_MAP = 1 << 20
_SUFFIXES = ("", ".yaml", ".yml")


class ConfigMapConfigs:
    """The named configs of ConfigMap ``namespace/name`` through the API: its ``data`` keys."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        name: str,
        *,
        watch: bool = True,
        poll_interval: float = 30.0,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.client, self.namespace, self.name = client, namespace, name
        self.poll_interval, self.log = poll_interval, log
        self.where = f"ConfigMap {namespace}/{name}"
        self._path = f"/api/v1/namespaces/{namespace}/configmaps"
        self._polled: tuple[float, dict[str, Any] | None] | None = None
        self.watch: ObjectWatch | None = None
        if watch:
            self.watch = ObjectWatch(client, self._path, name, log=log).start()
            self.watch.synced.wait(client.timeout)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.stop()

    def _object(self) -> dict[str, Any] | None:
        watch = self.watch
        if watch is not None and not watch.refused.is_set() and watch.lists:
            return watch.object
        now = time.monotonic()
        if self._polled is not None and now - self._polled[0] < self.poll_interval:
            return self._polled[1]
        try:
            found = self.client.request("GET", f"{self._path}/{self.name}")
        except ApiError as e:
            if e.status != 404:
                self.log(f"warning: {self.where} unknown: {e.message}")
                return self._polled[1] if self._polled else None
            found = None
        self._polled = (now, found if isinstance(found, dict) else None)
        return self._polled[1]

    def data(self) -> dict[str, str]:
        """The ConfigMap's keys and texts now; :class:`PluginConfigError` when it is missing
        or larger than :data:`MAX_CONFIG_MAP`."""
        obj = self._object()
        if obj is None:
            raise PluginConfigError(f"{self.where} does not exist (or cannot be read yet)")
        data = obj.get("data") or {}
        if not isinstance(data, dict):
            raise PluginConfigError(f"{self.where}: its data is not a mapping")
        size = sum(len(str(k)) + len(str(v).encode()) for k, v in data.items())
        if size > MAX_CONFIG_MAP:
            raise PluginConfigError(
                f"{self.where}: its data is {size} bytes, more than {MAX_CONFIG_MAP}: split it"
            )
        return {str(k): str(v) for k, v in data.items()}


class ConfigSelector:
    """The configuration named by ``node``'s ``label`` among ``directory``'s files."""

    def __init__(
        self,
        directory: str,
        *,
        default: str = "",
        node: str = "",
        label: str = DEFAULT_LABEL,
        credentials: Client | None = None,
        config_map: ConfigMapConfigs | None = None,
        overrides: Mapping[tuple[str, ...], Override] | None = None,
        finish: Callable[[PluginConfig], PluginConfig] = lambda c: c,
        log: Callable[[str], None] = lambda line: None,
        watch: bool = True,
        poll_interval: float = 30.0,
    ) -> None:
        self.directory, self.default, self.node, self.label = directory, default, node, label
        self.credentials, self.overrides, self.finish, self.log = (
            credentials,
            overrides,
            finish,
            log,
        )
        self.name = ""
        self.config_map = config_map
        self.poll_interval = poll_interval
        self._polled: tuple[float, str] | None = None  # (when, the label's value)
        self._key: tuple[object, ...] | None = None
        self._config: PluginConfig | None = None
        self._said: set[str] = set()  # before the watch: its thread may log at once
        self.node_watch: ObjectWatch | None = None
        if watch and node and credentials is not None:
            self.node_watch = ObjectWatch(
                credentials, "/api/v1/nodes", node, log=lambda line: self._once(line)
            ).start()
            self.node_watch.synced.wait(credentials.timeout)  # the first answer, or poll

    def _once(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            self.log(message)

    @property
    def where(self) -> str:
        return self.config_map.where if self.config_map is not None else self.directory

    def _names(self) -> list[str]:
        if self.config_map is not None:
            try:
                return sorted(self.config_map.data())
            except PluginConfigError:
                return []
        try:
            entries = sorted(os.listdir(self.directory))
        except OSError:
            return []
        return [e for e in entries if not e.startswith(".")]

    def _find(self, name: str) -> tuple[tuple[object, ...], Callable[[], PluginConfig]] | None:
        """The identity of config ``name`` and its loader (None: there is none)."""
        if self.config_map is not None:
            data = self.config_map.data()
            key = next((name + x for x in _SUFFIXES if name + x in data), None)
            if key is None:
                return None
            text, source = data[key], f"{self.config_map.where} key {key}"
            identity = (name, key, text)
            return identity, lambda: load_config_text(text, source=source, overrides=self.overrides)
        path = next(
            (
                os.path.join(self.directory, name + x)
                for x in _SUFFIXES
                if os.path.isfile(os.path.join(self.directory, name + x))
            ),
            None,
        )
        if path is None:
            return None
        st = os.stat(path)
        found = path
        return (name, st.st_ino, st.st_size, st.st_mtime_ns), lambda: load_config(
            found, overrides=self.overrides
        )

    def close(self) -> None:
        """Stop following the Node."""
        if self.node_watch is not None:
            self.node_watch.stop()
        if self.config_map is not None:
            self.config_map.close()

    def _label(self) -> str | None:
        """The node's label now (None: unknown, the API does not answer)."""
        assert self.credentials is not None
        watch = self.node_watch
        if watch is not None and not watch.refused.is_set() and watch.lists:
            labels = ((watch.object or {}).get("metadata") or {}).get("labels") or {}
            return str(labels.get(self.label, ""))
        now = time.monotonic()
        if self._polled is not None and now - self._polled[0] < self.poll_interval:
            return self._polled[1]
        try:
            value = node_labels(self.credentials, self.node).get(self.label, "")
        except ApiError as e:
            self._once(f"warning: the node's label {self.label} unknown: {e.message}")
            return None
        self._polled = (now, value)
        return value

    def _chosen(self) -> str:
        if self.node and self.credentials is not None:
            value = self._label()
            if value is None:
                return self.name or self.default
            if value:
                return value
        if self.default:
            return self.default
        names = self._names()
        return names[0] if len(names) == 1 else ""

    def __call__(self) -> PluginConfig | None:
        """The configuration to serve now (None: none could be chosen or loaded yet)."""
        name = self._chosen()
        if not name:
            self._once(
                f"error: no configuration chosen: no {self.label} label, no default, and "
                f"{self.where} holds {len(self._names())} configs; set --default-config"
            )
            return self._config
        try:
            found = self._find(name)
        except PluginConfigError as e:
            self._once(f"error: {e.message}; still serving {self.name or 'nothing'}")
            return self._config
        if found is None:
            self._once(
                f"error: {self.label}={name}: no such config in {self.where} (it has "
                f"{', '.join(self._names()) or 'none'}); still serving {self.name or 'nothing'}"
            )
            return self._config
        key, load = found
        if key == self._key:
            return self._config
        try:
            config = self.finish(load())
        except PluginConfigError as e:
            self._once(f"error: {e.message}; still serving {self.name or 'nothing'}")
            return self._config
        if self.name and name != self.name:
            self.log(f"configuration {name} chosen ({self.label}), was {self.name}")
        self._key, self._config, self.name = key, config, name
        self._said.clear()
        return config
