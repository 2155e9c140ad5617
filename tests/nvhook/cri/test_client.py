"""What kubelet sends, built from a device plugin's allocation; the CRI log's stdout."""

from __future__ import annotations

from pathlib import Path

from nvhook.cri.client import HOST_NETWORK, container_config, pod_config, read_log


def test_container_config_carries_the_allocation_as_kubelet_does() -> None:
    allocation = {
        "envs": {"NVIDIA_VISIBLE_DEVICES": "void", "PATH": "/from/plugin"},
        "mounts": [("/var/run/nvidia-container-devices/GPU-1", "/dev/null", True)],
        "devices": [("/dev/nvidia0", "/dev/nvidia0", "rw")],
        "annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=0"},
        "cdi_devices": ["nvidia.com/gpu=0"],
    }
    config = container_config(
        "c", "img", ["sh"], envs={"PATH": "/pod", "A": "1"}, allocation=allocation, log_path="c.log"
    )
    # the pod's env first; the plugin's envs after, replacing a name they share
    assert [(e.key, e.value) for e in config.envs] == [
        ("PATH", "/from/plugin"),
        ("A", "1"),
        ("NVIDIA_VISIBLE_DEVICES", "void"),
    ]
    [mount] = config.mounts
    assert (mount.container_path, mount.host_path, mount.readonly) == (
        "/var/run/nvidia-container-devices/GPU-1",
        "/dev/null",
        True,
    )
    [device] = config.devices
    assert (device.container_path, device.host_path, device.permissions) == (
        "/dev/nvidia0",
        "/dev/nvidia0",
        "rw",
    )
    assert dict(config.annotations) == {"cdi.k8s.io/x": "nvidia.com/gpu=0"}
    assert [d.name for d in config.CDI_devices] == ["nvidia.com/gpu=0"]
    assert (config.image.image, list(config.command), config.log_path) == ("img", ["sh"], "c.log")


def test_container_config_without_allocation_is_the_pod_s() -> None:
    config = container_config("c", "img", ["true"])
    assert (list(config.envs), list(config.mounts), dict(config.annotations)) == ([], [], {})


def test_pod_config_uses_the_host_network(tmp_path: Path) -> None:
    pod = pod_config("p", namespace="ns", log_directory=tmp_path)
    assert (pod.metadata.name, pod.metadata.uid, pod.metadata.namespace) == ("p", "p", "ns")
    assert pod.log_directory == str(tmp_path)
    assert pod.linux.security_context.namespace_options.network == HOST_NETWORK


def test_read_log_joins_partial_lines_and_keeps_stdout_only(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    log.write_text(
        "2024-01-01T00:00:00Z stdout P GPU 0: \n"
        "2024-01-01T00:00:00Z stdout F A100\n"
        "2024-01-01T00:00:00Z stderr F warning\n"
        "2024-01-01T00:00:01Z stdout F \n"
    )
    assert read_log(log) == "GPU 0: A100\n\n"
