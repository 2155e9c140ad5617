"""The few Kubernetes API calls the DRA driver makes, over the standard library's HTTP client.

Why not the ``kubernetes`` client: the driver needs five calls (get a ResourceClaim; list,
create, replace and delete its ResourceSlices) on a DaemonSet that should start fast and pull
little; the official client is ~40 MB of generated models with its own dependency tree
(urllib3, requests-oauthlib, websocket-client…) for that. The tests validate every object the
driver sends against that client's models instead (``tests/support/kubeapi.py``), so the
wire format is still checked against the real definitions.

Credentials (:func:`connect`): in a pod, the service account's (``KUBERNETES_SERVICE_HOST``
and ``_PORT``, ``/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}``); or a
kubeconfig file (its current context: ``server``, ``certificate-authority[-data]``,
``insecure-skip-tls-verify``, and a ``token``, ``tokenFile`` or client certificate and key,
files or ``-data``). An ``http://`` server is allowed for the loopback stand-in of the
tests. Every answer is bounded (:data:`MAX_RESPONSE`), every call has a timeout, and every
failure is one :class:`~nvhook.dra.errors.ApiError` naming the method, the path and what
the server said.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Mapping
from typing import Any, Protocol

from nvhook.dra.errors import ApiError, DraConfigError

__all__ = [
    "CLAIM_VERSIONS",
    "MAX_RESPONSE",
    "SERVICE_ACCOUNT",
    "Api",
    "KubeApi",
    "claim_path",
    "connect",
    "slices_path",
]

#: The largest answer read (a list of a big node's slices is well under this).
MAX_RESPONSE = 16 << 20
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
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
    """A client of one API server: ``request`` and the calls built on it."""

    def __init__(
        self,
        server: str,
        *,
        token: str | None = None,
        token_file: str | None = None,
        context: ssl.SSLContext | None = None,
        timeout: float = 10.0,
    ) -> None:
        url = urllib.parse.urlsplit(server)
        if url.scheme not in ("https", "http") or not url.hostname:
            raise DraConfigError(f"API server {server!r}: not an http(s) URL with a host")
        self.server = server.rstrip("/")
        self._url = url
        self._token = token
        self._token_file = token_file
        self._context = context
        self.timeout = timeout
        self.claim_version = CLAIM_VERSIONS[0]

    def _bearer(self) -> str | None:
        if self._token_file is not None:  # re-read: projected tokens rotate
            try:
                with open(self._token_file, encoding="utf-8") as f:
                    return f.read().strip()
            except OSError as e:
                raise ApiError(f"{self._token_file}: cannot read the token: {e.strerror}") from None
        return self._token

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        query: Mapping[str, str] | None = None,
    ) -> Any:
        """The decoded JSON answer of ``method path``; :class:`ApiError` otherwise (its
        ``status`` the HTTP status, None when the server was not reached)."""
        url = self._url
        port = url.port or (443 if url.scheme == "https" else 80)
        conn: http.client.HTTPConnection
        if url.scheme == "https":
            conn = http.client.HTTPSConnection(
                url.hostname or "", port, timeout=self.timeout, context=self._context
            )
        else:
            conn = http.client.HTTPConnection(url.hostname or "", port, timeout=self.timeout)
        target = path + ("?" + urllib.parse.urlencode(dict(query)) if query else "")
        headers = {"Accept": "application/json", "User-Agent": "nvhook-dra-plugin"}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        where = f"{method} {self.server}{path}"
        try:
            conn.request(method, target, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read(MAX_RESPONSE + 1)
        except (OSError, http.client.HTTPException) as e:
            raise ApiError(f"{where}: the API server cannot be reached: {e}") from None
        finally:
            conn.close()
        if len(raw) > MAX_RESPONSE:
            raise ApiError(f"{where}: the answer is larger than {MAX_RESPONSE} bytes")
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = None
        if response.status >= 300:
            message = decoded.get("message") if isinstance(decoded, dict) else None
            details = decoded.get("details") if isinstance(decoded, dict) else None
            named = isinstance(details, dict) and bool(details.get("name"))
            raise ApiError(
                f"{where}: {response.status} {response.reason}"
                + (f": {message}" if message else ""),
                response.status,
                unserved=response.status == 404 and not named,
            )
        if raw and decoded is None:
            raise ApiError(f"{where}: the answer is not JSON")
        return decoded

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
                raise ApiError(f"GET {self.server}{path}: the answer is not an object")
            self.claim_version = version
            return claim
        raise ApiError(
            f"{self.server}: the API server serves ResourceClaims in none of "
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
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise DraConfigError(
                "no API server: KUBERNETES_SERVICE_HOST is not set (not in a pod); "
                "pass --kubeconfig"
            )
        if ":" in host:
            host = f"[{host}]"
        ca = os.path.join(service_account, "ca.crt")
        try:
            context = ssl.create_default_context(cafile=ca)
        except OSError as e:
            raise DraConfigError(f"{ca}: cannot read the cluster's CA: {e.strerror}") from None
        return KubeApi(
            f"https://{host}:{port}",
            token_file=os.path.join(service_account, "token"),
            context=context,
            timeout=timeout,
        )
    return _from_kubeconfig(kubeconfig, timeout)


def _from_kubeconfig(path: str, timeout: float) -> KubeApi:
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except OSError as e:
        raise DraConfigError(f"{path}: cannot read the kubeconfig: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise DraConfigError(f"{path}: not YAML: {e}") from None

    def named(section: str, name: str) -> dict[str, Any]:
        for entry in (config or {}).get(section) or ():
            if isinstance(entry, dict) and entry.get("name") == name:
                body = entry.get(section.rstrip("s"))
                return body if isinstance(body, dict) else {}
        raise DraConfigError(f"{path}: {section} has no entry named {name!r}")

    if not isinstance(config, dict):
        raise DraConfigError(f"{path}: not a kubeconfig (a mapping)")
    current = config.get("current-context")
    if not current:
        raise DraConfigError(f"{path}: current-context is not set")
    context = named("contexts", str(current))
    cluster = named("clusters", str(context.get("cluster", "")))
    user = named("users", str(context.get("user", ""))) if context.get("user") else {}
    server = cluster.get("server")
    if not isinstance(server, str):
        raise DraConfigError(f"{path}: cluster {context.get('cluster')!r} has no server")
    base = os.path.dirname(os.path.abspath(path))

    def material(key: str, where: dict[str, Any]) -> str | None:
        """A file's path for ``key`` or ``key-data`` (the data written to a private file)."""
        if where.get(f"{key}-data"):
            fd, name = tempfile.mkstemp(prefix="nvhook-kube-")
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(where[f"{key}-data"]))
            return name
        value = where.get(key)
        return os.path.join(base, value) if isinstance(value, str) else None

    ssl_context = None
    if server.startswith("https://"):
        ca = material("certificate-authority", cluster)
        ssl_context = ssl.create_default_context(cafile=ca)
        if cluster.get("insecure-skip-tls-verify"):
            ssl_context.check_hostname = False
            ssl_context.verify_mode = ssl.CERT_NONE
        cert, key = material("client-certificate", user), material("client-key", user)
        if cert and key:
            ssl_context.load_cert_chain(cert, key)
    token_file = user.get("tokenFile")
    return KubeApi(
        server,
        token=user.get("token"),
        token_file=os.path.join(base, token_file) if isinstance(token_file, str) else None,
        context=ssl_context,
        timeout=timeout,
    )
