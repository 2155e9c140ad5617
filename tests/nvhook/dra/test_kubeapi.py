"""The driver's API client (nvhook/dra/kubeapi.py) and the stand-in it is tested against."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvhook.dra.errors import StateError
from nvhook.dra.kubeapi import KubeApi, connect
from nvhook.dra.state import Checkpoint, load, lock, save
from nvhook.kubeapi import ApiError, Client, KubeConfigError
from tests.nvhook.dra.conftest import allocated_claim
from tests.support.kubeapi import KubeApiServer


def test_the_stand_in_serves_lists_by_field_and_refuses_a_stale_replace(
    kubeapi: KubeApiServer, tmp_path: Path
) -> None:
    api = connect(str(kubeapi.kubeconfig(tmp_path / "kc")))
    kubeapi.put("nodes", {"metadata": {"name": "node-a"}})
    kubeapi.put("configmaps", {"metadata": {"name": "c", "namespace": "ns"}, "data": {"k": "v"}})
    assert api.request("GET", "/api/v1/nodes/node-a")["metadata"]["name"] == "node-a"
    assert api.request("GET", "/api/v1/namespaces/ns/configmaps/c")["data"] == {"k": "v"}
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s1"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-a",
                 "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1}},
    }  # fmt: skip
    created = api.create_slice(body)
    assert api.list_slices("gpu.nvidia.com", "node-a") == [created]
    assert api.list_slices("gpu.nvidia.com", "node-b") == []
    with pytest.raises(ApiError) as conflict:
        api.replace_slice({**body, "metadata": {"name": "s1", "resourceVersion": "0"}})
    assert conflict.value.status == 409 and "PUT" in conflict.value.message
    with pytest.raises(ApiError) as missing:
        api.get_claim("default", "nope")
    assert missing.value.status == 404 and "/resourceclaims/nope" in missing.value.message
    api.delete_slice("s1")
    api.delete_slice("s1")  # already gone: fine


def test_the_stand_in_refuses_an_invalid_object_with_422(
    kubeapi: KubeApiServer, tmp_path: Path
) -> None:
    api = connect(str(kubeapi.kubeconfig(tmp_path / "kc")))
    with pytest.raises(ApiError) as refused:
        api.create_slice({"metadata": {"name": "BAD NAME"}, "spec": {"driver": "gpu.nvidia.com"}})
    assert refused.value.status == 422 and "DNS subdomain" in refused.value.message
    kubeapi.rejected.clear()  # the fixture asserts that nothing was refused


def test_a_claim_fixture_is_the_client_s_model(kubeapi: KubeApiServer) -> None:
    from tests.support.kubeapi import validate_model

    assert validate_model(allocated_claim("c", ["gpu-0"]), "ResourceV1ResourceClaim") == []


def test_an_unreachable_server_is_one_line() -> None:
    api = KubeApi(Client("http://127.0.0.1:1", timeout=2))
    with pytest.raises(ApiError) as e:
        api.get_claim("default", "c")
    assert "cannot be reached" in e.value.message and "127.0.0.1:1" in e.value.message


def test_credentials_errors_name_what_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match=r"not in a pod.*--kubeconfig"):
        connect()
    config = tmp_path / "kc"
    config.write_text(json.dumps({"clusters": []}))
    with pytest.raises(KubeConfigError, match="current-context is not set"):
        connect(str(config))
    config.write_text(json.dumps({"current-context": "x", "contexts": []}))
    with pytest.raises(KubeConfigError, match="no entry named 'x'"):
        connect(str(config))
    with pytest.raises(KubeConfigError, match="cannot read"):
        connect(str(tmp_path / "missing"))


def test_a_corrupt_checkpoint_is_one_line_and_the_lock_is_exclusive(tmp_path: Path) -> None:
    save(str(tmp_path), Checkpoint({}, ("u1",)))
    assert load(str(tmp_path)).unprepared == ("u1",)
    (tmp_path / "checkpoint.json").write_text("{not json")
    with pytest.raises(StateError, match=r"checkpoint\.json: the checkpoint is not JSON"):
        load(str(tmp_path))
    (tmp_path / "checkpoint.json").write_text('{"version": 9}')
    with pytest.raises(StateError, match="version 9"):
        load(str(tmp_path))
    fd = lock(str(tmp_path / "state"))
    try:
        with pytest.raises(StateError, match="another nvhook dra-plugin"):
            lock(str(tmp_path / "state"))
    finally:
        import os

        os.close(fd)


def test_a_claim_is_read_in_the_version_the_server_serves(tmp_path: Path) -> None:
    """API-version skew (NVIDIA's #766): a server without resource.k8s.io/v1 claims still
    gives the driver its claim, in v1beta2; an object that is missing stays a 404."""
    from tests.support.kubeapi import RESOURCES, Resource

    beta = Resource("resource.k8s.io/v1beta2", "resourceclaims", "ResourceClaim",
                    "V1beta2ResourceClaim", namespaced=True)  # fmt: skip
    served = (RESOURCES[0], beta)
    with KubeApiServer(served) as server:
        stored = server.put("resourceclaims", allocated_claim("c", ["gpu-0"]))
        api = connect(str(server.kubeconfig(tmp_path / "kc")))
        claim = api.get_claim("default", "c")
        assert claim["metadata"]["uid"] == stored["metadata"]["uid"]
        assert api.claim_version == "v1beta2"
        with pytest.raises(ApiError) as missing:
            api.get_claim("default", "gone")
        assert missing.value.status == 404 and "/v1beta2/" in missing.value.message
        first = [p for m, p in server.requests if "resourceclaims/gone" in p]
        assert first == ["/apis/resource.k8s.io/v1beta2/namespaces/default/resourceclaims/gone"]
    with KubeApiServer((RESOURCES[0],)) as server:
        api = connect(str(server.kubeconfig(tmp_path / "kc2")))
        with pytest.raises(ApiError, match=r"none of resource\.k8s\.io/v1, v1beta2, v1beta1"):
            api.get_claim("default", "c")
