"""Writes a mock machine's files under one root, with explicit modes (the umask never matters).

Every failure is a :class:`MockError` naming the path. Device nodes are real character devices
(``mknod``, needs root) or empty regular files, by the tree's node mode; unix sockets are bound
and closed, so the socket file stays with nobody listening, as a stopped daemon leaves it.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
from pathlib import Path
from typing import Literal

from nvhook.errors import MockError

__all__ = ["Tree"]


class Tree:
    """Writes under one root, with explicit modes so that the umask does not matter."""

    def __init__(self, root: Path, nodes: Literal["char", "file"]) -> None:
        self.root = root
        self.nodes = nodes
        self._dirs: set[str] = set()

    def path(self, rel: str) -> Path:
        return self.root / rel if rel else self.root

    def mkdir(self, rel: str) -> None:
        if rel in self._dirs:
            return
        parent = os.path.dirname(rel)
        if rel:
            self.mkdir(parent)
        p = self.path(rel)
        try:
            p.mkdir(exist_ok=True)
            os.chmod(p, 0o755)
        except OSError as e:
            raise MockError(f"cannot create {p}: {e.strerror}") from e
        self._dirs.add(rel)

    def write(self, rel: str, content: bytes | str, mode: int = 0o644) -> None:
        self.mkdir(os.path.dirname(rel))
        p = self.path(rel)
        data = content.encode() if isinstance(content, str) else content
        try:
            p.write_bytes(data)
            os.chmod(p, mode)
        except OSError as e:
            raise MockError(f"cannot write {p}: {e.strerror}") from e

    def copy(self, rel: str, source: Path, mode: int = 0o755) -> None:
        self.mkdir(os.path.dirname(rel))
        p = self.path(rel)
        try:
            shutil.copyfile(source, p)
            os.chmod(p, mode)
        except OSError as e:
            raise MockError(f"cannot copy {source} to {p}: {e.strerror}") from e

    def symlink(self, rel: str, target: str) -> None:
        self.mkdir(os.path.dirname(rel))
        try:
            os.symlink(target, self.path(rel))
        except OSError as e:
            raise MockError(f"cannot create symlink {self.path(rel)}: {e.strerror}") from e

    def node(
        self, rel: str, major: int, minor: int, mode: int = 0o666, *, gid: int | None = None
    ) -> None:
        """A device node (or its regular-file stand-in) of ``mode``; of group ``gid`` where
        the caller may give it one (root), else of the caller's group."""
        self.mkdir(os.path.dirname(rel))
        p = self.path(rel)
        try:
            if self.nodes == "char":
                os.mknod(p, stat.S_IFCHR | mode, os.makedev(major, minor))
                os.chmod(p, mode)
            else:
                self.write(rel, b"", mode)
            if gid is not None and os.geteuid() == 0:
                os.chown(p, -1, gid)
        except OSError as e:
            raise MockError(f"cannot create device node {p} ({major}:{minor}): {e.strerror}") from e

    def unix_socket(self, rel: str) -> None:
        """Bind a unix socket and close it, leaving the socket file (as a stopped daemon does)."""
        self.mkdir(os.path.dirname(rel))
        parent = os.open(self.path(os.path.dirname(rel)), os.O_RDONLY | os.O_DIRECTORY)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                # through the directory's fd: the full path may exceed sun_path's 108 bytes
                s.bind(f"/proc/self/fd/{parent}/{os.path.basename(rel)}")
            os.chmod(self.path(rel), 0o777)
        except OSError as e:
            raise MockError(f"cannot create unix socket {self.path(rel)}: {e.strerror}") from e
        finally:
            os.close(parent)
