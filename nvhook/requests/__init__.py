"""Stage 3, requests (docs/architecture.md): what a container asks for; start path, no I/O.

``parse`` turns a ``config.json`` into :class:`~nvhook.requests.ids.Requests` (``ids``: the
values of a request) under the host's :mod:`~nvhook.requests.policy`; ``requirements``
checks ``NVIDIA_REQUIRE_*``.
"""
