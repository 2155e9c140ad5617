"""A minimal stand-in for kube-apiserver's Node API on 127.0.0.1 (no kube-apiserver here).

Only what ``nvhook labels --node`` uses: ``GET /api/v1/nodes/NAME`` and ``PATCH`` of the same
with ``application/merge-patch+json`` (RFC 7386, as the API applies it), a bearer token
checked when one is set (401 otherwise), 404 for an unknown node, and the API's label syntax
enforced on every patch (a qualified name, a value of at most 63 characters of
``[A-Za-z0-9._-]`` beginning and ending alphanumeric: 422 and the reason otherwise, as
``validation.ValidateLabels``). Errors are ``Status`` objects. Kept apart from the DRA
driver's fuller stand-in (tests/support/kubeapi.py on its branch) on purpose: it serves one
kind and one verb more than GET.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["NodeApi", "label_problems"]

_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_problems(labels: dict[str, Any]) -> list[str]:
    """What the API would refuse in ``labels`` (empty: none)."""
    out = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
            out.append(f"{key}: the prefix must be a DNS subdomain")
        if len(name) > 63 or not _NAME.match(name):
            out.append(f"{key}: the name must be 63 characters or less of [A-Za-z0-9._-]")
        if not isinstance(value, str) or len(value) > 63 or not _VALUE.match(value):
            out.append(
                f"{key}={value!r}: a label value must be 63 characters or less of [A-Za-z0-9._-]"
            )
    return out


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


class NodeApi:
    """Nodes by name, served on ``url`` until :meth:`stop`; ``requests`` lists (method, path)."""

    def __init__(self, nodes: dict[str, dict[str, str]], token: str = "") -> None:
        self.nodes = {
            name: {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
            for name, labels in nodes.items()
        }
        self.token = token
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, reason: str, message: str) -> None:
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
                self._answer(code, {**status, "message": message, "reason": reason, "code": code})

            def _node(self) -> str | None:
                api.requests.append((self.command, self.path))
                if api.token and self.headers.get("Authorization") != f"Bearer {api.token}":
                    self._status(401, "Unauthorized", "Unauthorized")
                    return None
                m = re.fullmatch(r"/api/v1/nodes/([^/?]+)", self.path)
                if m is None or m.group(1) not in api.nodes:
                    self._status(
                        404, "NotFound", f'nodes "{self.path.rsplit("/", 1)[-1]}" not found'
                    )
                    return None
                return m.group(1)

            def do_GET(self) -> None:
                name = self._node()
                if name is not None:
                    with api._lock:
                        self._answer(200, api.nodes[name])

            def do_PATCH(self) -> None:
                name = self._node()
                if name is None:
                    return
                if self.headers.get("Content-Type") != "application/merge-patch+json":
                    self._status(415, "UnsupportedMediaType", "only merge patches here")
                    return
                patch = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with api._lock:
                    node = _merge(api.nodes[name], patch)
                    problems = label_problems(node["metadata"].get("labels") or {})
                    if problems:
                        self._status(422, "Invalid", "; ".join(problems))
                        return
                    api.nodes[name] = node
                    self._answer(200, node)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def labels(self, node: str) -> dict[str, str]:
        with self._lock:
            return dict(self.nodes[node]["metadata"]["labels"])

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
