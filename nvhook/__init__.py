"""nvhook: give containers NVIDIA GPUs.

Import what you use from its submodule (``from nvhook.planner import plan``): this package
re-exports nothing and imports nothing, because the runtime shim and hooks import
``nvhook.shim`` and ``nvhook.hook`` on every container start and must not pay for the
rest (docs/architecture.md, D5). ``tests/test_layers.py`` holds the layer rules: what the
start path may reach, and that ``oci`` never imports ``nvhook``.
"""
