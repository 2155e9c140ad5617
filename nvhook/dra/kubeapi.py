"""The few Kubernetes API calls the DRA driver makes: get a ResourceClaim; list, create,
replace and delete its ResourceSlices, as thin functions over nvhook's one API client
(:mod:`nvhook.kubeapi`: credentials, the HTTPS request, timeouts, bounds and
:class:`~nvhook.kubeapi.ApiError`). The tests validate every object the driver sends against
the ``kubernetes`` client's models (``tests/support/kubeapi.py``).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any, Protocol

from nvhook.kubeapi import SERVICE_ACCOUNT, ApiError, Client, from_kubeconfig, in_cluster

__all__ = [
    "CLAIM_VERSIONS",
    "Api",
    "KubeApi",
    "claim_path",
    "connect",
    "slices_path",
]

_AGENT = "nvhook-dra-plugin"
_RESOURCE = "/apis/resource.k8s.io/v1"


#: The versions a claim is read in, newest first: a server older than 1.34 serves no ``v1``
#: (NVIDIA's driver #766: API-version skew made its prepare fail to fetch the claim). The
#: allocation results the driver reads (request, driver, pool, device, adminAccess) have the
#: same names in all three.
CLAIM_VERSIONS = ("v1", "v1beta2", "v1beta1")


def claim_path(namespace: str, name: str, version: str = "v1") -> str:
    q = urllib.parse.quote
    return (
        f"/apis/resource.k8s.io/{version}/namespaces/{q(namespace, safe='')}"
        f"/resourceclaims/{q(name, safe='')}"
    )


def slices_path(name: str | None = None) -> str:
    base = f"{_RESOURCE}/resourceslices"
    return base if name is None else f"{base}/{urllib.parse.quote(name, safe='')}"


class Api(Protocol):
    """The calls the driver makes (:class:`KubeApi`; the demo's in-memory API)."""

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]: ...

    def list_slices(self, driver: str, node: str) -> list[dict[str, Any]]: ...

    def create_slice(self, body: Mapping[str, Any]) -> Any: ...

    def replace_slice(self, body: Mapping[str, Any]) -> Any: ...

    def delete_slice(self, name: str) -> None: ...


class KubeApi:
    """The driver's calls over one :class:`~nvhook.kubeapi.Client` (``request`` is its)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.request = client.request
        self.claim_version = CLAIM_VERSIONS[0]

    # ------------------------------------------------------------------ the calls

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The claim, in the newest of :data:`CLAIM_VERSIONS` the server serves (the one
        found is remembered)."""
        versions = [self.claim_version] + [v for v in CLAIM_VERSIONS if v != self.claim_version]
        for version in versions:
            path = claim_path(namespace, name, version)
            try:
                claim = self.request("GET", path)
            except ApiError as e:
                if e.unserved:
                    continue
                raise
            if not isinstance(claim, dict):
                raise ApiError(f"GET {self.client.server}{path}: the answer is not an object")
            self.claim_version = version
            return claim
        raise ApiError(
            f"{self.client.server}: the API server serves ResourceClaims in none of "
            f"resource.k8s.io/{', '.join(CLAIM_VERSIONS)}; is DRA enabled on it?",
            404,
        )

    def list_slices(self, driver: str, node: str) -> list[dict[str, Any]]:
        answer = self.request(
            "GET",
            slices_path(),
            query={"fieldSelector": f"spec.driver={driver},spec.nodeName={node}"},
        )
        items = answer.get("items") if isinstance(answer, dict) else None
        if not isinstance(items, list):
            raise ApiError(f"GET {slices_path()}: the answer has no items list")
        return [i for i in items if isinstance(i, dict)]

    def create_slice(self, body: Mapping[str, Any]) -> Any:
        return self.request("POST", slices_path(), body)

    def replace_slice(self, body: Mapping[str, Any]) -> Any:
        return self.request("PUT", slices_path(body["metadata"]["name"]), body)

    def delete_slice(self, name: str) -> None:
        try:
            self.request("DELETE", slices_path(name))
        except ApiError as e:
            if e.status != 404:
                raise


def connect(
    kubeconfig: str | None = None,
    *,
    service_account: str = SERVICE_ACCOUNT,
    timeout: float = 10.0,
) -> KubeApi:
    """A client from ``kubeconfig`` (a path), else the pod's service account (its token and
    CA in ``service_account``: elsewhere than the default when the driver runs chrooted)."""
    if kubeconfig is None:
        client = in_cluster(service_account, fix="pass --kubeconfig", timeout=timeout, agent=_AGENT)
    else:
        client = from_kubeconfig(kubeconfig, timeout=timeout, agent=_AGENT)
    return KubeApi(client)
