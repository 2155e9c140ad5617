"""The hooks nvhook injects, as CDI :class:`~oci.cdi.edits.Hook` values, and their checker.

Every injected hook, in jit mode and in generated CDI specs alike (docs/architecture.md D7):

- has an absolute ``path`` to the ``nvhook-hook`` launcher (written by
  ``nvhook install-entrypoints``: ``#!<absolute python> -I``, so the interpreter
  ignores ``PYTHON*`` variables, the user site and the current directory);
- has an explicit ``env`` holding only :data:`HOOK_ENV`. runc gives a hook exactly
  its ``env`` list, and a hook *without* one inherits runc's whole environment, where
  an ``LD_PRELOAD`` would be honoured by the dynamic loader for the interpreter
  itself before any Python runs: ``-I`` cannot help there, only the explicit
  environment does (the class of CVE-2025-23266);
- runs at the lifecycle stage its command needs (:data:`LIFECYCLES`);
- has the OCI ``timeout`` :data:`HOOK_TIMEOUT_S`: a hook still running then is killed by
  the runtime, and the create fails with the runtime's message, instead of holding
  container creation for as long as the hook hangs. CDI has had ``hooks[].timeout``
  since its earliest supported version, so generated specs stay at ``cdiVersion`` 0.5.0.

:func:`validate_injected_hook` checks all of that; tests of the shim and of
``cdi generate`` run it on every hook they find.
"""

from __future__ import annotations

import os
import posixpath

from nvhook.constants import HOOK_PROGRAM
from nvhook.errors import HookError, UsageError
from oci.cdi.edits import Hook

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

__all__ = [
    "HOOK_ENV",
    "HOOK_PROGRAM",
    "HOOK_TIMEOUT_S",
    "LIFECYCLES",
    "create_container_hook",
    "default_hook_path",
    "ldcache_hook",
    "netdev_hook",
    "symlinks_hook",
    "validate_injected_hook",
]

#: The whole environment of every injected hook: a fixed PATH, nothing from the container.
HOOK_ENV: tuple[str, ...] = ("PATH=/usr/sbin:/usr/bin:/sbin:/bin",)
#: The OCI ``timeout`` of every injected hook, in seconds. Above update-ldcache's own 60 s
#: limit on ldconfig (``LDCONFIG_TIMEOUT_S``: the hook reports a slow ldconfig itself) and
#: below the kubelet's 2-minute runtime request timeout (so a stuck hook fails the create
#: with runc's message, not with a kubelet deadline).
HOOK_TIMEOUT_S = 90
#: The lifecycle stage of each command.
LIFECYCLES: dict[str, str] = {
    "create-container": "createContainer",
    "update-ldcache": "createContainer",
    "create-symlinks": "createContainer",
    "netdev": "createRuntime",
    "prestart": "prestart",  # hook mode: Docker's --gpus hook and oci-hooks.d, never injected
}


def default_hook_path() -> str:
    """The launcher next to this interpreter (where ``nvhook install-entrypoints`` writes it)."""
    import sys

    return posixpath.join(posixpath.dirname(posixpath.abspath(sys.executable)), HOOK_PROGRAM)


def _check_hook_path(hook_path: str) -> str:
    if (
        not isinstance(hook_path, str)
        or not hook_path.startswith("/")
        or posixpath.normpath(hook_path) != hook_path
        or any(c in hook_path for c in "\0\n")
    ):
        raise ValueError(f"hook path must be a clean absolute path, got {hook_path!r}")
    return hook_path


def _hook(command: str, args: Iterable[str], hook_path: str) -> Hook:
    return Hook(
        hook_name=LIFECYCLES[command],
        path=_check_hook_path(hook_path),
        args=(HOOK_PROGRAM, command, *args),
        env=HOOK_ENV,
        timeout=HOOK_TIMEOUT_S,
    )


def _folder_args(folders: Iterable[str]) -> list[str]:
    from nvhook.hook.update_ldcache import check_folder

    args: list[str] = []
    for folder in dict.fromkeys(folders):
        check_folder(folder)
        args += ["--folder", folder]
    return args


def _link_args(
    links: Iterable[tuple[str, str]] | Mapping[str, str], *, option: str = "--link"
) -> list[str]:
    from nvhook.hook.create_symlinks import SEPARATOR, parse_link

    pairs = [(t, lk) for lk, t in links.items()] if hasattr(links, "items") else list(links)
    args: list[str] = []
    for target, link in dict.fromkeys(pairs):
        spec = f"{target}{SEPARATOR}{link}"
        parse_link(spec)
        args += [option, spec]
    return args


def create_container_hook(
    *,
    links: Iterable[tuple[str, str]] | Mapping[str, str] = (),
    device_links: Iterable[tuple[str, str]] = (),
    folders: Iterable[str] = (),
    params: str | None = None,
    cuda_compat: str | None = None,
    application_profile: str | None = None,
    hook_path: str,
) -> Hook:
    """createContainer ``nvhook-hook create-container [--params P] --link T::L… --folder F…``.

    The one hook nvhook injects: the private driver params (``params``: the host's
    ``/proc/driver/nvidia/params``, whose copy with ``ModifyDeviceFiles: 0`` is mounted over
    the container's), the links, then the ld cache, in one process (a Python start, a
    ``bench/figures.py`` row, costs each container). ``links`` as for :func:`symlinks_hook`;
    ``device_links`` (``(target, link)`` pairs, ``--device-link``) are made only where the
    target is a device node in the container (DRI ``by-path`` links); all deduplicated, in order; at
    least one of them. ``cuda_compat`` (the host driver's version) adds ``--cuda-compat``:
    the image's CUDA forward compatibility folder first in the ld cache when its ``libcuda``
    is newer (:mod:`nvhook.hook.cuda_compat`). ``application_profile`` (a file in the
    container, :data:`nvhook.hook.app_profile.PROFILE_PATH` as the planner gives it) adds
    ``--application-profile``: EGL and Vulkan see only the GPUs whose nodes the container
    has (:mod:`nvhook.hook.app_profile`).
    """
    args: list[str] = []
    if params is not None:
        if (
            not params.startswith("/")
            or posixpath.normpath(params) != params
            or any(c in params for c in "\0\n")
        ):
            raise ValueError(f"params must be a clean absolute path, got {params!r}")
        args += ["--params", params]
    args += _link_args(links) + _link_args(device_links, option="--device-link")
    args += _folder_args(folders)
    if cuda_compat is not None:
        from nvhook.discover.libraries import is_version

        if not is_version(cuda_compat):
            raise ValueError(f"cuda_compat must be a driver version, got {cuda_compat!r}")
        args += ["--cuda-compat", cuda_compat]
    if application_profile is not None:
        from nvhook.hook.app_profile import check_profile_path

        try:
            check_profile_path(application_profile)
        except UsageError as e:
            raise ValueError(str(e)) from None
        args += ["--application-profile", application_profile]
    if not args:
        raise ValueError("create_container_hook needs params, a link or a folder")
    return _hook("create-container", args, hook_path)


def ldcache_hook(folders: Iterable[str], *, hook_path: str) -> Hook:
    """createContainer ``nvhook-hook update-ldcache --folder F…`` (deduplicated, in order)."""
    args = _folder_args(folders)
    if not args:
        raise ValueError("ldcache_hook needs at least one folder")
    return _hook("update-ldcache", args, hook_path)


def symlinks_hook(links: Iterable[tuple[str, str]] | Mapping[str, str], *, hook_path: str) -> Hook:
    """createContainer ``nvhook-hook create-symlinks --link TARGET::LINK…``.

    ``links`` holds ``(target, link)`` pairs, or is a mapping ``{link: target}``.
    """
    args = _link_args(links)
    if not args:
        raise ValueError("symlinks_hook needs at least one link")
    return _hook("create-symlinks", args, hook_path)


def netdev_hook(devices: Iterable[tuple[str, str]] | Mapping[str, str], *, hook_path: str) -> Hook:
    """createRuntime ``nvhook-hook netdev --device HOST=NAME…``.

    ``devices`` holds ``(host interface, name in the container)`` pairs, or is such a mapping.
    """
    from nvhook.hook.netdev import parse_device

    pairs = list(devices.items()) if hasattr(devices, "items") else list(devices)
    args: list[str] = []
    for host, name in dict.fromkeys(pairs):
        spec = f"{host}={name}"
        parse_device(spec)
        args += ["--device", spec]
    if not args:
        raise ValueError("netdev_hook needs at least one device")
    return _hook("netdev", args, hook_path)


def validate_injected_hook(
    hook: Hook | Mapping[str, Any],
    *,
    lifecycle: str | None = None,
    check_launcher: bool = True,
) -> None:
    """Raise :class:`HookError` listing everything wrong with an injected nvhook hook.

    ``hook`` is a :class:`Hook`, a CDI hook object (``hookName``, ``path``…) or an OCI
    ``hooks.<stage>[]`` item (give its stage as ``lifecycle``). With ``check_launcher`` the
    file at ``path`` must exist and start an absolute interpreter with ``-I`` (or be a
    native executable).
    """
    path: object
    env: list[str] | None
    stage: str | None
    timeout: object
    if isinstance(hook, Hook):
        path, args, env, stage = hook.path, list(hook.args), list(hook.env), hook.hook_name
        timeout = hook.timeout
    else:
        path = hook.get("path")
        args = list(hook.get("args") or [])
        env = list(hook["env"]) if hook.get("env") is not None else None
        stage = hook.get("hookName", lifecycle)
        timeout = hook.get("timeout")
    problems: list[str] = []
    if not isinstance(path, str) or not path.startswith("/"):
        problems.append(f"path {path!r} is not absolute")
    elif posixpath.normpath(path) != path:
        problems.append(f"path {path!r} is not clean")
    if len(args) < 2 or args[0] != HOOK_PROGRAM or args[1] not in LIFECYCLES:
        problems.append(f"args {args!r} do not start with {HOOK_PROGRAM} and a command")
    elif stage is not None and stage != LIFECYCLES[args[1]]:
        problems.append(f"{args[1]} must run at {LIFECYCLES[args[1]]}, not {stage}")
    if not env:
        problems.append("env is missing: the hook would inherit the runtime's environment")
    elif tuple(env) != HOOK_ENV:
        problems.append(f"env must be exactly {list(HOOK_ENV)!r}, got {env!r}")
    if timeout != HOOK_TIMEOUT_S or type(timeout) is not int:
        problems.append(f"timeout must be {HOOK_TIMEOUT_S} (seconds), got {timeout!r}")
    if check_launcher and isinstance(path, str) and path.startswith("/"):
        problem = _launcher_problem(path)
        if problem:
            problems.append(problem)
    if problems:
        raise HookError(f"injected hook {path}: " + "; ".join(problems))


def _launcher_problem(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as e:
        return f"cannot read the launcher: {e.strerror}"
    if not os.access(path, os.X_OK):
        return "the launcher is not executable"
    if head.startswith(b"\x7fELF"):
        return None
    if not head.startswith(b"#!"):
        return "the launcher is neither a script nor a native executable"
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words or not words[0].startswith("/"):
        return f"the launcher's interpreter {words[:1]!r} is not an absolute path"
    flags = words[1] if len(words) == 2 else ""
    if not flags.startswith("-") or flags.startswith("--") or "I" not in flags:
        return f"the launcher does not start {words[0]} isolated (-I)"
    if not os.access(words[0], os.X_OK):
        return f"the launcher's interpreter {words[0]} is not executable"
    return None
