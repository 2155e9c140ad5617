"""Per-node configurations: one of several named configs, chosen by the node's label.

NVIDIA's plugin takes a ConfigMap with several named configs and a default, and its
config-manager sidecar follows the node label ``nvidia.com/device-plugin.config``
(``NODE_LABEL``) to choose one, restarting the plugin on a change. Here the plugin does it
itself, without a restart: :class:`ConfigSelector` is called on every turn of the plugin's
configuration check and answers the configuration to serve:

- the name is the node's label (read with ``GET /api/v1/nodes/NAME``,
  :func:`nvhook.deviceplugin.nodeapi.node_labels`), else ``default``, else the directory's
  only config (NVIDIA's fallback strategies ``named`` then ``single``);
- the config is the file of that name in ``directory`` (a mounted ConfigMap: one file per
  key; ``NAME`` or ``NAME.yaml``), read again when the name or the file's identity (inode,
  size, mtime: kubelet swaps a ConfigMap's files by renaming its ``..data`` link) changes;
- a name with no file, a file that does not load, or an API that does not answer are logged
  once each and change nothing: the plugin keeps serving what it serves.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from nvhook.deviceplugin.config import Override, load_config
from nvhook.deviceplugin.errors import PluginConfigError
from nvhook.deviceplugin.model import PluginConfig
from nvhook.deviceplugin.nodeapi import node_labels
from nvhook.kubeapi import ApiError, Client

__all__ = ["DEFAULT_LABEL", "ConfigSelector"]

#: NVIDIA's label (its config-manager's ``NODE_LABEL`` default)
DEFAULT_LABEL = "nvidia.com/device-plugin.config"


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
        overrides: Mapping[tuple[str, ...], Override] | None = None,
        finish: Callable[[PluginConfig], PluginConfig] = lambda c: c,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.directory, self.default, self.node, self.label = directory, default, node, label
        self.credentials, self.overrides, self.finish, self.log = (
            credentials,
            overrides,
            finish,
            log,
        )
        self.name = ""
        self._key: tuple[str, int, int, int] | None = None
        self._config: PluginConfig | None = None
        self._said: set[str] = set()

    def _once(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            self.log(message)

    def _names(self) -> list[str]:
        try:
            entries = sorted(os.listdir(self.directory))
        except OSError:
            return []
        return [e for e in entries if not e.startswith(".")]

    def _chosen(self) -> str:
        if self.node and self.credentials is not None:
            try:
                value = node_labels(self.credentials, self.node).get(self.label, "")
            except ApiError as e:
                self._once(f"warning: the node's label {self.label} unknown: {e.message}")
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
                f"{self.directory} holds {len(self._names())} configs; set --default-config"
            )
            return self._config
        path = next(
            (
                os.path.join(self.directory, n)
                for n in (name, f"{name}.yaml", f"{name}.yml")
                if os.path.isfile(os.path.join(self.directory, n))
            ),
            None,
        )
        if path is None:
            self._once(
                f"error: {self.label}={name}: no such config in {self.directory} (it has "
                f"{', '.join(self._names()) or 'none'}); still serving {self.name or 'nothing'}"
            )
            return self._config
        st = os.stat(path)
        key = (name, st.st_ino, st.st_size, st.st_mtime_ns)
        if key == self._key:
            return self._config
        try:
            config = self.finish(load_config(path, overrides=self.overrides))
        except PluginConfigError as e:
            self._once(f"error: {e.message}; still serving {self.name or 'nothing'}")
            return self._config
        if self.name and name != self.name:
            self.log(f"configuration {name} chosen ({self.label}), was {self.name}")
        self._key, self._config, self.name = key, config, name
        self._said.clear()
        return config
