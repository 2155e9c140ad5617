"""nvhook's one Kubernetes API client (nvhook/kubeapi.py): the pod's credentials as client-go
finds them, and one error line per failure. The calls over it are tested with their features
(tests/nvhook/dra/test_kubeapi.py, tests/nvhook/deviceplugin/test_labels_node.py)."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from nvhook.kubeapi import ApiError, Client, KubeConfigError, in_cluster
from tests.support.basics import require
from tests.support.kubeapi import KubeApiServer


def _account(tmp_path: Path) -> Path:
    """A service-account directory: a token and a (self-signed) CA, as kubelet mounts them."""
    (tmp_path / "token").write_text("abc\n")
    subprocess.run(
        [require("openssl"), "req", "-x509", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=kube-ca", "-days", "1",
         "-keyout", str(tmp_path / "ca.key"), "-out", str(tmp_path / "ca.crt")],
        check=True, capture_output=True,
    )  # fmt: skip
    return tmp_path


def test_in_cluster_credentials(tmp_path: Path) -> None:
    account = str(_account(tmp_path))
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    client = in_cluster(account, env)
    assert (client.server, client.token_file) == ("https://10.0.0.1:443", f"{account}/token")
    assert isinstance(client.context, ssl.SSLContext)
    assert client.context.verify_mode == ssl.CERT_REQUIRED
    v6 = in_cluster(account, {**env, "KUBERNETES_SERVICE_HOST": "fd00::1"})
    assert v6.server == "https://[fd00::1]:443"


def test_in_cluster_failures_name_the_fix(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}
    with pytest.raises(KubeConfigError, match=r"not in a pod\); give --api-server$"):
        in_cluster(str(tmp_path), {"KUBERNETES_SERVICE_HOST": "h"}, fix="give --api-server")
    with pytest.raises(KubeConfigError, match=r"none/token: cannot read the service account"):
        in_cluster(str(tmp_path / "none"), env)
    (tmp_path / "token").write_text("abc\n")
    with pytest.raises(KubeConfigError, match=r"ca\.crt: cannot read the cluster's CA"):
        in_cluster(str(tmp_path), env)


def test_the_token_is_read_on_every_call_and_a_refusal_is_one_line(tmp_path: Path) -> None:
    """Projected service-account tokens rotate: a long-running daemon (the device plugin's
    per-node configs) must send the token the file holds now, not the one at its start."""
    token = tmp_path / "token"
    token.write_text("first\n")
    with KubeApiServer(token="first") as server:
        server.put("nodes", {"metadata": {"name": "n"}})
        client = Client(server.url, token_file=str(token))
        assert client.request("GET", "/api/v1/nodes/n")["metadata"]["name"] == "n"
        token.write_text("second\n")
        server.token = "second"
        assert client.request("GET", "/api/v1/nodes/n")["metadata"]["name"] == "n"
        with pytest.raises(ApiError) as e:
            client.request("GET", "/api/v1/nodes/gone")
        where = f"GET {server.url}/api/v1/nodes/gone"
        assert e.value.message == f'{where}: 404 Not Found: nodes "gone" not found'
        assert e.value.status == 404 and not e.value.unserved
