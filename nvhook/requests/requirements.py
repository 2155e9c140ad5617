"""``NVIDIA_REQUIRE_*`` constraints: parsing (pure) and checking against the host.

The language is libnvidia-container's requirement DSL, which every CUDA image
speaks, e.g. ``NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470,driver<471``:

- a value is a list of *alternatives* separated by blanks; it holds when one of
  them holds;
- an alternative is a list of *conditions* separated by commas; it holds when all
  of them hold (empty items are skipped, as libnvidia-container does);
- a condition is ``<key><op><value>``: keys ``cuda`` (the host driver's CUDA
  version), ``driver`` (the driver version), ``arch`` (a GPU's compute capability,
  ``8.0``), ``brand`` (a GPU's brand, ``tesla``, ``geforce``…); keys are
  case-insensitive; operators ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``;
- versions compare numerically component by component, missing components count
  as 0 (``12.4 < 12.10``, ``12 == 12.0``); brands compare case-insensitively and
  only with ``=`` or ``!=``;
- every ``NVIDIA_REQUIRE_*`` variable must hold (``NVIDIA_REQUIRE_JETPACK`` is not
  an expression and is skipped, like NVIDIA's toolkit does).

Checking (:func:`check_requirements`) follows libnvidia-container: each variable
is evaluated once per GPU that will be injected (``arch``/``brand`` look at that
GPU, so different GPUs may satisfy different alternatives); with no GPU, ``arch``
and ``brand`` conditions hold. A host value given as ``""`` means "unknown" and
conditions on it hold; callers that can know a value must pass it.

Malformed expressions raise :class:`~nvhook.errors.RequestError` at parse time; an
unmet requirement raises :class:`~nvhook.errors.RequirementError` naming the
variable, the condition and the host's value.
"""

from __future__ import annotations

from nvhook.constants import ENV_CUDA_VERSION, ENV_DISABLE_REQUIRE, REQUIREMENT_KEYS
from nvhook.errors import DriverError, RequestError, RequirementError
from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvhook.requests.ids import Requests

__all__ = [
    "Condition",
    "GpuFacts",
    "HostFacts",
    "Requirement",
    "check_requirements",
    "legacy_requirement",
    "parse_requirement",
    "parse_version",
    "unmet_condition",
]

#: Operators, longest first so that ``<=`` is not read as ``<``.
OPERATORS: tuple[str, ...] = ("!=", "<=", ">=", "=", "<", ">")
_OP_CHARS = frozenset("<>=!")
_VERSION_KEYS = frozenset(("cuda", "driver", "arch"))
_DIGITS = frozenset("0123456789")
#: Bounds on a version, so that a hostile value cannot make us build huge integers.
_MAX_VERSION_PARTS = 8
_MAX_PART_DIGITS = 9


def _show(text: str, limit: int = 80) -> str:
    """``text`` quoted for a one-line message, cut to about ``limit`` characters."""
    if len(text) > limit:
        return repr(text[: limit - 3] + "...") + f" ({len(text)} characters)"
    return repr(text)


def parse_version(text: str) -> tuple[int, ...]:
    """``"550.54.15"`` -> ``(550, 54, 15)``; raise :class:`ValueError` if not a dotted number."""
    parts = text.split(".")
    if len(parts) > _MAX_VERSION_PARTS:
        raise ValueError(f"{_show(text)} has more than {_MAX_VERSION_PARTS} components")
    out: list[int] = []
    for part in parts:
        if not part or len(part) > _MAX_PART_DIGITS or not _DIGITS.issuperset(part):
            raise ValueError(f"{_show(text)} is not a dotted number like 12.4")
        out.append(int(part))
    return tuple(out)


def _compare(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    width = max(len(a), len(b))
    a = a + (0,) * (width - len(a))
    b = b + (0,) * (width - len(b))
    return (a > b) - (a < b)


_HOLDS = {
    "=": lambda c: c == 0,
    "!=": lambda c: c != 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
}


class Condition(Frozen):
    """One ``<key><op><value>`` test, key lower-cased."""

    key: str
    op: str
    value: str

    def __str__(self) -> str:
        return f"{self.key}{self.op}{self.value}"


class Requirement(Frozen):
    """One ``NVIDIA_REQUIRE_*`` variable, parsed.

    ``source`` is the variable's name (``CUDA_VERSION`` for the requirement implied by a
    legacy image); ``expression`` the text as written; ``alternatives`` the blank-separated
    terms, each a tuple of conditions that must all hold.
    """

    source: str
    expression: str
    alternatives: tuple[tuple[Condition, ...], ...]


class GpuFacts(Frozen):
    """What a requirement can ask about one GPU that will be injected.

    ``arch`` is the compute capability (``"8.0"``), ``brand`` NVML's brand name in any
    case (``"tesla"``, ``"GeForce"``), ``name`` how messages call the GPU (its index or
    UUID); ``""`` means unknown.
    """

    arch: str
    brand: str
    name: str = ""

    def __post_init__(self) -> None:
        name = self.name
        _check_host_version(self.arch, f"GPU {name} architecture" if name else "GPU architecture")


class HostFacts(Frozen):
    """What a requirement can ask about the host: the driver's CUDA version (``"12.4"``),
    the driver version (``"550.54.15"``) and the GPUs that will be injected.

    ``cuda_from`` names where ``cuda_version`` comes from when it is not the host driver's:
    the image's CUDA forward compatibility ``libcuda``, which the container will load
    (:mod:`nvhook.hook.cuda_compat`); ``""``: the host driver. ``cuda_note`` says why an
    image's compat ``libcuda`` that is there does *not* count (shown with an unmet ``cuda``
    condition: the user expected it to).
    """

    cuda_version: str
    driver_version: str
    gpus: tuple[GpuFacts, ...] = ()
    cuda_from: str = ""
    cuda_note: str = ""

    def __post_init__(self) -> None:
        _check_host_version(self.cuda_version, "CUDA version")
        _check_host_version(self.driver_version, "driver version")


def _check_host_version(value: str, what: str) -> None:
    if value:
        try:
            parse_version(value)
        except ValueError as e:
            raise DriverError(f"host {what} {e}") from None


def _parse_condition(text: str, source: str) -> Condition:
    where = f"{source}: condition {_show(text)}"
    start = 0
    while start < len(text) and text[start] not in _OP_CHARS:
        start += 1
    end = start
    while end < len(text) and text[end] in _OP_CHARS:
        end += 1
    key, op, value = text[:start].lower(), text[start:end], text[end:]
    if not key or not op:
        raise RequestError(f"{where} is not <key><operator><value>, e.g. cuda>=12.4")
    if op not in OPERATORS:
        raise RequestError(f"{where}: unknown operator {op!r}; valid: {' '.join(OPERATORS)}")
    if not value:
        raise RequestError(f"{where} has no value after {op!r}")
    if key not in REQUIREMENT_KEYS:
        raise RequestError(
            f"{where}: unknown key {_show(key)}; valid: {', '.join(REQUIREMENT_KEYS)}"
        )
    if key in _VERSION_KEYS:
        try:
            parse_version(value)
        except ValueError as e:
            raise RequestError(f"{where}: {e}") from None
    elif op not in ("=", "!="):
        raise RequestError(f"{where}: a brand compares only with = or !=")
    elif not value.isascii() or not value.isprintable():
        raise RequestError(f"{where}: the brand must be printable ASCII")
    return Condition(key, op, value)


def parse_requirement(source: str, expression: str) -> Requirement | None:
    """Parse one variable's value; ``None`` when it is blank (no requirement).

    Raise :class:`RequestError` naming ``source`` and the bad condition.
    """
    alternatives: list[tuple[Condition, ...]] = []
    for term in expression.split():
        conditions = tuple(_parse_condition(c, source) for c in term.split(",") if c)
        if conditions:
            alternatives.append(conditions)
    if not alternatives:
        return None
    return Requirement(source, expression, tuple(alternatives))


def legacy_requirement(cuda_version: str) -> Requirement:
    """The ``cuda>=X.Y`` requirement that a legacy image's ``CUDA_VERSION=X.Y.Z`` implies."""
    try:
        parts = parse_version(cuda_version.strip().removeprefix("v"))
    except ValueError as e:
        raise RequestError(f"{ENV_CUDA_VERSION}: {e}") from None
    major_minor = ".".join(str(p) for p in (*parts, 0)[:2])
    condition = Condition("cuda", ">=", major_minor)
    return Requirement(ENV_CUDA_VERSION, str(condition), ((condition,),))


def _holds(condition: Condition, host: HostFacts, gpu: GpuFacts | None) -> bool:
    key = condition.key
    if key == "brand":
        if gpu is None or not gpu.brand:
            return True
        same = gpu.brand.casefold() == condition.value.casefold()
        return same if condition.op == "=" else not same
    if key == "cuda":
        have = host.cuda_version
    elif key == "driver":
        have = host.driver_version
    else:
        have = gpu.arch if gpu is not None else ""
    if not have:
        return True
    return bool(_HOLDS[condition.op](_compare(parse_version(have), parse_version(condition.value))))


def unmet_condition(
    requirement: Requirement, host: HostFacts, gpu: GpuFacts | None = None
) -> Condition | None:
    """``None`` when ``requirement`` holds for ``host`` (and ``gpu``); otherwise the first
    condition that fails in the first alternative, the one a message should name."""
    first_failure: Condition | None = None
    for conditions in requirement.alternatives:
        failed = next((c for c in conditions if not _holds(c, host, gpu)), None)
        if failed is None:
            return None
        if first_failure is None:
            first_failure = failed
    return first_failure


def _host_value(condition: Condition, host: HostFacts, gpu: GpuFacts | None, index: int) -> str:
    if condition.key == "cuda":
        if host.cuda_from:
            return f"the container's CUDA version is {host.cuda_version} ({host.cuda_from})"
        note = f" ({host.cuda_note})" if host.cuda_note else ""
        return f"the host's CUDA version is {host.cuda_version}{note}"
    if condition.key == "driver":
        return f"the host's driver is {host.driver_version}"
    assert gpu is not None  # arch and brand conditions hold when there is no GPU
    name = gpu.name or f"#{index}"
    if condition.key == "arch":
        return f"GPU {name} has architecture {gpu.arch}"
    return f"GPU {name} has brand {gpu.brand}"


def check_requirements(requests: Requests, host: HostFacts) -> None:
    """Raise :class:`RequirementError` unless every requirement holds on ``host``.

    Nothing is checked when the container set ``NVIDIA_DISABLE_REQUIRE``. ``host.gpus``
    must be the GPUs that will be injected.
    """
    if requests.disable_require or not requests.requirements:
        return
    gpus: tuple[GpuFacts | None, ...] = host.gpus or (None,)
    for index, gpu in enumerate(gpus):
        for requirement in requests.requirements:
            failed = unmet_condition(requirement, host, gpu)
            if failed is None:
                continue
            n = len(requirement.alternatives)
            others = f" (nor does any of the other {n - 1} alternatives)" if n > 1 else ""
            raise RequirementError(
                f"{requirement.source} is not met: {failed} but "
                f"{_host_value(failed, host, gpu, index)}{others}; use a newer driver, "
                f"an image built for this one, or set {ENV_DISABLE_REQUIRE}=true"
            )
