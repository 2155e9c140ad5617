"""Policy (nvhook/requests/policy.py): defaults, validation, and one behaviour test per switch."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nvhook.constants import ALL_CAPABILITIES
from nvhook.errors import ConfigError
from nvhook.requests.ids import (
    All,
    CdiName,
    Devices,
    Features,
    Ignored,
    Index,
    NoGpus,
    Source,
    SourceKind,
    Void,
)
from nvhook.requests.parse import parse_requests
from nvhook.requests.policy import SETTINGS_KEYS, Policy, canonical_capabilities

NOT_ALLOWED = "the container is not privileged and policy accept_env_unprivileged is false"


def spec_with(
    *env: str,
    privileged: bool = False,
    annotations: dict[str, str] | None = None,
    mounts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    bounding = ["CAP_CHOWN"] + (["CAP_SYS_ADMIN"] if privileged else [])
    spec: dict[str, Any] = {
        "process": {"env": ["PATH=/bin", *env], "capabilities": {"bounding": bounding}}
    }
    if annotations is not None:
        spec["annotations"] = annotations
    if mounts is not None:
        spec["mounts"] = mounts
    return spec


def test_defaults() -> None:
    policy = Policy()
    assert policy.accept_env_unprivileged is True
    assert policy.accept_volume_mounts is False
    assert policy.annotation_prefixes == ("cdi.k8s.io/",)
    assert policy.privileged_gets_all is False
    assert policy.default_capabilities == ("compute", "utility")


def test_defaults_agree_with_the_settings_reference() -> None:
    from nvhook.settings import KEYS, defaults

    assert set(SETTINGS_KEYS.values()) <= set(KEYS)
    assert Policy.from_settings(defaults()) == Policy()


def test_from_settings() -> None:
    from nvhook.settings import defaults

    settings = defaults()._replace(
        policy_accept_env_unprivileged=False,
        policy_accept_volume_mounts=True,
        cdi_annotation_prefixes=("cdi.k8s.io/", "nvidia.cdi.k8s.io/"),
        policy_privileged_gets_all=True,
        policy_default_capabilities=("utility", "compute", "video"),
    )
    assert Policy.from_settings(settings) == Policy(
        accept_env_unprivileged=False,
        accept_volume_mounts=True,
        annotation_prefixes=("cdi.k8s.io/", "nvidia.cdi.k8s.io/"),
        privileged_gets_all=True,
        default_capabilities=("compute", "utility", "video"),
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"accept_env_unprivileged": "false"},
            "policy.accept_env_unprivileged must be true or false, not 'false'",
        ),
        ({"accept_volume_mounts": 1}, "policy.accept_volume_mounts must be true or false, not 1"),
        (
            {"privileged_gets_all": None},
            "policy.privileged_gets_all must be true or false, not None",
        ),
        (
            {"annotation_prefixes": "cdi.k8s.io/"},
            "cdi.annotation_prefixes must be a list of strings, not 'cdi.k8s.io/'",
        ),
        ({"annotation_prefixes": [1]}, "cdi.annotation_prefixes must be a list of strings"),
        (
            {"annotation_prefixes": ["cdi.k8s.io/", ""]},
            "cdi.annotation_prefixes has an empty prefix",
        ),
        (
            {"default_capabilities": "compute"},
            "policy.default_capabilities must be a list of strings, not 'compute'",
        ),
        (
            {"default_capabilities": ["compute", "cuda"]},
            "policy.default_capabilities: unknown capability 'cuda'; valid: compute, utility, "
            "video, graphics, display, ngx, compat32, all",
        ),
    ],
)
def test_invalid_values_name_the_key(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Policy(**kwargs)
    assert str(info.value) == message
    assert info.value.exit_code == 8
    from nvhook.settings import defaults, field_name

    settings = defaults()._replace(**{field_name(SETTINGS_KEYS[k]): v for k, v in kwargs.items()})
    with pytest.raises(ConfigError, match="^" + re.escape(message.split(" ")[0])):
        Policy.from_settings(settings)


def test_keyword_only_frozen_hashable() -> None:
    with pytest.raises(TypeError):
        Policy(True)  # type: ignore[call-arg]
    policy = Policy(annotation_prefixes=["a/"], default_capabilities=["all"])
    assert policy.annotation_prefixes == ("a/",)
    assert policy.default_capabilities == ALL_CAPABILITIES
    assert hash(policy) == hash(Policy(annotation_prefixes=("a/",), default_capabilities=("all",)))
    with pytest.raises(AttributeError):
        policy.privileged_gets_all = True


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ((), ()),
        (("utility", "compute", "utility"), ("compute", "utility")),
        (("ngx", "all"), ALL_CAPABILITIES),
    ],
)
def test_canonical_capabilities(names: tuple[str, ...], expected: tuple[str, ...]) -> None:
    assert canonical_capabilities(names) == expected


def test_canonical_capabilities_checks_every_name() -> None:
    with pytest.raises(ValueError, match=r"unknown capability 'bogus'"):
        canonical_capabilities(["all", "bogus"])


# --- accept_env_unprivileged ------------------------------------------------------------------


def test_accept_env_unprivileged_true_honours_env() -> None:
    request = parse_requests(spec_with("NVIDIA_VISIBLE_DEVICES=all"), Policy())
    assert request.devices == All()
    assert request.warnings == ()


def test_accept_env_unprivileged_false_ignores_env_with_a_warning() -> None:
    spec = spec_with(
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_IMEX_CHANNELS=0",
        "NVIDIA_GDS=enabled",
    )
    request = parse_requests(spec, Policy(accept_env_unprivileged=False))
    assert request.devices == Void()
    assert request.imex_channels == ()
    assert not request.wants_anything
    assert request.sources == ()
    assert request.ignored == (
        Ignored(SourceKind.ENV, "NVIDIA_VISIBLE_DEVICES", "all", NOT_ALLOWED),
        Ignored(SourceKind.ENV, "NVIDIA_IMEX_CHANNELS", "0", NOT_ALLOWED),
    )
    assert request.warnings == (
        f"ignored NVIDIA_VISIBLE_DEVICES='all': {NOT_ALLOWED}",
        f"ignored NVIDIA_IMEX_CHANNELS='0': {NOT_ALLOWED}",
    )


def test_accept_env_unprivileged_false_ignores_features_of_an_annotated_request() -> None:
    spec = spec_with("NVIDIA_GDS=enabled", annotations={"cdi.k8s.io/a": "nvidia.com/gpu=0"})
    request = parse_requests(spec, Policy(accept_env_unprivileged=False))
    assert request.devices == Devices((CdiName("nvidia.com/gpu=0"),))
    assert request.features == Features()
    assert request.ignored == (Ignored(SourceKind.ENV, "NVIDIA_GDS", "enabled", NOT_ALLOWED),)


def test_accept_env_unprivileged_false_is_quiet_about_void() -> None:
    request = parse_requests(
        spec_with("NVIDIA_VISIBLE_DEVICES=void"), Policy(accept_env_unprivileged=False)
    )
    assert request.warnings == ()
    assert request.ignored == (
        Ignored(SourceKind.ENV, "NVIDIA_VISIBLE_DEVICES", "void", NOT_ALLOWED),
    )


def test_accept_env_unprivileged_false_ignores_a_legacy_image() -> None:
    request = parse_requests(spec_with("CUDA_VERSION=10.0"), Policy(accept_env_unprivileged=False))
    assert request.devices == Void()
    assert request.ignored == (
        Ignored(SourceKind.LEGACY_IMAGE, "CUDA_VERSION", "10.0", NOT_ALLOWED),
    )
    assert "legacy CUDA image" in request.warnings[0]


def test_accept_env_unprivileged_false_still_honours_privileged_containers() -> None:
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=all", privileged=True)
    request = parse_requests(spec, Policy(accept_env_unprivileged=False))
    assert request.is_privileged
    assert request.devices == Devices((Index(0),))
    assert request.imex_channels == All()
    assert request.warnings == ()


def test_accept_env_unprivileged_false_keeps_annotations() -> None:
    spec = spec_with(annotations={"cdi.k8s.io/a": "nvidia.com/gpu=0"})
    request = parse_requests(spec, Policy(accept_env_unprivileged=False))
    assert request.devices == Devices((CdiName("nvidia.com/gpu=0"),))


# --- accept_volume_mounts ----------------------------------------------------------------------

DEVMOUNT = {"destination": "/var/run/nvidia-container-devices/1", "source": "/dev/null"}


def test_accept_volume_mounts_false_ignores_mounts() -> None:
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=0", mounts=[DEVMOUNT])
    request = parse_requests(spec, Policy())
    assert request.devices == Devices((Index(0),))
    assert request.ignored == ()


def test_accept_volume_mounts_true_prefers_mounts_to_env() -> None:
    spec = spec_with("NVIDIA_VISIBLE_DEVICES=0", mounts=[DEVMOUNT])
    request = parse_requests(spec, Policy(accept_volume_mounts=True))
    assert request.devices == Devices((Index(1),))
    assert request.sources == (
        Source(SourceKind.MOUNT, DEVMOUNT["destination"], "", Devices((Index(1),))),
    )


def test_accept_volume_mounts_works_for_unprivileged_containers() -> None:
    # Mounts are written by the orchestrator, not the image: the env rule does not apply.
    policy = Policy(accept_volume_mounts=True, accept_env_unprivileged=False)
    request = parse_requests(spec_with("NVIDIA_VISIBLE_DEVICES=all", mounts=[DEVMOUNT]), policy)
    assert request.devices == Devices((Index(1),))
    assert request.warnings == ()


# --- annotation_prefixes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefixes", "expected"),
    [
        (("cdi.k8s.io/",), Devices((CdiName("nvidia.com/gpu=0"),))),
        (("nvidia.cdi.k8s.io/",), Devices((CdiName("nvidia.com/gpu=1"),))),
        (
            ("nvidia.cdi.k8s.io/", "cdi.k8s.io/"),
            Devices((CdiName("nvidia.com/gpu=0"), CdiName("nvidia.com/gpu=1"))),
        ),
        ((), Devices((Index(3),))),  # annotations ignored: env counts
    ],
)
def test_annotation_prefixes(prefixes: tuple[str, ...], expected: Devices) -> None:
    spec = spec_with(
        "NVIDIA_VISIBLE_DEVICES=3",
        annotations={"cdi.k8s.io/a": "nvidia.com/gpu=0", "nvidia.cdi.k8s.io/b": "nvidia.com/gpu=1"},
    )
    assert parse_requests(spec, Policy(annotation_prefixes=prefixes)).devices == expected


# --- privileged_gets_all -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("privileged_gets_all", "privileged", "env", "expected"),
    [
        (False, True, [], Void()),  # NVIDIA's behaviour: no request, nothing
        (True, True, [], All()),
        (True, False, [], Void()),  # only privileged containers
        (True, True, ["NVIDIA_VISIBLE_DEVICES=void"], Void()),  # explicit void respected
        (True, True, ["NVIDIA_VISIBLE_DEVICES="], Void()),
        (True, True, ["NVIDIA_VISIBLE_DEVICES=0"], Devices((Index(0),))),
    ],
)
def test_privileged_gets_all(
    privileged_gets_all: bool, privileged: bool, env: list[str], expected: object
) -> None:
    policy = Policy(privileged_gets_all=privileged_gets_all)
    request = parse_requests(spec_with(*env, privileged=privileged), policy)
    assert request.devices == expected
    if privileged_gets_all and privileged and not env:
        assert request.sources == (Source(SourceKind.POLICY, "privileged_gets_all", "true", All()),)


@pytest.mark.parametrize(
    ("env", "policy", "expected"),
    [
        (["NVIDIA_VISIBLE_DEVICES=void"], Policy(privileged_gets_all=True), Void()),
        (["NVIDIA_VISIBLE_DEVICES= void "], Policy(privileged_gets_all=True), Void()),
        (["NVIDIA_VISIBLE_DEVICES=void,void"], Policy(privileged_gets_all=True), Void()),
        (["NVIDIA_VISIBLE_DEVICES=none"], Policy(privileged_gets_all=True), NoGpus()),
        # a legacy CUDA image's implicit "all" and the strict env policy change nothing
        (
            ["CUDA_VERSION=12.4.1", "NVIDIA_VISIBLE_DEVICES=void"],
            Policy(privileged_gets_all=True),
            Void(),
        ),
        (
            ["NVIDIA_VISIBLE_DEVICES=void"],
            Policy(privileged_gets_all=True, accept_env_unprivileged=False),
            Void(),
        ),
    ],
)
def test_privileged_gets_all_yields_to_an_explicit_request(
    env: list[str], policy: Policy, expected: object
) -> None:
    request = parse_requests(spec_with(*env, privileged=True), policy)
    assert request.is_privileged
    assert request.devices == expected
    (source,) = request.sources
    assert (source.kind, source.name, source.devices) == (
        SourceKind.ENV,
        "NVIDIA_VISIBLE_DEVICES",
        expected,
    )
    assert request.wants_anything == (expected != Void())


# --- default_capabilities -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ([], ("utility",)),
        (["NVIDIA_DRIVER_CAPABILITIES="], ("utility",)),
        (["NVIDIA_DRIVER_CAPABILITIES=video"], ("video",)),
        (["CUDA_VERSION=10.0"], ALL_CAPABILITIES),  # legacy image without the variable
    ],
)
def test_default_capabilities(env: list[str], expected: tuple[str, ...]) -> None:
    policy = Policy(default_capabilities=("utility",))
    request = parse_requests(spec_with("NVIDIA_VISIBLE_DEVICES=0", *env), policy)
    assert request.capabilities == expected
