"""Whose CDI spec files are believed: the rule :mod:`oci._cache` applies to its own files.

A spec's hooks run as root on the host (``createRuntime`` ``/bin/sh -c …``) and its mounts
and nodes go into every container that asks for one of its devices, so a spec file is
only as trustworthy as whoever can write it. A file is *trusted* when

- its directory (the spec directory, as opened) is owned by root or the effective uid and
  is not writable by group or others;
- the file itself is a regular file, not a symbolic link (whose target's directory is not
  checked), owned by root or the effective uid, and not writable by group or others.

The verdict is made from ``fstat`` of the opened directory and file (the registry opens
spec files with ``O_NOFOLLOW``): what is judged is what is read. Each problem is one line
naming the path, the owner and mode, and the fix. What to do with an untrusted file is the
caller's (:data:`REFUSE` it, the default, or :data:`WARN` and use it, for a deliberately
shared directory). Imports only ``os`` and ``stat`` (the shim's start path).
"""

from __future__ import annotations

import os
from stat import S_IMODE, S_ISREG

__all__ = [
    "MODES",
    "REFUSE",
    "WARN",
    "directory_fix",
    "directory_problem",
    "file_fix",
    "file_problem",
    "fix_of",
    "link_fix",
    "link_problem",
]

#: An untrusted spec file is not read (its devices are not defined); one line says why.
REFUSE = "refuse"
#: An untrusted spec file is read and used; one line warns of it.
WARN = "warn"
MODES: tuple[str, ...] = (REFUSE, WARN)


def _owner_problem(st: os.stat_result) -> str | None:
    euid = os.geteuid()
    if st.st_uid not in (0, euid):
        owners = "root" if euid == 0 else f"root or uid {euid}"
        return f"owned by uid {st.st_uid}, not {owners}"
    if st.st_mode & 0o022:
        return "writable by group or others"
    return None


def directory_problem(directory: str, st: os.stat_result) -> str | None:
    """Why the spec directory ``directory`` (``st``: fstat of it opened) is not trusted."""
    problem = _owner_problem(st)
    if problem is None:
        return None
    mode = S_IMODE(st.st_mode)
    return (
        f"{directory}: CDI spec directory is {problem} (uid {st.st_uid}, mode {mode:04o}), "
        f"so anyone who can write it decides what runs as root: {directory_fix(directory)}"
    )


def file_problem(path: str, st: os.stat_result) -> str | None:
    """Why the spec file ``path`` (``st``: fstat of it opened with ``O_NOFOLLOW``) is not
    trusted; None when it is (a non-regular file is the reader's error, not this one)."""
    if not S_ISREG(st.st_mode):
        return None
    problem = _owner_problem(st)
    if problem is None:
        return None
    mode = S_IMODE(st.st_mode)
    return (
        f"{path}: CDI spec file is {problem} (uid {st.st_uid}, mode {mode:04o}), "
        f"and its hooks would run as root: {file_fix(path)}"
    )


def link_problem(path: str) -> str:
    """The line for a spec file that is a symbolic link (its target is not judged)."""
    return (
        f"{path}: CDI spec file is a symbolic link, whose target's directory is not checked: "
        f"{link_fix(path)}"
    )


def directory_fix(directory: str) -> str:
    """What makes the spec directory ``directory`` trusted (the end of its line)."""
    return f"chown root {directory} and chmod go-w {directory}"


def file_fix(path: str) -> str:
    """What makes the spec file ``path`` trusted (the end of its line)."""
    return f"chown root {path} and chmod go-w {path}, or remove it"


def link_fix(path: str) -> str:
    """What makes the linked spec file ``path`` trusted (the end of its line)."""
    return f"replace {path} with a copy of the file it links to"


def fix_of(line: str, path: str, directory: str) -> str:
    """The fix that ends ``line``, the problem this module gave the spec file ``path`` of the
    spec directory ``directory`` (its own line, its link's or its directory's)."""
    if line == link_problem(path):
        return link_fix(path)
    if line.startswith(f"{directory}: CDI spec directory "):
        return directory_fix(directory)
    return file_fix(path)
