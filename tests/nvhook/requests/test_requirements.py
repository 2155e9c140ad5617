"""NVIDIA_REQUIRE_* parsing and checking (nvhook/requests/requirements.py)."""

from __future__ import annotations

import pytest

from nvhook.errors import DriverError, RequestError, RequirementError
from nvhook.requests.ids import All, Requests, Void
from nvhook.requests.requirements import (
    Condition,
    GpuFacts,
    HostFacts,
    Requirement,
    check_requirements,
    legacy_requirement,
    parse_requirement,
    parse_version,
    unmet_condition,
)

BRANDS = [
    "tesla",
    "unknown",
    "nvidia",
    "nvidiartx",
    "geforce",
    "geforcertx",
    "quadro",
    "quadrortx",
    "titan",
    "titanrtx",
]


def _cuda_image_value(cuda: str, drivers: tuple[int, ...]) -> str:
    """NVIDIA_REQUIRE_CUDA as nvidia/cuda images write it (forward-compat brand terms)."""
    terms = [f"cuda>={cuda}"]
    for driver in drivers:
        terms += [f"brand={b},driver>={driver},driver<{driver + 1}" for b in BRANDS]
    return " ".join(terms)


#: nvidia/cuda:12.4.1-base-ubuntu22.04 carries this (470, 525 and 535 branches).
CUDA_12_4 = _cuda_image_value("12.4", (470, 525, 535))


def _requests(*requirements: Requirement, disable: bool = False) -> Requests:
    return Requests(All(), requirements=requirements, disable_require=disable)


def _req(value: str, source: str = "NVIDIA_REQUIRE_CUDA") -> Requirement:
    requirement = parse_requirement(source, value)
    assert requirement is not None
    return requirement


# --- parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "alternatives"),
    [
        ("cuda>=12.4", ((("cuda", ">=", "12.4"),),)),
        ("  cuda>=12.4  ", ((("cuda", ">=", "12.4"),),)),
        ("CUDA>=12.4", ((("cuda", ">=", "12.4"),),)),
        ("driver<=550.54.15", ((("driver", "<=", "550.54.15"),),)),
        ("arch=8.0", ((("arch", "=", "8.0"),),)),
        ("arch!=7.5", ((("arch", "!=", "7.5"),),)),
        ("driver>470", ((("driver", ">", "470"),),)),
        ("driver<471", ((("driver", "<", "471"),),)),
        ("brand=Tesla", ((("brand", "=", "Tesla"),),)),
        ("brand!=geforce", ((("brand", "!=", "geforce"),),)),
        (
            "cuda>=12.4 brand=tesla,driver>=470,driver<471",
            (
                (("cuda", ">=", "12.4"),),
                (("brand", "=", "tesla"), ("driver", ">=", "470"), ("driver", "<", "471")),
            ),
        ),
        # empty conditions and repeated blanks are skipped, as libnvidia-container does
        ("cuda>=12.4,,  \tdriver>=470,", ((("cuda", ">=", "12.4"),), (("driver", ">=", "470"),))),
    ],
)
def test_parse_requirement(
    value: str, alternatives: tuple[tuple[tuple[str, str, str], ...], ...]
) -> None:
    requirement = _req(value)
    assert requirement.source == "NVIDIA_REQUIRE_CUDA"
    assert requirement.expression == value
    assert requirement.alternatives == tuple(
        tuple(Condition(*c) for c in term) for term in alternatives
    )


def test_parse_real_cuda_image_value() -> None:
    requirement = _req(CUDA_12_4)
    assert len(requirement.alternatives) == 1 + 3 * len(BRANDS)
    assert requirement.alternatives[0] == (Condition("cuda", ">=", "12.4"),)
    assert requirement.alternatives[-1] == (
        Condition("brand", "=", "titanrtx"),
        Condition("driver", ">=", "535"),
        Condition("driver", "<", "536"),
    )


@pytest.mark.parametrize("value", ["", "   ", "\t", ",", " , ,"])
def test_blank_requirement_is_none(value: str) -> None:
    assert parse_requirement("NVIDIA_REQUIRE_CUDA", value) is None


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        ("foo>=1", ["unknown key 'foo'", "cuda, driver, arch, brand"]),
        ("cuda>=", ["has no value after '>='"]),
        ("cuda", ["is not <key><operator><value>"]),
        (">=12.4", ["is not <key><operator><value>"]),
        ("cuda=>12", ["unknown operator '=>'"]),
        ("cuda==12", ["unknown operator '=='"]),
        ("cuda<>12", ["unknown operator '<>'"]),
        ("cuda>=abc", ["'abc' is not a dotted number"]),
        ("cuda>=12..4", ["'12..4' is not a dotted number"]),
        ("cuda>=12.4.", ["is not a dotted number"]),
        ("cuda>=-1", ["'-1' is not a dotted number"]),
        ("driver>=1.2.3.4.5.6.7.8.9", ["more than 8 components"]),
        ("driver>=1234567890", ["is not a dotted number"]),
        ("arch>=sm_80", ["'sm_80' is not a dotted number"]),
        ("brand>=tesla", ["a brand compares only with = or !="]),
        ("brand<tesla", ["a brand compares only with = or !="]),
        ("cuda>=12.4 brand=tesla,foo=1", ["unknown key 'foo'", "'foo=1'"]),
    ],
)
def test_parse_requirement_errors(value: str, fragments: list[str]) -> None:
    with pytest.raises(RequestError) as info:
        parse_requirement("NVIDIA_REQUIRE_CUDA", value)
    message = str(info.value)
    assert message.startswith("NVIDIA_REQUIRE_CUDA: condition ")
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_error_message_truncates_huge_condition() -> None:
    with pytest.raises(RequestError) as info:
        parse_requirement("NVIDIA_REQUIRE_X", "foo>=" + "1" * 100_000)
    assert len(str(info.value)) < 400
    assert "(100005 characters)" in str(info.value)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("12", (12,)), ("12.4", (12, 4)), ("550.54.15", (550, 54, 15)), ("0", (0,))],
)
def test_parse_version(text: str, parsed: tuple[int, ...]) -> None:
    assert parse_version(text) == parsed


@pytest.mark.parametrize("text", ["", ".", "1.", ".1", "a", "1.a", "1 2", "+1", "١٢", "1e3"])
def test_parse_version_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"dotted number"):
        parse_version(text)


@pytest.mark.parametrize(
    ("cuda_version", "expected"),
    [
        ("10.0.130", "cuda>=10.0"),
        ("9", "cuda>=9.0"),
        ("v11.8.0", "cuda>=11.8"),
        ("12.4", "cuda>=12.4"),
    ],
)
def test_legacy_requirement(cuda_version: str, expected: str) -> None:
    requirement = legacy_requirement(cuda_version)
    assert requirement.source == "CUDA_VERSION"
    assert requirement.expression == expected
    assert len(requirement.alternatives) == 1


@pytest.mark.parametrize("cuda_version", ["abc", "10.x", "-1"])
def test_legacy_requirement_rejects(cuda_version: str) -> None:
    with pytest.raises(RequestError, match=r"^CUDA_VERSION: "):
        legacy_requirement(cuda_version)


# --- checking ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "host_cuda", "holds"),
    [
        ("cuda>=12.4", "12.4", True),
        ("cuda>=12.4", "12.10", True),  # numeric, not lexicographic
        ("cuda>=12.10", "12.4", False),
        ("cuda>=12.4", "12.3", False),
        ("cuda>12.4", "12.4", False),
        ("cuda>12.4", "12.4.1", True),
        ("cuda<12.4", "12.3.99", True),
        ("cuda<=12.4", "12.4.0", True),  # missing components count as 0
        ("cuda=12", "12.0", True),
        ("cuda=12.0.0", "12", True),
        ("cuda!=12.0", "12", False),
        ("cuda!=12.0", "12.1", True),
        ("cuda>=13", "12.9", False),
    ],
)
def test_version_comparison(condition: str, host_cuda: str, holds: bool) -> None:
    host = HostFacts(cuda_version=host_cuda, driver_version="550.54.15")
    assert (unmet_condition(_req(condition), host) is None) is holds


@pytest.mark.parametrize(
    ("condition", "driver", "holds"),
    [
        ("driver>=550.54.15", "550.54.15", True),
        ("driver>=550.54.15", "550.54.14", False),
        ("driver>=550.54.15", "550.100", True),
        ("driver<551", "550.127.05", True),
        ("driver<471", "470.256.02", True),
        ("driver<471", "471", False),
    ],
)
def test_driver_comparison(condition: str, driver: str, holds: bool) -> None:
    host = HostFacts(cuda_version="12.4", driver_version=driver)
    assert (unmet_condition(_req(condition), host) is None) is holds


@pytest.mark.parametrize(
    ("cuda", "driver", "brand", "holds"),
    [
        ("12.4", "550.54.15", "tesla", True),  # cuda>=12.4
        ("12.6", "560.35.03", "geforce", True),
        ("12.2", "535.104.05", "tesla", True),  # forward compatibility, 535 branch
        ("12.2", "535.104.05", "GeForce", True),  # brands compare case-insensitively
        ("11.4", "470.82.01", "quadrortx", True),  # 470 branch
        ("12.0", "525.60.13", "nvidiartx", True),  # 525 branch
        ("12.3", "545.23.08", "tesla", False),  # no term for 545
        ("12.2", "535.104.05", "a100x", False),  # a brand without a term
        ("11.8", "520.61.05", "tesla", False),
    ],
)
def test_real_cuda_image_requirement(cuda: str, driver: str, brand: str, holds: bool) -> None:
    host = HostFacts(cuda, driver, (GpuFacts(arch="8.0", brand=brand, name="0"),))
    requests = _requests(_req(CUDA_12_4))
    if holds:
        assert unmet_condition(requests.requirements[0], host, host.gpus[0]) is None
        assert _met(requests, host)
        return
    with pytest.raises(RequirementError) as info:
        check_requirements(requests, host)
    message = str(info.value)
    assert message.startswith("NVIDIA_REQUIRE_CUDA is not met: cuda>=12.4 but ")
    assert f"the host's CUDA version is {cuda}" in message
    assert f"nor does any of the other {3 * len(BRANDS)} alternatives" in message
    assert "NVIDIA_DISABLE_REQUIRE=true" in message
    assert "\n" not in message and len(message) < 300
    assert info.value.exit_code == 7


def test_unmet_names_driver_and_host_value() -> None:
    host = HostFacts("12.4", "535.104.05")
    with pytest.raises(RequirementError) as info:
        check_requirements(_requests(_req("driver>=550", "NVIDIA_REQUIRE_DRIVER")), host)
    assert str(info.value).startswith(
        "NVIDIA_REQUIRE_DRIVER is not met: driver>=550 but the host's driver is 535.104.05;"
    )


def test_every_variable_must_hold() -> None:
    host = HostFacts("12.4", "550.54.15")
    ok = _req("cuda>=12.0")
    bad = _req("driver>=560", "NVIDIA_REQUIRE_DRIVER")
    check_requirements(_requests(ok), host)
    with pytest.raises(RequirementError, match=r"^NVIDIA_REQUIRE_DRIVER is not met"):
        check_requirements(_requests(ok, bad), host)


def test_arch_and_brand_hold_for_every_injected_gpu() -> None:
    requirement = _req("arch>=8.0", "NVIDIA_REQUIRE_ARCH")
    a100 = GpuFacts(arch="8.0", brand="tesla", name="GPU-a100")
    v100 = GpuFacts(arch="7.0", brand="tesla", name="GPU-v100")
    check_requirements(_requests(requirement), HostFacts("12.4", "550.54.15", (a100,)))
    with pytest.raises(RequirementError) as info:
        check_requirements(_requests(requirement), HostFacts("12.4", "550.54.15", (a100, v100)))
    assert "arch>=8.0 but GPU GPU-v100 has architecture 7.0" in str(info.value)


def test_alternatives_are_evaluated_per_gpu() -> None:
    # libnvidia-container evaluates each expression per GPU: each GPU may satisfy a
    # different alternative.
    requirement = _req("brand=tesla,arch>=8.0 brand=geforce,arch>=7.5")
    gpus = (GpuFacts("8.0", "tesla", "0"), GpuFacts("7.5", "geforce", "1"))
    check_requirements(_requests(requirement), HostFacts("12.4", "550.54.15", gpus))
    gpus = (GpuFacts("8.0", "tesla", "0"), GpuFacts("7.0", "geforce", "1"))
    with pytest.raises(RequirementError, match=r"brand=tesla but GPU 1 has brand geforce"):
        check_requirements(_requests(requirement), HostFacts("12.4", "550.54.15", gpus))


def test_unnamed_gpu_is_called_by_position() -> None:
    host = HostFacts("12.4", "550.54.15", (GpuFacts("8.0", "tesla"), GpuFacts("7.0", "tesla")))
    with pytest.raises(RequirementError, match=r"GPU #1 has architecture 7.0"):
        check_requirements(_requests(_req("arch>=8.0")), host)


def _met(requests: Requests, host: HostFacts) -> bool:
    """Whether ``check_requirements`` lets the container start (it returns nothing)."""
    try:
        check_requirements(requests, host)
    except RequirementError:
        return False
    return True


@pytest.mark.parametrize("value", ["arch>=9.0 brand=tesla", "arch>=9.0,brand=tesla"])
def test_arch_and_brand_hold_without_gpus(value: str) -> None:
    # No GPU injected (NVIDIA_VISIBLE_DEVICES=none): as in libnvidia-container.
    requirement = _req(value)
    assert unmet_condition(requirement, HostFacts("12.4", "550.54.15", ())) is None
    assert _met(_requests(requirement), HostFacts("12.4", "550.54.15", ()))
    # ...while an injected GPU is held to them
    gpu = GpuFacts(arch="8.0", brand="geforce", name="0")
    assert not _met(_requests(requirement), HostFacts("12.4", "550.54.15", (gpu,)))


def test_unknown_host_values_hold() -> None:
    versions = _req("cuda>=99 driver>=999")
    gpu_terms = _req("arch>=9.0,brand=tesla")
    unknown_gpu = GpuFacts(arch="", brand="")
    assert unmet_condition(versions, HostFacts("", "")) is None
    assert unmet_condition(gpu_terms, HostFacts("", "", (unknown_gpu,)), unknown_gpu) is None
    assert _met(_requests(versions), HostFacts("", ""))
    assert _met(_requests(gpu_terms), HostFacts("", "", (unknown_gpu,)))
    # ...while known values are compared
    assert not _met(_requests(versions), HostFacts("12.4", "550.54.15"))
    known_gpu = GpuFacts(arch="8.0", brand="tesla")
    assert not _met(_requests(gpu_terms), HostFacts("", "", (known_gpu,)))


def test_disable_require_skips_the_check() -> None:
    host = HostFacts("12.4", "550.54.15")
    assert _met(_requests(_req("cuda>=99"), disable=True), host)
    assert not _met(_requests(_req("cuda>=99")), host)  # what it skips


def test_no_requirements() -> None:
    request = Requests(Void())
    assert request.requirements == () and not request.disable_require
    assert _met(request, HostFacts("12.4", "550.54.15"))
    assert _met(Requests(All()), HostFacts("", ""))


def test_legacy_requirement_is_checked() -> None:
    with pytest.raises(RequirementError) as info:
        check_requirements(_requests(legacy_requirement("10.0.130")), HostFacts("9.2", "396.26"))
    assert str(info.value).startswith(
        "CUDA_VERSION is not met: cuda>=10.0 but the host's CUDA version is 9.2"
    )


def test_unmet_condition_names_first_failure_of_first_alternative() -> None:
    requirement = _req("cuda>=12.4,driver>=550 driver>=999")
    failed = unmet_condition(requirement, HostFacts("12.4", "535.104.05"))
    assert failed == Condition("driver", ">=", "550")


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"cuda_version": "12.x", "driver_version": "550"}, "host CUDA version '12.x'"),
        ({"cuda_version": "12.4", "driver_version": "550-open"}, "host driver version"),
    ],
)
def test_host_facts_validate_versions(kwargs: dict[str, str], fragment: str) -> None:
    with pytest.raises(DriverError, match=fragment):
        HostFacts(kwargs["cuda_version"], kwargs["driver_version"])


def test_gpu_facts_validate_arch() -> None:
    with pytest.raises(DriverError, match=r"host GPU 3 architecture 'sm_80'"):
        GpuFacts(arch="sm_80", brand="tesla", name="3")


def test_values_are_frozen_and_comparable() -> None:
    condition = Condition("cuda", ">=", "12.4")
    assert condition == Condition("cuda", ">=", "12.4")
    assert hash(condition) == hash(Condition("cuda", ">=", "12.4"))
    assert str(condition) == "cuda>=12.4"
    with pytest.raises(AttributeError):
        condition.value = "1"
