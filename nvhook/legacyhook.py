"""The prestart hook Docker adds for ``--gpus``, recognised so that nothing is done twice.

dockerd accepts ``--gpus`` only when a program named :data:`LEGACY_HOOK` is on its PATH
at start-up; for such a container it sets ``NVIDIA_VISIBLE_DEVICES`` (and
``NVIDIA_DRIVER_CAPABILITIES`` when capabilities are given) and appends the prestart
hook ``{"path": <that program>, "args": ["nvidia-container-runtime-hook", "prestart"]}``
(no env; docker 20.10, ``daemon/nvidia_linux.go``). nvhook installs its own prestart
hook under that name (``nvhook-hook prestart``, hook mode).

When ``nvhook-runtime`` is the runtime it injects by spec edits, so
:func:`without_prestart_hooks` drops such a hook (and an ``nvhook-hook prestart`` one
that an ``oci-hooks.d`` file added) from the spec it writes. The hook itself also does
nothing on a bundle whose config.json already carries its edits.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["LEGACY_HOOK", "PRESTART_PROGRAMS", "is_prestart_hook", "without_prestart_hooks"]

#: The program name dockerd looks for on its PATH and puts in ``args[0]``.
LEGACY_HOOK = "nvidia-container-runtime-hook"
#: ``args[0]`` of the prestart hooks that inject GPUs (NVIDIA's and nvhook's).
PRESTART_PROGRAMS = frozenset({LEGACY_HOOK, "nvhook-hook"})


def is_prestart_hook(hook: object) -> bool:
    """Whether an OCI hook entry is a GPU-injecting prestart hook: ``[NAME, "prestart"]``."""
    if not isinstance(hook, dict):
        return False
    path, args = hook.get("path"), hook.get("args")
    if not isinstance(path, str) or not isinstance(args, list) or len(args) != 2:
        return False
    name = args[0]
    return (
        isinstance(name, str)
        and name.rsplit("/", 1)[-1] in PRESTART_PROGRAMS
        and path.rsplit("/", 1)[-1] in PRESTART_PROGRAMS
        and args[1] == "prestart"
    )


def without_prestart_hooks(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` without those hooks (the same object when it has none; never mutated)."""
    hooks = spec.get("hooks")
    if not isinstance(hooks, dict):
        return spec
    prestart = hooks.get("prestart")
    if not isinstance(prestart, list) or not any(is_prestart_hook(h) for h in prestart):
        return spec
    kept = [h for h in prestart if not is_prestart_hook(h)]
    new_hooks = {k: v for k, v in hooks.items() if k != "prestart" or kept}
    if kept:
        new_hooks["prestart"] = kept
    new_spec = dict(spec)
    if new_hooks:
        new_spec["hooks"] = new_hooks
    else:
        del new_spec["hooks"]
    return new_spec
