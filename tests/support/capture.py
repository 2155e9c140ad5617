"""A capturing runtime: a runc wrapper that keeps what each call was given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oci._frozen import Frozen
from tests.support.basics import Json, require

__all__ = ["CaptureRuntime"]

_CAPTURE_SCRIPT = r"""#!/bin/sh
# capture runtime (tests/support/capture.py): keeps each call's argv in OUT/call-TS-PID
# (NUL-separated) and, on `create`, the bundle's config.json as OUT/create-TS-PID-<id>.json;
# then execs the real runtime with the same argv. Absolute paths: podman calls it without PATH.
out=@OUT@
real=@REAL@
stamp=$(/bin/date +%s%N)-$$
/usr/bin/printf '%s\0' "$@" > "$out/call-$stamp"
cmd= bundle= id= expect=
for a in "$@"; do
  if [ -n "$expect" ]; then
    [ "$expect" = bundle ] && bundle=$a
    expect=
    continue
  fi
  if [ -z "$cmd" ]; then
    case $a in
      --root|--log|--log-format|--criu|--rootless) expect=global ;;
      -*) ;;
      *) cmd=$a ;;
    esac
    continue
  fi
  case $a in
    --bundle|-b) expect=bundle ;;
    --bundle=*) bundle=${a#--bundle=} ;;
    -b=*) bundle=${a#-b=} ;;
    --pid-file|--console-socket|--preserve-fds) expect=value ;;
    -*) ;;
    *) id=$a ;;
  esac
done
if [ "$cmd" = create ]; then
  [ -n "$bundle" ] || bundle=$(pwd)
  /bin/cp "$bundle/config.json" "$out/create-$stamp-$id.json"
fi
exec "$real" "$@"
"""


def _sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


class CaptureRuntime(Frozen):
    """A runc wrapper script that keeps, for each ``create``, config.json as the runtime saw it.

    Pass :attr:`path` as ``podman --runtime``, ``ctr run --runc-binary`` or ``Runc(binary=…)``.
    """

    path: Path
    out: Path
    real: str

    @classmethod
    def create(cls, directory: Path, *, real: str = "runc") -> CaptureRuntime:
        real_path = real if "/" in real else require(real)
        out = directory / "captured"
        out.mkdir(parents=True, exist_ok=True)
        path = directory / "capture-runc"
        script = _CAPTURE_SCRIPT.replace("@OUT@", _sh_quote(str(out.resolve())))
        path.write_text(script.replace("@REAL@", _sh_quote(real_path)))
        path.chmod(0o755)
        return cls(path=path, out=out, real=real_path)

    def configs(self) -> dict[str, Json]:
        """Captured config.json of each created container, by container id, oldest first."""
        files = sorted(self.out.glob("create-*.json"), key=_stamp)
        return {p.stem.split("-", 3)[3]: json.loads(p.read_text()) for p in files}

    def last(self) -> Json:
        """The config.json of the most recent ``create``; fails the test if there was none."""
        configs = self.configs()
        if not configs:
            pytest.fail(f"the capture runtime saw no create (calls: {self.calls()})")
        return list(configs.values())[-1]

    def calls(self) -> list[list[str]]:
        """argv (without argv[0]) of every call, oldest first."""
        files = sorted(self.out.glob("call-*"), key=_stamp)
        return [_decode(p.read_bytes()) for p in files]


def _stamp(p: Path) -> tuple[int, int]:
    """(nanoseconds, pid) from ``call-TS-PID`` / ``create-TS-PID-ID.json``."""
    _, ts, pid = p.name.split("-", 3)[:3]
    return int(ts), int(pid.split(".")[0])


def _decode(raw: bytes) -> list[str]:
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]
