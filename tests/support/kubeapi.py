"""A stand-in for kube-apiserver on 127.0.0.1, for the tests (no kube-apiserver binary here).

:class:`KubeApiServer` serves a small, real-shaped REST API over plain HTTP: per resource
(:data:`RESOURCES`: ResourceSlices and ResourceClaims of ``resource.k8s.io/v1``, Nodes and
ConfigMaps of ``v1``; add a :class:`Resource` for more) ``GET`` one, ``GET`` a list (with
``fieldSelector`` equality terms on dotted paths, as the API's field selectors), ``POST``,
``PUT`` (the ``resourceVersion`` must be the stored one: 409 otherwise, as the API does),
``PATCH`` with ``application/merge-patch+json`` (RFC 7386, as the API applies it; 415 for
another patch type), ``DELETE``; answers and errors are ``Status`` objects as the API's. With
:attr:`KubeApiServer.token` set, a request without that bearer token is refused with 401.

Every object it receives is validated before it is stored, and a bad one is refused with
422 and the reasons (and kept in :attr:`KubeApiServer.rejected`, so a test can assert that
nothing was refused):

- against the ``kubernetes`` Python client's model of its kind (its required fields and
  enums, the client-side validation of the generated models), and round-tripped through the
  model: a field the model does not know (a typo, a field of another version) is refused;
- for Nodes, their labels against the API's label syntax (:func:`label_problems`, as
  ``validation.ValidateLabels``: a qualified name, a value of at most 63 characters of
  ``[A-Za-z0-9._-]`` beginning and ending alphanumeric);
- for ResourceSlices, against the rules and limits of ``resource/v1/types.go`` the
  driver can break (:func:`slice_problems`): devices per slice, attributes and capacities
  per device, qualified names, one value per attribute, value lengths, strict semver
  versions, DNS-label device names, taint effects; :meth:`KubeApiServer.pool_problems`
  checks a pool as a whole (its newest generation's slices: the count they declare).

Watches (``GET`` of a collection with ``watch=1``) stream events as kube-apiserver does
(its watch handler, chunked JSON lines ``{"type", "object"}``, read the same way by the
``kubernetes`` client's ``watch/watch.py``): every change after the ``resourceVersion`` asked
for, filtered by the ``fieldSelector``, ``BOOKMARK`` events where ``allowWatchBookmarks`` asks,
until ``timeoutSeconds``; a version older than what is kept (:meth:`KubeApiServer.compact`)
gets the ``ERROR`` event with a 410 ``Expired`` Status. :meth:`KubeApiServer.drop_watches`
breaks every open stream (an API server restarting), :attr:`KubeApiServer.refuse_watch`
answers watches with that status (RBAC without ``watch``), and
:attr:`KubeApiServer.watches` counts the watches opened.

:meth:`KubeApiServer.fail` makes the next matching requests fail (an API error mid-prepare);
:meth:`KubeApiServer.kubeconfig` writes a kubeconfig pointing at it.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "RESOURCES",
    "KubeApiServer",
    "Resource",
    "label_problems",
    "slice_problems",
    "validate_model",
]

# types.go limits (kubernetes/api, resource/v1/types.go at commit 10b39a39bcee)
MAX_DEVICES = 128  # ResourceSliceMaxDevices
MAX_ATTRIBUTES_AND_CAPACITIES = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
MAX_DOMAIN = 63  # DeviceMaxDomainLength
MAX_ID = 32  # DeviceMaxIDLength
MAX_VALUE = 64  # DeviceAttributeMaxValueLength
MAX_TAINTS = 16  # DeviceTaintsMaxLength
DRIVER_MAX = 63  # DriverNameMaxLength
TAINT_EFFECTS = ("None", "NoSchedule", "NoExecute")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# semver.org's regular expression (strict: no leading zeros)
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")


class Resource:
    """One kind the stand-in serves: its REST path, scope and the client's model name."""

    def __init__(
        self,
        group_version: str,
        plural: str,
        kind: str,
        model: str,
        *,
        namespaced: bool,
        check: Callable[[dict[str, Any], KubeApiServer], list[str]] | None = None,
    ) -> None:
        self.group_version = group_version
        self.plural = plural
        self.kind = kind
        self.model = model
        self.namespaced = namespaced
        self.check = check

    @property
    def prefix(self) -> str:
        return ("/api/" if self.group_version == "v1" else "/apis/") + self.group_version


def validate_model(obj: dict[str, Any], model: str) -> list[str]:
    """What the ``kubernetes`` client's model ``model`` finds wrong with ``obj`` (JSON)."""
    from kubernetes.client import ApiClient

    client = ApiClient()
    try:
        parsed = client.deserialize(json.dumps(obj), model, "application/json")
    except (ValueError, TypeError) as e:
        return [f"{model}: {e}"]
    back = client.sanitize_for_serialization(parsed)
    extra = _unknown_fields(obj, back, "")
    return [f"{model}: field {p} is not in the model" for p in extra]


def _unknown_fields(sent: Any, known: Any, path: str) -> list[str]:
    if isinstance(sent, dict):
        if not isinstance(known, dict):
            return [path or "."]
        out = []
        for k, v in sent.items():
            if k not in known:
                out.append(f"{path}.{k}")
            else:
                out += _unknown_fields(v, known[k], f"{path}.{k}")
        return out
    if isinstance(sent, list) and isinstance(known, list):
        out = []
        for i, (a, b) in enumerate(zip(sent, known, strict=False)):
            out += _unknown_fields(a, b, f"{path}[{i}]")
        return out
    return []


def _qualified_name_problem(name: str, driver: str) -> str | None:
    domain, _, ident = name.rpartition("/")
    if len(ident) > MAX_ID or not _C_IDENTIFIER.match(ident):
        return f"{name!r}: the ID must be a C identifier of at most {MAX_ID} characters"
    if domain and (len(domain) > MAX_DOMAIN or not _DNS_SUBDOMAIN.match(domain)):
        return f"{name!r}: the domain must be a DNS subdomain of at most {MAX_DOMAIN}"
    del driver
    return None


def slice_problems(obj: dict[str, Any], server: KubeApiServer | None = None) -> list[str]:
    """What ``types.go`` refuses in a ResourceSlice (the parts a node driver sets)."""
    out: list[str] = []
    name = (obj.get("metadata") or {}).get("name", "")
    if not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        out.append(f"metadata.name {name!r}: not a DNS subdomain")
    spec = obj.get("spec") or {}
    driver = spec.get("driver", "")
    if len(driver) > DRIVER_MAX or not _DNS_SUBDOMAIN.match(driver):
        out.append(f"spec.driver {driver!r}: not a DNS subdomain of at most {DRIVER_MAX}")
    pool = spec.get("pool") or {}
    if not pool.get("name") or len(pool["name"]) > 253:
        out.append("spec.pool.name: required, at most 253 characters")
    if int(pool.get("generation", -1)) < 0:
        out.append("spec.pool.generation: must be >= 0")
    if int(pool.get("resourceSliceCount", 0)) < 1:
        out.append("spec.pool.resourceSliceCount: must be >= 1")
    selections = [
        k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)
    ]
    if len(selections) != 1:
        out.append(
            "spec: exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection "
            f"must be set ({selections})"
        )
    devices = spec.get("devices") or []
    if len(devices) > MAX_DEVICES:
        out.append(f"spec.devices: {len(devices)} devices, at most {MAX_DEVICES}")
    names = [d.get("name", "") for d in devices]
    if len(set(names)) != len(names):
        out.append("spec.devices: device names must be unique")
    for i, d in enumerate(devices):
        where = f"spec.devices[{i}] ({d.get('name')})"
        if not _DNS_LABEL.match(d.get("name", "")) or len(d.get("name", "")) > 63:
            out.append(f"{where}: the name must be a DNS label")
        attrs, caps = d.get("attributes") or {}, d.get("capacity") or {}
        if len(attrs) + len(caps) > MAX_ATTRIBUTES_AND_CAPACITIES:
            out.append(f"{where}: {len(attrs) + len(caps)} attributes and capacities, at most 32")
        for key, value in attrs.items():
            problem = _qualified_name_problem(key, driver)
            if problem:
                out.append(f"{where}: attribute {problem}")
            kinds = [
                k
                for k in (
                    "int",
                    "bool",
                    "string",
                    "version",
                    "strings",
                    "ints",
                    "bools",
                    "versions",
                )
                if k in value
            ]
            if len(kinds) != 1:
                out.append(f"{where}: attribute {key} must have exactly one value, has {kinds}")
                continue
            v = value[kinds[0]]
            if kinds[0] in ("string", "version") and len(v) > MAX_VALUE:
                out.append(f"{where}: attribute {key} longer than {MAX_VALUE}")
            if kinds[0] == "version" and not _SEMVER.match(v):
                out.append(f"{where}: attribute {key} {v!r} is not strict semver")
            if kinds[0] == "int" and not isinstance(v, int):
                out.append(f"{where}: attribute {key} is not an int")
        for key, value in caps.items():
            problem = _qualified_name_problem(key, driver)
            if problem:
                out.append(f"{where}: capacity {problem}")
            if not _QUANTITY.match(str(value.get("value", ""))):
                out.append(f"{where}: capacity {key} {value.get('value')!r} is not a quantity")
        taints = d.get("taints") or []
        if len(taints) > MAX_TAINTS:
            out.append(f"{where}: more than {MAX_TAINTS} taints")
        for t in taints:
            if t.get("effect") not in TAINT_EFFECTS:
                out.append(f"{where}: taint effect {t.get('effect')!r} not in {TAINT_EFFECTS}")
            problem = _qualified_name_problem(t.get("key", ""), driver)
            if problem:
                out.append(f"{where}: taint key {problem}")
    return out


_RESOURCE = "resource.k8s.io/v1"
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_problems(labels: dict[str, Any]) -> list[str]:
    """What the API would refuse in ``labels`` (empty: none)."""
    out = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
            out.append(f"{key}: the prefix must be a DNS subdomain")
        if len(name) > 63 or not _LABEL_NAME.match(name):
            out.append(f"{key}: the name must be 63 characters or less of [A-Za-z0-9._-]")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            out.append(
                f"{key}={value!r}: a label value must be 63 characters or less of [A-Za-z0-9._-]"
            )
    return out


def _node_problems(obj: dict[str, Any], server: KubeApiServer | None = None) -> list[str]:
    return label_problems((obj.get("metadata") or {}).get("labels") or {})


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


RESOURCES = (
    Resource(_RESOURCE, "resourceslices", "ResourceSlice", "V1ResourceSlice",
             namespaced=False, check=slice_problems),
    Resource(_RESOURCE, "resourceclaims", "ResourceClaim", "ResourceV1ResourceClaim",
             namespaced=True),
    Resource("v1", "nodes", "Node", "V1Node", namespaced=False, check=_node_problems),
    Resource("v1", "configmaps", "ConfigMap", "V1ConfigMap", namespaced=True),
)  # fmt: skip


def _field(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _send_json(handler: BaseHTTPRequestHandler, status: int, answer: Any) -> None:
    """One JSON answer, and the connection closed after it (one request per connection, as
    nvhook's client)."""
    data = json.dumps(answer).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
    handler.close_connection = True


class KubeApiServer:
    """The stand-in (module docstring); a context manager that serves on 127.0.0.1."""

    def __init__(self, resources: tuple[Resource, ...] = RESOURCES, *, token: str = "") -> None:
        self.resources = resources
        #: the bearer token every request must carry ("": none checked)
        self.token = token
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, ns, name)
        self.requests: list[tuple[str, str]] = []
        self.rejected: list[tuple[str, list[str]]] = []
        self._faults: list[list[Any]] = []  # [method, path part, status, times]
        self._version = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        #: every change: (resourceVersion, type, plural, namespace, the object after it)
        self.events: list[tuple[int, str, str, str, dict[str, Any]]] = []
        self._compacted = 0  # versions up to this one are no longer kept
        self._generation = 0  # drop_watches() breaks the streams of older generations
        self._closing = False
        #: a status to refuse watches with (0: watches are served)
        self.refuse_watch = 0
        self.watches = 0
        self._httpd: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------ test side

    def __enter__(self) -> KubeApiServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            protocol_version = "HTTP/1.1"  # chunked watch streams, as the API's

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                if self.command == "GET" and server.watch_stream(self):
                    return
                status, answer = server.handle(
                    self.command,
                    self.path,
                    body,
                    authorization=self.headers.get("Authorization"),
                    content_type=self.headers.get("Content-Type"),
                )
                _send_json(self, status, answer)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "stand-in",
                    "clusters": [{"name": "stand-in", "cluster": {"server": self.url}}],
                    "users": [{"name": "test", "user": {"token": "test-token"}}],
                    "contexts": [
                        {"name": "stand-in", "context": {"cluster": "stand-in", "user": "test"}}
                    ],
                }
            )
        )
        return path

    def fail(self, method: str, path_part: str, status: int = 500, times: int = 1) -> None:
        """The next ``times`` ``method`` requests whose path contains ``path_part`` fail."""
        with self._lock:
            self._faults.append([method, path_part, status, times])

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` directly (a test's fixture: a claim as the scheduler left it)."""
        resource = self._resource(plural)
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        obj.setdefault("apiVersion", resource.group_version)
        obj.setdefault("kind", resource.kind)
        with self._lock:
            self._version += 1
            meta["resourceVersion"] = str(self._version)
            key = (plural, meta.get("namespace", ""), meta["name"])
            self._record("MODIFIED" if key in self.objects else "ADDED", key, obj)
            self.objects[key] = obj
        return obj

    def _record(self, kind: str, key: tuple[str, str, str], obj: dict[str, Any]) -> None:
        """Log a change (the lock held) for the watches, and wake them."""
        self.events.append((self._version, kind, key[0], key[1], copy.deepcopy(obj)))
        self._changed.notify_all()

    def compact(self) -> None:
        """Keep no change older than now: a watch from an older version gets 410 Expired."""
        with self._lock:
            self._compacted = self._version
            self.events = []

    def drop_watches(self) -> None:
        """Break every open watch stream (no final chunk), as a restarting server does."""
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    def watch_stream(self, handler: BaseHTTPRequestHandler) -> bool:
        """Serve ``handler``'s request as a watch if it is one (False: it is not)."""
        url = urlsplit(handler.path)
        query = parse_qs(url.query)
        if query.get("watch", [""])[0] not in ("1", "true"):
            return False
        route = self._route(url.path)

        def refuse(code: int, message: str) -> bool:
            _send_json(handler, code, self._status(code, message, "Forbidden")[1])
            return True

        with self._lock:
            self.requests.append(("WATCH", url.path))
            if self.token and handler.headers.get("Authorization") != f"Bearer {self.token}":
                return refuse(401, "Unauthorized")
            if self.refuse_watch:
                return refuse(self.refuse_watch, f"watch of {url.path} refused by the stand-in")
            self.watches += 1
            generation = self._generation
        if route is None or route[2] is not None:
            return refuse(404, f"the server could not find the requested resource {url.path}")
        resource, namespace, _ = route
        terms = [t.split("=", 1) for t in query.get("fieldSelector", [""])[0].split(",") if t]
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        bookmarks = query.get("allowWatchBookmarks", [""])[0] == "true"
        deadline = time.monotonic() + float(query.get("timeoutSeconds", ["1800"])[0])
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def send(event: dict[str, Any]) -> None:
            data = json.dumps(event).encode() + b"\n"
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            handler.wfile.flush()

        try:
            if since and since < self._compacted:
                status = self._status(410, f"too old resource version: {since}", "Expired")[1]
                send({"type": "ERROR", "object": status})
                handler.wfile.write(b"0\r\n\r\n")
                return True
            while True:
                with self._changed:
                    while True:
                        if self._closing or generation != self._generation:
                            handler.close_connection = True
                            return True  # broken: no final chunk
                        new = [
                            (v, k, o)
                            for v, k, p, ns, o in self.events
                            if v > since
                            and p == resource.plural
                            and (not namespace or ns == namespace)
                            and all(str(_field(o, f)) == x for f, x in terms)
                        ]
                        left = deadline - time.monotonic()
                        if new or left <= 0:
                            break
                        self._changed.wait(min(left, 1.0))
                    version = self._version
                for v, kind, obj in new:
                    send({"type": kind, "object": obj})
                    since = v
                if left <= 0:
                    if bookmarks:
                        mark = {"kind": resource.kind, "apiVersion": resource.group_version,
                                "metadata": {"resourceVersion": str(version)}}  # fmt: skip
                        send({"type": "BOOKMARK", "object": mark})
                    handler.wfile.write(b"0\r\n\r\n")
                    return True
        except OSError:  # the client went away
            handler.close_connection = True
            return True

    def pool_problems(self, driver: str, pool: str) -> list[str]:
        """What is wrong with the pool as stored: its newest generation must have exactly
        ``resourceSliceCount`` slices, all saying so, and no older generation may remain
        beside it (a driver that left one behind makes the scheduler wait)."""
        slices = [
            s
            for s in self.list("resourceslices")
            if s["spec"]["driver"] == driver and s["spec"]["pool"]["name"] == pool
        ]
        if not slices:
            return [f"pool {pool} of {driver} has no slice"]
        generations = {s["spec"]["pool"]["generation"] for s in slices}
        counts = {s["spec"]["pool"]["resourceSliceCount"] for s in slices}
        out = []
        if len(generations) != 1:
            out.append(f"pool {pool}: slices of generations {sorted(generations)}")
        if counts != {len(slices)}:
            out.append(f"pool {pool}: {len(slices)} slices declare counts {sorted(counts)}")
        return out

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any]:
        """The stored object (a copy); KeyError when there is none."""
        with self._lock:
            return copy.deepcopy(self.objects[(plural, namespace, name)])

    def list(self, plural: str) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(o) for (p, _, _), o in sorted(self.objects.items()) if p == plural
            ]

    # ------------------------------------------------------------------ the API

    def _resource(self, plural: str) -> Resource:
        return next(r for r in self.resources if r.plural == plural)

    @staticmethod
    def _status(
        code: int, message: str, reason: str = "", **details: str
    ) -> tuple[int, dict[str, Any]]:
        """A ``Status``; ``details`` (``name``, ``kind``) as the API gives them for an object
        (a path the server does not serve has none, as the real one)."""
        return code, {
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure" if code >= 300 else "Success",
            "message": message,
            "reason": reason,
            "code": code,
            **({"details": details} if details else {}),
        }

    def _not_found(self, resource: Resource, name: str) -> tuple[int, dict[str, Any]]:
        return self._status(
            404,
            f'{resource.plural} "{name}" not found',
            "NotFound",
            name=name,
            kind=resource.plural,
        )

    def _route(self, path: str) -> tuple[Resource, str, str | None] | None:
        for r in self.resources:
            if not path.startswith(r.prefix + "/"):
                continue
            rest = path[len(r.prefix) + 1 :].split("/")
            namespace = ""
            if r.namespaced and len(rest) >= 3 and rest[0] == "namespaces":
                namespace, rest = rest[1], rest[2:]
            if rest and rest[0] == r.plural and len(rest) <= 2:
                return r, namespace, rest[1] if len(rest) == 2 else None
        return None

    def handle(
        self,
        method: str,
        target: str,
        body: Any,
        *,
        authorization: str | None = None,
        content_type: str | None = None,
    ) -> tuple[int, Any]:
        url = urlsplit(target)
        with self._lock:
            self.requests.append((method, url.path))
            if self.token and authorization != f"Bearer {self.token}":
                return self._status(401, "Unauthorized", "Unauthorized")
            for fault in self._faults:
                if fault[0] == method and fault[1] in url.path and fault[3] > 0:
                    fault[3] -= 1
                    return self._status(fault[2], f"injected failure of {method} {url.path}")
        route = self._route(url.path)
        if route is None:
            return self._status(
                404, f"the server could not find the requested resource {url.path}", "NotFound"
            )
        resource, namespace, name = route
        key = (resource.plural, namespace, name or "")
        if method == "GET" and name is None:
            selector = parse_qs(url.query).get("fieldSelector", [""])[0]
            terms = [t.split("=", 1) for t in selector.split(",") if t]
            with self._lock:
                items = [
                    copy.deepcopy(o)
                    for (p, ns, _), o in sorted(self.objects.items())
                    if p == resource.plural
                    and (not namespace or ns == namespace)
                    and all(str(_field(o, f)) == v for f, v in terms)
                ]
            return 200, {
                "apiVersion": resource.group_version,
                "kind": f"{resource.kind}List",
                "metadata": {"resourceVersion": str(self._version)},
                "items": items,
            }
        if method == "GET":
            with self._lock:
                obj = self.objects.get(key)
            if obj is None:
                return self._not_found(resource, name or "")
            return 200, copy.deepcopy(obj)
        if method == "DELETE":
            with self._lock:
                obj = self.objects.pop(key, None)
                if obj is not None:
                    self._version += 1
                    obj["metadata"]["resourceVersion"] = str(self._version)
                    self._record("DELETED", key, obj)
            if obj is None:
                return self._not_found(resource, name or "")
            return self._status(200, "deleted")
        if method == "PATCH" and name is not None:
            if content_type != "application/merge-patch+json":
                return self._status(415, f"{content_type}: only merge patches here", "Unsupported")
            with self._lock:
                old = self.objects.get(key)
            if old is None:
                return self._not_found(resource, name)
            body = _merge(old, body)  # then validated and stored as a replace of the merge
        if method not in ("POST", "PUT", "PATCH") or not isinstance(body, dict):
            return self._status(405, f"{method} {url.path}: not served by the stand-in")
        problems = validate_model(body, resource.model)
        if resource.check is not None:
            problems += resource.check(body, self)
        if method == "POST" and name is not None:
            problems.append("POST to a named path")
        obj_name = (body.get("metadata") or {}).get("name")
        if method in ("PUT", "PATCH") and obj_name != name:
            problems.append(f"metadata.name {obj_name!r} is not the path's {name!r}")
        if problems:
            self.rejected.append((f"{method} {url.path}", problems))
            return self._status(422, "; ".join(problems), "Invalid")
        key = (resource.plural, namespace, obj_name or "")
        with self._lock:
            old = self.objects.get(key)
            if method == "POST" and old is not None:
                return self._status(
                    409, f'{resource.plural} "{obj_name}" already exists', "AlreadyExists"
                )
            if method in ("PUT", "PATCH"):
                if old is None:
                    return self._status(
                        404, f'{resource.plural} "{obj_name}" not found', "NotFound"
                    )
                sent = (body.get("metadata") or {}).get("resourceVersion")
                if sent != old["metadata"]["resourceVersion"]:
                    return self._status(
                        409, f"the object has been modified (resourceVersion {sent!r})", "Conflict"
                    )
            obj = copy.deepcopy(body)
            meta = obj["metadata"]
            meta["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
            self._version += 1
            meta["resourceVersion"] = str(self._version)
            self._record("ADDED" if old is None else "MODIFIED", key, obj)
            self.objects[key] = obj
        return (201 if method == "POST" else 200), copy.deepcopy(obj)
