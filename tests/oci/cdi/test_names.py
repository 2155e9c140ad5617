"""Qualified device names follow the reference parser (pkg/parser/parser.go)."""

from __future__ import annotations

import pytest

from oci.cdi.names import (
    QualifiedName,
    class_name_problem,
    device_name_problem,
    is_qualified_name,
    parse_kind,
    parse_qualified_name,
    qualified_name,
    quote,
    vendor_name_problem,
)
from oci.errors import CdiNameError, ExitCode


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("nvidia.com/gpu=0", ("nvidia.com", "gpu", "0")),
        ("nvidia.com/gpu=all", ("nvidia.com", "gpu", "all")),
        (
            "nvidia.com/gpu=GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
            ("nvidia.com", "gpu", "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"),
        ),
        ("nvidia.com/mig=0:1", ("nvidia.com", "mig", "0:1")),
        ("vendor.com/class.sub=dev_1.a", ("vendor.com", "class.sub", "dev_1.a")),
        ("a/b=c", ("a", "b", "c")),
        ("V-1_x.y/C-2_z=n", ("V-1_x.y", "C-2_z", "n")),
        # only the first "=" and the first "/" split
        ("vendor.com/class=a=b", None),
        ("vendor.com/cl/ass=x", None),
    ],
)
def test_parse_valid_and_invalid_splits(device: str, expected: tuple[str, str, str] | None) -> None:
    if expected is None:
        with pytest.raises(CdiNameError):
            parse_qualified_name(device)
        return
    parsed = parse_qualified_name(device)
    assert parsed == QualifiedName(*expected)
    assert str(parsed) == device
    assert parsed.kind == f"{expected[0]}/{expected[1]}"
    assert is_qualified_name(device)


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("", "a device name cannot be empty or start with '/'"),
        ("gpu0", "unqualified device \"gpu0\": expected vendor/class=name (no '=name' part)"),
        ("/dev/nvidia0", "cannot be empty or start with '/'"),
        ("nvidia.com/gpu", "no '=name' part"),
        ("nvidia.com/gpu=", "empty name after '='"),
        ("=0", "no 'vendor/class' before '='"),
        ("/gpu=0", "cannot be empty or start with '/'"),
        ("nvidia.com/=0", "no 'vendor/class' before '='"),
        ("1vendor/gpu=0", 'invalid vendor. "1vendor", should start with letter'),
        ("vendor-/gpu=0", 'invalid vendor. "vendor-", should end with a letter or digit'),
        ("ven:dor/gpu=0", "invalid vendor. invalid character ':' in name \"ven:dor\""),
        ("vendor/_gpu=0", 'invalid class. "_gpu", should start with letter'),
        ("vendor/gpu.=0", 'invalid class. "gpu.", should end with a letter or digit'),
        ("vendor/g:pu=0", "invalid class. invalid character ':' in name \"g:pu\""),
        ("vendor/gpu=-0", 'invalid device name "-0", should start with a letter or digit'),
        ("vendor/gpu=0:", 'invalid device name "0:", should end with a letter or digit'),
        ("vendor/gpu=a/b", "invalid character '/' in device name \"a/b\""),
        ("vendor/gpu=a b", "invalid character ' ' in device name \"a b\""),
        ("vendor/gpu=gpü", 'invalid device name "gpü", should end with a letter or digit'),
    ],
)
def test_parse_errors_name_the_problem(device: str, message: str) -> None:
    with pytest.raises(CdiNameError) as info:
        parse_qualified_name(device)
    assert message in str(info.value)
    assert info.value.exit_code == ExitCode.UNRESOLVED
    assert not is_qualified_name(device)


def test_single_character_names_are_valid() -> None:
    # The reference's vendor/class check slices name[1:len-1], which panics in Go
    # for one character; the rule itself (start letter, end alnum) accepts "a".
    assert vendor_name_problem("a") is None
    assert class_name_problem("b") is None
    assert device_name_problem("0") is None
    assert device_name_problem("x") is None
    assert vendor_name_problem("1") is not None
    assert device_name_problem("-") is not None


def test_empty_parts() -> None:
    assert vendor_name_problem("") == "invalid vendor. empty name"
    assert class_name_problem("") == "invalid class. empty name"
    assert device_name_problem("") == "invalid (empty) device name"


def test_device_names_may_hold_colon_but_kinds_may_not() -> None:
    assert device_name_problem("a:b") is None
    assert vendor_name_problem("a:b") is not None
    assert class_name_problem("a:b") is not None


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("nvidia.com/gpu", ("nvidia.com", "gpu")),
        ("a/b/c", ("a", "b/c")),
        ("nvidia.com", ("", "nvidia.com")),
        ("/gpu", ("", "/gpu")),
        ("nvidia.com/", ("", "nvidia.com/")),
        ("", ("", "")),
    ],
)
def test_parse_kind_is_the_reference_parse_qualifier(kind: str, expected: tuple[str, str]) -> None:
    assert parse_kind(kind) == expected


def test_qualified_name_joins() -> None:
    assert qualified_name("nvidia.com", "gpu", "0") == "nvidia.com/gpu=0"


def test_quote_keeps_messages_on_one_line() -> None:
    assert quote('a"b') == '"a\\"b"'
    assert quote("a\nb") == '"a\\nb"'
    assert "\n" not in quote("x\n\ty")
