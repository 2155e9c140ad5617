"""Recognising Docker's --gpus prestart hook (and nvhook's) so the shim drops it."""

from __future__ import annotations

from typing import Any

from nvhook.legacyhook import is_prestart_hook, without_prestart_hooks

DOCKER_HOOK = {
    "path": "/usr/bin/nvidia-container-runtime-hook",
    "args": ["nvidia-container-runtime-hook", "prestart"],
}
OTHER = {"path": "/usr/bin/other", "args": ["other", "prestart"]}
LDCACHE = {"path": "/opt/nvhook/bin/nvhook-hook", "args": ["nvhook-hook", "update-ldcache"]}


def test_recognised() -> None:
    assert is_prestart_hook(DOCKER_HOOK)
    assert is_prestart_hook({"path": "/x/nvhook-hook", "args": ["nvhook-hook", "prestart"]})
    assert not is_prestart_hook(OTHER)
    assert not is_prestart_hook(LDCACHE)
    assert not is_prestart_hook({"path": "/x/nvidia-container-runtime-hook", "args": []})
    assert not is_prestart_hook(
        {"path": "/x/nvidia-container-runtime-hook", "args": ["x", "prestart", "--debug"]}
    )


def test_dropped_others_kept_input_untouched() -> None:
    spec: dict[str, Any] = {
        "ociVersion": "1.0.2",
        "hooks": {"prestart": [OTHER, DOCKER_HOOK], "createContainer": [LDCACHE]},
    }
    out = without_prestart_hooks(spec)
    assert out["hooks"] == {"prestart": [OTHER], "createContainer": [LDCACHE]}
    assert spec["hooks"]["prestart"] == [OTHER, DOCKER_HOOK]


def test_empty_hooks_removed() -> None:
    spec: dict[str, Any] = {"ociVersion": "1.0.2", "hooks": {"prestart": [DOCKER_HOOK]}}
    assert without_prestart_hooks(spec) == {"ociVersion": "1.0.2"}


def test_no_hook_same_object() -> None:
    spec: dict[str, Any] = {"hooks": {"prestart": [OTHER]}}
    assert without_prestart_hooks(spec) is spec
