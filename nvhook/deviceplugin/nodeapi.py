"""Apply nvhook's labels to this node's Node object through the Kubernetes API.

The smallest client that does it, on the standard library (no ``kubernetes`` package): the
in-cluster credentials (``KUBERNETES_SERVICE_HOST``/``_PORT``, the service account's token and
CA under ``/var/run/secrets/kubernetes.io/serviceaccount/``, as client-go's
``rest.InClusterConfig``), or an explicit server (tests: the API stand-in on loopback).

:func:`label_node` reads ``GET /api/v1/nodes/NAME`` and sends one JSON merge patch
(``application/merge-patch+json``) of ``metadata.labels``: every label of ours set, and every
label under a prefix we own (:data:`OWNED`) that we no longer give removed (``null``) — so a
GPU that went away takes its labels with it, and labels of others (``nvidia.com/device-plugin
.config``, anything outside ``nvidia.com/``) are never touched. Nothing is sent when nothing
changes. Every error is a :class:`~nvhook.errors.NvhookError` naming the node and the API's
answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping

from nvhook.deviceplugin.model import is_dns_subdomain
from nvhook.errors import NvhookError
from oci.errors import ExitCode

__all__ = [
    "OWNED",
    "ApiError",
    "Credentials",
    "in_cluster",
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
_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
_MAX = 4 << 20  # a Node object is a few KiB; refuse to read more than this


class ApiError(NvhookError):
    """The Kubernetes API cannot be reached, or refused the request."""

    exit_code = ExitCode.IO


class Credentials:
    """Where the API is and how to authenticate (a bearer token, a CA bundle)."""

    __slots__ = ("ca_file", "server", "token")

    def __init__(self, server: str, token: str = "", ca_file: str = "") -> None:
        self.server, self.token, self.ca_file = server.rstrip("/"), token, ca_file


def in_cluster(account: str = _ACCOUNT, environ: Mapping[str, str] = os.environ) -> Credentials:
    """The pod's own credentials, as client-go's InClusterConfig finds them."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ApiError(
            "not in a Kubernetes pod: KUBERNETES_SERVICE_HOST/PORT unset; run `nvhook labels "
            "--node` in the labeller DaemonSet, or give --api-server"
        )
    try:
        with open(os.path.join(account, "token"), encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise ApiError(
            f"cannot read the service account token {account}/token: {e.strerror} (is "
            "automountServiceAccountToken false?)"
        ) from None
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    return Credentials(server, token, os.path.join(account, "ca.crt"))


def label_patch(current: Mapping[str, str], labels: Mapping[str, str]) -> dict[str, str | None]:
    """The merge patch of ``metadata.labels`` that makes ours ``labels`` (see the module)."""
    patch: dict[str, str | None] = {k: v for k, v in labels.items() if current.get(k) != v}
    for key in current:
        if key not in labels and key.startswith(OWNED):
            patch[key] = None
    return patch


def _request(creds: Credentials, method: str, path: str, body: bytes | None = None) -> object:
    request = urllib.request.Request(creds.server + path, data=body, method=method)
    request.add_header("Accept", "application/json")
    if creds.token:
        request.add_header("Authorization", f"Bearer {creds.token}")
    if body is not None:
        request.add_header("Content-Type", "application/merge-patch+json")
    context = None
    if creds.server.startswith("https:"):
        context = ssl.create_default_context(cafile=creds.ca_file or None)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            data = response.read(_MAX + 1)
    except urllib.error.HTTPError as e:
        detail = e.read(4096).decode("utf-8", "replace")
        with contextlib.suppress(ValueError, AttributeError):
            detail = json.loads(detail).get("message", detail)
        raise ApiError(f"{method} {path}: {e.code} {e.reason}: {detail}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ApiError(f"{method} {path}: cannot reach {creds.server}: {reason}") from None
    if len(data) > _MAX:
        raise ApiError(f"{method} {path}: the answer is larger than {_MAX} bytes")
    try:
        return json.loads(data)
    except ValueError:
        raise ApiError(f"{method} {path}: the answer is not JSON") from None


def node_labels(creds: Credentials, node: str) -> dict[str, str]:
    """The labels of Node ``node`` (``GET /api/v1/nodes/NAME``)."""
    if not is_dns_subdomain(node):
        raise ApiError(f"{node!r} is not a node name (a DNS subdomain): check --node / $NODE_NAME")
    found = _request(creds, "GET", f"/api/v1/nodes/{node}")
    metadata = found.get("metadata", {}) if isinstance(found, dict) else {}
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def label_node(creds: Credentials, node: str, labels: Mapping[str, str]) -> dict[str, str | None]:
    """Make ``labels`` the node's labels of ours; the patch sent (empty: nothing changed)."""
    current = node_labels(creds, node)
    path = f"/api/v1/nodes/{node}"
    patch = label_patch(current, labels)
    if patch:
        body = json.dumps({"metadata": {"labels": patch}}).encode()
        _request(creds, "PATCH", path, body)
    return patch
