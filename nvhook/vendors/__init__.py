"""Accelerators of other vendors beside NVIDIA's: AMD ROCm, Intel, Huawei Ascend.

Each vendor is one module (:mod:`~nvhook.vendors.amd`, :mod:`~nvhook.vendors.intel`,
:mod:`~nvhook.vendors.ascend`) that provides one :class:`~nvhook.vendors.model.Vendor`:
its CDI kind, its request variable and grammar (where it has one), and ``discover``, which
reads the host's sysfs and ``/dev`` through the host root (docs/architecture.md D6; no vendor
library at run time) into :class:`~nvhook.vendors.model.Accelerator` values. Everything else
is shared: :mod:`~nvhook.vendors.registry` turns CDI names of any vendor into container
edits (jit mode), ``nvhook cdi generate --vendor`` writes the same edits as a spec, and
:mod:`~nvhook.vendors.labels` derives the vendors' own labels and the vendor-neutral set.
"""
