"""Fixtures of the DRA driver's tests: a mock machine, the API-server stand-in, claims."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kubeapi import KubeApiServer

NODE = "node-a"
DRIVER = "gpu.nvidia.com"


@pytest.fixture
def kubeapi() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        yield server
        assert server.rejected == []  # the driver never sent an object the API refuses


def allocated_claim(
    name: str,
    devices: list[str],
    *,
    namespace: str = "default",
    pool: str = NODE,
    admin: bool = False,
    request: str = "gpus",
    driver: str = DRIVER,
) -> dict[str, Any]:
    """A ResourceClaim as the scheduler leaves it: allocated ``devices`` of ``pool`` of
    ``driver`` (whose DeviceClass has the driver's name)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {"requests": [{"name": request, "exactly": {"deviceClassName": driver}}]}
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": request,
                            "driver": driver,
                            "pool": pool,
                            "device": d,
                            **({"adminAccess": True} if admin else {}),
                        }
                        for d in devices
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [pool]}
                            ]
                        }
                    ]
                },
            }
        },
    }


@pytest.fixture
def add_claim(kubeapi: KubeApiServer) -> Callable[..., tuple[str, str, str]]:
    """Store an allocated claim; its (namespace, name, uid) as kubelet names it."""

    def add(name: str, devices: list[str], **kw: Any) -> tuple[str, str, str]:
        obj = kubeapi.put("resourceclaims", allocated_claim(name, devices, **kw))
        meta = obj["metadata"]
        return meta["namespace"], meta["name"], meta["uid"]

    return add


@pytest.fixture
def settings(tmp_path: Path, mock_machine: Callable[..., Path]) -> Callable[[str], Path]:
    """nvhook's settings file whose host root is the mock ``profile``."""

    def make(profile: str) -> Path:
        path = tmp_path / f"nvhook-{profile}.toml"
        path.write_text(f'[host]\nroot = "{mock_machine(profile)}"\n')
        return path

    return make
