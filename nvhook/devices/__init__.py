"""Stage 4, devices (docs/architecture.md): requests resolved to the host's GPUs and MIG devices.

``procfs`` (the driver's view under ``/proc``, the fast default) and ``nvml`` (through
pynvml, for MIG UUIDs and requirement checks) read the host; ``gpus`` resolves ids to devices.
"""
