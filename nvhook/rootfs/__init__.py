"""A container's rootfs, read safely: what the hooks and the create path share about it.

:mod:`.safepath` resolves every path inside a rootfs the image controls (``openat2``
with ``RESOLVE_IN_ROOT``, or an ``O_PATH`` walk; docs/architecture.md D7); :mod:`.spec`
reads what config.json says of the container (its rootfs path, its environment). Rank 2
of the start path (docs/architecture.md section 2): it imports only ``oci``, the
constants and the errors.
"""
