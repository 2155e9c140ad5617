"""``prestart``: give a created, not yet started container its GPUs (hook mode).

Docker's ``--gpus`` runs a prestart hook named ``nvidia-container-runtime-hook`` with
args ``[nvidia-container-runtime-hook, prestart]``; nvhook installs its hook launcher
under that name too (``nvhook install-entrypoints``), and ``packaging/oci-hooks.d``
has the hook for CRI-O and podman. runc starts it on the host, with the state
(``creating``, the host pid of runc init) on stdin, the cwd the bundle and, without an
``env`` in the hook, runc's own environment (which is where ``NVHOOK_CONFIG`` comes
from; the image's environment never reaches a prestart hook).

What it does is what ``nvhook-runtime`` would have written into config.json, done to
the live container instead:

1. decide exactly as the shim does (:func:`nvhook.create.decide_spec`: env set by
   dockerd, annotations, policy, requirements; jit, or cdi for qualified names), and
   apply the edits to the spec *in memory*. When that changes nothing, config.json
   already carries the edits (``nvhook-runtime`` made them): nothing more is done;
2. the pid checked to be the container's init and held
   (:mod:`nvhook.hook.container_init`: a child of the runtime that started the hook, in
   another mount namespace; pinned with a pidfd), before anything is changed; then the
   device cgroup allow rules for exactly the new device nodes (:mod:`nvhook.hook.cgroups`);
3. the device nodes and the read-only bind mounts of the driver files, same entries
   and options as the spec would have had, in the container's mount namespace
   (:mod:`nvhook.hook.mountns`);
4. the createContainer hooks the edits carry (``create-container``, or the older
   ``update-ldcache`` and ``create-symlinks``),
   run in the same namespace over the rootfs, with the same safeguards as when runc runs
   them.

Environment edits cannot reach a process that already has its environment: the
container keeps the ``NVIDIA_VISIBLE_DEVICES`` it asked with (the shim would have
written ``void``), and a CDI spec asking for other variables gets a note on stderr. A
bundle that ``nvhook-runtime`` served says ``NVIDIA_VISIBLE_DEVICES=void``, so step 1
finds nothing asked and the hook does nothing. A hook of a CDI spec other than nvhook's own is
refused (hook mode cannot run it at the right stage): use ``nvhook-runtime``.
"""

from __future__ import annotations

import os
import sys

from nvhook.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from oci.cdi.edits import Hook
    from oci.state import State

__all__ = ["added_entries", "prestart"]

_OWN_HOOKS = ("create-container", "update-ldcache", "create-symlinks")


def added_entries(before: list[Any] | None, after: list[Any] | None) -> list[Any]:
    """The entries of ``after`` that ``before`` lacks (both lists of spec items)."""
    old = before or []
    return [item for item in after or [] if item not in old]


def _linux(spec: dict[str, Any], *keys: str) -> list[Any] | None:
    node: Any = spec.get("linux")
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node if isinstance(node, list) else None


def prestart(state: State, *, log: Callable[[str], None]) -> bool:
    """Inject what the container at ``state.bundle`` asks for; False when nothing was to do."""
    from nvhook.create import decide_spec
    from nvhook.settings import load_settings
    from oci.bundle import Bundle

    if state.pid is None or state.pid <= 0:
        raise HookError(
            "the container state has no pid: run nvhook-hook prestart as a prestart or "
            "createRuntime hook"
        )
    bundle = Bundle(state.bundle)
    spec = bundle.load()
    warnings: list[str] = []
    settings = load_settings(warnings=warnings)
    for warning in warnings:
        log(warning)
    decision = decide_spec(spec, settings, bundle=state.bundle)
    if decision.error is not None:
        raise decision.error
    result, edits = decision.result, decision.edits
    if decision.mode is None or result is None or edits is None:
        return False
    if result == spec:
        log(f"{state.bundle}/config.json already carries the edits (nvhook-runtime): nothing to do")
        return False
    from nvhook.rootfs.spec import container_env, require_rootfs

    environ = container_env(spec)
    steps = [_hook_step(hook, settings.hook_ldconfig, environ) for hook in edits.hooks]
    from nvhook.devices.miglayout import GPU_ENV, LAYOUT_ENV
    from nvhook.planner import INJECTED_ENV  # "served": a process's env cannot change now

    env = added_entries(spec.get("process", {}).get("env"), result.get("process", {}).get("env"))
    records = (GPU_ENV, LAYOUT_ENV)  # for the shim's create check; nothing here reads them
    if [e for e in env if e != INJECTED_ENV and not e.startswith(records)]:
        log("the environment of the devices' edits is not applied in hook mode")
    devices = added_entries(_linux(spec, "devices"), _linux(result, "devices"))
    rules = added_entries(
        _linux(spec, "resources", "devices"), _linux(result, "resources", "devices")
    )
    mounts = added_entries(spec.get("mounts"), result.get("mounts"))
    rootfs = require_rootfs(spec, state.bundle)

    from nvhook.hook.cgroups import allow_devices
    from nvhook.hook.container_init import check_init
    from nvhook.hook.mountns import check_bounds, inject

    check_bounds(devices, mounts)

    def then() -> None:
        for step in steps:
            step(rootfs)

    if steps:  # they run inside the container's mount namespace: import what they need here
        for name in _STEP_IMPORTS:
            __import__(name)

    # the pid is checked and held before any cgroup or mount namespace is touched; both
    # steps act on what the check read, never on the pid again
    with check_init(state.pid) as init:
        allow_devices(init, rules)
        inject(init, rootfs, devices=devices, mounts=mounts, then=then)
    return True


#: What the createContainer steps import when they run (each found by
#: tests/nvhook/hook/test_prestart_imports.py): they run in a child after it entered the
#: container's mount namespace (:func:`nvhook.hook.mountns.inject`), where nothing of the
#: host's is found. Python 3.12+ has ``os.setns`` (``ctypes`` is then not loaded yet), and
#: Debian 13's 3.13 and sid's 3.14 ship ``resource`` and ``select`` as lib-dynload files
#: where Debian 12's 3.11 has them built in.
_STEP_IMPORTS = (
    "ctypes",
    "resource",
    "select",
    "signal",
    "struct",
    "nvhook.constants",
    "nvhook.errors",
    "nvhook.hook.app_profile",
    "nvhook.hook.create_container",
    "nvhook.hook.create_symlinks",
    "nvhook.hook.cuda_compat",
    "nvhook.hook.device_files",
    "nvhook.hook.mountns",
    "nvhook.hook.update_ldcache",
    "nvhook.rootfs.safepath",
    "oci.jsoncodec",
)


def _hook_step(hook: Hook, ldconfig: str, env: Mapping[str, str]) -> Callable[[str], None]:
    """What running ``hook`` at createContainer would do, as a call over the rootfs."""
    from nvhook.hook.args import PROGRAM, parse_args
    from nvhook.hook.create_container import create_container
    from nvhook.hook.create_symlinks import parse_link
    from nvhook.hook.update_ldcache import check_folder

    args = hook.args
    if (
        len(args) < 2
        or os.path.basename(args[0]) != PROGRAM
        or os.path.basename(hook.path) != PROGRAM
        or args[1] not in _OWN_HOOKS
    ):
        raise HookError(
            f"the {hook.hook_name} hook {hook.path} of the devices' edits cannot run in hook "
            "mode: use nvhook-runtime as the runtime"
        )
    _, options = parse_args(args[1:])
    for spec in (*options.get("--link", []), *options.get("--device-link", [])):
        parse_link(spec)  # a bad one fails before anything is injected
    for folder in options.get("--folder", []):
        check_folder(folder)

    def note(message: str) -> None:
        print(f"{PROGRAM} prestart: update-ldcache: {message}", file=sys.stderr)

    def step(rootfs: str) -> None:  # as create-container: params, links, then the ld cache
        create_container(rootfs, options, env=env, ldconfig=ldconfig or None, log=note)

    return step
