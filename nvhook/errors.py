"""Errors of the ``nvhook`` package (NVIDIA policy, discovery, shim, hooks).

Each carries a one-line message for a person and an exit code from the shared
table :class:`oci.errors.ExitCode`.

Hierarchy (the root, :class:`oci.errors.Error`, is shared with the ``oci`` errors)::

    oci.errors.Error
    └── NvhookError
        ├── ConfigError        the config file (/etc/nvhook/config.toml or $NVHOOK_CONFIG) is bad
        ├── RequestError       what the container asks for cannot be parsed (env, annotation, mount)
        ├── UnknownDeviceError a requested GPU or MIG device does not exist; lists those that do
        ├── RequirementError   an NVIDIA_REQUIRE_* constraint is unmet, or policy refuses it
        ├── DriverError        the driver root, procfs or NVML cannot be read (wraps NVML errors)
        ├── MockError          a mock machine cannot be laid out (compiler missing, target used)
        │   └── UnknownProfileError  no mock profile has that name (a usage error: exit 2)
        ├── WorkdirError       a working directory cannot be created or written (demo --dir)
        ├── RuntimeNotFound    no low-level runtime (runc/crun) to exec
        ├── MissingExtraError  a part needs a library of an extra that is not installed
        ├── ContainerEngineError  a private containerd, its CRI or an image tool (umoci,
        │                      skopeo) that the demo drives failed
        ├── HookError          a hook refused to act (path escaping the rootfs, conflicting link)
        │   └── UsageError     a hook's command line cannot be understood (exit 2)
        └── EngineConfigError  an engine's config file (containerd, Docker, CRI-O, podman) is
            │                  invalid or unsupported: `nvhook runtime configure` changed nothing
            └── EngineWriteError   a config file, drop-in or backup cannot be written or restored
"""

from __future__ import annotations

from oci.errors import Error, ExitCode

__all__ = [
    "ConfigError",
    "ContainerEngineError",
    "DriverError",
    "EngineConfigError",
    "EngineWriteError",
    "ExitCode",
    "HookError",
    "MissingExtraError",
    "MockError",
    "NvhookError",
    "RequestError",
    "RequirementError",
    "RuntimeNotFound",
    "UnknownDeviceError",
    "UnknownProfileError",
    "UsageError",
    "WorkdirError",
]


class NvhookError(Error):
    """Root of the ``nvhook`` errors (NVIDIA policy, discovery, shim, hooks, engines)."""


class ConfigError(NvhookError):
    exit_code = ExitCode.CONFIG


class RequestError(NvhookError):
    exit_code = ExitCode.INVALID_SPEC


class UnknownDeviceError(NvhookError):
    exit_code = ExitCode.UNRESOLVED


class RequirementError(NvhookError):
    exit_code = ExitCode.REQUIREMENT


class DriverError(NvhookError):
    exit_code = ExitCode.DEVICE


class MockError(NvhookError):
    exit_code = ExitCode.DEVICE


class UnknownProfileError(MockError):
    exit_code = ExitCode.USAGE


class MockOptionError(MockError):
    """A mock machine option out of range (a node mode, a group id)."""

    exit_code = ExitCode.USAGE


class WorkdirError(NvhookError):
    exit_code = ExitCode.IO


class RuntimeNotFound(NvhookError):
    exit_code = ExitCode.RUNTIME


class ContainerEngineError(NvhookError):
    exit_code = ExitCode.RUNTIME


#: The distribution that installs each import name of an extra's libraries.
_DISTRIBUTIONS = {"grpc": "grpcio", "google": "protobuf", "yaml": "PyYAML"}


class MissingExtraError(NvhookError):
    """A part of nvhook needs a library of one of its extras, and it is not installed: one
    line naming the part, the library and the ``pip install`` that adds it."""

    exit_code = ExitCode.CONFIG

    def __init__(self, part: str, error: ImportError, extra: str) -> None:
        module = (error.name or "").split(".")[0] or "a library"
        library = _DISTRIBUTIONS.get(module, module)
        super().__init__(
            f"{part} needs {library}, which is not installed: pip install 'nvhook[{extra}]' "
            "(nvhook's packages and installer image include every extra)"
        )
        self.library = library
        self.extra = extra


class HookError(NvhookError):
    exit_code = ExitCode.HOOK


class UsageError(HookError):
    """A hook's command line cannot be understood (exit code 2)."""

    exit_code = ExitCode.USAGE


class EngineConfigError(NvhookError):
    exit_code = ExitCode.CONFIG


class EngineWriteError(EngineConfigError):
    exit_code = ExitCode.IO
