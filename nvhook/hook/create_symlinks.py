"""``create-symlinks``: links the driver needs in the container (``libcuda.so -> libcuda.so.1``).

A createContainer hook. For each ``TARGET::LINK``:

- ``LINK`` is an absolute path inside the container; its missing parent directories are
  created (through :mod:`nvhook.rootfs.safepath`, so inside the rootfs whatever symlinks
  the image has on the way);
- ``TARGET`` is written verbatim as the link's target, absolute or relative, but a target
  that would resolve outside the rootfs is refused. "Outside" is decided lexically:
  starting from the root (absolute target) or from the link's directory as it is
  physically in the rootfs (relative target), a ``..`` that would climb above the root
  escapes (``/../../etc/shadow``, ``../../../../etc`` from ``/usr/lib``);
- an existing link with the same target is fine (the hook is idempotent); anything
  else at ``LINK`` (another target, a file, a directory) is an error that names it.

Every link is checked before any is created, so a refusal changes nothing.

*Device links* (``--device-link TARGET::LINK`` of ``create-container``) are links to device
nodes, such as ``/dev/dri/by-path/pci-0000:07:00.0-card -> ../card1``: each is created only
when ``TARGET``, read from the link's directory as it is in the rootfs, is a character
device there (runc has created the container's nodes before createContainer hooks run), and
skipped otherwise. A generated CDI spec lists the links of every GPU in its one spec-level
hook, and each container gets those of the GPUs it was given.
"""

from __future__ import annotations

import posixpath
import stat

from nvhook.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvhook.rootfs.safepath import Impl, RootFd

__all__ = ["SEPARATOR", "create_symlinks", "parse_link", "target_escapes"]

#: Between TARGET and LINK in ``--link TARGET::LINK``.
SEPARATOR = "::"


def parse_link(spec: str) -> tuple[str, str]:
    """``TARGET::LINK`` -> (target, link), checking both."""
    from nvhook.errors import UsageError

    target, sep, link = spec.partition(SEPARATOR)
    if not sep or not target or not link:
        raise UsageError(f"--link must be TARGET::LINK, got {spec!r}")
    if "\0" in spec:
        raise UsageError(f"--link must not contain NUL, got {spec!r}")
    if not link.startswith("/") or link.endswith("/"):
        raise UsageError(f"--link: LINK must be an absolute path to a file, got {link!r}")
    if any(part in (".", "..") for part in link.split("/")):
        raise UsageError(f"--link: LINK must not contain . or .. components, got {link!r}")
    return target, posixpath.normpath(link)


def target_escapes(target: str, link_dir: str) -> bool:
    """Whether ``target``, read by a link in ``link_dir`` (in-root path), climbs above ``/``."""
    parts = [] if target.startswith("/") else [p for p in link_dir.split("/") if p]
    for comp in target.split("/"):
        if comp in ("", "."):
            continue
        if comp == "..":
            if not parts:
                return True
            parts.pop()
        else:
            parts.append(comp)
    return False


def _physical_dir(root: RootFd, directory: str) -> str:
    """Where ``directory`` is inside the root once its symlinks are resolved (it may not exist
    yet: its missing tail will be created as plain directories)."""
    missing: list[str] = []
    current = directory
    while True:
        try:
            resolved = root.realpath(current)
            break
        except FileNotFoundError:
            if current == "/":
                resolved = "/"
                break
            missing.insert(0, posixpath.basename(current))
            current = posixpath.dirname(current)
        except NotADirectoryError as e:
            raise HookError(
                f"cannot create links under {directory} in {root.path}: "
                f"{e.filename} is not a directory"
            ) from None
    return posixpath.join(resolved, *missing) if missing else resolved


def _existing(root: RootFd, link: str) -> str | None:
    """The target of an existing symlink at ``link``; None when nothing is there."""
    try:
        st = root.lstat(link)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISLNK(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a symlink"
        raise HookError(f"{link} in {root.path} exists and is {kind}; refusing to replace it")
    return root.readlink(link)


def create_symlinks(
    rootfs: str,
    links: Sequence[tuple[str, str]],
    *,
    device_links: Sequence[tuple[str, str]] = (),
    impl: Impl | None = None,
) -> list[str]:
    """Create each ``(target, link)`` in the container at ``rootfs``, and each of
    ``device_links`` whose target is a character device there; return the links created."""
    try:
        from nvhook.rootfs.safepath import open_root  # ctypes: only when a hook runs

        with open_root(rootfs, impl=impl) as root:
            present = [(t, lk) for t, lk in device_links if _is_device(root, t, lk)]
            return _create(root, _wanted([*links, *present]))
    except OSError as e:
        raise HookError(f"cannot create links in {rootfs}: {e.filename}: {e.strerror}") from None


def _wanted(links: Sequence[tuple[str, str]]) -> dict[str, str]:
    wanted: dict[str, str] = {}
    for target, link in links:
        if wanted.setdefault(link, target) != target:
            raise HookError(f"{link} is asked to point to both {wanted[link]} and {target}")
    return wanted


def _is_device(root: RootFd, target: str, link: str) -> bool:
    """Whether ``target``, read by a link at ``link``, names a character device in the root."""
    directory = _physical_dir(root, posixpath.dirname(link))
    if target_escapes(target, directory):
        return False  # refused by _create when asked for as a plain link; skipped here
    try:
        st = root.lstat(posixpath.normpath(posixpath.join(directory, target)))
    except (FileNotFoundError, NotADirectoryError):
        return False
    return stat.S_ISCHR(st.st_mode)


def _create(root: RootFd, wanted: dict[str, str]) -> list[str]:
    rootfs = root.path
    created: list[str] = []
    todo: list[tuple[str, str]] = []
    for link, target in wanted.items():
        directory = _physical_dir(root, posixpath.dirname(link))
        if target_escapes(target, directory):
            raise HookError(
                f"refusing link {link} -> {target} in {rootfs}: the target resolves "
                f"outside the container's root (from {directory})"
            )
        current = _existing(root, link)
        if current is None:
            todo.append((link, target))
        elif current != target:
            raise HookError(f"{link} in {rootfs} already points to {current}, not {target}")
    for link, target in todo:
        try:
            root.mkdirs(posixpath.dirname(link), 0o755)
            root.symlink(target, link)
        except FileExistsError:
            current = _existing(root, link)
            if current != target:
                raise HookError(
                    f"{link} in {rootfs} appeared meanwhile and points to {current}, not {target}"
                ) from None
            continue
        created.append(link)
    return created
