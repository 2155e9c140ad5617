"""runc, or anything with its command line (the nvhook shim), under a private state root."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.basics import Json, Result, require, run_command, unique_id

__all__ = ["Runc"]


class Runc:
    """A runc-compatible runtime (runc itself, or the nvhook shim) with its own state root.

    ``run`` runs in the foreground and captures the container's output. ``create`` sends the
    container's stdio to ``<bundle>/<id>.stdout`` / ``.stderr`` (see :meth:`output`), since a
    pipe would stay open as long as the container lives.
    """

    def __init__(
        self,
        root: Path,
        binary: str = "runc",
        env: Mapping[str, str] | None = None,
        global_args: Sequence[str] = (),
    ) -> None:
        self.root = root
        self.binary = binary if "/" in binary else require(binary)
        self.env = env
        self.global_args = global_args
        self.ids: list[str] = []  # every container id it ran or created, for cleanup
        self._outputs: dict[str, Path] = {}
        root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"Runc(root={self.root!r}, binary={self.binary!r})"

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "--root", str(self.root), *self.global_args, *args]

    def call(self, *args: str, timeout: float = 60, check: bool = False) -> Result:
        """Run ``<binary> --root R [global_args] ARGS…`` and capture its output."""
        return run_command(self.argv(*args), timeout=timeout, check=check, env=self.env)

    def run(
        self, bundle: Path, id: str | None = None, *, timeout: float = 60, check: bool = False
    ) -> Result:
        """``run --bundle B ID`` in the foreground: the container's output is the result's."""
        cid = id or unique_id("run")
        self.ids.append(cid)
        return self.call("run", "--bundle", str(bundle), cid, timeout=timeout, check=check)

    def create(
        self, bundle: Path, id: str | None = None, *, timeout: float = 60, check: bool = True
    ) -> str:
        """``create --bundle B ID``; returns the id. Fails the test on error when ``check``."""
        cid = id or unique_id("ctr")
        self.ids.append(cid)
        out, err = bundle / f"{cid}.stdout", bundle / f"{cid}.stderr"
        self._outputs[cid] = out
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.run(
                self.argv("create", "--bundle", str(bundle), cid),
                stdin=subprocess.DEVNULL,
                stdout=o,
                stderr=e,
                timeout=timeout,
                env=dict(self.env) if self.env is not None else None,
                check=False,
            )
        if check and proc.returncode != 0:
            pytest.fail(
                f"{self.binary} create {cid} failed ({proc.returncode}):\n"
                f"{err.read_text(errors='replace')}",
                pytrace=False,
            )
        return cid

    def start(self, id: str, *, timeout: float = 60, check: bool = True) -> Result:
        return self.call("start", id, timeout=timeout, check=check)

    def state(self, id: str, *, timeout: float = 60) -> Json:
        state: Json = json.loads(self.call("state", id, timeout=timeout, check=True).stdout)
        return state

    def kill(self, id: str, sig: str = "KILL", *, timeout: float = 60) -> Result:
        return self.call("kill", id, sig, timeout=timeout)

    def delete(self, id: str, *, force: bool = False, timeout: float = 60) -> Result:
        return self.call("delete", *(["--force"] if force else []), id, timeout=timeout)

    def wait_stopped(self, id: str, *, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.state(id)["status"] != "stopped":
            if time.monotonic() > deadline:
                pytest.fail(f"container {id} still running after {timeout}s", pytrace=False)
            time.sleep(0.02)

    def output(self, id: str) -> str:
        """What a container made by :meth:`create` wrote to its stdout so far."""
        return self._outputs[id].read_text(errors="replace")

    def cleanup(self) -> None:
        """Force-delete every container this helper made (errors ignored)."""
        for cid in reversed(self.ids):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.delete(cid, force=True, timeout=30)
        self.ids.clear()
