"""Discovery: what of the NVIDIA driver a host has, as container edits.

:func:`discover_driver_files` finds the driver's libraries, binaries,
configuration, firmware and IPC endpoints for a set of capabilities under a
driver root (docs/architecture.md D6 and section 6); :meth:`DriverFiles.to_edits`
turns them into read-only bind mounts. Standard library only: this runs in the
runtime shim on container start (docs/architecture.md D5).
"""

from __future__ import annotations

from nvhook.discover.catalog import DEFAULT_SEARCH_PATHS
from nvhook.discover.driver import (
    DATA_OPTIONS,
    EXEC_OPTIONS,
    IPC_OPTIONS,
    CapabilityFiles,
    DriverFiles,
    Symlink,
    discover_driver_files,
)

__all__ = [
    "DATA_OPTIONS",
    "DEFAULT_SEARCH_PATHS",
    "EXEC_OPTIONS",
    "IPC_OPTIONS",
    "CapabilityFiles",
    "DriverFiles",
    "Symlink",
    "discover_driver_files",
]
