"""Hand-built GPUs (NVML's view) for the device plugin's value-level tests."""

from __future__ import annotations

from nvhook.devices.nvml import GpuInfo, MigInfo

A100 = "NVIDIA A100-SXM4-80GB"


def gpu(index: int, *, mig: tuple[str, ...] | None = None) -> GpuInfo:
    """GPU ``index`` (UUID ``GPU-<index>``); ``mig``: in MIG mode with devices of these
    profiles (``()``: in MIG mode without devices)."""
    uuid = f"GPU-{index}"
    migs = tuple(
        MigInfo(
            index=i,
            uuid=f"MIG-{index}-{i}",
            gi=i + 1,
            ci=0,
            profile=p,
            memory_bytes=10 << 30,
            parent_uuid=uuid,
        )
        for i, p in enumerate(mig or ())
    )
    return GpuInfo(
        index=index,
        name=A100,
        uuid=uuid,
        bus_id=f"0000:{index + 1:02x}:00.0",
        minor=index,
        arch="ampere",
        compute_capability="8.0",
        memory_bytes=80 << 30,
        brand="nvidia",
        mig_capable=True,
        mig_enabled=mig is not None,
        migs=migs,
    )
