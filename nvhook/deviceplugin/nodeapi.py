"""Apply nvhook's labels to this node's Node object through the Kubernetes API.

Thin functions over nvhook's one API client (:mod:`nvhook.kubeapi`: the in-cluster
credentials, the request, timeouts, bounds and :class:`~nvhook.kubeapi.ApiError`).

:func:`label_node` reads ``GET /api/v1/nodes/NAME`` and sends one JSON merge patch
(``application/merge-patch+json``) of ``metadata.labels``: every label of ours set, and every
label under a prefix we own (:data:`OWNED`) that we no longer give removed (``null``) — so a
GPU that went away takes its labels with it, and labels of others (``nvidia.com/device-plugin
.config``, anything outside ``nvidia.com/``) are never touched. Nothing is sent when nothing
changes. Every error is one :class:`~nvhook.kubeapi.ApiError` naming the call and the API's
answer.
"""

from __future__ import annotations

from collections.abc import Mapping

from nvhook.deviceplugin.model import is_dns_subdomain
from nvhook.kubeapi import SERVICE_ACCOUNT, ApiError, Client, in_cluster

__all__ = [
    "OWNED",
    "client",
    "label_node",
    "label_patch",
    "node_labels",
]

#: label prefixes ``nvhook labels`` owns: what it may remove when it no longer gives them
OWNED = (
    "nvidia.com/gpu.",
    "nvidia.com/gpu-",
    "nvidia.com/mig.",
    "nvidia.com/mig-",
    "nvidia.com/cuda.",
)


def client(api_server: str | None, account: str = SERVICE_ACCOUNT) -> Client:
    """A client of ``api_server`` (no credentials: the tests' stand-in), else the pod's."""
    if api_server:
        return Client(api_server, agent="nvhook-labels")
    return in_cluster(account, fix="give --api-server", agent="nvhook-labels")


def label_patch(current: Mapping[str, str], labels: Mapping[str, str]) -> dict[str, str | None]:
    """The merge patch of ``metadata.labels`` that makes ours ``labels`` (see the module)."""
    patch: dict[str, str | None] = {k: v for k, v in labels.items() if current.get(k) != v}
    for key in current:
        if key not in labels and key.startswith(OWNED):
            patch[key] = None
    return patch


def node_labels(client: Client, node: str) -> dict[str, str]:
    """The labels of Node ``node`` (``GET /api/v1/nodes/NAME``)."""
    if not is_dns_subdomain(node):
        raise ApiError(f"{node!r} is not a node name (a DNS subdomain): check --node / $NODE_NAME")
    found = client.request("GET", f"/api/v1/nodes/{node}")
    metadata = found.get("metadata", {}) if isinstance(found, dict) else {}
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def label_node(client: Client, node: str, labels: Mapping[str, str]) -> dict[str, str | None]:
    """Make ``labels`` the node's labels of ours; the patch sent (empty: nothing changed)."""
    current = node_labels(client, node)
    path = f"/api/v1/nodes/{node}"
    patch = label_patch(current, labels)
    if patch:
        body = {"metadata": {"labels": patch}}
        client.request("PATCH", path, body, content_type="application/merge-patch+json")
    return patch
