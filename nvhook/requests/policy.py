"""What the host's administrator allows containers to ask for (docs/architecture.md D11).

:class:`Policy` is a frozen value with one documented field per switch, each with
the default a fresh install gets. :meth:`Policy.from_settings` builds it from the
:class:`~nvhook.settings.Settings` record (keys ``policy.*`` and
``cdi.annotation_prefixes``); the shim passes it to
:func:`nvhook.requests.parse_requests`. Invalid values raise
:class:`~nvhook.errors.ConfigError` naming the key.
"""

from __future__ import annotations

from nvhook.constants import (
    ALL_CAPABILITIES,
    CAPABILITY_ALL,
    DEFAULT_ANNOTATION_PREFIXES,
    DEFAULT_CAPABILITIES,
)
from nvhook.errors import ConfigError
from oci._frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from nvhook.settings import Settings

__all__ = ["SETTINGS_KEYS", "Policy", "canonical_capabilities"]

#: Policy field -> its key in the settings (:data:`nvhook.settings.KEYS`).
SETTINGS_KEYS: dict[str, str] = {
    "accept_env_unprivileged": "policy.accept_env_unprivileged",
    "accept_volume_mounts": "policy.accept_volume_mounts",
    "annotation_prefixes": "cdi.annotation_prefixes",
    "privileged_gets_all": "policy.privileged_gets_all",
    "default_capabilities": "policy.default_capabilities",
}


class Policy(Frozen, kw_only=True):
    """The switches that decide which requests of a container count (all keyword-only).

    ``accept_env_unprivileged`` (default ``True``)
        Honour ``NVIDIA_VISIBLE_DEVICES`` (and ``NVIDIA_IMEX_CHANNELS``, the feature
        variables, and a legacy image's implicit ``all``) from a container that is not
        privileged. ``True`` is what docker/podman users expect; on Kubernetes set it to
        ``False``: images carry ``NVIDIA_VISIBLE_DEVICES=all``, so every pod would see
        every GPU. An ignored request lands in ``Requests.ignored`` with a warning.
        A privileged container's env counts either way.
    ``accept_volume_mounts`` (default ``False``)
        Honour device lists given as mounts under ``/var/run/nvidia-container-devices/``
        (source ``/dev/null``), the way a device plugin can ask without trusting the
        image's env. Only a host whose orchestrator writes such mounts should turn it on.
    ``annotation_prefixes`` (default ``("cdi.k8s.io/",)``)
        Annotation keys under these prefixes are CDI device requests (comma lists of
        ``vendor/class=name``); they take precedence over mounts and env. ``()`` ignores
        annotations altogether.
    ``privileged_gets_all`` (default ``False``)
        What a privileged container (``CAP_SYS_ADMIN`` in its bounding set) gets when it
        asks for nothing at all (no variable, annotation or mount): nothing (the default,
        as in NVIDIA's toolkit) or every GPU. An explicit ``void`` or empty
        ``NVIDIA_VISIBLE_DEVICES`` is respected either way.
    ``default_capabilities`` (default ``("compute", "utility")``)
        Driver capabilities when ``NVIDIA_DRIVER_CAPABILITIES`` is unset or empty (a
        legacy CUDA image without the variable gets all, as in NVIDIA's toolkit). Stored
        deduplicated in canonical order, ``all`` expanded.
    """

    accept_env_unprivileged: bool = True
    accept_volume_mounts: bool = False
    annotation_prefixes: tuple[str, ...] = DEFAULT_ANNOTATION_PREFIXES
    privileged_gets_all: bool = False
    default_capabilities: tuple[str, ...] = DEFAULT_CAPABILITIES

    def __post_init__(self) -> None:
        """Check each value (a settings file can hold anything); lists become tuples."""
        for name in ("accept_env_unprivileged", "accept_volume_mounts", "privileged_gets_all"):
            flag = getattr(self, name)
            if not isinstance(flag, bool):
                raise ConfigError(f"{SETTINGS_KEYS[name]} must be true or false, not {flag!r}")
        prefixes = _strings(self.annotation_prefixes, "annotation_prefixes")
        if not all(prefixes):
            raise ConfigError(f"{SETTINGS_KEYS['annotation_prefixes']} has an empty prefix")
        try:
            caps = canonical_capabilities(
                _strings(self.default_capabilities, "default_capabilities")
            )
        except ValueError as e:
            raise ConfigError(f"{SETTINGS_KEYS['default_capabilities']}: {e}") from None
        self._set(annotation_prefixes=prefixes, default_capabilities=caps)

    @classmethod
    def from_settings(cls, settings: Settings) -> Policy:
        """The policy that the settings (:func:`nvhook.settings.load_settings`) describe."""
        return cls(
            accept_env_unprivileged=settings.policy_accept_env_unprivileged,
            accept_volume_mounts=settings.policy_accept_volume_mounts,
            annotation_prefixes=settings.cdi_annotation_prefixes,
            privileged_gets_all=settings.policy_privileged_gets_all,
            default_capabilities=settings.policy_default_capabilities,
        )


def _strings(value: object, field: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(f"{SETTINGS_KEYS[field]} must be a list of strings, not {value!r}")
    if not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{SETTINGS_KEYS[field]} must be a list of strings")
    return tuple(value)


def canonical_capabilities(names: Iterable[str]) -> tuple[str, ...]:
    """Validate capability names and return them deduplicated, in canonical order.

    ``all`` stands for every capability. Raise :class:`ValueError` naming the first
    unknown name and listing the valid ones (callers wrap it in their own error).
    """
    wanted: set[str] = set()
    for name in names:
        if name != CAPABILITY_ALL and name not in ALL_CAPABILITIES:
            valid = ", ".join((*ALL_CAPABILITIES, CAPABILITY_ALL))
            shown = name if len(name) <= 80 else name[:77] + "..."
            raise ValueError(f"unknown capability {shown!r}; valid: {valid}")
        wanted.add(name)
    if CAPABILITY_ALL in wanted:
        return ALL_CAPABILITIES
    return tuple(c for c in ALL_CAPABILITIES if c in wanted)
