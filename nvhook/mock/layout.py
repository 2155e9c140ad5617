"""Lay out a mock machine: a fake host root for one profile.

:func:`create` writes, under one directory and nowhere else (compiled objects come from the
build cache, :mod:`nvhook.mock.build`):

- ``dev/`` and ``run/`` (:mod:`nvhook.mock.devnodes`): ``nvidia<minor>`` per GPU,
  ``nvidiactl``, ``nvidia-modeset``, ``nvidia-uvm``, ``nvidia-uvm-tools``,
  ``nvidia-caps/nvidia-cap<n>`` (MIG config, monitor, each GPU and compute instance), IMEX
  channels, NVSwitch nodes, ``dri/card*``, ``dri/renderD*`` and their ``dri/by-path`` links.
  Real character devices with the driver's numbers (195 for GPUs and control nodes, the
  dynamic majors that ``proc/devices`` announces for the others) when ``nodes="char"`` (needs
  root), empty regular files when ``nodes="file"``; ``run/nvidia-persistenced/socket`` (and
  the fabric manager's on NVSwitch systems): real unix sockets with nobody listening;
- ``proc/`` (:mod:`nvhook.mock.procfs`): ``devices``, ``driver/nvidia/{version,params}``,
  ``driver/nvidia/gpus/<bus>/information``, ``driver/nvidia/capabilities/…/access``,
  ``driver/nvidia-caps/mig-minors``, as the driver writes them;
- the driver's user space at the Debian paths (:mod:`nvhook.mock.userspace`): every library of
  the driver's version (``usr/lib/x86_64-linux-gnu``, 32-bit copies in
  ``usr/lib/i386-linux-gnu``; ``usr/lib/aarch64-linux-gnu`` alone for an aarch64 profile) as
  an ELF shared object with its real SONAME and SONAME link, ``etc/ld.so.conf`` and an
  ``etc/ld.so.cache`` made by the real ``ldconfig -r`` (written in Python, with the
  profile's flags, for an architecture this machine does not compile for); binaries in
  ``usr/bin``; GSP firmware; the OpenCL ICD file; graphics vendor files and the Xorg module
  where the profile has them;
- ``etc/nvhook-mock/nvml.txt`` (what the fake NVML answers) and ``profile.json``
  (:mod:`nvhook.mock.nvmldata`).

``libnvidia-ml.so.1`` is the fake NVML (``csrc/nvml.c``); ``libcuda.so.1`` and
``usr/bin/nvidia-smi`` count the GPUs whose ``/dev`` nodes the caller can open
(``csrc/visible.c``). The result is a pure function of the profile and the node mode: two
layouts have the same files, bytes and modes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from nvhook.errors import MockError, MockOptionError
from nvhook.mock._tree import Tree
from nvhook.mock.devnodes import write_dev, write_run
from nvhook.mock.model import Profile
from nvhook.mock.nvmldata import DATA_DIR, write_data
from nvhook.mock.procfs import write_proc
from nvhook.mock.profiles import load_profile
from nvhook.mock.sysfs import write_sys
from nvhook.mock.userspace import (
    LIB32_DIR,
    LIB_DIR,
    InstalledLibrary,
    compiled,
    installed_libraries,
    lib_dirs,
    write_ld_cache,
    write_user_space,
)
from oci._frozen import Frozen

__all__ = [
    "DATA_DIR",
    "LIB32_DIR",
    "LIB_DIR",
    "InstalledLibrary",
    "MockMachine",
    "NodeMode",
    "compiled",
    "create",
    "installed_libraries",
    "lib_dirs",
]

NodeMode = Literal["auto", "char", "file"]


class MockMachine(Frozen):
    """A laid-out mock machine."""

    root: Path
    profile: Profile
    nodes: Literal["char", "file"] = "file"

    def __repr__(self) -> str:  # the profile would fill a screen
        return f"MockMachine(root={self.root!r}, nodes={self.nodes!r})"

    @property
    def lib_dir(self) -> Path:
        """Where the 64-bit driver libraries are (put it in LD_LIBRARY_PATH for the fake NVML)."""
        return self.root / lib_dirs(self.profile)[0]

    @property
    def lib32_dir(self) -> Path | None:
        """Where the 32-bit copies are; None on an architecture without them (aarch64)."""
        lib32 = lib_dirs(self.profile)[1]
        return None if lib32 is None else self.root / lib32

    @property
    def bin_dir(self) -> Path:
        return self.root / "usr/bin"

    @property
    def dev_dir(self) -> Path:
        return self.root / "dev"

    @property
    def ldcache(self) -> Path:
        return self.root / "etc/ld.so.cache"


def create(
    profile: Profile | str,
    root: Path | str,
    *,
    nodes: NodeMode = "auto",
    device_file_gid: int = 0,
    device_file_mode: int = 0o666,
) -> MockMachine:
    """Lay out ``profile`` (a :class:`Profile` or a profile name) as a fake host at ``root``.

    ``root`` must not exist or be an empty directory. ``nodes="auto"`` makes character devices
    when running as root and regular files otherwise. ``device_file_gid`` and
    ``device_file_mode`` are the driver's ``NVreg_DeviceFileGID`` and
    ``NVreg_DeviceFileMode`` (``44`` and ``0o660``: GPUs for group ``video`` only): the
    group (where the caller may give one: root) and mode of the GPU, control, modeset and UVM
    nodes, and what ``proc/driver/nvidia/params`` says.
    """
    if not 0 <= device_file_mode <= 0o777:
        raise MockOptionError(
            f"device file mode {device_file_mode:o}: expected an octal mode 0-0777 (e.g. 0660)"
        )
    if device_file_gid < 0:
        raise MockOptionError(f"device file gid {device_file_gid}: expected a group id >= 0")
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    mode = _node_mode(nodes)
    top = Path(root).absolute()
    if top.exists() and (not top.is_dir() or any(top.iterdir())):
        raise MockError(f"cannot lay out mock machine at {top}: it exists and is not empty")
    tree = Tree(top, mode)
    tree.mkdir("")
    write_user_space(tree, prof)
    access = {"gid": device_file_gid, "mode": device_file_mode}
    write_proc(tree, prof, **access)
    write_dev(tree, prof, **access)
    write_run(tree, prof)
    write_sys(tree, prof)
    write_data(tree, prof, mode)
    write_ld_cache(top, prof)
    return MockMachine(root=top, profile=prof, nodes=mode)


def _node_mode(nodes: NodeMode) -> Literal["char", "file"]:
    if nodes == "auto":
        return "char" if os.geteuid() == 0 else "file"
    if nodes == "char" and os.geteuid() != 0:
        raise MockError("mock machine device nodes as character devices need root (mknod)")
    if nodes not in ("char", "file"):
        raise MockError(f"unknown node mode {nodes!r}: expected auto, char or file")
    return nodes
