"""nvhook's one Kubernetes API client, on the standard library's HTTP client.

Its users each make a handful of calls: the DRA driver reads ResourceClaims and keeps its
ResourceSlices (``nvhook/dra/kubeapi.py``), the device plugin and ``nvhook labels`` read and
merge-patch their Node (``nvhook/deviceplugin/nodeapi.py``). Those calls are thin functions
over :meth:`Client.request`; this module holds what they share.

Why not the ``kubernetes`` client: ~40 MB of generated models with its own dependency tree
(urllib3, requests-oauthlib, websocket-client…) for a few calls, on DaemonSets that should
start fast and pull little. The tests validate every object sent against that client's models
instead (``tests/support/kubeapi.py``), so the wire format is still checked against the real
definitions. Not on the start path: only the ``nvhook`` CLI's daemons import it.

Credentials: :func:`in_cluster`, the pod's service account as client-go's
``rest.InClusterConfig`` finds it (``KUBERNETES_SERVICE_HOST`` and ``_PORT``,
``/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}``; the token re-read on every
call, as projected tokens rotate); :func:`from_kubeconfig`, a kubeconfig file's current
context (``server``, ``certificate-authority[-data]``, ``insecure-skip-tls-verify``, and a
``token``, ``tokenFile`` or client certificate and key, files or ``-data``); or a bare
:class:`Client` for an explicit server. An ``http://`` server is allowed for the loopback
stand-in of the tests. Every answer is bounded (:data:`MAX_RESPONSE`), every call has a
timeout, and every failure is one :class:`ApiError` naming the method, the URL and what the
server said; bad credentials or kubeconfig are one :class:`KubeConfigError` naming the file.
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
from typing import Any

from nvhook.errors import ConfigError, NvhookError
from oci.errors import ExitCode

__all__ = [
    "MAX_RESPONSE",
    "SERVICE_ACCOUNT",
    "ApiError",
    "Client",
    "KubeConfigError",
    "from_kubeconfig",
    "in_cluster",
]

#: The largest answer read (a list of a big node's slices, a Node, are well under this).
MAX_RESPONSE = 16 << 20
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class ApiError(NvhookError):
    """The Kubernetes API server refused or could not be reached (names the call and URL)."""

    exit_code = ExitCode.IO

    def __init__(self, message: str, status: int | None = None, *, unserved: bool = False) -> None:
        super().__init__(message)
        #: the HTTP status (None: the server was not reached, or its answer was unusable)
        self.status = status
        #: a 404 for the path, not for an object (the server does not serve that API version)
        self.unserved = unserved


class KubeConfigError(ConfigError):
    """No API server or credentials: not in a pod, or the kubeconfig, token or CA is bad."""


class Client:
    """A client of one API server: :meth:`request` and nothing else."""

    def __init__(
        self,
        server: str,
        *,
        token: str | None = None,
        token_file: str | None = None,
        context: ssl.SSLContext | None = None,
        timeout: float = 10.0,
        agent: str = "nvhook",
    ) -> None:
        url = urllib.parse.urlsplit(server)
        if url.scheme not in ("https", "http") or not url.hostname:
            raise KubeConfigError(f"API server {server!r}: not an http(s) URL with a host")
        self.server = server.rstrip("/")
        self._url = url
        self.token = token
        self.token_file = token_file
        self.context = context
        self.timeout = timeout
        self.agent = agent

    def _bearer(self) -> str | None:
        if self.token_file is not None:  # re-read: projected tokens rotate
            try:
                with open(self.token_file, encoding="utf-8") as f:
                    return f.read().strip()
            except OSError as e:
                raise ApiError(f"{self.token_file}: cannot read the token: {e.strerror}") from None
        return self.token

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """The decoded JSON answer of ``method path``; :class:`ApiError` otherwise (its
        ``status`` the HTTP status, None when the server was not reached)."""
        url = self._url
        port = url.port or (443 if url.scheme == "https" else 80)
        conn: http.client.HTTPConnection
        if url.scheme == "https":
            conn = http.client.HTTPSConnection(
                url.hostname or "", port, timeout=self.timeout, context=self.context
            )
        else:
            conn = http.client.HTTPConnection(url.hostname or "", port, timeout=self.timeout)
        target = path + ("?" + urllib.parse.urlencode(dict(query)) if query else "")
        headers = {"Accept": "application/json", "User-Agent": self.agent}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
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


def in_cluster(
    account: str = SERVICE_ACCOUNT,
    environ: Mapping[str, str] = os.environ,
    *,
    fix: str = "pass --kubeconfig",
    timeout: float = 10.0,
    agent: str = "nvhook",
) -> Client:
    """A client with the pod's own credentials, as client-go's InClusterConfig finds them:
    its token and CA in ``account`` (elsewhere than the default when run chrooted); ``fix``
    ends the message when not in a pod (the caller's flag that names a server)."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeConfigError(
            f"no API server: KUBERNETES_SERVICE_HOST/PORT are not set (not in a pod); {fix}"
        )
    token = os.path.join(account, "token")
    try:
        with open(token, encoding="utf-8"):
            pass
    except OSError as e:
        raise KubeConfigError(
            f"{token}: cannot read the service account token: {e.strerror} (is "
            "automountServiceAccountToken false?)"
        ) from None
    ca = os.path.join(account, "ca.crt")
    try:
        context = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as e:
        raise KubeConfigError(f"{ca}: cannot read the cluster's CA: {e.strerror}") from None
    return Client(
        f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}",
        token_file=token,
        context=context,
        timeout=timeout,
        agent=agent,
    )


def from_kubeconfig(path: str, *, timeout: float = 10.0, agent: str = "nvhook") -> Client:
    """A client for the current context of the kubeconfig file ``path``."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except OSError as e:
        raise KubeConfigError(f"{path}: cannot read the kubeconfig: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise KubeConfigError(f"{path}: not YAML: {e}") from None

    def named(section: str, name: str) -> dict[str, Any]:
        for entry in (config or {}).get(section) or ():
            if isinstance(entry, dict) and entry.get("name") == name:
                body = entry.get(section.rstrip("s"))
                return body if isinstance(body, dict) else {}
        raise KubeConfigError(f"{path}: {section} has no entry named {name!r}")

    if not isinstance(config, dict):
        raise KubeConfigError(f"{path}: not a kubeconfig (a mapping)")
    current = config.get("current-context")
    if not current:
        raise KubeConfigError(f"{path}: current-context is not set")
    context = named("contexts", str(current))
    cluster = named("clusters", str(context.get("cluster", "")))
    user = named("users", str(context.get("user", ""))) if context.get("user") else {}
    server = cluster.get("server")
    if not isinstance(server, str):
        raise KubeConfigError(f"{path}: cluster {context.get('cluster')!r} has no server")
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
    return Client(
        server,
        token=user.get("token"),
        token_file=os.path.join(base, token_file) if isinstance(token_file, str) else None,
        context=ssl_context,
        timeout=timeout,
        agent=agent,
    )
