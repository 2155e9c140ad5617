"""The rootfs tests share the hook tests' fixtures: both safepath implementations, root."""

from __future__ import annotations

from tests.nvhook.hook.conftest import impl, pytest_runtest_setup  # noqa: F401  (fixtures)
