"""The few NVML calls that name GPUs and MIG devices, through ``ctypes`` alone (no ``pynvml``).

``nvhook cdi generate`` names MIG devices by UUID by default, and only NVML knows MIG UUIDs
(``/proc`` has their GPU and compute instances, not their UUIDs). Importing ``pynvml`` costs
more than a bare ``python -I -S`` (``bench/figures.py``: its 8,000 lines, and ``ctypes.util``
with ``shutil``, ``subprocess`` and ``tempfile``); the calls themselves take
well under a millisecond. :func:`mig_ids` makes the calls :meth:`nvhook.devices.nvml.Nvml.gpus`
makes for these fields, with :func:`nvhook.devices.nvml.open_nvml`'s error messages, and this
module imports nothing but ``os`` at its top (``ctypes`` when called). Everything else NVML
answers goes through :mod:`nvhook.devices.nvml`.
"""

from __future__ import annotations

import os

from nvhook.errors import DriverError
from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ctypes
    from typing import Any

__all__ = ["LIBRARY", "GpuMigIds", "MigId", "mig_ids"]

LIBRARY = "libnvidia-ml.so.1"


class MigId(Frozen):
    """A MIG device as :func:`mig_ids` reads it: what names it and where its nodes are."""

    index: int  # nvmlDeviceGetMigDeviceHandleByIndex's slot
    uuid: str  # "MIG-…"
    gi: int  # GPU instance id
    ci: int  # compute instance id


class GpuMigIds(Frozen):
    """A GPU as :func:`mig_ids` reads it: its identity and its MIG devices (MIG mode only)."""

    index: int
    name: str  # "NVIDIA A100-SXM4-80GB" (nvmlDeviceGetName)
    uuid: str
    minor: int
    migs: tuple[MigId, ...]


_NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
_NOT_FOUND = 6  # NVML_ERROR_NOT_FOUND
_TEXT_SIZE = 96  # NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_DEVICE_NAME_V2_BUFFER_SIZE


def mig_ids(lib_dir: str | os.PathLike[str] | None = None) -> tuple[GpuMigIds, ...]:
    """Every GPU's index, name, UUID, minor and MIG devices, straight from ``libnvidia-ml.so.1``.

    What :meth:`~nvhook.devices.nvml.Nvml.gpus` answers about these fields (module
    docstring). Errors are :class:`DriverError` with ``open_nvml``'s messages. NVML counts
    its initialisations, so this may run while an ``open_nvml`` block is open.
    """
    import ctypes

    library = os.path.abspath(os.path.join(lib_dir, LIBRARY)) if lib_dir is not None else None
    shown = library or LIBRARY
    try:
        lib = ctypes.CDLL(library or LIBRARY)
    except OSError as e:
        if library is None:
            raise DriverError(f"cannot load NVML: {shown} not found by the dynamic loader") from e
        raise DriverError(f"cannot load NVML library {library}: {e}") from e

    def fail(function: str, where: str, rc: int) -> DriverError:
        describe = lib.nvmlErrorString
        describe.restype = ctypes.c_char_p
        text = describe(rc)
        message = text.decode() if text is not None else f"NVML Error with code {rc}"
        return DriverError(
            f"NVML {function} failed{where}: {message} (NVML error {rc}, library {shown})"
        )

    def call(function: str, where: str, *args: Any) -> None:
        rc = getattr(lib, function)(*args)
        if rc:
            raise fail(function, where, rc)

    def text(function: str, handle: ctypes.c_void_p, where: str) -> str:
        buffer = ctypes.create_string_buffer(_TEXT_SIZE)
        call(function, where, handle, buffer, ctypes.c_uint(_TEXT_SIZE))
        return buffer.value.decode()

    def migs(handle: ctypes.c_void_p, index: int, parent: str) -> tuple[MigId, ...]:
        at = f" for GPU {index} ({parent})"
        current, pending = ctypes.c_uint(), ctypes.c_uint()
        rc = lib.nvmlDeviceGetMigMode(handle, ctypes.byref(current), ctypes.byref(pending))
        if rc == _NOT_SUPPORTED or (rc == 0 and not current.value):
            return ()
        if rc:
            raise fail("nvmlDeviceGetMigMode", at, rc)
        slots = ctypes.c_uint()
        call("nvmlDeviceGetMaxMigDeviceCount", at, handle, ctypes.byref(slots))
        out = []
        for slot in range(slots.value):
            where = f"{at} MIG device {slot}"
            mig = ctypes.c_void_p()
            rc = lib.nvmlDeviceGetMigDeviceHandleByIndex(
                handle, ctypes.c_uint(slot), ctypes.byref(mig)
            )
            if rc == _NOT_FOUND:
                continue  # an empty slot
            if rc:
                raise fail("nvmlDeviceGetMigDeviceHandleByIndex", where, rc)
            gi, ci = ctypes.c_uint(), ctypes.c_uint()
            uuid = text("nvmlDeviceGetUUID", mig, where)
            call("nvmlDeviceGetGpuInstanceId", where, mig, ctypes.byref(gi))
            call("nvmlDeviceGetComputeInstanceId", where, mig, ctypes.byref(ci))
            out.append(MigId(index=slot, uuid=uuid, gi=gi.value, ci=ci.value))
        return tuple(out)

    rc = lib.nvmlInitWithFlags(ctypes.c_uint(0))
    if rc:
        raise fail("nvmlInitWithFlags", "", rc)
    try:
        count = ctypes.c_uint()
        call("nvmlDeviceGetCount_v2", "", ctypes.byref(count))
        gpus = []
        for index in range(count.value):
            at = f" for GPU {index}"
            handle = ctypes.c_void_p()
            call("nvmlDeviceGetHandleByIndex_v2", at, ctypes.c_uint(index), ctypes.byref(handle))
            uuid = text("nvmlDeviceGetUUID", handle, at)
            at = f"{at} ({uuid})"
            minor = ctypes.c_uint()
            call("nvmlDeviceGetMinorNumber", at, handle, ctypes.byref(minor))
            gpus.append(
                GpuMigIds(
                    index=index,
                    name=text("nvmlDeviceGetName", handle, at),
                    uuid=uuid,
                    minor=minor.value,
                    migs=migs(handle, index, uuid),
                )
            )
    except DriverError:
        lib.nvmlShutdown()
        raise
    rc = lib.nvmlShutdown()
    if rc:
        raise fail("nvmlShutdown", "", rc)
    return tuple(gpus)
