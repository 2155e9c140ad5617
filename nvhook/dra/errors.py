"""The DRA driver's errors (docs/architecture.md D9): one line naming what is wrong."""

from __future__ import annotations

from nvhook.errors import ConfigError, NvhookError
from oci.errors import ExitCode

__all__ = ["ApiError", "DraConfigError", "PrepareError", "RegistrationError", "StateError"]


class DraConfigError(ConfigError):
    """The DRA driver's flags, configuration file or kubeconfig are invalid (names which)."""


class ApiError(NvhookError):
    """The Kubernetes API server refused or could not be reached (names the object and URL)."""

    exit_code = ExitCode.IO

    def __init__(self, message: str, status: int | None = None, *, unserved: bool = False) -> None:
        super().__init__(message)
        self.status = status
        #: a 404 for the path, not for an object (the server does not serve that API version)
        self.unserved = unserved


class PrepareError(NvhookError):
    """A claim cannot be prepared: not ours, not this node's, taken by another claim."""

    exit_code = ExitCode.UNRESOLVED


class StateError(NvhookError):
    """The driver's checkpoint cannot be read or written (names the file)."""

    exit_code = ExitCode.IO


class RegistrationError(NvhookError):
    """The plugin cannot serve its sockets in kubelet's directories."""

    exit_code = ExitCode.IO
