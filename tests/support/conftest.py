"""Makes the container harness's fixtures visible to tests/support/.

Elsewhere they come from ``pytest_plugins = ["tests.support.containers"]`` in tests/conftest.py.
"""

from tests.support.containers import (  # noqa: F401
    busybox_image,
    capture_runtime,
    containerd,
    need_root,
    podman,
    pytest_runtest_setup,
    runc,
)
