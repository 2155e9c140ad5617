"""The end-to-end tests of :mod:`tests.e2e.test_runtime_runc` again, every call that the
native front-end hands over served by ``nvhook-shim-server`` (docs/architecture.md D12), as
on a node where the packages enabled it.

The shim of this module is a native front-end installed in a directory of its own whose
Python launcher (``nvhook-runtime.py``) is replaced by a program that fails, so a call that
fell back to the Python shim instead of reaching the server fails its test: each test below
passes only through the server. Its cache directory (root's, 0700) holds the server's
socket. The two tests of the front-end itself (which start Python, or a server of their
own, on purpose) are not repeated here.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from dataclasses import replace

import pytest

from nvhook.tools.entrypoints import install_entrypoints
from tests.e2e.conftest import Shim, start_shim_server
from tests.e2e.test_runtime_runc import (  # noqa: F401 - collected here again, through the server
    test_a_typo_in_the_settings_stops_no_container_without_gpus,
    test_all_gives_every_gpu_and_mig_device,
    test_cdi_annotation,
    test_cdi_mode_plain_id,
    test_create_start_delete,
    test_mig_device,
    test_none_gives_libraries_without_gpus,
    test_pass_through_is_runc,
    test_run_two_gpus,
    test_twenty_concurrent_creates,
    test_unknown_gpu_creates_nothing,
)

pytestmark = [pytest.mark.root, pytest.mark.runtime]

#: What the replaced Python launcher says: a call that did not reach the server.
FELL_BACK = "nvhook-runtime.py ran: the call did not reach nvhook-shim-server"


@pytest.fixture(scope="module")
def shim(shim: Shim, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shim]:
    """The session's shim settings, through a native front-end that only the server serves."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: no native front-end, so no server is ever asked")
    work = tmp_path_factory.mktemp("via-server")
    bin_dir = work / "bin"
    install_entrypoints(str(bin_dir), sys.executable)
    front, launcher = bin_dir / "nvhook-runtime", bin_dir / "nvhook-runtime.py"
    assert front.read_bytes()[:4] == b"\x7fELF"
    launcher.write_text(f"#!/bin/sh\necho '{FELL_BACK}' >&2\nexit 99\n")
    cache = work / "cache"
    sock = cache / "shim.sock"
    server = start_shim_server(bin_dir, cache)
    try:
        yield replace(shim, binary=str(front), cache_dir=cache)
        assert server.poll() is None, "the server died during the tests"
    finally:
        if server.poll() is None:
            server.terminate()
        assert server.wait(timeout=30) == 0
    assert not sock.exists()
