"""NVIDIA's device-plugin config files as they are: every key of its ``api/config/v1``
accepted (implemented, or one note naming the key), its examples (tests/data/nvidia-device-
plugin, copied from its README), its environment variables and flags, renaming by pattern,
``devices`` of a time-sliced resource, ``deviceIDStrategy`` against ``nvhook cdi generate``'s
names, and ``--check-config FILE --node PROFILE`` on mock machines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.deviceplugin.allocate import allocate
from nvhook.deviceplugin.config import NO_EFFECT, load_config, parse_config
from nvhook.deviceplugin.errors import PluginConfigError, StrategyError
from nvhook.deviceplugin.model import NamedResource, PluginConfig, TimeSlicedResource
from nvhook.deviceplugin.resources import build_resources
from nvhook.devices.nvml import GpuInfo
from tests.nvhook.deviceplugin.conftest import gpu

DATA = Path(__file__).parents[2] / "data" / "nvidia-device-plugin"

#: Every key of NVIDIA's config (api/config/v1: config.go, flags.go, resources.go,
#: replicas.go, sharing.go, imex.go at 1b826acc), each set.
EVERY_KEY = """\
version: v1
flags:
  migStrategy: mixed
  failOnInitError: false
  mpsRoot: /run/nvidia/mps
  nvidiaDriverRoot: /run/nvidia/driver
  nvidiaDevRoot: /
  gdrcopyEnabled: true
  gdsEnabled: true
  mofedEnabled: false
  useNodeFeatureAPI: false
  deviceDiscoveryStrategy: auto
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [envvar, cdi-cri]
    deviceIDStrategy: index
    cdiAnnotationPrefix: cdi.k8s.io/
    nvidiaCTKPath: /usr/bin/nvidia-ctk
    containerDriverRoot: /driver-root
    sharedDevicesAllocationPolicy: packed
  gfd:
    oneshot: true
    noTimestamp: true
    sleepInterval: 60s
    outputFile: /etc/kubernetes/node-feature-discovery/features.d/gfd
    machineTypeFile: /sys/class/dmi/id/product_name
resources:
  gpus:
    - pattern: "*A100*"
      name: a100
  mig:
    - pattern: "1g.10gb"
      name: mig-small
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
      - name: nvidia.com/a100
        rename: a100-shared
        devices: [0, "1:0", "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763"]
        replicas: 2
  mps:
    renameByDefault: false
    failRequestsGreaterThanOne: true
    resources: []
imex:
  channelIDs: [0]
  required: false
"""


def test_every_key_of_nvidias_config_is_accepted() -> None:
    import yaml

    config = parse_config(yaml.safe_load(EVERY_KEY), source="every.yaml")
    assert config == PluginConfig(
        mig_strategy="mixed",
        device_list_strategies=("envvar", "cdi-cri"),
        device_id_strategy="index",
        time_slicing=(
            TimeSlicedResource(
                "nvidia.com/a100",
                2,
                "nvidia.com/a100-shared",
                devices=("0", "1:0", "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763"),
            ),
        ),
        rename_by_default=True,
        fail_requests_greater_than_one=True,
        fail_on_init_error=False,
        pass_device_specs=True,
        dev_root="/",
        gpu_resources=(NamedResource("*A100*", "nvidia.com/a100"),),
        mig_resources=(NamedResource("1g.10gb", "nvidia.com/mig-small"),),
        features=("NVIDIA_GDRCOPY", "NVIDIA_GDS"),
        imex_channel_ids=(0,),
        gfd_output_file="/etc/kubernetes/node-feature-discovery/features.d/gfd",
        mps_root="/run/nvidia/mps",
        notes=config.notes,
    )
    # one note per key without effect here, naming it and why
    assert [n.split(":")[0] for n in config.notes] == list(NO_EFFECT)
    assert all("has no effect here: " in n and "\n" not in n for n in config.notes)


@pytest.mark.parametrize(
    "name", ["sample.yaml", "time-slicing.yaml", "config0.yaml", "config1.yaml"]
)
def test_nvidias_examples_load(name: str) -> None:
    config = load_config(str(DATA / name))
    assert config.notes == ()
    if name == "time-slicing.yaml":
        assert config.time_slicing == (TimeSlicedResource("nvidia.com/gpu", 10),)
    if name == "config1.yaml":
        assert config.mig_strategy == "mixed"


def test_nvidias_mps_example_loads_with_its_mps_root() -> None:
    from nvhook.deviceplugin.config import environment_overrides

    path = str(DATA / "mps.yaml")
    with pytest.raises(PluginConfigError) as e:  # NVIDIA's rule: MPS needs --mps-root
        load_config(path)
    assert e.value.message.startswith(f"{path}: sharing.mps: needs flags.mpsRoot (or $MPS_ROOT)")
    config = load_config(path, overrides=environment_overrides({"MPS_ROOT": "/run/nvidia/mps"}))
    assert config.sharing_strategy == "mps" and config.mps_root == "/run/nvidia/mps"
    assert config.time_slicing == (TimeSlicedResource("nvidia.com/gpu", 10),)
    assert config.fail_requests_greater_than_one  # MPS's default (api/config/v1/config.go)
    with pytest.raises(PluginConfigError, match="MPS cannot share MIG devices"):
        load_config(
            path,
            overrides=environment_overrides({"MPS_ROOT": "/m", "MIG_STRATEGY": "mixed"}),
        )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"flags": {"deviceDiscoveryStrategy": "tegra"}}, "flags.deviceDiscoveryStrategy: tegra"),
        ({"flags": {"plugin": {"deviceIDStrategy": "serial"}}},
         "flags.plugin.deviceIDStrategy: input should be 'uuid' or 'index' (got 'serial')"),
        ({"resources": {"gpus": [{"pattern": "*", "name": "A100"}]}},
         "resources.gpus[0].name: nvidia.com/A100 is not a resource name"),
        ({"resources": {"gpus": [{"name": "a100"}]}}, "resources.gpus[0].pattern: field required"),
        ({"sharing": {"timeSlicing": {"resources": [
            {"name": "gpu", "replicas": 2, "devices": ["GPU-x"]}]}}},
         "sharing.timeSlicing.resources[0].devices: 'GPU-x' is not a device"),
        ({"imex": {"channelIDs": [1]}}, "imex.channelIDs: should be [] or [0] (got [1])"),
    ],
)  # fmt: skip
def test_unsafe_values_are_errors_naming_the_key_path(data: object, message: str) -> None:
    with pytest.raises(PluginConfigError) as e:
        parse_config(data, source="f.yaml")
    assert e.value.message.startswith(f"f.yaml: {message}"), e.value.message


def test_names_get_nvidias_prefix() -> None:
    config = parse_config(
        {"sharing": {"timeSlicing": {"resources": [{"name": "gpu", "replicas": 2}]}}}
    )
    assert config.time_slicing == (TimeSlicedResource("nvidia.com/gpu", 2),)


# ----------------------------------------------------------------------------- renaming


def l40s(index: int) -> GpuInfo:
    g = gpu(index)
    return GpuInfo(**{**{f: getattr(g, f) for f in GpuInfo.__match_args__}, "name": "NVIDIA L40S"})


def test_resources_patterns_rename_gpus_and_mig_devices() -> None:
    gpus = [gpu(0, mig=("1g.10gb", "3g.40gb")), gpu(1), l40s(2)]
    config = PluginConfig(
        mig_strategy="mixed",
        gpu_resources=(
            NamedResource("*L40S", "nvidia.com/l40s"),
            NamedResource("*A100*", "nvidia.com/a100"),
        ),
        mig_resources=(NamedResource("1g.*", "nvidia.com/mig-small"),),
    )
    got = {r.name: [d.id for d in r.devices] for r in build_resources(gpus, config)}
    assert got == {
        "nvidia.com/a100": ["GPU-1"],
        "nvidia.com/l40s": ["GPU-2"],
        "nvidia.com/mig-3g.40gb": ["MIG-0-1"],  # no pattern: the mixed strategy's default
        "nvidia.com/mig-small": ["MIG-0-0"],
    }
    # a pattern matches the whole name: "A100" alone matches nothing, the default applies
    unmatched = PluginConfig(gpu_resources=(NamedResource("A100", "nvidia.com/a100"),))
    assert [r.name for r in build_resources([gpu(1)], unmatched)] == ["nvidia.com/gpu"]


def test_time_sliced_devices_pick_which_are_replicated() -> None:
    gpus = [gpu(0), gpu(1), gpu(2)]
    shared = TimeSlicedResource(
        "nvidia.com/gpu", 2, "nvidia.com/gpu.shared", devices=("0", "GPU-2")
    )
    listed = PluginConfig(time_slicing=(shared,))
    got = {r.name: [d.id for d in r.devices] for r in build_resources(gpus, listed)}
    assert got == {
        "nvidia.com/gpu": ["GPU-1"],
        "nvidia.com/gpu.shared": ["GPU-0::0", "GPU-0::1", "GPU-2::0", "GPU-2::1"],
    }
    counted = PluginConfig(time_slicing=(TimeSlicedResource("nvidia.com/gpu", 2, count=1),))
    [r] = build_resources(gpus, counted)
    assert [d.id for d in r.devices] == ["GPU-0::0", "GPU-0::1", "GPU-1", "GPU-2"]
    with pytest.raises(StrategyError, match=r"devices: 5 is not a device of nvidia.com/gpu"):
        missing = TimeSlicedResource("nvidia.com/gpu", 2, devices=("5",))
        build_resources(gpus, PluginConfig(time_slicing=(missing,)))


# ----------------------------------------------------------------------------- id strategy


def test_index_strategy_names_what_cdi_generate_names(tmp_path: Path) -> None:
    """Every CDI name an allocation gives, under either strategy, is a device of the spec
    ``nvhook cdi generate`` writes for the same machine."""
    from nvhook.deviceplugin.plugin import read_gpus
    from nvhook.mock import create
    from nvhook.planner import Host

    root = tmp_path / "root"
    create("dgx-a100", root, nodes="file")
    spec = tmp_path / "nvidia.json"
    assert main(["cdi", "generate", "--root", str(root), "--output", str(spec)]) == 0
    names = {f"nvidia.com/gpu={d['name']}" for d in json.loads(spec.read_text())["devices"]}
    gpus = read_gpus(Host(root=str(root)))
    for strategy in ("uuid", "index"):
        config = PluginConfig(
            mig_strategy="mixed", device_list_strategies=("cdi-cri",), device_id_strategy=strategy
        )
        for r in build_resources(gpus, config):
            a = allocate(r, [d.id for d in r.devices], config)
            assert set(a.cdi_devices) <= names, (strategy, set(a.cdi_devices) - names)
    config = PluginConfig(mig_strategy="mixed", device_id_strategy="index")
    mig = next(r for r in build_resources(gpus, config) if r.name == "nvidia.com/mig-2g.20gb")
    assert dict(allocate(mig, [mig.devices[1].id], config).envs) == {
        "NVIDIA_VISIBLE_DEVICES": "0:2"
    }


# ----------------------------------------------------------------------------- CLI


def test_environment_and_flags_override_the_file_as_nvidias_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("version: v1\nflags:\n  migStrategy: none\n")
    monkeypatch.setenv("MIG_STRATEGY", "mixed")
    monkeypatch.setenv("DEVICE_ID_STRATEGY", "index")
    monkeypatch.setenv("DEVICE_LIST_STRATEGY", "envvar,cdi-cri")
    argv = ["device-plugin", "--check-config", str(path), "--node", "dgx-a100"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "nvidia.com/mig-3g.40gb: 1 device IDs" in out  # mixed from $MIG_STRATEGY
    assert "container sees 0:0" in out  # index from $DEVICE_ID_STRATEGY
    assert main([*argv, "--mig-strategy", "none", "--device-id-strategy=uuid"]) == 0
    out = capsys.readouterr().out
    assert "mig-3g.40gb" not in out and "container sees GPU-" in out  # the flags win
    monkeypatch.setenv("PASS_DEVICE_SPECS", "maybe")
    assert main(["device-plugin", "--check-config", str(path)]) == 8
    assert (
        "flags.plugin.passDeviceSpecs (from $PASS_DEVICE_SPECS): input should be a valid boolean"
        in capsys.readouterr().err
    )
    monkeypatch.delenv("PASS_DEVICE_SPECS")
    monkeypatch.setenv("CONFIG_FILE", str(DATA / "mps.yaml"))  # read when --config is not given
    assert main(["device-plugin", "--check-config", str(path), "--cdi-feature-flags", "x"]) == 0
    assert "warning: --cdi-feature-flags ($CDI_FEATURE_FLAGS): set, but has no effect" in (
        capsys.readouterr().out
    )


CHECK_H100 = """\
{path}: valid device plugin configuration
warning: flags.plugin.nvidiaCTKPath: set, but has no effect here: the CDI spec is nvhook cdi generate's, its hooks nvhook-hook
on mock h100-pcie, nvhook device-plugin would advertise:
nvidia.com/h100.shared: 3 device IDs, time-sliced: 1 devices x 3 replicas (socket nvhook-nvidia.com_h100.shared.sock)
  GPU-c8c5f2ea-115d-48d0-bcf3-fa2527591762::0  GPU 0 replica 0 NUMA 0  container sees 0
  GPU-c8c5f2ea-115d-48d0-bcf3-fa2527591762::1  GPU 0 replica 1 NUMA 0  container sees 0
  GPU-c8c5f2ea-115d-48d0-bcf3-fa2527591762::2  GPU 0 replica 2 NUMA 0  container sees 0
"""  # noqa: E501


def test_check_config_on_a_node_prints_what_it_would_advertise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "version: v1\nflags:\n  plugin:\n    deviceIDStrategy: index\n"
        "    nvidiaCTKPath: /usr/bin/nvidia-ctk\n"
        "resources:\n  gpus: [{pattern: '*H100*', name: h100}]\n"
        "sharing:\n  timeSlicing:\n    renameByDefault: true\n"
        "    resources: [{name: h100, replicas: 3}]\n"
    )
    assert main(["device-plugin", "--check-config", str(path), "--node", "h100-pcie"]) == 0
    assert capsys.readouterr().out == CHECK_H100.format(path=path)
    # no driver: exit 6 by default; with failOnInitError false, nothing served and up
    assert main(["device-plugin", "--check-config", str(path), "--node", "no-gpu"]) == 6
    assert "Driver Not Loaded" in capsys.readouterr().err
    argv = ["device-plugin", "--check-config", str(path), "--node", "no-gpu"]
    assert main([*argv, "--fail-on-init-error=false"]) == 0
    assert "failOnInitError is false: the plugin would serve nothing and stay up" in (
        capsys.readouterr().out
    )
