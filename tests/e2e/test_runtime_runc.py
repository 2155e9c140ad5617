"""nvhook-runtime in front of real runc, on the dgx-a100 mock: what the container sees."""

from __future__ import annotations

import json
import random
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nvhook.constants import VERSION
from nvhook.mock import Profile
from nvhook.tools.entrypoints import install_entrypoints
from tests.e2e.conftest import (
    CTL_MINOR,
    ELF_MAGIC,
    LIBCUDA,
    NVIDIA_MAJOR,
    Shim,
    expected_smi_uuids,
    parse_probe,
    start_shim_server,
)
from tests.support.containers import Runc, make_bundle, unique_id

pytestmark = [pytest.mark.root, pytest.mark.runtime]

GpuBundle = Callable[..., Path]


def test_run_two_gpus(shim: Shim, shim_runc: Runc, gpu_bundle: GpuBundle, profile: Profile) -> None:
    bundle = gpu_bundle("b", ["NVIDIA_VISIBLE_DEVICES=0,3"])
    cid = unique_id("two")
    result = shim_runc.run(bundle, cid)
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [0, 3])
    assert probe.smi_rc == 0
    assert probe.gpu_nodes == {"/dev/nvidia0", "/dev/nvidia3"}
    assert probe.nodes["/dev/nvidia3"] == (NVIDIA_MAJOR, 3)
    assert probe.nodes["/dev/nvidiactl"] == (NVIDIA_MAJOR, CTL_MINOR)
    assert probe.env["NVIDIA_VISIBLE_DEVICES"] == "void"  # served: a second injector adds nothing
    assert probe.lib_magic == ELF_MAGIC
    (record,) = shim.log_records(cid)
    assert record["mode"] == "jit" and record["written"] is True


def test_create_start_delete(
    shim: Shim, shim_runc: Runc, gpu_bundle: GpuBundle, profile: Profile
) -> None:
    bundle = gpu_bundle("b", ["NVIDIA_VISIBLE_DEVICES=0,3"])
    cid = shim_runc.create(bundle)
    assert shim_runc.state(cid)["status"] == "created"
    shim_runc.start(cid)
    shim_runc.wait_stopped(cid)
    probe = parse_probe(shim_runc.output(cid))
    assert probe.gpu_uuids == expected_smi_uuids(profile, [0, 3])
    assert probe.gpu_nodes == {"/dev/nvidia0", "/dev/nvidia3"}
    assert "/dev/nvidiactl" in probe.nodes
    assert probe.lib_magic == ELF_MAGIC
    assert shim_runc.delete(cid).returncode == 0
    assert shim_runc.call("list", "-q", check=True).stdout == ""
    assert [r["command"] for r in shim.log_records(cid)] == ["create"]  # the rest passed through


def test_all_gives_every_gpu_and_mig_device(
    shim_runc: Runc, gpu_bundle: GpuBundle, profile: Profile
) -> None:
    """``all``: the eight GPUs and, under the MIG-mode ones, every MIG device (their GPU- and
    compute-instance access nodes are injected), as the mock nvidia-smi sees them inside."""
    result = shim_runc.run(gpu_bundle("b", ["NVIDIA_VISIBLE_DEVICES=all"]))
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, range(8))
    assert probe.gpu_nodes == {f"/dev/nvidia{n}" for n in range(8)}
    migs = [m for g in profile.gpus for m in g.mig_devices]
    assert len(migs) >= 3  # the dgx-a100 mock has MIG devices on GPU 0 at least
    assert probe.mig_uuids == [m.uuid for m in migs]
    assert probe.caps_nodes == {
        f"/dev/nvidia-caps/nvidia-cap{n}" for m in migs for n in (m.gi_caps_minor, m.ci_caps_minor)
    }
    assert probe.lib_magic == ELF_MAGIC


@pytest.mark.parametrize(
    ("request_of", "gpu_instance"),
    [
        (lambda uuid: "0:0", 2),  # MIG device 0 of GPU 0: GPU instance 2 (3g.40gb)
        (lambda uuid: f"MIG-{uuid}/3/0", 3),  # MIG-<GPU uuid>/<gi>/<ci>
    ],
    ids=["index", "gpu-uuid-gi-ci"],
)
def test_mig_device(
    shim_runc: Runc,
    gpu_bundle: GpuBundle,
    profile: Profile,
    request_of: Callable[[str], str],
    gpu_instance: int,
    dgx: Path,
) -> None:
    gpu = profile.gpu_by_minor(0)
    assert gpu is not None
    (mig,) = [m for m in gpu.mig_devices if m.gi == gpu_instance and m.ci == 0]
    result = shim_runc.run(gpu_bundle("b", [f"NVIDIA_VISIBLE_DEVICES={request_of(gpu.uuid)}"]))
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == [gpu.uuid]
    assert probe.mig_uuids == [mig.uuid]
    caps = {f"/dev/nvidia-caps/nvidia-cap{n}" for n in (mig.gi_caps_minor, mig.ci_caps_minor)}
    assert probe.caps_nodes == caps
    # each node with the host's permission bits (runc would make a node without fileMode 0666)
    listed = [line.split() for line in probe.raw.splitlines() if line.startswith("c")]
    modes = {fields[-1]: fields[0] for fields in listed if fields[-1].startswith("nvidia-cap")}
    for path in caps:
        host_mode = stat.filemode((dgx / path.lstrip("/")).stat().st_mode)
        assert modes[path.rsplit("/", 1)[1]] == host_mode, (path, host_mode, modes)
    assert "crw-rw-rw-" not in modes.values()  # the access nodes are 0444, not runc's default
    assert probe.gpu_nodes == {"/dev/nvidia0"}
    assert probe.lib_magic == ELF_MAGIC


def test_none_gives_libraries_without_gpus(shim_runc: Runc, gpu_bundle: GpuBundle) -> None:
    result = shim_runc.run(gpu_bundle("b", ["NVIDIA_VISIBLE_DEVICES=none"]))
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == []
    assert probe.smi == ["No devices were found"] and probe.smi_rc == 6
    assert probe.gpu_nodes == set()
    assert "/dev/nvidiactl" in probe.nodes
    assert probe.lib_magic == ELF_MAGIC


def test_unknown_gpu_creates_nothing(
    shim: Shim, shim_runc: Runc, gpu_bundle: GpuBundle, tmp_path: Path
) -> None:
    bundle = gpu_bundle("b", ["NVIDIA_VISIBLE_DEVICES=9"])
    before = (bundle / "config.json").read_bytes()
    log = tmp_path / "runc-log.json"
    cid = unique_id("gpu9")
    shim_runc.ids.append(cid)
    result = shim_runc.call(
        "--log", str(log), "--log-format", "json", "create", "--bundle", str(bundle), cid
    )
    assert result.returncode != 0
    assert "GPU 9" in result.stderr
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["level"] == "error" and "GPU 9" in entry["msg"]
    assert (bundle / "config.json").read_bytes() == before
    plain = Runc(shim_runc.root)
    assert plain.call("list", "-q", check=True).stdout == ""
    assert plain.call("state", cid).returncode != 0
    assert [r["level"] for r in shim.log_records(cid)] == ["error"]


def test_pass_through_is_runc(shim: Shim, runc: Runc, tmp_path: Path) -> None:
    """state / list / --version through the shim: runc's stdout and exit code, byte for byte."""
    cid = runc.create(make_bundle(tmp_path / "b", ["sleep", "30"]))
    through = Runc(runc.root, binary=shim.binary, env=shim.env)
    for args in (
        ("state", cid),
        ("list",),
        ("list", "--format", "json"),
        ("--version",),
        ("state", "no-such-container"),
    ):
        direct, shimmed = runc.call(*args), through.call(*args)
        if args == ("--version",):  # nvhook's version first, then runc's own lines
            assert shimmed.stdout.startswith(f"nvhook-runtime version {VERSION}\nrunc version ")
            assert shimmed.stdout.removeprefix(f"nvhook-runtime version {VERSION}\n") == (
                direct.stdout
            )
            continue
        assert (shimmed.returncode, shimmed.stdout) == (direct.returncode, direct.stdout), args
    assert runc.call("state", "no-such-container").returncode != 0  # the comparison means something


def test_a_typo_in_the_settings_stops_no_container_without_gpus(
    shim: Shim, gpu_bundle: GpuBundle, tmp_path: Path
) -> None:
    """create, start, state, delete through the shim under real runc, with an invalid config.

    Only the create that asks for a GPU fails (exit 8, nothing started); the shim's log
    has one warning per call passed through.
    """
    typo = shim.with_config(unique_id("typo"), runtime={"mode": "turbo"})
    helper = typo.runc_for(tmp_path / "state")
    try:
        cid = helper.create(gpu_bundle("plain", args=["true"]))
        assert helper.state(cid)["status"] == "created"
        helper.start(cid)
        helper.wait_stopped(cid)
        assert helper.delete(cid).returncode == 0
        assert helper.call("list", "-q", check=True).stdout == ""
        gpu = gpu_bundle("gpu", ["NVIDIA_VISIBLE_DEVICES=0"])
        before = (gpu / "config.json").read_bytes()
        failed = helper.call("create", "--bundle", str(gpu), unique_id("typo-gpu"))
    finally:
        helper.cleanup()
    assert failed.returncode == 8
    assert failed.stderr.startswith(f"nvhook-runtime: {typo.config}: runtime.mode: 'turbo'")
    assert (gpu / "config.json").read_bytes() == before
    records = typo.log_records(cid)
    assert [r["command"] for r in records][:3] == ["create", "state", "start"]
    assert records[-1]["command"] == "delete"
    assert {r["level"] for r in records} == {"warning"}
    assert all("runtime.mode: 'turbo' is not one of" in r["msg"] for r in records)


#: The shim as its launcher runs it, with the injected hooks' timeout cut to 2 s.
SHORT_TIMEOUT_SHIM = """import sys
import nvhook.discover.hooks
nvhook.discover.hooks.HOOK_TIMEOUT_S = 2
sys.argv = ["nvhook-runtime", *sys.argv[1:]]
from nvhook.shim import main
raise SystemExit(main())
"""


def test_runc_kills_an_injected_hook_past_its_timeout(
    shim: Shim, gpu_bundle: GpuBundle, tmp_path: Path
) -> None:
    """The hooks nvhook injects carry an OCI timeout that runc enforces: a stuck hook fails
    the create promptly with runc's message instead of holding it.

    Real shim code and real runc; only the value is cut from 90 s to 2 s (the unit tests
    and golden cases check 90), and ``hook.path`` is a hook that never ends.
    """
    stuck = tmp_path / "stuck-hook"
    stuck.write_text("#!/bin/sh\nexec sleep 600\n")
    stuck.chmod(0o755)
    config = shim.with_config(unique_id("stuck"), hook={"path": str(stuck)})
    bundle = gpu_bundle("b", ["NVIDIA_VISIBLE_DEVICES=0"])
    cid = unique_id("stuck")
    argv = ["--root", str(tmp_path / "state"), "create", "--bundle", str(bundle), cid]
    started = time.monotonic()
    with open(bundle / "out", "wb") as out, open(bundle / "err", "wb") as err:
        result = subprocess.run(
            [sys.executable, "-I", "-c", SHORT_TIMEOUT_SHIM, *argv],
            env=config.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            timeout=60,
            check=False,
        )
    elapsed = time.monotonic() - started
    message = (bundle / "err").read_text()
    plain = Runc(tmp_path / "state")
    plain.ids.append(cid)
    try:
        assert result.returncode != 0, message
        assert "hook ran past specified timeout of 2.0s" in message
        assert elapsed < 30, f"runc took {elapsed:.1f}s to give up on the hook"
        hooks = json.loads((bundle / "config.json").read_text())["hooks"]["createContainer"]
        assert {h["path"] for h in hooks} == {str(stuck)}
        assert {h["timeout"] for h in hooks} == {2}
        assert plain.call("state", cid).returncode != 0  # no container left behind
    finally:
        plain.cleanup()


def test_cdi_annotation(
    shim: Shim, shim_runc: Runc, gpu_bundle: GpuBundle, profile: Profile
) -> None:
    """mode auto + a cdi.k8s.io annotation: the spec in cdi.spec_dirs decides, not the host."""
    kind = f"e2e.nvhook.test/{unique_id('gpu').replace('-', '')}"
    spec = cdi_spec_for_gpu1(shim.machine, kind)
    (shim.cdi_dir / f"{kind.split('/')[1]}.json").write_text(json.dumps(spec))
    cid = unique_id("cdi")
    bundle = gpu_bundle("b", annotations={"cdi.k8s.io/x": f"{kind}=gpu1"})
    result = shim_runc.run(bundle, cid)
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [1])
    assert probe.gpu_nodes == {"/dev/nvidia1"}
    assert probe.nodes["/dev/nvidiactl"] == (NVIDIA_MAJOR, CTL_MINOR)
    assert probe.env["NVHOOK_E2E_CDI"] == "gpu1"
    assert probe.lib_magic == ELF_MAGIC
    (record,) = shim.log_records(cid)
    assert record["mode"] == "cdi"


def test_cdi_mode_plain_id(
    shim: Shim, gpu_bundle: GpuBundle, profile: Profile, tmp_path: Path
) -> None:
    """mode cdi: NVIDIA_VISIBLE_DEVICES=1 names cdi.default_kind's device ``1``."""
    kind = f"e2e.nvhook.test/{unique_id('gpu').replace('-', '')}"
    spec = cdi_spec_for_gpu1(shim.machine, kind, name="1")
    (shim.cdi_dir / f"{kind.split('/')[1]}.json").write_text(json.dumps(spec))
    cdi_shim = shim.with_config(
        unique_id("cdi-mode"), runtime={"mode": "cdi"}, cdi={"default_kind": kind}
    )
    helper = cdi_shim.runc_for(tmp_path / "state")
    try:
        result = helper.run(gpu_bundle("b", ["NVIDIA_VISIBLE_DEVICES=1"]))
    finally:
        helper.cleanup()
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [1])
    assert probe.gpu_nodes == {"/dev/nvidia1"}
    assert probe.env["NVHOOK_E2E_CDI"] == "1"


def cdi_spec_for_gpu1(machine: Path, kind: str, *, name: str = "gpu1") -> dict[str, object]:
    """A hand-written CDI spec: GPU 1 and nvidiactl from the mock, plus nvidia-smi and libcuda."""
    lib = next((machine / LIBCUDA.lstrip("/")).parent.glob("libcuda.so.*.*"))
    return {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "containerEdits": {
            "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": f"{machine}/dev/nvidiactl"}],
            "mounts": [
                {
                    "hostPath": f"{machine}/usr/bin/nvidia-smi",
                    "containerPath": "/usr/bin/nvidia-smi",
                    "options": ["ro", "nosuid", "nodev", "bind"],
                },
                {
                    "hostPath": str(lib),
                    "containerPath": LIBCUDA,
                    "options": ["ro", "nosuid", "nodev", "bind"],
                },
            ],
        },
        "devices": [
            {
                "name": name,
                "containerEdits": {
                    "env": [f"NVHOOK_E2E_CDI={name}"],
                    "deviceNodes": [
                        {
                            "path": "/dev/nvidia1",
                            "hostPath": f"{machine}/dev/nvidia1",
                            "type": "c",
                            "major": NVIDIA_MAJOR,
                            "minor": 1,
                        }
                    ],
                },
            }
        ],
    }


@pytest.mark.slow
def test_twenty_concurrent_creates(
    shim_runc: Runc, gpu_bundle: GpuBundle, profile: Profile
) -> None:
    """Threads running ``nvhook-runtime create`` at once, each its own bundle and GPU mix."""
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    mixes = [sorted(rng.sample(range(8), rng.randint(1, 4))) for _ in range(20)]
    bundles = [
        gpu_bundle(f"b{i}", [f"NVIDIA_VISIBLE_DEVICES={','.join(map(str, mix))}"])
        for i, mix in enumerate(mixes)
    ]
    ids = [unique_id("conc") for _ in mixes]

    def create(i: int) -> str:
        return shim_runc.create(bundles[i], ids[i], check=False)

    with ThreadPoolExecutor(max_workers=len(mixes)) as pool:
        list(pool.map(create, range(len(mixes))))
    problems = []
    for cid, bundle, mix in zip(ids, bundles, mixes, strict=True):
        spec = json.loads((bundle / "config.json").read_text())
        nodes = {d["path"] for d in spec["linux"].get("devices", []) if d["path"][11:].isdigit()}
        if nodes != {f"/dev/nvidia{n}" for n in mix}:
            problems.append(f"{cid} {mix}: config.json has {sorted(nodes)}")
        if shim_runc.call("state", cid).returncode != 0:
            err = (bundle / f"{cid}.stderr").read_text()
            problems.append(f"{cid} {mix}: not created: {err}")
    assert not problems, f"seed {seed}:\n" + "\n".join(problems)
    for cid in ids:
        shim_runc.start(cid)
    for cid, mix in zip(ids, mixes, strict=True):
        shim_runc.wait_stopped(cid)
        probe = parse_probe(shim_runc.output(cid))
        seen = (probe.gpu_uuids, probe.gpu_nodes, probe.lib_magic)
        if seen != (expected_smi_uuids(profile, mix), {f"/dev/nvidia{n}" for n in mix}, ELF_MAGIC):
            problems.append(f"{cid} {mix}: sees {seen}")
    assert not problems, f"seed {seed}:\n" + "\n".join(problems)
    with ThreadPoolExecutor(max_workers=4) as pool:
        deleted = list(pool.map(lambda cid: shim_runc.delete(cid).returncode, ids))
    assert deleted == [0] * len(ids)
    assert shim_runc.call("list", "-q", check=True).stdout == ""
    shim_runc.ids.clear()


def test_native_front_end_runs_plain_containers_without_python(
    shim: Shim, gpu_bundle: GpuBundle, profile: Profile, tmp_path: Path
) -> None:
    """Real runc behind the native front-end (issue 16): a container that asks for nothing
    is created, started, queried and deleted without the Python shim (here replaced by a
    program that fails); one that asks for a GPU is handed to it, and gets the GPU."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: no native front-end")
    bin_dir = tmp_path / "bin"
    install_entrypoints(str(bin_dir), sys.executable)
    front, launcher = bin_dir / "nvhook-runtime", bin_dir / "nvhook-runtime.py"
    assert front.read_bytes()[:4] == b"\x7fELF"
    helper = Runc(tmp_path / "state", binary=str(front), env=shim.env)
    try:
        plain = gpu_bundle("plain")
        gpu = gpu_bundle("gpu", ["NVIDIA_VISIBLE_DEVICES=1"])
        assert helper.call("state", "none").returncode != 0  # handed over: the data is written
        real = launcher.read_bytes()
        launcher.write_text("#!/bin/sh\necho 'the Python shim ran' >&2\nexit 99\n")

        cid = helper.create(plain)
        assert helper.state(cid)["status"] == "created"
        helper.start(cid)
        helper.wait_stopped(cid)
        probe = parse_probe(helper.output(cid))
        assert probe.gpu_nodes == set() and "/dev/nvidiactl" not in probe.nodes
        assert helper.delete(cid).returncode == 0
        (record,) = shim.log_records(cid)  # written by the front-end, as the shim writes it
        assert (record["command"], record["mode"], record["written"]) == ("create", None, False)

        refused = helper.run(gpu)
        assert refused.returncode == 99 and "the Python shim ran" in refused.stderr

        launcher.write_bytes(real)
        result = helper.run(gpu_bundle("gpu2", ["NVIDIA_VISIBLE_DEVICES=1"]))
        assert result.returncode == 0, result.stderr
        assert parse_probe(result.stdout).gpu_uuids == expected_smi_uuids(profile, [1])
    finally:
        helper.cleanup()


def test_front_end_hands_gpu_containers_to_the_shim_server(
    shim: Shim, gpu_bundle: GpuBundle, profile: Profile, tmp_path: Path
) -> None:
    """Real runc behind the native front-end with ``nvhook-shim-server`` up (D12): GPU
    containers are created through the server, with the Python shim replaced by a program
    that fails; with the server stopped, the same calls fall back to the Python shim."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: no native front-end")
    bin_dir = tmp_path / "bin"
    install_entrypoints(str(bin_dir), sys.executable)
    front, launcher = bin_dir / "nvhook-runtime", bin_dir / "nvhook-runtime.py"
    cache = tmp_path / "cache"
    sock = cache / "shim.sock"
    env = {**shim.env, "NVHOOK_CACHE_DIR": str(cache)}
    server = start_shim_server(bin_dir, cache)
    helper = Runc(tmp_path / "state", binary=str(front), env=env)
    try:
        real = launcher.read_bytes()
        launcher.write_text("#!/bin/sh\necho 'the Python shim ran' >&2\nexit 99\n")

        result = helper.run(gpu_bundle("gpu", ["NVIDIA_VISIBLE_DEVICES=1"]))
        assert result.returncode == 0, result.stderr
        probe = parse_probe(result.stdout)
        assert probe.gpu_uuids == expected_smi_uuids(profile, [1])
        assert probe.gpu_nodes == {"/dev/nvidia1"} and probe.lib_magic == ELF_MAGIC
        assert probe.env["NVIDIA_VISIBLE_DEVICES"] == "void"

        cid = helper.create(gpu_bundle("two", ["NVIDIA_VISIBLE_DEVICES=0,3"]))  # containerd's way
        helper.start(cid)
        helper.wait_stopped(cid)
        assert parse_probe(helper.output(cid)).gpu_nodes == {"/dev/nvidia0", "/dev/nvidia3"}
        (record,) = shim.log_records(cid)  # the shim's line, written by the server's child
        assert (record["mode"], record["written"]) == ("jit", True)
        assert helper.delete(cid).returncode == 0

        server.terminate()
        assert server.wait(timeout=30) == 0 and not sock.exists()
        refused = helper.run(gpu_bundle("down", ["NVIDIA_VISIBLE_DEVICES=1"]))
        assert refused.returncode == 99 and "the Python shim ran" in refused.stderr

        launcher.write_bytes(real)
        result = helper.run(gpu_bundle("python", ["NVIDIA_VISIBLE_DEVICES=1"]))
        assert result.returncode == 0, result.stderr
        assert parse_probe(result.stdout).gpu_uuids == expected_smi_uuids(profile, [1])
    finally:
        helper.cleanup()
        if server.poll() is None:
            server.kill()
        server.wait()
