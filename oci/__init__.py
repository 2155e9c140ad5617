"""Vendor-neutral OCI runtime-spec and CDI machinery (never imports nvhook, pynvml, click)."""
