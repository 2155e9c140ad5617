"""Per-node configs: the plugin on a dgx-a100 mock with a directory of named configs, the node's
``nvidia.com/device-plugin.config`` label read from the Node API stand-in
(tests/support/kubeapi.py); a label change and a config file change are each applied without
a restart (the resource registered again with its new devices); a bad name or a bad file is
logged and changes nothing."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvhook.deviceplugin.selector import (
    ASK_INTERVAL,
    MAX_CONFIG_MAP,
    ConfigMapConfigs,
    ConfigSelector,
)
from nvhook.kubeapi import Client
from tests.nvhook.deviceplugin.test_server import dgx, serving  # noqa: F401 (fixture)
from tests.support.kubeapi import KubeApiServer

SLICED = (
    "version: v1\nsharing:\n  timeSlicing:\n"
    "    resources: [{{name: nvidia.com/gpu, replicas: {n}}}]\n"
)


@pytest.fixture
def api() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        server.put(
            "nodes", {"metadata": {"name": "gpu-1", "labels": {"kubernetes.io/hostname": "gpu-1"}}}
        )
        yield server


def _set_label(api: KubeApiServer, value: str | None) -> None:
    node = api.get("nodes", "gpu-1")
    labels = node["metadata"]["labels"]
    if value is None:
        labels.pop("nvidia.com/device-plugin.config", None)
    else:
        labels["nvidia.com/device-plugin.config"] = value
    api.put("nodes", node)


def _wait(predicate: object, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_label_and_file_changes_apply_without_a_restart(
    dgx: Path,  # noqa: F811
    api: KubeApiServer,
    tmp_path: Path,
) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "plain").write_text("version: v1\n")
    (configs / "sliced").write_text(SLICED.format(n=2))
    lines: list[str] = []
    selector = ConfigSelector(
        str(configs),
        default="plain",
        node="gpu-1",
        credentials=Client(api.url),
        log=lines.append,
    )
    initial = selector()
    assert initial is not None and initial.time_slicing == ()
    with serving(
        dgx,
        initial,
        prefix="nvh-sel-",
        health_interval=0.2,
        log=lines.append,
        config_source=selector,
        config_interval=0.2,
    ) as served:
        kubelet, thread = served.kubelet, served.thread

        def devices() -> int:
            [request] = kubelet.wait_registered(len(kubelet.requests))[-1:]
            client = kubelet.client(request)
            client.watch()
            return len(client.wait_for(lambda d: True))

        kubelet.wait_registered(1)
        assert devices() == 8
        _set_label(api, "sliced")  # the label names another config: 2 replicas each
        _wait(lambda: len(kubelet.requests) >= 2)
        assert kubelet.requests[-1].resource_name == "nvidia.com/gpu"
        assert devices() == 16
        (configs / "sliced").write_text(SLICED.format(n=3))  # the config itself changes
        _wait(lambda: len(kubelet.requests) >= 3)
        assert devices() == 24
        registered = len(kubelet.requests)
        (configs / "sliced").write_text("version: v1\nflags: {migStrategy: all}\n")  # bad
        _wait(lambda: any("flags.migStrategy: input should be" in line for line in lines))
        _set_label(api, "nope")  # no such config
        _wait(lambda: any("device-plugin.config=nope: no such config" in line for line in lines))
        time.sleep(0.5)
        assert len(kubelet.requests) == registered  # nothing changed: still 24 replicas
        assert thread.is_alive()
        _set_label(api, None)  # back to the default
        _wait(lambda: len(kubelet.requests) > registered)
        assert devices() == 8


def test_the_command_needs_a_config_to_start_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nvhook.cli import main

    (tmp_path / "plain").write_text("version: v1\n")
    (tmp_path / "other").write_text("version: v1\n")
    argv = ["device-plugin", "--config-dir", str(tmp_path), "--device-plugin-path", str(tmp_path)]
    assert main([*argv, "--default-config", "nope"]) == 8
    err = capsys.readouterr().err
    assert "nvidia.com/device-plugin.config=nope: no such config" in err
    assert f"{tmp_path}: no configuration to start with" in err
    assert main(argv) == 8  # two configs, no label, no default: which one is not guessed
    assert "no default, and" in capsys.readouterr().err


class _Running:
    """A plugin on the dgx mock with ``selector`` as its config source, asked as often as
    ``nvhook device-plugin`` asks it, and the kubelet stand-in it registers with."""

    def __init__(self, root: Path, selector: ConfigSelector, lines: list[str]) -> None:
        initial = selector()
        assert initial is not None
        self._stack = contextlib.ExitStack()
        self._stack.callback(selector.close)  # last: after the plugin stopped
        served = self._stack.enter_context(
            serving(
                root,
                initial,
                prefix="nvh-sel-",
                health_interval=5.0,
                log=lines.append,
                config_source=selector,
                config_interval=ASK_INTERVAL,
            )
        )
        self.kubelet = served.kubelet
        self.kubelet.wait_registered(1)

    def devices(self) -> int:
        [request] = self.kubelet.wait_registered(len(self.kubelet.requests))[-1:]
        client = self.kubelet.client(request)
        client.watch()
        return len(client.wait_for(lambda d: True))

    def close(self) -> None:
        self._stack.close()


def test_a_label_change_is_applied_within_a_second_by_the_node_watch(
    dgx: Path,  # noqa: F811
    api: KubeApiServer,
    tmp_path: Path,
) -> None:
    (tmp_path / "plain").write_text("version: v1\n")
    (tmp_path / "sliced").write_text(SLICED.format(n=2))
    lines: list[str] = []
    selector = ConfigSelector(str(tmp_path), default="plain", node="gpu-1",
                              credentials=Client(api.url), log=lines.append)  # fmt: skip
    running = _Running(dgx, selector, lines)
    try:
        assert running.devices() == 8
        start = time.monotonic()
        _set_label(api, "sliced")
        _wait(lambda: len(running.kubelet.requests) >= 2)
        took = time.monotonic() - start
        assert running.devices() == 16
        assert took < 2.0, took  # measured 1.0 s: the event, ASK_INTERVAL, the old servers' stop
        # followed by one list and one watch: no GET of the Node per second
        assert ("GET", "/api/v1/nodes/gpu-1") not in api.requests
        assert api.requests.count(("WATCH", "/api/v1/nodes")) == 1
    finally:
        running.close()


def test_a_refused_watch_falls_back_to_polling(
    dgx: Path,  # noqa: F811
    api: KubeApiServer,
    tmp_path: Path,
) -> None:
    api.refuse_watch = 403  # RBAC without list/watch on nodes
    (tmp_path / "plain").write_text("version: v1\n")
    (tmp_path / "sliced").write_text(SLICED.format(n=2))
    lines: list[str] = []
    selector = ConfigSelector(str(tmp_path), default="plain", node="gpu-1",
                              credentials=Client(api.url), log=lines.append,
                              poll_interval=1.0)  # fmt: skip
    running = _Running(dgx, selector, lines)
    try:
        assert any("403 Forbidden" in line and "polling instead" in line for line in lines)
        _set_label(api, "sliced")
        _wait(lambda: len(running.kubelet.requests) >= 2)
        assert running.devices() == 16
        assert ("GET", "/api/v1/nodes/gpu-1") in api.requests
    finally:
        running.close()


def test_the_node_watch_may_log_before_the_selector_is_built(
    api: KubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch's thread logs as soon as it runs (a refused watch: "polling instead"), which
    can be before the selector's constructor returns; a watch that logs on start shows it."""
    from nvhook.kubeapi import ObjectWatch

    start = ObjectWatch.start

    def start_and_log(self: ObjectWatch) -> ObjectWatch:
        self.log("warning: logged at once")
        return start(self)

    monkeypatch.setattr(ObjectWatch, "start", start_and_log)
    (tmp_path / "plain").write_text("version: v1\n")
    lines: list[str] = []
    selector = ConfigSelector(str(tmp_path), default="plain", node="gpu-1",
                              credentials=Client(api.url), log=lines.append)  # fmt: skip
    selector.close()
    assert lines[0] == "warning: logged at once"


def test_configs_from_a_config_map_through_the_api(
    dgx: Path,  # noqa: F811
    api: KubeApiServer,
) -> None:
    """The named configs are a ConfigMap's keys, watched: a key's change and a label's are
    each applied without a restart; a bad key, a missing name and an oversized ConfigMap
    are named and change nothing."""
    cm = {"metadata": {"name": "cfg", "namespace": "kube-system"},
          "data": {"plain": "version: v1\n", "sliced.yaml": SLICED.format(n=2)}}  # fmt: skip
    api.put("configmaps", cm)

    def edit(**data: str) -> None:
        obj = api.get("configmaps", "cfg", "kube-system")
        obj["data"] = {**obj["data"], **data}
        api.put("configmaps", obj)

    lines: list[str] = []
    creds = Client(api.url)
    configs = ConfigMapConfigs(creds, "kube-system", "cfg", log=lines.append)
    selector = ConfigSelector("", default="plain", node="gpu-1", credentials=creds,
                              config_map=configs, log=lines.append)  # fmt: skip
    running = _Running(dgx, selector, lines)
    try:
        assert running.devices() == 8
        _set_label(api, "sliced")  # the key sliced.yaml
        _wait(lambda: len(running.kubelet.requests) >= 2)
        assert running.devices() == 16
        start = time.monotonic()
        edit(**{"sliced.yaml": SLICED.format(n=3)})  # the ConfigMap itself changes
        _wait(lambda: len(running.kubelet.requests) >= 3)
        assert time.monotonic() - start < 2.0
        assert running.devices() == 24
        registered = len(running.kubelet.requests)
        edit(**{"sliced.yaml": "version: v1\nflags: {migStrategy: all}\n"})
        _wait(lambda: any("ConfigMap kube-system/cfg key sliced.yaml: " in x for x in lines))
        edit(**{"sliced.yaml": SLICED.format(n=3), "huge": "#" * MAX_CONFIG_MAP})
        _wait(lambda: any(f"more than {MAX_CONFIG_MAP}: split it" in x for x in lines))
        small = api.get("configmaps", "cfg", "kube-system")
        del small["data"]["huge"]
        api.put("configmaps", small)
        _set_label(api, "nope")
        _wait(lambda: any("=nope: no such config in ConfigMap kube-system/cfg" in x for x in lines))
        time.sleep(1.5)
        assert len(running.kubelet.requests) == registered  # nothing changed: still 24
        assert ("GET", "/api/v1/namespaces/kube-system/configmaps/cfg") not in api.requests
    finally:
        running.close()


def test_the_command_takes_a_config_map(
    api: KubeApiServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from nvhook.cli import main

    argv = ["device-plugin", "--api-server", api.url, "--node-name", "gpu-1"]
    assert main([*argv, "--config-map", "nope"]) == 2
    assert "expected NAMESPACE/NAME" in capsys.readouterr().err
    assert main([*argv, "--config-map", "a/b", "--config-dir", "/x"]) == 2
    assert main([*argv, "--config-map", "kube-system/cfg", "--default-config", "plain"]) == 8
    err = capsys.readouterr().err
    assert "ConfigMap kube-system/cfg does not exist" in err
    assert "ConfigMap kube-system/cfg: no configuration to start with" in err
