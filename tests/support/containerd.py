"""A private containerd (own config, root, state and sockets), driven with ``ctr``: the harness's
face of :class:`nvhook.tools.containerd.Containerd`, which ``nvhook demo --kubernetes`` starts
too. Here a missing tool skips the test (fails under CI), an error fails it readably, the
namespace is ``nvhook-test`` and the sandbox image the busybox one unless given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from nvhook.tools import containerd
from tests.support.basics import Result, fail_on_engine_error, require, unique_id
from tests.support.images import BUSYBOX_IMAGE

__all__ = ["Containerd"]


class Containerd(containerd.Containerd):
    """:class:`nvhook.tools.containerd.Containerd` for tests (see the module's docstring)."""

    def __init__(
        self,
        workdir: Path,
        *,
        cri: bool = False,
        runtimes: Mapping[str, str] | None = None,
        sandbox_image: str = BUSYBOX_IMAGE,
        namespace: str = "nvhook-test",
        extra_config: str = "",
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            workdir,
            cri=cri,
            runtimes=runtimes,
            sandbox_image=sandbox_image,
            namespace=namespace,
            extra_config=extra_config,
            env=env,
            binary=require("containerd"),
            ctr_binary=require("ctr"),
        )

    def __enter__(self) -> Containerd:
        self.start()
        return self

    def start(self, *, timeout: float = 20) -> None:
        with fail_on_engine_error():
            super().start(timeout=timeout)

    def ctr(
        self, *args: str, namespace: str | None = None, timeout: float = 120, check: bool = True
    ) -> Result:
        with fail_on_engine_error():
            return super().ctr(*args, namespace=namespace, timeout=timeout, check=check)

    def run(  # type: ignore[override]  # the id is optional here: a unique one is made
        self,
        image: str,
        id: str | None,
        cmd: Sequence[str],
        *,
        runc_binary: str | None = None,
        env: Mapping[str, str] | None = None,
        options: Sequence[str] = (),
        namespace: str | None = None,
        timeout: float = 60,
        check: bool = False,
    ) -> Result:
        """``ctr run --rm`` with private fifo and runc roots; ``runc_binary`` is the shim."""
        return super().run(
            image,
            id or unique_id("ctrd"),
            cmd,
            runc_binary=runc_binary,
            env=env,
            options=options,
            namespace=namespace,
            timeout=timeout,
            check=check,
        )
