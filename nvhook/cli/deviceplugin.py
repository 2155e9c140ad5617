"""``nvhook device-plugin``: the Kubernetes device plugin (:mod:`nvhook.deviceplugin.plugin`).

Besides its own options it takes NVIDIA's device plugin's flags and environment variables
(``cmd/nvidia-device-plugin/main.go``), with NVIDIA's precedence: a flag over its variable
over the config file's key (:data:`NVIDIA_FLAGS`; the variables are
:data:`nvhook.deviceplugin.config.ENVIRONMENT`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from nvhook.cli.daemon import (
    DEFAULT_HEALTH_STATE,
    api_server_option,
    follow_options,
    followed_interval,
    health_interval_option,
    health_state_option,
    service_account_option,
)
from nvhook.cli.options import stop_on_signals

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.deviceplugin.model import PluginConfig

__all__ = ["DEFAULT_HEALTH_STATE", "NVIDIA_FLAGS", "device_plugin"]

#: NVIDIA's flags (names as in its main.go, aliases after the first) → the key path each sets;
#: ``bool`` ones may be given bare (``--pass-device-specs``) or with a value (``=false``).
NVIDIA_FLAGS: tuple[tuple[tuple[str, ...], tuple[str, ...], bool], ...] = (
    (("--mig-strategy",), ("flags", "migStrategy"), False),
    (("--fail-on-init-error",), ("flags", "failOnInitError"), True),
    (("--driver-root", "--nvidia-driver-root"), ("flags", "nvidiaDriverRoot"), False),
    (("--dev-root", "--nvidia-dev-root"), ("flags", "nvidiaDevRoot"), False),
    (("--gdrcopy-enabled",), ("flags", "gdrcopyEnabled"), True),
    (("--gds-enabled",), ("flags", "gdsEnabled"), True),
    (("--mofed-enabled",), ("flags", "mofedEnabled"), True),
    (("--mps-root",), ("flags", "mpsRoot"), False),
    (("--device-discovery-strategy",), ("flags", "deviceDiscoveryStrategy"), False),
    (("--pass-device-specs",), ("flags", "plugin", "passDeviceSpecs"), True),
    (("--device-list-strategy",), ("flags", "plugin", "deviceListStrategy"), False),
    (("--device-id-strategy",), ("flags", "plugin", "deviceIDStrategy"), False),
    (("--cdi-annotation-prefix",), ("flags", "plugin", "cdiAnnotationPrefix"), False),
    (("--nvidia-cdi-hook-path", "--nvidia-ctk-path"), ("flags", "plugin", "nvidiaCTKPath"), False),
    (
        ("--driver-root-ctr-path", "--container-driver-root"),
        ("flags", "plugin", "containerDriverRoot"),
        False,
    ),
    (
        ("--shared-devices-allocation-policy",),
        ("flags", "plugin", "sharedDevicesAllocationPolicy"),
        False,
    ),
    (("--imex-channel-ids",), ("imex", "channelIDs"), False),
    (("--imex-required",), ("imex", "required"), True),
)
_LIST_PATHS = {("flags", "plugin", "deviceListStrategy"), ("imex", "channelIDs")}
#: NVIDIA's flags for its own CDI spec generation: accepted, with a note (no effect here).
_CDI_FLAGS = {
    "cdi_feature_flags": ("--cdi-feature-flags", "CDI_FEATURE_FLAGS"),
    "cdi_disable_hooks": ("--cdi-disable-hooks", "CDI_DISABLE_HOOKS"),
}


def _param(names: tuple[str, ...]) -> str:
    return "nv_" + names[0].lstrip("-").replace("-", "_")


def _nvidia_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    for names, path, boolean in reversed(NVIDIA_FLAGS):
        key = ".".join(path)
        extra: dict[str, Any] = {"is_flag": False, "flag_value": "true"} if boolean else {}
        if path in _LIST_PATHS:
            extra["multiple"] = True
        func = click.option(
            *names,
            _param(names),
            metavar="VALUE",
            help=f"NVIDIA's flag: sets {key} (over the config file and its variable).",
            **extra,
        )(func)
    for param, (flag, env) in _CDI_FLAGS.items():
        func = click.option(
            flag,
            param,
            envvar=env,
            metavar="VALUE",
            help="NVIDIA's CDI generation flag: accepted, no effect (the spec is "
            "nvhook cdi generate's).",
        )(func)
    return func


def _overrides(values: dict[str, Any]) -> dict[tuple[str, ...], Any]:
    from nvhook.deviceplugin.config import Override, environment_overrides

    out: dict[tuple[str, ...], Any] = dict(environment_overrides(os.environ))
    for names, path, _ in NVIDIA_FLAGS:
        value = values.get(_param(names))
        if value is None or value == ():
            continue
        if path in _LIST_PATHS:
            value = [v.strip() for item in value for v in item.split(",") if v.strip()]
        out[path] = Override(value, names[0])
    return out


def _finish(config: PluginConfig, state_file: str, amd_naming: str = "single") -> PluginConfig:
    """``config`` with NVIDIA's health variables (``DP_DISABLE_HEALTHCHECKS``,
    ``DP_ENABLE_HEALTHCHECKS``) applied, the state file defaulted and AMD's naming set."""
    from nvhook.deviceplugin.config import health_environment

    health = health_environment(config.health, os.environ)
    if not health.state_file:
        health = health._replace(state_file=state_file)
    return config._replace(health=health, amd_resource_naming=amd_naming)


@click.command("device-plugin")
@click.option(
    "--config",
    "--config-file",
    "config_file",
    envvar="CONFIG_FILE",
    type=click.Path(dir_okay=False),
    help="The device plugin's YAML configuration, NVIDIA's format (default: $CONFIG_FILE, "
    "else every default).",
)
@click.option(
    "--device-plugin-path",
    default="/var/lib/kubelet/device-plugins/",
    show_default=True,
    type=click.Path(file_okay=False),
    help="kubelet's device-plugin directory: kubelet.sock is there, the plugin's sockets go there.",
)
@click.option(
    "--kubelet-socket",
    envvar="KUBELET_SOCKET",
    type=click.Path(dir_okay=False),
    help="NVIDIA's flag: kubelet's socket; its directory is the device-plugin directory.",
)
@click.option(
    "--config-dir",
    envvar="CONFIG_FILE_SRCDIR",
    type=click.Path(file_okay=False),
    help="Several named configs (a mounted ConfigMap: one file per name); the node's label "
    "--node-label chooses one, else --default-config, else the only one; a change of either "
    "is applied without a restart (NVIDIA's config-manager variables work too).",
)
@click.option(
    "--config-map",
    metavar="NAMESPACE/NAME",
    help="Several named configs in this ConfigMap (its data keys), read and watched through "
    "the Kubernetes API instead of a mounted --config-dir: a change is applied within a "
    "second (RBAC: get, list and watch on that ConfigMap by resourceNames); the node's label "
    "chooses among them as with --config-dir.",
)
@click.option(
    "--default-config",
    envvar="DEFAULT_CONFIG",
    default="",
    help="With --config-dir: the config of a node without the label.",
)
@click.option(
    "--node-label",
    envvar="NODE_LABEL",
    default="nvidia.com/device-plugin.config",
    show_default=True,
    help="With --config-dir: the Node label that names the node's config.",
)
@click.option(
    "--node-name",
    "node_name",
    envvar="NODE_NAME",
    default="",
    help="With --config-dir: this node's name, its label read through the Kubernetes API "
    "with the pod's service account (default: $NODE_NAME; none: the default config).",
)
@api_server_option("--node-name")
@click.option(
    "--config-interval",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="With --config-dir or --config-map: seconds between GETs of the node's label (and "
    "the ConfigMap) where the API server refuses to watch them (a thousand nodes at 30 s are "
    "some 33 requests a second); watched, a change is applied within a second.",
)
@service_account_option("With --node-name: where the pod's service account token and ca.crt are.")
@click.option(
    "--check-config",
    "check_file",
    type=click.Path(dir_okay=False),
    help="Validate this configuration file and exit (0 when valid).",
)
@click.option(
    "--node",
    "node_profile",
    metavar="PROFILE",
    help="With --check-config: lay out this mock machine (nvhook mock profiles) and print what "
    "the plugin would advertise there (resources, device IDs, replicas, MIG devices).",
)
@health_state_option(
    "Where the GPUs' health is written for nvhook labels and nvhook doctor (the config's "
    "health.stateFile wins; '' for nowhere)."
)
@health_interval_option
@follow_options("re-registers the resources")
@click.option(
    "--amd-resource-naming",
    "--resource-naming-strategy",
    "amd_naming",
    type=click.Choice(["single", "mixed"]),
    default="single",
    show_default=True,
    help="AMD partitions, as ROCm's plugin's -resource_naming_strategy: single (all "
    "amd.com/gpu) or mixed (amd.com/<compute>_<memory>, amd.com/cpx_nps1).",
)
@_nvidia_flags
def device_plugin(
    config_file: str | None,
    device_plugin_path: str,
    kubelet_socket: str | None,
    config_dir: str | None,
    config_map: str | None,
    default_config: str,
    node_label: str,
    node_name: str,
    api_server: str | None,
    config_interval: float,
    service_account_dir: str,
    check_file: str | None,
    node_profile: str | None,
    health_state_file: str,
    health_interval: float,
    follow_gpus: bool,
    follow_interval: float,
    amd_naming: str,
    **nvidia: Any,
) -> None:
    """Serve the host's GPUs to kubelet (device plugin API v1beta1), one socket per resource.

    The host, driver and dev roots come from nvhook's settings ($NVHOOK_CONFIG or
    /etc/nvhook/config.toml), so it runs on a mock machine too. Stops cleanly on SIGTERM,
    removing its sockets."""
    from nvhook.deviceplugin.config import load_config

    overrides = _overrides(nvidia)
    notes = [
        f"{flag} (${env}): set, but has no effect here: the CDI spec is nvhook cdi generate's"
        for param, (flag, env) in _CDI_FLAGS.items()
        if nvidia.get(param)
    ]
    if check_file is not None:
        config = _finish(
            load_config(check_file, overrides=overrides), health_state_file, amd_naming
        )
        click.echo(f"{check_file}: valid device plugin configuration")
        for note in (*config.notes, *notes):
            click.echo(f"warning: {note}")
        if node_profile is not None:
            from nvhook.deviceplugin.check import advertised_on_profile

            click.echo(advertised_on_profile(config, node_profile), nl=False)
        return
    if node_profile is not None:
        raise click.UsageError("--node goes with --check-config FILE")
    from nvhook.deviceplugin.plugin import DevicePlugin
    from nvhook.planner import Host
    from nvhook.settings import load_settings

    source = None
    if config_dir is not None and config_map is not None:
        raise click.UsageError("--config-dir and --config-map: give one source of configs")
    if config_map is not None:
        namespace, _, map_name = config_map.partition("/")
        if not namespace or not map_name or "/" in map_name:
            raise click.UsageError(f"--config-map {config_map!r}: expected NAMESPACE/NAME")
    if config_dir is not None or config_map is not None:
        from nvhook.deviceplugin.errors import PluginConfigError
        from nvhook.deviceplugin.nodeapi import client
        from nvhook.deviceplugin.selector import ConfigSelector

        def log_line(line: str) -> None:
            click.echo(f"nvhook device-plugin: {line}", err=True)

        creds = client(api_server, service_account_dir) if node_name or config_map else None
        configs = None
        if config_map is not None:
            from nvhook.deviceplugin.selector import ConfigMapConfigs

            assert creds is not None
            configs = ConfigMapConfigs(
                creds, namespace, map_name, poll_interval=config_interval, log=log_line
            )
        source = ConfigSelector(
            config_dir or "",
            default=default_config,
            node=node_name,
            label=node_label,
            credentials=creds if node_name else None,
            config_map=configs,
            overrides=overrides,
            finish=lambda c: _finish(c, health_state_file, amd_naming),
            log=log_line,
            poll_interval=config_interval,
        )
        chosen = source()
        if chosen is None:
            source.close()
            raise PluginConfigError(
                f"{source.where}: no configuration to start with (see the line above); give "
                "--default-config or a valid config"
            )
        config = chosen
    else:
        config = _finish(
            load_config(config_file, overrides=overrides), health_state_file, amd_naming
        )
    host = Host.from_settings(load_settings())

    def log(line: str) -> None:
        click.echo(f"nvhook device-plugin: {line}", err=True)

    for note in notes:
        log(f"warning: {note}")
    stop = stop_on_signals()
    directory = os.path.dirname(kubelet_socket) if kubelet_socket else device_plugin_path
    from nvhook.deviceplugin.selector import ASK_INTERVAL

    plugin = DevicePlugin(
        host,
        config,
        directory,
        health_interval=health_interval,
        log=log,
        kubelet_socket=kubelet_socket,
        config_source=source,
        # a watched label or ConfigMap costs nothing to ask: asked often (the selector polls
        # the API at most every --config-interval where it is not watched)
        config_interval=ASK_INTERVAL if source is not None else config_interval,
        follow_interval=followed_interval(follow_gpus, follow_interval),
    )
    plugin.run(stop)
