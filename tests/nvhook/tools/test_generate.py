"""nvhook.tools.generate: one CDI spec for the host, checked against the mock profiles."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvhook.create import decide_spec
from nvhook.discover.hooks import validate_injected_hook
from nvhook.discover.nodes import with_host_access
from nvhook.errors import DriverError, RequestError
from nvhook.mock import compiled, list_profiles, load_profile
from nvhook.mock.model import mig_caps_minor
from nvhook.planner import Host
from nvhook.settings import Settings, defaults
from nvhook.tools.generate import DEFAULT_CAPABILITIES, device_names, generate_spec
from oci.cdi.apply import apply
from oci.cdi.decode import decode_spec
from oci.cdi.edits import Edits
from oci.cdi.parse import parse_spec
from oci.cdi.validate import validate_data
from oci.cdi.write import dump_spec, write_spec
from oci.errors import CdiNameError

LOADED = [p for p in list_profiles() if load_profile(p).driver.loaded]
#: Loaded profiles whose NVML loads here (not gh200's aarch64 objects on x86-64).
NVML_HERE = [p for p in LOADED if compiled(load_profile(p))]
SPECS = Path(__file__).parents[2] / "data" / "specs"


@pytest.fixture
def host(mock_machine: Callable[..., Path]) -> Callable[[str], Host]:
    return lambda profile: Host(root=str(mock_machine(profile)))


def _nodes(edits: Any) -> list[tuple[str, int, int]]:
    return [(n.path, n.major, n.minor) for n in edits.device_nodes]


@pytest.mark.parametrize("profile", LOADED)
def test_spec_is_valid_deterministic_and_at_version_050(
    profile: str, host: Callable[[str], Host]
) -> None:
    generated = generate_spec(host(profile))
    for fmt in ("yaml", "json"):
        data = dump_spec(generated.spec, format=fmt)
        # a second discovery of the same host gives the same bytes
        assert dump_spec(generate_spec(host(profile)).spec, format=fmt) == data
        raw = decode_spec(data, suffix=f".{fmt}")
        assert isinstance(raw, dict)
        assert raw["cdiVersion"] == "0.5.0"
        assert "annotations" not in raw
        problems = validate_data(raw, source=f"{profile}.{fmt}", strict=True)
        assert [str(p) for p in problems] == []
        parse_spec(raw, source=profile)  # the registry's own parser accepts it


@pytest.mark.parametrize("profile", LOADED)
def test_every_gpu_and_mig_device_by_index_and_uuid_then_all(
    profile: str, host: Callable[[str], Host]
) -> None:
    prof = load_profile(profile)
    generated = generate_spec(host(profile))
    expected: list[str] = []
    for gpu in prof.gpus:
        expected += [str(gpu.index), gpu.uuid]
        for mig in gpu.mig_devices:
            expected += [f"{gpu.index}:{mig.index}", mig.uuid]
    expected.append("all")
    names = [d.name for d in generated.spec.devices]
    assert names == expected
    assert device_names(generated.gpus) == expected
    assert generated.spec.kind == "nvidia.com/gpu"


@pytest.mark.parametrize("profile", LOADED)
def test_device_edits_are_the_device_nodes_by_minor(
    profile: str, host: Callable[[str], Host]
) -> None:
    prof = load_profile(profile)
    generated = generate_spec(host(profile), capabilities=["compute", "utility"])
    spec = generated.spec
    caps_major = prof.major("nvidia-caps")
    for gpu in prof.gpus:
        node = (f"/dev/nvidia{gpu.minor}", 195, gpu.minor)
        for name in (str(gpu.index), gpu.uuid):
            device = spec.device(name)
            assert device is not None
            assert _nodes(device.edits) == [node]
            assert not (device.edits.mounts or device.edits.hooks)
            # only the GPU's presence, which the create checks (nvhook.devices.miglayout)
            assert [e.partition("=")[0] for e in device.edits.env] == [f"NVHOOK_GPU_{gpu.minor}"]
        for mig in gpu.mig_devices:
            gi = mig_caps_minor(gpu.minor, mig.gi)
            ci = mig_caps_minor(gpu.minor, mig.gi, mig.ci)
            assert (mig.gi_caps_minor, mig.ci_caps_minor) == (gi, ci)
            for name in (f"{gpu.index}:{mig.index}", mig.uuid):
                device = spec.device(name)
                assert device is not None
                assert _nodes(device.edits) == [
                    node,
                    (f"/dev/nvidia-caps/nvidia-cap{gi}", caps_major, gi),
                    (f"/dev/nvidia-caps/nvidia-cap{ci}", caps_major, ci),
                ]
    everything = spec.device("all")
    assert everything is not None
    expected_all = []  # every GPU, then the access nodes of each of its MIG devices
    for gpu in prof.gpus:
        expected_all.append((f"/dev/nvidia{gpu.minor}", 195, gpu.minor))
        for mig in gpu.mig_devices:
            expected_all += [
                (f"/dev/nvidia-caps/nvidia-cap{m}", caps_major, m)
                for m in (mig.gi_caps_minor, mig.ci_caps_minor)
            ]
    assert _nodes(everything.edits) == list(dict.fromkeys(expected_all))


def test_l40s_index_is_not_the_minor(host: Callable[[str], Host]) -> None:
    spec = generate_spec(host("l40s-x4"), capabilities=["utility"]).spec
    device = spec.device("3")
    assert device is not None
    assert _nodes(device.edits) == [("/dev/nvidia0", 195, 0)]


def test_spec_edits_hold_control_nodes_driver_files_and_valid_hooks(
    host: Callable[[str], Host], mock_machine: Callable[..., Path]
) -> None:
    root = mock_machine("dgx-a100")
    edits = generate_spec(host("dgx-a100")).spec.edits
    assert [p for p, _, _ in _nodes(edits)] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
    ]
    assert all(n.host_path == f"{root}{n.path}" for n in edits.device_nodes)
    destinations = {m.container_path for m in edits.mounts}
    # a few of every capability's files
    assert {
        "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
        "/usr/bin/nvidia-smi",
        "/usr/lib/x86_64-linux-gnu/libnvcuvid.so.550.54.15",
        "/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.550.54.15",
        "/usr/lib/x86_64-linux-gnu/libnvidia-ngx.so.550.54.15",
    } <= destinations
    assert not any("/i386-linux-gnu/" in d for d in destinations)  # compat32: only when asked
    assert all(m.host_path == f"{root}{m.container_path}" for m in edits.mounts)
    assert [h.args[1] for h in edits.hooks] == ["create-container"]
    for hook in edits.hooks:
        validate_injected_hook(hook)  # absolute launcher that exists, -I, fixed env


def test_capabilities_narrow_the_mounts_and_the_dri_nodes(host: Callable[[str], Host]) -> None:
    narrow = generate_spec(host("l40s-x4"), capabilities=["utility"])
    assert narrow.capabilities == ("utility",)
    destinations = {m.container_path for m in narrow.spec.edits.mounts}
    assert "/usr/bin/nvidia-smi" in destinations
    assert not any("libcuda" in d or "GLX" in d for d in destinations)
    device = narrow.spec.device("0")
    assert device is not None
    assert [p for p, _, _ in _nodes(device.edits)] == ["/dev/nvidia1"]
    graphics = generate_spec(host("l40s-x4"), capabilities=["graphics"]).spec.device("0")
    assert graphics is not None
    # GPU 0 (bus 01:00.0) has card2 and renderD129, matched by bus id
    assert _nodes(graphics.edits) == [
        ("/dev/nvidia1", 195, 1),
        ("/dev/dri/card2", 226, 2),
        ("/dev/dri/renderD129", 226, 129),
    ]


@pytest.mark.parametrize("asked", [["compute", "compat32"], ["all"]])
def test_compat32_mounts_32_bit_libraries_only_when_asked(
    host: Callable[[str], Host], asked: list[str]
) -> None:
    default = generate_spec(host("dgx-a100"))
    assert default.capabilities == DEFAULT_CAPABILITIES
    assert "compat32" not in default.capabilities
    with32 = generate_spec(host("dgx-a100"), capabilities=asked)
    assert "compat32" in with32.capabilities
    lib32 = {
        m.container_path for m in with32.spec.edits.mounts if "/i386-linux-gnu/" in m.container_path
    }
    assert "/usr/lib/i386-linux-gnu/libcuda.so.550.54.15" in lib32
    (hook,) = with32.spec.edits.hooks
    assert "/usr/lib/i386-linux-gnu" in hook.args


def test_vendor_and_class_make_the_kind(host: Callable[[str], Host]) -> None:
    spec = generate_spec(host("h100-pcie"), vendor="example.com", class_name="accel").spec
    assert spec.kind == "example.com/accel"


def test_errors_are_one_line(host: Callable[[str], Host]) -> None:
    with pytest.raises(DriverError, match=r"kernel module is not loaded: .*/proc/driver/nvidia"):
        generate_spec(host("no-gpu"))
    with pytest.raises(CdiNameError, match=r"kind '-bad/gpu': invalid vendor"):
        generate_spec(host("h100-pcie"), vendor="-bad")
    with pytest.raises(RequestError, match="unknown capability 'tensor'"):
        generate_spec(host("h100-pcie"), capabilities=["tensor"])


def test_written_atomically_with_mode_0644(host: Callable[[str], Host], tmp_path: Path) -> None:
    spec = generate_spec(host("h100-pcie")).spec
    target = tmp_path / "cdi" / "nvidia.yaml"
    old = os.umask(0o077)
    try:
        write_spec(target, spec)
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert target.read_bytes() == dump_spec(spec, format="yaml")
    assert sorted(p.name for p in target.parent.iterdir()) == ["nvidia.yaml"]


def _settings(root: Path, mode: str, spec_dir: Path | None = None) -> Settings:
    settings = defaults()._replace(host_root=str(root), runtime_mode=mode)
    if spec_dir is not None:
        settings = settings._replace(cdi_spec_dirs=(str(spec_dir),))
    return settings


def _mode_and_edits(spec: dict[str, Any], settings: Settings) -> tuple[str | None, Edits]:
    decision = decide_spec(spec, settings)
    assert decision.error is None and decision.edits is not None, decision.error
    return decision.mode, decision.edits


@pytest.mark.parametrize(
    ("profile", "visible"),
    [
        ("dgx-a100", "2"),
        ("dgx-a100", "GPU-086c745f-81ed-45b1-b563-f27bba6d7561"),
        ("dgx-a100", "0:1"),
        ("dgx-a100", "MIG-876d730c-2610-4349-abee-3967c5a8e3c8"),
        ("dgx-a100", "all"),
        ("l40s-x4", "3"),
        ("l40s-x4", "all"),
        ("gb200-imex", "1"),
    ],
)
def test_cdi_mode_with_the_generated_spec_equals_jit(
    profile: str, visible: str, mock_machine: Callable[..., Path], tmp_path: Path
) -> None:
    """The same container gets the same config.json through the spec as through discovery,
    the nodes' host access (fileMode, and uid/gid where restricted) included."""
    root = mock_machine(profile)
    write_spec(tmp_path / "nvidia.json", generate_spec(Host(root=str(root))).spec)
    base = json.loads((SPECS / "runc-spec.json").read_text())
    base["process"]["env"] += [
        f"NVIDIA_VISIBLE_DEVICES={visible}",
        f"NVIDIA_DRIVER_CAPABILITIES={','.join(DEFAULT_CAPABILITIES)}",  # the spec's default
    ]
    jit_mode, jit_edits = _mode_and_edits(base, _settings(root, "jit"))
    cdi_mode, cdi_edits = _mode_and_edits(base, _settings(root, "cdi", tmp_path))
    assert (jit_mode, cdi_mode) == ("jit", "cdi")
    assert apply(cdi_edits, base) == apply(jit_edits, base)
    assert all(node.file_mode is not None for node in jit_edits.device_nodes)


def test_multi_device_request_same_nodes_as_jit(
    mock_machine: Callable[..., Path], tmp_path: Path
) -> None:
    """Several devices: the same nodes and rules; only their order differs (per device)."""
    root = mock_machine("l40s-x4")
    base = json.loads((SPECS / "runc-spec.json").read_text())
    write_spec(
        tmp_path / "nvidia.json", generate_spec(Host(root=str(root)), capabilities=["all"]).spec
    )
    base["process"]["env"] += ["NVIDIA_VISIBLE_DEVICES=2,0", "NVIDIA_DRIVER_CAPABILITIES=all"]
    jit = apply(with_host_access(_mode_and_edits(base, _settings(root, "jit"))[1]), base)
    cdi = apply(_mode_and_edits(base, _settings(root, "cdi", tmp_path))[1], base)
    key = json.dumps
    for field in ("devices", "resources"):
        a, b = jit["linux"][field], cdi["linux"][field]
        if field == "resources":
            a, b = a["devices"], b["devices"]
        assert sorted(map(key, a)) == sorted(map(key, b))
    assert jit["mounts"] == cdi["mounts"] and jit["hooks"] == cdi["hooks"]


def _all_nodes(spec: Any) -> list[Any]:
    nodes = list(spec.edits.device_nodes)
    for device in spec.devices:
        nodes += device.edits.device_nodes
    return nodes


def test_nodes_record_the_host_access(make_mock_machine: Callable[..., Path]) -> None:
    """Every node carries the host node's permission bits; a node only its owner or group
    may open also carries the host's owner and group (without them a CDI consumer would
    create it for the container's user); the version stays 0.5.0."""
    root = make_mock_machine("l40s-x4")
    (root / "dev/nvidia1").chmod(0o640)  # NVreg_DeviceFileMode=0640, say
    spec = generate_spec(Host(root=str(root)), capabilities=["utility", "graphics"]).spec
    nodes = _all_nodes(spec)
    assert {n.path for n in nodes} >= {"/dev/nvidiactl", "/dev/nvidia1", "/dev/dri/card1"}
    for node in nodes:
        st = os.stat(node.host_path)
        assert node.file_mode == stat.S_IMODE(st.st_mode), node.path
        if node.path in ("/dev/nvidia1",) or node.path.startswith("/dev/dri/card"):
            assert (node.uid, node.gid) == (st.st_uid, st.st_gid), node.path
        else:  # world-accessible as far as its owner and group are: no owner recorded
            assert (node.uid, node.gid) == (None, None), node.path
    assert json.loads(dump_spec(spec, format="json"))["cdiVersion"] == "0.5.0"


@pytest.mark.root
def test_a_group_restricted_node_keeps_its_group(make_mock_machine: Callable[..., Path]) -> None:
    """The mock's DRM cards are ``crw-rw---- root video`` (gid 44) when laid out as root:
    applied, the container's node is of group 44 with mode 0660, not the process's."""
    from tests.support.containers import require_root

    require_root()
    root = make_mock_machine("l40s-x4")
    spec = generate_spec(Host(root=str(root)), capabilities=["graphics"]).spec
    card = next(n for n in _all_nodes(spec) if n.path.startswith("/dev/dri/card"))
    assert (card.file_mode, card.uid, card.gid) == (0o660, 0, 44)
    base = {"process": {"user": {"uid": 1000, "gid": 1000}}}
    device = apply(Edits(device_nodes=(card,)), base)["linux"]["devices"][0]
    assert (device["fileMode"], device["uid"], device["gid"]) == (0o660, 0, 44)


@pytest.mark.root
def test_a_group_restricted_driver_gives_its_group_to_the_process(tmp_path: Path) -> None:
    """A driver whose nodes are ``root:video 0660`` (``NVreg_DeviceFileGID=44``): the spec
    adds group 44 to the container's process (``additionalGids``, CDI 0.7.0), so a user other
    than root in the container opens the nodes; the default driver's spec stays at 0.5.0."""
    from nvhook.mock import create
    from tests.support.containers import require_root

    require_root()
    create("l40s-x4", tmp_path / "video", device_file_gid=44, device_file_mode=0o660)
    restricted = generate_spec(Host(root=str(tmp_path / "video"))).spec
    assert restricted.edits.additional_gids == (44,)
    assert all(d.edits.additional_gids == () for d in restricted.devices)
    raw = json.loads(dump_spec(restricted, format="json"))
    assert (raw["cdiVersion"], raw["containerEdits"]["additionalGids"]) == ("0.7.0", [44])
    base = {"process": {"user": {"uid": 1000, "gid": 1000}}}
    applied = apply(restricted.edits, base)
    assert applied["process"]["user"]["additionalGids"] == [44]
    ctl = next(d for d in applied["linux"]["devices"] if d["path"] == "/dev/nvidiactl")
    assert (ctl["fileMode"], ctl["gid"]) == (0o660, 44)
    # jit mode gives the process the same group (the planner makes both modes' edits)
    from nvhook.planner import plan
    from nvhook.requests.ids import Devices, Index, Requests

    asked = Requests(Devices((Index(1),)), capabilities=("compute",))
    jit = plan(asked, Host(root=str(tmp_path / "video")))
    assert jit.edits.additional_gids == (44,)
    # the default driver (0666) and a DRM card's video group alone add no group
    create("l40s-x4", tmp_path / "plain")
    plain = generate_spec(Host(root=str(tmp_path / "plain")), capabilities=["graphics"]).spec
    assert any(n.gid == 44 for n in _all_nodes(plain))  # the DRM cards
    assert plain.edits.additional_gids == ()
    assert json.loads(dump_spec(plain, format="json"))["cdiVersion"] == "0.5.0"


def _kinds_nodes(spec: Any) -> dict[str, list[tuple[str, int, int]]]:
    return {d.name: _nodes(d.edits) for d in spec.devices}


@pytest.mark.root
def test_gds_mofed_gdrcopy_kinds_are_the_nodes_jit_injects(
    make_mock_machine: Callable[..., Path],
) -> None:
    """Each feature kind is ``<vendor>/<kind>=all`` with the host's nodes as they are
    (``lstat``: their majors are dynamic), no spec-level edits, version 0.5.0."""
    root = make_mock_machine("h100-pcie")
    for path, major, minor in (
        ("dev/nvidia-fs0", 240, 0),
        ("dev/nvidia-fs1", 240, 1),
        ("dev/gdrdrv", 241, 0),
        ("dev/infiniband/uverbs0", 231, 192),
        ("dev/infiniband/rdma_cm", 10, 58),
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        os.mknod(root / path, 0o20666, os.makedev(major, minor))
    (root / "dev/infiniband/not-a-node").write_text("")
    host = Host(root=str(root))
    expected = {
        "gds": [("/dev/nvidia-fs0", 240, 0), ("/dev/nvidia-fs1", 240, 1)],
        "gdrcopy": [("/dev/gdrdrv", 241, 0)],
        "mofed": [("/dev/infiniband/rdma_cm", 10, 58), ("/dev/infiniband/uverbs0", 231, 192)],
    }
    for kind, nodes in expected.items():
        spec = generate_spec(host, kind=kind).spec
        assert spec.kind == f"nvidia.com/{kind}"
        assert _kinds_nodes(spec) == {"all": nodes}
        assert spec.edits == Edits()
        assert json.loads(dump_spec(spec, format="json"))["cdiVersion"] == "0.5.0"


def test_a_kind_the_host_lacks_is_an_error(host: Callable[[str], Host]) -> None:
    for kind, what in (
        ("imex-channel", "IMEX channel"),
        ("nvswitch", "NVSwitch node"),
        ("gds", "GPUDirect Storage node"),
        ("mofed", "MOFED/InfiniBand node"),
        ("gdrcopy", "GDRCopy node"),
    ):
        with pytest.raises(DriverError, match=f"the host has no {what}.*nothing to generate"):
            generate_spec(host("h100-pcie"), kind=kind)


def test_choices_that_do_not_apply_to_the_kind(host: Callable[[str], Host]) -> None:
    h = host("gb200-imex")
    with pytest.raises(RequestError, match="unknown kind 'fpga'"):
        generate_spec(h, kind="fpga")
    with pytest.raises(RequestError, match="name strategies apply to kind gpu only"):
        generate_spec(h, kind="imex-channel", name_strategies=["index"])
    with pytest.raises(RequestError, match="its only device is all"):
        generate_spec(h, kind="management", all_device=False)
    with pytest.raises(RequestError, match="capabilities apply to kinds gpu and management"):
        generate_spec(h, kind="imex-channel", capabilities=["utility"])
    with pytest.raises(RequestError, match="unknown device name strategy 'serial'"):
        generate_spec(h, name_strategies=["serial"])
    with pytest.raises(RequestError, match="no device name strategy"):
        generate_spec(h, name_strategies=[])


@pytest.mark.parametrize("profile", LOADED)
def test_name_strategies_follow_one_order_and_device_names_agree(
    profile: str, host: Callable[[str], Host]
) -> None:
    every = ("type-index", "uuid", "index")  # given in any order, written in NAME_STRATEGIES'
    generated = generate_spec(host(profile), name_strategies=every, capabilities=["utility"])
    names = [d.name for d in generated.spec.devices]
    assert names == device_names(generated.gpus, every)
    prof = load_profile(profile)
    first = prof.gpus[0]
    assert names[:3] == [str(first.index), first.uuid, f"gpu{first.index}"]
    assert set(names) >= {f"mig{g.index}:{m.index}" for g in prof.gpus for m in g.mig_devices}
    without_all = generate_spec(host(profile), name_strategies=every, all_device=False)
    assert [d.name for d in without_all.spec.devices] == names[:-1]


@pytest.mark.parametrize("profile", NVML_HERE)
def test_procfs_view_gives_the_nvml_spec(profile: str, mock_machine: Callable[..., Path]) -> None:
    """Without MIG UUIDs to name, generate reads /proc instead of loading NVML: the spec is
    the same bytes as through NVML (a profile with MIG devices asks NVML for their UUIDs,
    through nvml_mig_view: the view is nvml_view's)."""
    root = str(mock_machine(profile))
    has_migs = any(g.mig_devices for g in load_profile(profile).gpus)
    for strategies in (None, ("index", "type-index")):
        by_default = generate_spec(Host(root=root), name_strategies=strategies)
        by_nvml = generate_spec(Host(root=root, resolver="nvml"), name_strategies=strategies)
        assert by_nvml.gpus.source == "nvml"
        if has_migs and strategies is None:  # NVML's view without pynvml
            assert by_default.gpus == by_nvml.gpus
        assert dump_spec(by_default.spec, format="json") == dump_spec(by_nvml.spec, format="json")
    assert generate_spec(Host(root=root)).gpus.source == ("nvml" if has_migs else "procfs")
    assert generate_spec(Host(root=root), name_strategies=["index"]).gpus.source == "procfs"


def test_management_has_every_node_in_one_device(host: Callable[[str], Host]) -> None:
    gb200 = generate_spec(host("gb200-imex"), kind="management", capabilities=["utility"])
    spec = gb200.spec
    assert spec.kind == "management.nvidia.com/gpu"
    assert [d.name for d in spec.devices] == ["all"]
    paths = [p for p, _, _ in _nodes(spec.devices[0].edits)]
    assert "/dev/nvidia-caps-imex-channels/channel0" in paths
    assert "/dev/nvidia-caps/nvidia-cap1" in paths  # MIG configuration, for nvidia-smi mig
    assert all(f"/dev/nvidia{g.minor}" in paths for g in load_profile("gb200-imex").gpus)
    gpu = generate_spec(host("gb200-imex"), capabilities=["utility"]).spec
    assert spec.edits == gpu.edits  # the same control nodes, driver files and hooks
