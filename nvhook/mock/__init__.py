"""The mock GPU machine: profiles, and fake hosts laid out from them (docs/architecture.md, D8).

>>> from nvhook.mock import create
>>> machine = create("dgx-a100", "/tmp/dgx")      # doctest: +SKIP
>>> machine.lib_dir                                 # doctest: +SKIP
PosixPath('/tmp/dgx/usr/lib/x86_64-linux-gnu')

:mod:`nvhook.mock.model` is what a machine is made of (frozen values), :mod:`nvhook.mock.profiles`
reads the profiles (``machines/*.toml``) and ``driver.toml`` into it, :mod:`nvhook.mock.layout`
lays one out (with :mod:`~nvhook.mock.userspace`, :mod:`~nvhook.mock.procfs`,
:mod:`~nvhook.mock.devnodes` and :mod:`~nvhook.mock.nvmldata`, one part of the tree each), and
:mod:`nvhook.mock.build` compiles the C sources in ``csrc/`` (cached)."""

from __future__ import annotations

from nvhook.mock.layout import (
    InstalledLibrary,
    MockMachine,
    NodeMode,
    compiled,
    create,
    installed_libraries,
    lib_dirs,
)
from nvhook.mock.model import Gpu, GpuModel, MigDevice, MigProfile, Profile
from nvhook.mock.profiles import list_profiles, load_profile

__all__ = [
    "Gpu",
    "GpuModel",
    "InstalledLibrary",
    "MigDevice",
    "MigProfile",
    "MockMachine",
    "NodeMode",
    "Profile",
    "compiled",
    "create",
    "installed_libraries",
    "lib_dirs",
    "list_profiles",
    "load_profile",
]
