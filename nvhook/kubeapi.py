"""nvhook's one Kubernetes API client, on the standard library's HTTP client.

Its users each make a handful of calls: the DRA driver reads ResourceClaims and keeps its
ResourceSlices (``nvhook/dra/kubeapi.py``), the device plugin and ``nvhook labels`` read and
merge-patch their Node (``nvhook/deviceplugin/nodeapi.py``), and the device plugin follows its
Node and its ConfigMap (:class:`ObjectWatch`). Those calls are thin functions over
:meth:`Client.request` and :meth:`Client.watch`; this module holds what they share.

Watching is the API's own protocol (kube-apiserver's watch handler; the ``kubernetes`` Python
client's ``watch/watch.py`` reads it the same way): ``GET`` of the collection with
``watch=1``, a ``fieldSelector`` naming the object, and the ``resourceVersion`` to resume
from; the answer streams one JSON event per line (``{"type": "ADDED" | "MODIFIED" |
"DELETED" | "BOOKMARK" | "ERROR", "object": …}``) until the server's ``timeoutSeconds``. An
``ERROR`` event whose ``Status`` is 410 Gone (the version is older than the server keeps)
means list again and watch from the list's version. :class:`ObjectWatch` does that in a
thread: list, watch, resume where it was, re-list on 410, reconnect with a doubling backoff
when the stream breaks, and every line bounded (:data:`MAX_EVENT`); a server that refuses the
watch (403, 404, 405) is reported (:attr:`ObjectWatch.refused`) so that the caller polls.

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
import contextlib
import http.client
import json
import os
import socket
import ssl
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from nvhook.errors import ConfigError, NvhookError
from oci.errors import ExitCode

__all__ = [
    "MAX_EVENT",
    "MAX_RESPONSE",
    "SERVICE_ACCOUNT",
    "ApiError",
    "Client",
    "KubeConfigError",
    "ObjectWatch",
    "from_kubeconfig",
    "in_cluster",
]

#: The largest answer read (a list of a big node's slices, a Node, are well under this).
MAX_RESPONSE = 16 << 20
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The longest watch event line read: one object (etcd keeps at most 1.5 MiB per object) in
#: JSON with its event's envelope.
MAX_EVENT = 4 << 20


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
        conn = self._connection(self.timeout)
        target = path + ("?" + urllib.parse.urlencode(dict(query)) if query else "")
        headers = self._headers()
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

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        url = self._url
        port = url.port or (443 if url.scheme == "https" else 80)
        if url.scheme == "https":
            return http.client.HTTPSConnection(
                url.hostname or "", port, timeout=timeout, context=self.context
            )
        return http.client.HTTPConnection(url.hostname or "", port, timeout=timeout)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self.agent}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def watch(
        self,
        path: str,
        *,
        query: Mapping[str, str],
        timeout_seconds: int = 300,
        opened: Callable[[Callable[[], None]], None] = lambda cut: None,
    ) -> Iterator[dict[str, Any]]:
        """The events of a watch of the collection ``path`` (``watch=1`` and ``query``
        added), each a decoded ``{"type", "object"}``, until the server ends the stream after
        ``timeout_seconds``; ``opened`` is called when the server has answered 200, with a
        function that cuts the stream from another thread (a blocked read then fails).
        :class:`ApiError` for a refusal (its status), a broken stream or a bad line."""
        conn = self._connection(timeout_seconds + 30.0)  # idle reads: the server's timeout
        params = {**query, "watch": "1", "timeoutSeconds": str(timeout_seconds)}
        target = path + "?" + urllib.parse.urlencode(params)
        where = f"GET {self.server}{path} (watch)"
        try:
            try:
                conn.request("GET", target, headers=self._headers())
                response = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                raise ApiError(f"{where}: the API server cannot be reached: {e}") from None
            if response.status >= 300:
                raw = response.read(MAX_RESPONSE)
                try:
                    decoded = json.loads(raw) if raw else None
                except ValueError:
                    decoded = None
                message = decoded.get("message") if isinstance(decoded, dict) else None
                raise ApiError(
                    f"{where}: {response.status} {response.reason}"
                    + (f": {message}" if message else ""),
                    response.status,
                )

            def cut() -> None:
                if conn.sock is not None:
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(socket.SHUT_RDWR)

            opened(cut)
            buffer = bytearray()
            while True:
                newline = buffer.find(b"\n")
                if newline > MAX_EVENT or (newline < 0 and len(buffer) > MAX_EVENT):
                    raise ApiError(f"{where}: an event is larger than {MAX_EVENT} bytes")
                if newline < 0:
                    try:
                        # read1, not readline: a chunked stream cut short raises here, where
                        # readline would answer b"" as for the server's own end
                        data = response.read1(65536)
                    except (OSError, http.client.HTTPException) as e:
                        raise ApiError(f"{where}: the stream broke: {e!r}") from None
                    if not data:
                        if buffer.strip():
                            raise ApiError(f"{where}: the stream ended inside an event")
                        return  # the server ended the watch (its timeout): resume from here
                    buffer += data
                    continue
                line = bytes(buffer[:newline])
                del buffer[: newline + 1]
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    raise ApiError(f"{where}: an event is not JSON") from None
                if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
                    raise ApiError(f"{where}: an event without an object")
                yield event
        finally:
            conn.close()


class ObjectWatch:
    """The newest version of one named object, kept by a list then a watch (the module
    docstring), in a thread; ``on_change`` is called with it (None: it does not exist) at
    the first list and after every change."""

    #: the statuses that say "this server will not watch this for you": poll instead
    REFUSED = (403, 404, 405)

    def __init__(
        self,
        client: Client,
        collection: str,
        name: str,
        *,
        on_change: Callable[[dict[str, Any] | None], None] = lambda obj: None,
        log: Callable[[str], None] = lambda line: None,
        timeout_seconds: int = 300,
        backoff: tuple[float, float] = (1.0, 30.0),
    ) -> None:
        self.client, self.collection, self.name = client, collection, name
        self.on_change, self.log = on_change, log
        self.timeout_seconds, self.backoff = timeout_seconds, backoff
        #: the object as last seen (None: absent, or not listed yet: see :attr:`synced`)
        self.object: dict[str, Any] | None = None
        #: set once listed; cleared while the watch is broken
        self.synced = threading.Event()
        #: set when the server refused the list or watch (the thread has ended)
        self.refused = threading.Event()
        self.lists = 0  # how many times it listed (a 410 lists again)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cut: Callable[[], None] = lambda: None

    def start(self) -> ObjectWatch:
        self._thread = threading.Thread(target=self._run, name=f"watch {self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._cut()  # a read blocked on an idle stream returns now
        if self._thread is not None:
            self._thread.join(5)

    def _set(self, obj: dict[str, Any] | None) -> None:
        self.object = obj
        self.on_change(obj)

    def _list(self) -> str:
        listed = self.client.request(
            "GET", self.collection, query={"fieldSelector": f"metadata.name={self.name}"}
        )
        items = listed.get("items") if isinstance(listed, dict) else None
        if not isinstance(items, list):
            raise ApiError(f"GET {self.client.server}{self.collection}: not a list")
        self.lists += 1
        self._set(items[0] if items and isinstance(items[0], dict) else None)
        self.synced.set()
        return str((listed.get("metadata") or {}).get("resourceVersion") or "")

    def _run(self) -> None:
        version = ""
        delay = self.backoff[0]
        said = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._list()

                def opened(cut: Callable[[], None]) -> None:
                    nonlocal delay, said
                    delay, said = self.backoff[0], ""
                    self._cut = cut
                    self.synced.set()
                    if self._stop.is_set():
                        cut()

                query = {
                    "fieldSelector": f"metadata.name={self.name}",
                    "resourceVersion": version,
                    "allowWatchBookmarks": "true",
                }
                for event in self.client.watch(
                    self.collection,
                    query=query,
                    timeout_seconds=self.timeout_seconds,
                    opened=opened,
                ):
                    if self._stop.is_set():
                        return
                    kind, obj = event.get("type"), event["object"]
                    if kind == "ERROR":
                        if obj.get("code") == 410:  # too old: list again, watch from there
                            version = ""
                            break
                        raise ApiError(f"watch of {self.name}: {obj.get('message', obj)}")
                    meta = obj.get("metadata") or {}
                    version = str(meta.get("resourceVersion") or version)
                    if kind == "BOOKMARK" or meta.get("name") != self.name:
                        continue
                    self._set(None if kind == "DELETED" else obj)
                self._stop.wait(0.2)  # ended (its timeout, or a 410): never a busy loop
            except ApiError as e:
                if self._stop.is_set():
                    return
                if e.status == 410:
                    version = ""
                    continue
                if e.status in self.REFUSED:
                    self.log(f"warning: {e.message}; polling instead")
                    self.synced.clear()
                    self.refused.set()
                    return
                self.synced.clear()
                if e.message != said:
                    self.log(f"warning: {e.message}; watching again in {delay:g} s")
                    said = e.message
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, self.backoff[1])


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
