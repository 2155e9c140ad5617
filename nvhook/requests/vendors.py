"""Other vendors' request variables: ``AMD_VISIBLE_DEVICES`` and ``ASCEND_VISIBLE_DEVICES``.

Each becomes :class:`~nvhook.requests.ids.VendorName` values, qualified names of the
vendor's CDI kind (``amd.com/gpu=0``, ``huawei.com/npu=3``) that jit mode serves from the
vendor's discovery (:mod:`nvhook.vendors.registry`) and cdi mode from spec files, so a
variable and a CDI annotation ask for the same device. The grammars are the vendors' own:

- ``AMD_VISIBLE_DEVICES`` as ROCm's container toolkit reads it (ROCm/container-toolkit
  ``internal/gpu-tracker/gpu-tracker.go`` ``parseGPUsList`` at 192fe8e): ``all`` (``All``,
  ``ALL``), or a comma list of indices, ranges ``a-b`` and unique ids (``0x`` then hex, or
  more than 8 hex digits; written ``0x…`` lower case, as its map keys are);
- ``ASCEND_VISIBLE_DEVICES`` as ``ascend-docker-runtime`` reads it (Ascend/
  ascend-docker-runtime ``runtime/main.go`` ``parseDevices``, ``parseAscendDevices`` at
  c451124): a comma list of numbers and ranges ``a-b`` (right border at most 128), or of
  ``Ascend<chip>-<n>`` of one chip (``Ascend910``, ``Ascend310``, ``Ascend310B``,
  ``Ascend310P``); sorted, duplicates dropped.

Empty, ``void`` and ``none`` ask for nothing. Anything else is a :class:`RequestError` naming
the variable and the item (those tools refuse them too). Pure functions, stdlib only.
"""

from __future__ import annotations

from nvhook.errors import RequestError
from nvhook.requests.ids import (
    CdiName,
    DeviceId,
    DeviceRequest,
    Devices,
    Requests,
    VendorName,
    Void,
)
from nvhook.requests.values import show, split_items

__all__ = [
    "ASCEND_CHIPS",
    "VENDOR_ENV",
    "VENDOR_KINDS",
    "parse_vendor_list",
    "split_vendor_names",
]

#: Request variable: the CDI kind its devices are named under.
VENDOR_ENV: dict[str, str] = {
    "AMD_VISIBLE_DEVICES": "amd.com/gpu",
    "ASCEND_VISIBLE_DEVICES": "huawei.com/npu",
}
ASCEND_CHIPS = ("910", "310", "310B", "310P")
_ASCEND_MAX = 128
_HEX = frozenset("0123456789abcdefABCDEF")


def parse_vendor_list(name: str, value: str) -> tuple[VendorName, ...]:
    """The devices ``value`` of variable ``name`` (a :data:`VENDOR_ENV` key) asks for."""
    kind = VENDOR_ENV[name]
    items = split_items(value, name)
    if not items or (len(items) == 1 and items[0] in ("void", "none")):
        return ()
    names = _amd(items, name) if name == "AMD_VISIBLE_DEVICES" else _ascend(items, name)
    return tuple(VendorName(f"{kind}={n}") for n in dict.fromkeys(names))


def _number(text: str, name: str, item: str) -> int:
    if not text.isdigit() or not text.isascii():
        raise RequestError(f"{name}: invalid device {show(item)}: expected a number")
    return int(text)


def _range(item: str, name: str, limit: int | None) -> list[int]:
    left, _, right = item.partition("-")
    a, b = _number(left.strip(), name, item), _number(right.strip(), name, item)
    if a > b:
        raise RequestError(f"{name}: invalid range {show(item)}: {a} is more than {b}")
    if limit is not None and b > limit:
        raise RequestError(f"{name}: invalid range {show(item)}: the most is {limit}")
    return list(range(a, b + 1))


def _amd(items: list[str], name: str) -> list[str]:
    if items == ["all"] or items == ["All"] or items == ["ALL"]:
        return ["all"]
    names: list[str] = []
    for item in items:
        if item in ("all", "All", "ALL"):
            raise RequestError(f"{name}: all stands alone, not with {show(','.join(items))}")
        bare = item[2:] if item[:2] in ("0x", "0X") else item
        if item[:2] in ("0x", "0X") or (len(item) > 8 and set(item) <= _HEX):
            if not bare or not set(bare) <= _HEX:
                raise RequestError(f"{name}: invalid unique id {show(item)}")
            names.append("0x" + bare.lower())
        elif "-" in item:
            names += [str(n) for n in _range(item, name, None)]
        else:
            names.append(str(_number(item, name, item)))
    return names


def _ascend(items: list[str], name: str) -> list[str]:
    numbers: list[int] = []
    if any(i.startswith("Ascend") for i in items):
        chips = set()
        for item in items:
            chip, _, n = item.removeprefix("Ascend").rpartition("-")
            if not item.startswith("Ascend") or chip not in ASCEND_CHIPS:
                raise RequestError(
                    f"{name}: invalid device {show(item)}: expected Ascend<chip>-<n> with chip "
                    f"one of {', '.join(ASCEND_CHIPS)}"
                )
            chips.add(chip)
            numbers.append(_number(n, name, item))
        if len(chips) > 1:
            raise RequestError(f"{name}: devices of more than one chip: {show(','.join(items))}")
    else:
        for item in items:
            if "-" in item:
                numbers += _range(item, name, _ASCEND_MAX)
            else:
                numbers.append(_number(item, name, item))
    return [str(n) for n in sorted(set(numbers))]


#: Every other vendor's CDI kind (:data:`nvhook.vendors.registry.VENDORS`' kinds): jit mode
#: serves a qualified name of one from that vendor's discovery.
VENDOR_KINDS = ("amd.com/gpu", "intel.com/gpu", "huawei.com/npu")


def split_vendor_names(requests: Requests) -> tuple[Requests, tuple[str, ...]]:
    """``requests`` without other vendors' devices, and those devices' qualified names.

    Other vendors' devices are the :class:`VendorName` values and the CDI names of a
    :data:`VENDOR_KINDS` kind; what is left is NVIDIA's (:class:`Void` when nothing is)."""
    devices = requests.devices
    if not isinstance(devices, Devices):
        return requests, ()
    names: list[str] = []
    rest: list[DeviceId] = []
    for i in devices.ids:
        if isinstance(i, VendorName) or (
            isinstance(i, CdiName) and i.value.partition("=")[0] in VENDOR_KINDS
        ):
            names.append(i.value)
        else:
            rest.append(i)
    if not names:
        return requests, ()
    left: DeviceRequest = Devices(tuple(rest)) if rest else Void()
    return requests._replace(devices=left), tuple(names)
