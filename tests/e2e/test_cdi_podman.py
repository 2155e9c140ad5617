"""A real CDI client (podman 4.3) with specs from ``nvhook cdi generate``, and parity with
``nvhook cdi inject``.

1. On the ``dgx-a100`` mock laid out as root (real ``c 195:N`` nodes), the spec that
   ``nvhook cdi generate`` writes into /var/run/cdi (a vendor of its own per test:
   /var/run/cdi is shared by concurrent test processes; removed afterwards) lets
   ``podman run --device <vendor>/gpu=0`` start a busybox container in which the mock
   ``nvidia-smi -L`` lists GPU 0 only, ``/dev/nvidia1`` is absent and the driver's
   libraries (with the links the hook makes) are present; ``<vendor>/gpu=all`` lists all
   eight GPUs and the MIG devices of the MIG-mode ones.
2. For a handful of CDI specs (cdiVersion <= 0.5.0: three requests on the generated spec
   and a hand-made one with env, a stat-ed node, typed and nested mounts and a hook),
   podman's own CDI injection (captured through the harness's ``CaptureRuntime``) and
   ``nvhook cdi inject`` on the config.json podman makes without the device give the same
   device nodes, cgroup rules and hooks, in the same order, and the same mounts. podman 4.3
   vendors container-orchestrated-devices/container-device-interface v0.5.x, whose
   ``ContainerEdits.Apply`` differs from the reference semantics we follow (docs/architecture.md D2)
   in two ways, both checked here:

   - env: it appends every injected entry (``AddMultipleProcessEnv`` on a generator made
     by ``NewFromSpec``), so a name the image already sets appears twice, the image's entry
     first; we replace the image's entry in place (D2, deliberate);
   - device nodes: a node it completes from the host (no type, or major 0) gets no
     ``fileMode``; the reference library's ``fillMissingInfo`` (and we) give it the host
     node's permission bits. Generated specs record every node's ``fileMode``, so the
     difference shows only with the hand-made spec's stat-ed node;
   - mounts: it sorts the whole list with ``sort.Sort`` and ``Less`` = fewer path
     components first, then the destination in byte order: a total order, so podman's list
     is exactly ours sorted by (depth, destination). We stable-sort by depth only, which
     keeps the runtime's own order among mounts of equal depth (``/proc`` before ``/dev``),
     as the reference 1.x library does; for every spec here the two orders differ.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nvhook.discover.hooks import validate_injected_hook
from nvhook.mock import load_profile
from oci.cdi.apply import mount_depth
from oci.cdi.inject import inject
from tests.support.containers import CaptureRuntime, Podman, cdi_spec, unique_id

pytestmark = [pytest.mark.runtime, pytest.mark.root]

NVHOOK = str(Path(sys.executable).parent / "nvhook")
LIB = "/usr/lib/x86_64-linux-gnu"
#: podman needs no network, and runc (not crun: docs/facts.md)
OPTIONS = ["--network", "none"]


@pytest.fixture(scope="module")
def dgx_root(mock_machine: Callable[..., Path]) -> Path:
    return mock_machine("dgx-a100", as_root_nodes=True)


def _vendor() -> str:
    return unique_id("nvhook-test").replace("-", "") + ".com"


def _generate(root: Path, vendor: str) -> str:
    """``nvhook cdi generate`` as a user runs it: the JSON text of the spec."""
    argv = [NVHOOK, "cdi", "generate", "--root", str(root), "--vendor", vendor]
    argv += ["--format", "json", "--output", "-"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def dgx_spec(dgx_root: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The generated spec of the mock, installed in /var/run/cdi under a vendor of its own."""
    vendor = _vendor()
    text = _generate(dgx_root, vendor)
    with cdi_spec(text, vendor):
        yield vendor, json.loads(text)


def _smi_gpus(output: str) -> list[str]:
    return [line.split("(UUID: ")[1].rstrip(")") for line in output.splitlines() if "GPU " in line]


PROBE = (
    "nvidia-smi -L; echo '--- dev'; ls /dev; echo '--- lib'; "
    f"ls {LIB}; head -c 4 {LIB}/libcuda.so.1 | od -An -c"
)


def test_podman_gpu_0_sees_gpu_0_only(podman: Podman, dgx_spec: tuple[str, Any]) -> None:
    vendor, spec = dgx_spec
    assert spec["cdiVersion"] == "0.5.0"
    # every node records the host node's mode (the mock's are 0666, MIG access nodes 0444)
    nodes = [n for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]]
    nodes += spec["containerEdits"]["deviceNodes"]
    assert {n["fileMode"] for n in nodes} == {0o666, 0o444}
    hooks = spec["containerEdits"]["hooks"]
    assert {h["path"] for h in hooks} == {str(Path(sys.executable).parent / "nvhook-hook")}
    for hook in hooks:
        validate_injected_hook(hook)
    done = podman.run(["sh", "-c", PROBE], devices=[f"{vendor}/gpu=0"], options=OPTIONS)
    assert done.returncode == 0, done.stderr
    smi, _, rest = done.stdout.partition("--- dev\n")
    dev, _, lib = rest.partition("--- lib\n")
    assert _smi_gpus(smi) == ["GPU-ac376f35-2448-4461-a104-b174eb2df7b3"]
    nodes = dev.split()
    assert "nvidia0" in nodes and "nvidiactl" in nodes and "nvidia-uvm" in nodes
    assert "nvidia1" not in nodes
    files = lib.split()
    for name in ("libcuda.so.550.54.15", "libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1"):
        assert name in files, name
    assert "E   L   F" in lib  # libcuda.so.1 (a link the hook made) resolves to the ELF stub


def test_podman_gpu_all_sees_every_gpu_and_mig_device(
    podman: Podman, dgx_spec: tuple[str, Any]
) -> None:
    vendor, _ = dgx_spec
    done = podman.run(["nvidia-smi", "-L"], devices=[f"{vendor}/gpu=all"], options=OPTIONS)
    assert done.returncode == 0, done.stderr
    # GPU 0 is in MIG mode: its MIG devices are listed under it (their access nodes came too)
    lines = done.stdout.splitlines()
    migs = [m.uuid for g in load_profile("dgx-a100").gpus for m in g.mig_devices]
    assert len(migs) == 3
    assert [line.rsplit("(UUID: ", 1)[1].rstrip(")") for line in lines[1:4]] == migs
    assert _smi_gpus(done.stdout) == [
        "GPU-ac376f35-2448-4461-a104-b174eb2df7b3",
        "GPU-91263f39-f322-4b13-abbc-1b055deec8c9",
        "GPU-086c745f-81ed-45b1-b563-f27bba6d7561",
        "GPU-17297365-d66b-40f2-85f4-de7bd1bd8cd3",
        "GPU-1e50f74c-f683-498c-b043-7c772a2ef6c7",
        "GPU-a90113b3-2647-4928-aeb4-a59fd7e34f58",
        "GPU-12cd996a-a806-4623-9406-a97f77030265",
        "GPU-6d5ef7d0-10e3-4787-a26f-7a72b0ba9c98",
    ]


def test_podman_mig_device(podman: Podman, dgx_spec: tuple[str, Any]) -> None:
    vendor, _ = dgx_spec
    done = podman.run(["nvidia-smi", "-L"], devices=[f"{vendor}/gpu=0:1"], options=OPTIONS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-ac376f35-2448-4461-a104-b174eb2df7b3)",
        "  MIG 2g.20gb      Device  0: (UUID: MIG-a1d5c39a-2905-47eb-b305-71fbf59c3472)",
    ]


# --------------------------------------------------------------------------- parity


def _handmade(vendor: str, dgx_root: Path, tmp: Path) -> dict[str, Any]:
    """What the generated spec lacks: env (PATH, which the image sets, and a new name), a node
    whose numbers come from stat(hostPath), mounts at several depths (one typed), a hook."""
    (tmp / "share").mkdir()
    (tmp / "share" / "tool.conf").write_text("x\n")
    return {
        "cdiVersion": "0.5.0",
        "kind": f"{vendor}/thing",
        "containerEdits": {
            "env": ["PATH=/opt/thing/bin:/usr/bin:/bin", "THING_MODE=fast"],
            "mounts": [
                {
                    "hostPath": str(tmp / "share"),
                    "containerPath": "/opt/thing/share",
                    "options": ["ro", "bind"],
                },
                {"hostPath": "tmpfs", "containerPath": "/opt", "type": "tmpfs"},
            ],
            "hooks": [{"hookName": "createContainer", "path": "/bin/true", "args": ["true"]}],
        },
        "devices": [
            {
                "name": "one",
                "containerEdits": {
                    "env": ["THING_DEVICE=one"],
                    "deviceNodes": [
                        {"path": "/dev/thing0", "hostPath": f"{dgx_root}/dev/nvidia-nvswitch0"}
                    ],
                    "mounts": [
                        {
                            "hostPath": str(tmp / "share" / "tool.conf"),
                            "containerPath": "/etc/thing.conf",
                            "options": ["ro", "bind"],
                        }
                    ],
                },
            }
        ],
    }


def _normalized(config: dict[str, Any], container_id: str) -> dict[str, Any]:
    """The config with the per-container id (mount sources, HOSTNAME) written as <id>."""
    text = json.dumps(config).replace(container_id, "<id>").replace(container_id[:12], "<id>")
    value: dict[str, Any] = json.loads(text)
    return value


def _podman_config(podman: Podman, capture: CaptureRuntime, devices: list[str]) -> dict[str, Any]:
    before = set(capture.configs())
    done = podman.run(["true"], runtime=str(capture.path), devices=devices, options=OPTIONS)
    assert done.returncode == 0, done.stderr
    ((container_id, config),) = [(k, v) for k, v in capture.configs().items() if k not in before]
    return _normalized(config, container_id)


def _depth_then_destination(mount: dict[str, Any]) -> tuple[int, str]:
    return mount_depth(mount["destination"]), mount["destination"]


PARITY = {
    "gpu-0": ["gpu=0"],
    "mig-and-uuid": ["gpu=0:1", "gpu=GPU-17297365-d66b-40f2-85f4-de7bd1bd8cd3"],
    "all": ["gpu=all"],
    "handmade": ["thing=one"],
}


@pytest.mark.parametrize("case", list(PARITY))
def test_podman_and_nvhook_inject_agree(
    case: str,
    podman: Podman,
    dgx_root: Path,
    dgx_spec: tuple[str, Any],
    tmp_path: Path,
) -> None:
    vendor, _ = dgx_spec
    capture = CaptureRuntime.create(tmp_path / "capture")
    names = [f"{vendor}/{n}" for n in PARITY[case]]
    handmade = _handmade(vendor, dgx_root, tmp_path) if case == "handmade" else None
    installed = cdi_spec(handmade, f"{vendor}-thing") if handmade else contextlib.nullcontext()
    with installed:
        base = _podman_config(podman, capture, [])
        theirs = _podman_config(podman, capture, names)
        bundle = tmp_path / "bundle"
        bundle.mkdir()
        (bundle / "config.json").write_text(json.dumps(base))
        ours = inject(str(bundle), names, spec_dirs=["/etc/cdi", "/var/run/cdi"]).spec

    # the same nodes, cgroup rules and hooks, in the same order; podman 4.3 gives the node it
    # completes from the host no fileMode, we give it the host node's (the reference's rule)
    stat_ed = {"path": "/dev/thing0", "type": "c", "major": 509, "minor": 0}
    if handmade:
        assert stat_ed in theirs["linux"]["devices"]
        assert {**stat_ed, "fileMode": 0o666} in ours["linux"]["devices"]
        theirs["linux"]["devices"] = [
            {**d, "fileMode": 0o666} if d == stat_ed else d for d in theirs["linux"]["devices"]
        ]
    assert theirs["linux"]["devices"] == ours["linux"]["devices"]
    assert theirs["linux"]["resources"]["devices"] == ours["linux"]["resources"]["devices"]
    assert theirs["hooks"] == ours["hooks"]
    # the same mounts; podman 4.3's CDI sorts them by (depth, destination), we stable-sort
    # by depth only, keeping the runtime's own order among mounts of equal depth
    assert sorted(ours["mounts"], key=_depth_then_destination) == theirs["mounts"]
    depths = [mount_depth(m["destination"]) for m in ours["mounts"]]
    assert depths == sorted(depths)
    base_dests = [m["destination"] for m in base["mounts"]]
    kept = [m["destination"] for m in ours["mounts"] if m["destination"] in base_dests]
    assert kept == sorted(base_dests, key=mount_depth)
    assert theirs["mounts"] != ours["mounts"]  # the difference is real for these specs
    # env: podman orders its own entries differently from run to run, so they compare as sets
    if not handmade:
        assert sorted(theirs["process"]["env"]) == sorted(ours["process"]["env"])
        return
    injected = ["PATH=/opt/thing/bin:/usr/bin:/bin", "THING_MODE=fast", "THING_DEVICE=one"]
    image_env = base["process"]["env"]
    assert sum(e.startswith("PATH=") for e in image_env) == 1
    # podman 4.3 appends every injected entry: PATH is there twice, the image's first
    assert theirs["process"]["env"][-3:] == injected
    assert sorted(theirs["process"]["env"][:-3]) == sorted(image_env)
    # we replace the image's PATH in place (docs/architecture.md D2) and append the new names
    assert (
        ours["process"]["env"]
        == [injected[0] if e.startswith("PATH=") else e for e in image_env] + injected[1:]
    )
    assert {**stat_ed, "fileMode": 0o666} in ours["linux"]["devices"]
