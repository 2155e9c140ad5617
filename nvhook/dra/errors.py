"""The DRA driver's errors (docs/architecture.md D9): one line naming what is wrong."""

from __future__ import annotations

from nvhook.errors import ConfigError, NvhookError
from oci.errors import ExitCode

__all__ = ["DraConfigError", "PrepareError", "RegistrationError", "StateError"]

# The API server's failures are nvhook.kubeapi.ApiError, shared with the device plugin.


class DraConfigError(ConfigError):
    """The DRA driver's flags, configuration file or kubeconfig are invalid (names which)."""


class PrepareError(NvhookError):
    """A claim cannot be prepared: not ours, not this node's, taken by another claim."""

    exit_code = ExitCode.UNRESOLVED


class StateError(NvhookError):
    """The driver's checkpoint cannot be read or written (names the file)."""

    exit_code = ExitCode.IO


class RegistrationError(NvhookError):
    """The plugin cannot serve its sockets in kubelet's directories."""

    exit_code = ExitCode.IO
