"""Node labels: each vendor's own, and one vendor-neutral set a scheduler can match by.

**Vendors' own labels**, as their labellers write them:

- AMD (ROCm/k8s-device-plugin ``cmd/k8s-node-labeller/main.go`` at ed76468,
  ``createLabels``): for each of ``device-id``, ``product-name``, ``vram`` (GiB rounded,
  ``24G``) and ``cu-count``, ``amd.com/gpu.<name>=<value>`` when the node's devices share
  one value, else ``amd.com/gpu.<name>.<value>=<count>`` per value; and
  ``beta.amd.com/gpu.<name>.<value>=<count>`` always (with ``beta.amd.com/gpu.<name>`` too
  when there is one value). Product names have their blanks as ``_`` (a label value
  cannot hold one).
- Intel (intel/intel-device-plugins-for-kubernetes ``cmd/internal/labeler/labeler.go`` at
  94a91bc): ``gpu.intel.com/memory.max`` (bytes, summed over the cards, as its
  ``addNumericLabel`` sums), ``gpu.intel.com/tiles`` (summed), ``gpu.intel.com/cards``
  (``card0.card1``), ``gpu.intel.com/gpu-numbers`` (``0.1``), ``gpu.intel.com/millicores``
  (1000 a card).
- Ascend (Ascend/mind-cluster ``component/ascend-device-plugin/pkg/server/manager.go`` at
  22bb3d9, ``getNewNodeLabel``, ``updateChipNameToNode``, ``setAcceleratorLabel``; the keys
  in ``pkg/common/constants.go`` and ``component/ascend-common/api``), from the node's first
  NPU as that plugin reads them: ``node.kubernetes.io/npu.chip.name`` (DCMI's chip name,
  ``910B3``), ``servertype`` (``<card type>-<AI cores>``, ``Ascend910B-20``),
  ``accelerator`` (``huawei-Ascend910`` for the 910 family, ``huawei-Ascend310``,
  ``huawei-Ascend310P``) and, for the 910 family (``HasOnChipMemory``),
  ``mind-cluster/npu-chip-memory`` (HBM in GiB, ``64G``). Not written: its
  ``huawei.com/driver.version`` (the DCMI library's own version, which nvhook does not load)
  and ``accelerator-type`` (``card-910b-infer``, by DCMI's board id: Atlas 300I A2 only).

**The neutral set** (``accelerator.nvhook.io/``), over every accelerator of the node,
NVIDIA's included (from NVML, when given):

- ``vendor`` (``amd``, ``intel``, ``ascend``, ``nvidia``; ``mixed`` with more than one) and
  ``vendors`` (the vendors, sorted, ``.``-joined); ``<vendor>.count``; ``count``;
- ``product``: the product when every device is one (blanks as ``-``), else ``mixed``;
- ``memory-mib``: the least memory of any device (an integer, so a node affinity's ``Gt``
  compares it: ``accelerator.nvhook.io/memory-mib Gt 81919`` is "every accelerator here has
  at least 80 GiB", whatever the vendor); ``memory-mib.max`` the most;
- ``compute-units``: the least of those known (AMD compute units, Intel Xe cores, Ascend AI
  cores, NVIDIA SMs: a MIG device's from NVML's ``nvmlDeviceGetAttributes_v2``, a whole
  GPU's from its ``nvmlDeviceGetNumGpuCores``, :func:`nvhook.devices.nvml.multiprocessors`);
  a GPU in MIG mode counts as its MIG devices (what a pod gets), each with its own memory and
  SMs;
- ``dtype.<t>=true`` for each matrix data type every device takes (``fp8``, ``bf16``,
  ``fp16``, ``fp32``, ``fp64``), and ``class``, the narrowest of them: ``fp8`` (Hopper, Ada,
  MI300), ``bf16`` (Ampere, MI200, Max, Ascend 910B), ``fp16`` or ``fp32``. NVIDIA's data
  types come from the compute capability (>= 8.9 fp8, >= 8.0 bf16, >= 7.0 fp16).

Values are label-safe (``[A-Za-z0-9._-]``, at most 63 characters).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from nvhook.vendors import ascend as _ascend
from nvhook.vendors.intel import tiles
from nvhook.vendors.model import Accelerator

__all__ = ["NEUTRAL", "Facts", "facts_of_nvidia", "neutral_labels", "node_labels", "vendor_labels"]

NEUTRAL = "accelerator.nvhook.io/"
_CLASSES = ("fp8", "bf16", "fp16", "fp32")
_DTYPES = ("fp8", "bf16", "fp16", "fp32", "fp64")

#: Ascend's card type → its ``accelerator`` label (``acceleratorLabelMap`` in manager.go)
_ASCEND_ACCELERATOR = {
    "Ascend910": "huawei-Ascend910",
    "Ascend910B": "huawei-Ascend910",
    "Ascend910A3": "huawei-Ascend910",
    "Ascend310": "huawei-Ascend310",
    "Ascend310P": "huawei-Ascend310P",
}

#: (vendor, product, memory MiB, compute units, data types) of one accelerator.
Facts = tuple[str, str, int, int, tuple[str, ...]]


def _safe(text: str, blank: str = "_") -> str:
    out = "".join(c if c.isalnum() or c in "._-" else blank for c in text.replace(" ", blank))
    return out.strip("._-")[:63]


def _counted(prefix: str, name: str, values: Iterable[str]) -> dict[str, str]:
    counts = Counter(values)
    labels: dict[str, str] = {}
    for value, n in sorted(counts.items()):
        labels[f"beta.{prefix}/gpu.{name}.{value}"] = str(n)
        if len(counts) == 1:
            labels[f"beta.{prefix}/gpu.{name}"] = value
            labels[f"{prefix}/gpu.{name}"] = value
        else:
            labels[f"{prefix}/gpu.{name}.{value}"] = str(n)
    return labels


def vendor_labels(found: Mapping[str, Sequence[Accelerator]]) -> dict[str, str]:
    """Each vendor's own labels for the devices ``found`` (vendor name: devices)."""
    labels: dict[str, str] = {}
    amd = found.get("amd", ())
    if amd:
        labels |= _counted("amd.com", "device-id", (f"{d.device_id:04x}" for d in amd))
        labels |= _counted("amd.com", "product-name", (_safe(d.product) for d in amd))
        labels |= _counted("amd.com", "vram", (f"{round(d.memory_mib / 1024)}G" for d in amd))
        labels |= _counted("amd.com", "cu-count", (str(d.compute_units) for d in amd))
    intel = found.get("intel", ())
    if intel:
        cards = [n.rsplit("/", 1)[1] for d in intel for n in d.nodes if "/card" in n]
        labels["gpu.intel.com/memory.max"] = str(sum(d.memory_mib for d in intel) << 20)
        labels["gpu.intel.com/tiles"] = str(sum(tiles(d.device_id) for d in intel))
        labels["gpu.intel.com/cards"] = ".".join(cards)
        labels["gpu.intel.com/gpu-numbers"] = ".".join(c[4:] for c in cards)
        labels["gpu.intel.com/millicores"] = str(1000 * len(intel))
    npus = found.get("ascend", ())
    if npus and _ascend.card_type(npus[0].device_id):
        first = npus[0]
        card = _ascend.card_type(first.device_id)
        labels["node.kubernetes.io/npu.chip.name"] = _safe(_ascend.chip_name(first.product))
        labels["servertype"] = f"{card}-{first.compute_units}"
        if card in _ASCEND_ACCELERATOR:  # setAcceleratorLabel's map: no 310B
            labels["accelerator"] = _ASCEND_ACCELERATOR[card]
        if first.family == "Ascend910":  # HasOnChipMemory: 910A, 910B, 910A3
            labels["mind-cluster/npu-chip-memory"] = f"{first.memory_mib // 1024}G"
    return labels


def facts_of_nvidia(
    name: str, memory_bytes: int, compute_capability: str, multiprocessors: int = 0
) -> Facts:
    """An NVIDIA GPU's or MIG device's neutral facts (NVML's name, memory, compute capability
    and SMs: 0 where NVML does not tell)."""
    try:
        major, minor = (int(x) for x in compute_capability.split(".", 1))
    except ValueError:
        major, minor = 0, 0
    cc = major * 10 + minor
    dtypes = ["fp32", "fp64"]
    for floor, dtype in ((89, "fp8"), (80, "bf16"), (70, "fp16")):
        if cc >= floor:
            dtypes.append(dtype)
    return ("nvidia", name, memory_bytes >> 20, multiprocessors, tuple(dtypes))


def neutral_labels(facts: Sequence[Facts]) -> dict[str, str]:
    """The vendor-neutral set (module docstring) over every accelerator's facts."""
    if not facts:
        return {f"{NEUTRAL}count": "0"}
    vendors = sorted({f[0] for f in facts})
    products = {f[1] for f in facts}
    labels = {
        f"{NEUTRAL}count": str(len(facts)),
        f"{NEUTRAL}vendor": vendors[0] if len(vendors) == 1 else "mixed",
        f"{NEUTRAL}vendors": ".".join(vendors),
        f"{NEUTRAL}product": _safe(products.pop(), "-") if len(products) == 1 else "mixed",
        f"{NEUTRAL}memory-mib": str(min(f[2] for f in facts)),
        f"{NEUTRAL}memory-mib.max": str(max(f[2] for f in facts)),
    }
    known = [f[3] for f in facts if f[3] > 0]
    if known:
        labels[f"{NEUTRAL}compute-units"] = str(min(known))
    for vendor in vendors:
        labels[f"{NEUTRAL}{vendor}.count"] = str(sum(1 for f in facts if f[0] == vendor))
    common = set(_DTYPES).intersection(*(set(f[4]) for f in facts))
    for dtype in _DTYPES:
        if dtype in common:
            labels[f"{NEUTRAL}dtype.{dtype}"] = "true"
    labels[f"{NEUTRAL}class"] = next((c for c in _CLASSES if c in common), "none")
    return labels


def node_labels(
    found: Mapping[str, Sequence[Accelerator]], nvidia: Sequence[Facts] = ()
) -> dict[str, str]:
    """The vendors' own labels and the neutral set, sorted by key."""
    facts: list[Facts] = list(nvidia)
    for devices in found.values():
        facts += [(d.vendor, d.product, d.memory_mib, d.compute_units, d.dtypes) for d in devices]
    return dict(sorted((vendor_labels(found) | neutral_labels(facts)).items()))
