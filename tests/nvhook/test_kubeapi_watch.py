"""nvhook/kubeapi.py's watch against the API-server stand-in (tests/support/kubeapi.py, on
loopback; no kube-apiserver here), which streams chunked JSON events as the real watch
handler does: changes arrive as they are made; a broken stream resumes from the last
resourceVersion without listing again; a version the server no longer keeps (410 Expired)
lists again; a refused watch says so (the caller polls); an event larger than the bound is
refused; a deleted object is None."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nvhook.kubeapi import MAX_EVENT, ApiError, Client, ObjectWatch
from tests.support.kubeapi import KubeApiServer


@pytest.fixture
def api() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        server.put("nodes", {"metadata": {"name": "gpu-1", "labels": {"n": "0"}}})
        server.put("nodes", {"metadata": {"name": "gpu-2", "labels": {"n": "0"}}})
        yield server


def _wait(predicate: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _label(api: KubeApiServer, node: str, value: str) -> None:
    obj = api.get("nodes", node)
    obj["metadata"]["labels"]["n"] = value
    api.put("nodes", obj)


@pytest.fixture
def watched(api: KubeApiServer) -> Iterator[tuple[ObjectWatch, list[Any], list[str]]]:
    seen: list[Any] = []
    lines: list[str] = []
    watch = ObjectWatch(
        Client(api.url),
        "/api/v1/nodes",
        "gpu-1",
        on_change=lambda obj: seen.append(obj and obj["metadata"]["labels"]["n"]),
        log=lines.append,
        backoff=(0.05, 0.2),
    ).start()
    assert watch.synced.wait(10)
    _wait(lambda: api.watches == 1)  # listed, and its watch is open
    yield watch, seen, lines
    watch.stop()


def test_changes_arrive_as_made_and_only_the_named_object_s(
    api: KubeApiServer, watched: tuple[ObjectWatch, list[Any], list[str]]
) -> None:
    watch, seen, _ = watched
    assert seen == ["0"]
    start = time.monotonic()
    _label(api, "gpu-1", "1")
    _wait(lambda: seen[-1] == "1")
    assert time.monotonic() - start < 1.0
    _label(api, "gpu-2", "9")  # another node's change is not this watch's
    _label(api, "gpu-1", "2")
    _wait(lambda: seen[-1] == "2")
    assert seen == ["0", "1", "2"] and watch.lists == 1 and api.watches == 1
    api.handle("DELETE", "/api/v1/nodes/gpu-1", None)
    _wait(lambda: seen[-1] is None)
    assert watch.object is None


def test_a_broken_stream_resumes_where_it_was(
    api: KubeApiServer, watched: tuple[ObjectWatch, list[Any], list[str]]
) -> None:
    watch, seen, lines = watched
    api.refuse_watch = 500  # the server restarting: its watches fail for a while
    api.drop_watches()
    _wait(lambda: any("stream broke" in line for line in lines))
    _label(api, "gpu-1", "1")  # made while nobody watched
    time.sleep(0.3)
    api.refuse_watch = 0
    _wait(lambda: seen[-1] == "1")  # replayed from the version it had seen
    assert watch.lists == 1  # resumed, not listed again
    assert any("500" in line and "watching again in" in line for line in lines)


def test_an_expired_version_lists_again(
    api: KubeApiServer, watched: tuple[ObjectWatch, list[Any], list[str]]
) -> None:
    watch, seen, _ = watched
    api.refuse_watch = 500
    api.drop_watches()
    time.sleep(0.1)
    _label(api, "gpu-1", "1")
    api.compact()  # its version is no longer kept: 410 Expired on resume
    api.refuse_watch = 0
    _wait(lambda: watch.lists == 2)
    assert seen[-1] == "1"
    _label(api, "gpu-1", "2")  # and it watches from the new list's version
    _wait(lambda: seen[-1] == "2")


def test_a_refused_watch_says_so(api: KubeApiServer) -> None:
    api.refuse_watch = 403  # RBAC without watch
    lines: list[str] = []
    watch = ObjectWatch(Client(api.url), "/api/v1/nodes", "gpu-1", log=lines.append).start()
    assert watch.refused.wait(10)
    assert watch.lists == 1 and watch.object is not None  # the list answered
    assert lines == [
        f"warning: GET {api.url}/api/v1/nodes (watch): 403 Forbidden: watch of /api/v1/nodes "
        "refused by the stand-in; polling instead"
    ]
    watch.stop()


def test_an_event_larger_than_the_bound_is_refused(api: KubeApiServer) -> None:
    api.put("configmaps", {"metadata": {"name": "big", "namespace": "ns"}, "data": {}})
    client = Client(api.url)
    events = client.watch("/api/v1/namespaces/ns/configmaps", query={"resourceVersion": "1"})
    assert next(events)["object"]["metadata"]["name"] == "big"  # its ADDED
    big = api.get("configmaps", "big", "ns")
    big["data"] = {"k": "x" * (MAX_EVENT + 1)}
    api.put("configmaps", big)
    with pytest.raises(ApiError, match=f"an event is larger than {MAX_EVENT} bytes"):
        next(events)
