"""``nvhook-runtime``: a drop-in for runc that gives containers the GPUs they ask for.

Containerd, CRI-O and podman call it exactly as they call runc, several times per
container. It always ends by exec'ing the low-level runtime with the original argv;
only a ``create`` (or runc's ``run``) whose container asks for GPUs first edits the
bundle's config.json. This module is the launcher's entry point and nothing else:
:func:`main` is :func:`nvhook.call.handle` (everything up to the exec: the decision, the
edit, the messages), then :meth:`nvhook.call.Exec.run` (the exec). Nothing imports it.
"""

from __future__ import annotations

from nvhook.call import handle

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one runtime call; returns an exit code only when it fails (success execs)."""
    step = handle(argv)
    return step if isinstance(step, int) else step.run()
