"""The mock GPU machine: machine profiles and a fake host laid out from one (DESIGN.md D8).

>>> from nvhook.mock import create
>>> machine = create("dgx-a100", "/tmp/dgx")      # doctest: +SKIP
>>> machine.lib_dir                                 # doctest: +SKIP
PosixPath('/tmp/dgx/usr/lib/x86_64-linux-gnu')

:mod:`nvhook.mock.profiles` reads the profiles (``machines/*.toml``), :mod:`nvhook.mock.layout`
lays one out, :mod:`nvhook.mock.build` compiles the C sources in ``csrc/`` (cached).
"""

from __future__ import annotations

from nvhook.mock.layout import InstalledLibrary, MockMachine, NodeMode, create, installed_libraries
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
    "create",
    "installed_libraries",
    "list_profiles",
    "load_profile",
]
