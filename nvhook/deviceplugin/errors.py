"""The device plugin's errors (docs/architecture.md D9): one line naming what is wrong."""

from __future__ import annotations

from nvhook.errors import ConfigError, NvhookError, UnknownDeviceError
from oci.errors import ExitCode

__all__ = ["AllocationError", "PluginConfigError", "RegistrationError", "StrategyError"]


class PluginConfigError(ConfigError):
    """The device plugin's configuration file is invalid (names the key path)."""


class StrategyError(ConfigError):
    """The host's GPUs do not fit the configured MIG strategy (names the GPU)."""


class AllocationError(UnknownDeviceError):
    """kubelet asked for a device ID that is unknown or unhealthy, or too many replicas."""


class RegistrationError(NvhookError):
    """kubelet refused the registration, or cannot be reached on its socket."""

    exit_code = ExitCode.IO
