"""C sources of the mock machine's driver stubs, compiled by ``nvhook mock create``.

``nvml.c`` (the fake ``libnvidia-ml.so.1``), ``cuda.c`` (the stub ``libcuda.so.1``), ``smi.c``
(the static mock ``nvidia-smi``), ``tool.c`` (the other driver binaries), ``stub.c`` (every other
library: an ELF shared object with the real SONAME) and ``visible.c`` (included by ``cuda.c`` and
``smi.c``: which GPUs the calling process can open). A package only so that they ship as data.
"""
