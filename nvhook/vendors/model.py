"""The values every vendor module yields: :class:`Accelerator` and :class:`Vendor`."""

from __future__ import annotations

from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Accelerator", "Host", "Vendor"]


class Host(Frozen):
    """Where a vendor's files are: ``root`` for sysfs and driver trees, ``dev_root`` for
    ``/dev`` (both ``/`` on a real host, the mock's root on a mock machine)."""

    root: str = "/"
    dev_root: str = "/"

    def sys(self, rel: str) -> str:
        """``rel`` (a host path such as ``/sys/class/kfd``) under the host root."""
        return _under(self.root, rel)

    def dev(self, rel: str) -> str:
        """``rel`` (a host path such as ``/dev/kfd``) under the dev root."""
        return _under(self.dev_root, rel)


def _under(root: str, rel: str) -> str:
    if root in ("", "/"):
        return rel
    return root.rstrip("/") + "/" + rel.lstrip("/")


class Accelerator(Frozen, kw_only=True):
    """One device a container can be given, as its vendor's CDI generator names it.

    ``nodes`` are the device nodes of this device alone (container paths; the host's are
    the same under the dev root); ``links`` ``(target, link)`` pairs made in the container
    where the node is there (Intel's ``/dev/dri/by-path``); ``memory_mib`` and
    ``compute_units`` what the vendor's own labeller reports (AMD: compute units, Intel:
    Xe cores, Ascend: AI cores); ``dtypes`` the data types its matrix units take."""

    vendor: str
    kind: str
    name: str
    index: int
    bus_id: str
    product: str
    driver: str
    nodes: tuple[str, ...]
    links: tuple[tuple[str, str], ...] = ()
    memory_mib: int = 0
    compute_units: int = 0
    device_id: int = 0
    family: str = ""
    partition: str = ""
    unique_id: str = ""
    dtypes: tuple[str, ...] = ()
    #: What the vendors' DRA drivers publish beside (nvhook/dra/vendors.py): the PCIe root
    #: complex (``pci0000:29``), AMD's SIMD units and ``amdgpu`` module version and
    #: srcversion, Intel's SR-IOV virtual functions the device can have.
    pcie_root: str = ""
    simd_units: int = 0
    driver_version: str = ""
    driver_src_version: str = ""
    max_vfs: int = 0

    @property
    def qualified_name(self) -> str:
        return f"{self.kind}={self.name}"


class Vendor(Frozen, kw_only=True):
    """What a vendor module provides (docs/architecture.md, "Where a vendor plugs in").

    - ``name``: ``amd``, ``intel``, ``ascend`` (``--vendor``);
    - ``kind``: the CDI kind its own generator writes;
    - ``discover(host)``: its devices, in its own index order;
    - ``shared_nodes(host)``: nodes every container of it gets (``/dev/kfd``, Ascend's
      manager nodes), container paths;
    - ``mounts(host)``: host trees bind-mounted read-only (Ascend's driver), host paths
      that exist;
    - ``env``: its request variable (empty: none), parsed by
      :func:`nvhook.requests.vendors.parse_vendor_list`."""

    name: str
    kind: str
    env: str
    discover: Callable[[Host], tuple[Accelerator, ...]]
    shared_nodes: Callable[[Host], tuple[str, ...]]
    mounts: Callable[[Host], tuple[str, ...]]
