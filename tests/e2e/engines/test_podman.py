"""podman 5.8 (Debian unstable) and 5.4 (Debian 13), each from its Debian root, run privately
(tests/support/engine_podman.py): as root, rootless, and on a cgroup2-only hierarchy.

As root, on the ``dgx-a100`` mock, podman's low-level runtime the root's runc (1.3 in sid,
1.1.15 in trixie):

- **engine CDI**: ``--device nvidia.com/gpu=1``, two ``--device`` flags and ``=all`` with the
  spec ``nvhook cdi generate`` wrote into the root's ``/etc/cdi``;
- **shim**: ``--runtime`` nvhook-runtime in jit and cdi mode, ``NVIDIA_VISIBLE_DEVICES=2``
  (its config reaches the ``create`` call through containers.conf's ``conmon_env_vars``);
- **hook**: ``--hooks-dir`` with the packaged ``oci-hooks.d`` file (its path and config
  pointed at this checkout): nvhook's prestart hook gives the container its GPU.

Each container's mock ``nvidia-smi -L`` lists exactly its GPUs, and its GPU nodes open as far
as the driver (ENXIO: the mock has none).

**cgroup v2** (a cgroup2-only ``/sys/fs/cgroup``: device access is an eBPF program the runtime
attaches): in hook mode, where nvhook's prestart hook itself lets the container at its GPU's
nodes (it replaces runc's program with one that also allows them), and under nvhook-runtime,
GPU 1's node opens (ENXIO) while GPU 0's, made with ``mknod`` in the container, fails with
EPERM.

**Rootless** (podman run by ``gpuuser``, uid 1500, with ``/etc/subuid`` and ``/etc/subgid``
ranges, made in the root's overlay) on a mock whose driver restricts its nodes to group
``video`` (``nvhook mock create --device-file-gid 44 --device-file-mode 0660``, the
nodes ``root:video 0660`` in the root's own ``/dev``): rootless podman cannot ``mknod``, so its
runtime bind-mounts the host's nodes, and the container's process opens them only with the
user's own ``video`` membership, which only ``--group-add keep-groups`` keeps (crun: it skips
``setgroups``; runc drops the groups). crun runs only on cgroup2 here (the VM's hybrid
hierarchy: tests/e2e/engines/test_lowlevel.py), so the rootless root is cgroup2-only (the
harness's roots are ``pivot_root``-ed, not chrooted: the kernel refuses a chrooted process
the user namespace rootless podman needs). Proven: with keep-groups the container opens GPU 1
(ENXIO) and ``nvidia-smi -L`` lists it; without it, under runc, or for a user outside
``video``, the node is EACCES and nothing is listed, and ``nvhook doctor`` run as that user
says in one line what is missing. The ``additionalGids`` that the spec and jit mode give the
process (the nodes' group, for a container process of another user under rootful podman,
checked here with ``--user 1000``) do not get in the way.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nvhook.cli import main
from nvhook.mock import Profile, create, load_profile
from tests.e2e.conftest import ELF_MAGIC, PROBE, Shim, expected_smi_uuids, parse_probe
from tests.e2e.engines.conftest import Engine, private_root
from tests.support.engine_podman import EnginePodman, RootlessUser, private_dev
from tests.support.engines import PrivateRoot

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]

#: engine -> (Debian suite, the version's prefix)
PODMANS = {"podman58": ("sid", "5.8."), "podman54": ("trixie", "5.4.")}
PACKAGED = Path(__file__).parents[3] / "packaging/oci-hooks.d/oci-nvhook-hook.json"
BIN = Path(__file__).resolve().parents[3] / ".venv/bin"
VIDEO = 44
ENXIO = "No such device or address"


class Served:
    """A private root of the module and the podman in it (image loaded, spec installed)."""

    def __init__(self, engine: Engine, podman: EnginePodman) -> None:
        self.engine = engine
        self.podman = podman


def _generate(root: Path, output: Path) -> dict[str, Any]:
    assert main(["cdi", "generate", "--root", str(root), "--output", str(output)]) == 0
    spec: dict[str, Any] = json.loads(output.read_text())
    return spec


def _serve(engine: Engine, dgx: Path, busybox_image: Path) -> Served:
    """nvhook's spec of ``dgx`` in the root's ``/etc/cdi``, podman with the busybox image."""
    spec = engine.work / "nvidia.json"
    _generate(dgx, spec)
    engine.root.run("sh", "-c", f"mkdir -p /etc/cdi && cp {spec} /etc/cdi/nvidia.json")
    podman = EnginePodman(engine.root, engine.work / "podman")
    assert podman.version() == engine.version
    podman.load(busybox_image)
    return Served(engine, podman)


@pytest.fixture(scope="module", params=list(PODMANS))
def _podman(
    request: pytest.FixtureRequest,
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    dgx: Path,
    busybox_image: Path,
) -> Iterator[Served]:
    yield from _podmans(request.param, suite_root, tmp_path_factory, dgx, busybox_image)


def _podmans(
    param: str,
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    dgx: Path,
    busybox_image: Path,
    *,
    cgroup2: bool = False,
) -> Iterator[Served]:
    """The module fixtures' podman of ``PODMANS[param]`` (``cgroup2``: on a cgroup2-only
    ``/sys/fs/cgroup``, checked from inside the root)."""
    suite, minor = PODMANS[param]
    name = f"{param}-cgroup2" if cgroup2 else param
    for engine in private_root(
        suite_root, tmp_path_factory, name, suite, ("podman", "--version"), 5, cgroup2=cgroup2
    ):
        assert minor in engine.version, engine.version
        if cgroup2:
            fstype = engine.root.run("stat", "-f", "-c", "%T", "/sys/fs/cgroup").stdout.strip()
            assert fstype == "cgroup2fs"
        yield _serve(engine, dgx, busybox_image)


@pytest.fixture
def served(_podman: Served, print_version: Callable[[Engine], None]) -> Served:
    print_version(_podman.engine)
    return _podman


def _script(*opened: str) -> list[str]:
    """:data:`PROBE`, then each of ``opened`` read (its error) under ``--- open``."""
    reads = "".join(f"cat {n} 2>&1; " for n in opened)
    return ["sh", "-c", f"{PROBE}; echo '--- open'; {reads}true"]


def _opened(output: str) -> list[str]:
    return output.split("--- open\n", 1)[1].splitlines()


def _cant_open(node: str, why: str) -> str:
    return f"cat: can't open '{node}': {why}"


CDI_CASES = {
    "gpu1": (["nvidia.com/gpu=1"], [1]),
    "gpu1-gpu3": (["nvidia.com/gpu=1", "nvidia.com/gpu=3"], [1, 3]),
    "all": (["nvidia.com/gpu=all"], list(range(8))),
}


@pytest.mark.parametrize("case", list(CDI_CASES))
def test_cdi_device(served: Served, profile: Profile, case: str) -> None:
    """podman's own CDI applies nvhook's spec: exactly the GPUs asked for, their nodes open."""
    devices, minors = CDI_CASES[case]
    result = served.podman.run(_script("/dev/nvidia1"), devices=devices)
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, minors)
    assert probe.gpu_nodes == {f"/dev/nvidia{m}" for m in minors}
    assert probe.lib_magic == ELF_MAGIC  # libcuda.so.1: the link the hook made
    assert _opened(result.stdout) == [_cant_open("/dev/nvidia1", ENXIO)]


def _shim_records(shim: Shim, before: int) -> list[dict[str, Any]]:
    """The shim's create records logged since the log had ``before`` lines."""
    lines = shim.log_file.read_text().splitlines() if shim.log_file.exists() else []
    records = [json.loads(line) for line in lines[before:]]
    return [r for r in records if "written" in r]


def _log_lines(shim: Shim) -> int:
    return len(shim.log_file.read_text().splitlines()) if shim.log_file.exists() else 0


def _shim_config(shim: Shim, name: str, mode: str, dgx: Path, work: Path) -> Shim:
    sections: dict[str, dict[str, object]] = {"runtime": {"mode": mode}}
    if mode == "cdi":
        spec_dir = work / "cdi"
        spec_dir.mkdir()
        _generate(dgx, spec_dir / "nvidia.json")
        sections["cdi"] = {"spec_dirs": [str(spec_dir)]}
    return shim.with_config(name, **sections)


@pytest.mark.parametrize("mode", ["jit", "cdi"])
def test_runtime_nvhook_runtime(
    served: Served, shim: Shim, dgx: Path, profile: Profile, tmp_path: Path, mode: str
) -> None:
    """``podman --runtime nvhook-runtime``: the shim edits the create in ``mode``."""
    config = _shim_config(shim, f"{served.engine.name}-{mode}", mode, dgx, tmp_path)
    podman = served.podman.with_conmon_env(mode, config.extra_env)
    before = _log_lines(shim)
    result = podman.run(
        _script("/dev/nvidia2"), runtime=shim.binary, env={"NVIDIA_VISIBLE_DEVICES": "2"}
    )
    assert result.returncode == 0, result.stderr
    [record] = _shim_records(shim, before)
    assert (record["written"], record["mode"]) == (True, mode)
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [2])
    assert probe.gpu_nodes == {"/dev/nvidia2"}
    assert probe.lib_magic == ELF_MAGIC
    assert _opened(result.stdout) == [_cant_open("/dev/nvidia2", ENXIO)]
    assert podman.cmd("ps", "-aq", check=True).stdout == ""  # --rm went through the shim


def _hooks_dir(shim: Shim, work: Path) -> Path:
    """The packaged oci-hooks.d file, its hook this checkout's and its config the shim's."""
    hook = json.loads(PACKAGED.read_text())
    assert hook["stages"] == ["prestart"] and hook["hook"]["args"] == ["nvhook-hook", "prestart"]
    hook["hook"]["path"] = str(BIN / "nvhook-hook")
    hook["hook"]["env"] = [*hook["hook"]["env"], f"NVHOOK_CONFIG={shim.config}"]
    hooks_dir = work / "hooks.d"
    hooks_dir.mkdir()
    (hooks_dir / PACKAGED.name).write_text(json.dumps(hook))
    return hooks_dir


def test_hooks_dir(served: Served, shim: Shim, profile: Profile, tmp_path: Path) -> None:
    """``--hooks-dir`` with the packaged hook file: nvhook's prestart hook gives GPU 2."""
    hooks = _hooks_dir(shim, tmp_path)
    result = served.podman.run(
        _script("/dev/nvidia2"), env={"NVIDIA_VISIBLE_DEVICES": "2"}, hooks_dir=hooks
    )
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [2])
    assert probe.gpu_nodes == {"/dev/nvidia2"}
    assert probe.lib_magic == ELF_MAGIC
    assert _opened(result.stdout) == [_cant_open("/dev/nvidia2", ENXIO)]
    plain = served.podman.run(_script(), hooks_dir=hooks)  # asking for nothing: as before
    assert plain.returncode == 0, plain.stderr
    assert parse_probe(plain.stdout).gpu_nodes == set()


# --------------------------------------------------------------------------- cgroup v2

#: GPU 1's node (given) opens as far as the driver; GPU 0's, made in the container, is denied
CGROUP2_SCRIPT = _script("/dev/nvidia1", "/tmp/gpu0")
CGROUP2_SCRIPT[-1] = CGROUP2_SCRIPT[-1].replace(
    "echo '--- open';", "echo '--- open'; mknod /tmp/gpu0 c 195 0 || echo mknod failed;"
)


@pytest.fixture(scope="module", params=list(PODMANS))
def _podman_cgroup2(
    request: pytest.FixtureRequest,
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    dgx: Path,
    busybox_image: Path,
) -> Iterator[Served]:
    yield from _podmans(
        request.param, suite_root, tmp_path_factory, dgx, busybox_image, cgroup2=True
    )


@pytest.fixture
def served_cgroup2(_podman_cgroup2: Served, print_version: Callable[[Engine], None]) -> Served:
    print_version(_podman_cgroup2.engine)
    return _podman_cgroup2


def _cgroup2_seen(result: Any) -> tuple[list[str], set[str], list[str]]:
    """(nvidia-smi's UUIDs, the GPU nodes, what reading GPU 1's and GPU 0's nodes said)."""
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    return probe.gpu_uuids, probe.gpu_nodes, _opened(result.stdout)


def _cgroup2_expected(profile: Profile) -> tuple[list[str], set[str], list[str]]:
    opened = [_cant_open("/dev/nvidia1", ENXIO), _cant_open("/tmp/gpu0", "Operation not permitted")]
    return expected_smi_uuids(profile, [1]), {"/dev/nvidia1"}, opened


def test_cgroup2_hooks_dir(
    served_cgroup2: Served, shim: Shim, profile: Profile, tmp_path: Path
) -> None:
    """Hook mode on cgroup v2: the prestart hook's eBPF program lets GPU 1 in, not GPU 0."""
    result = served_cgroup2.podman.run(
        CGROUP2_SCRIPT,
        env={"NVIDIA_VISIBLE_DEVICES": "1"},
        options=["--cap-add", "MKNOD"],
        hooks_dir=_hooks_dir(shim, tmp_path),
    )
    assert _cgroup2_seen(result) == _cgroup2_expected(profile)


def test_cgroup2_nvhook_runtime(
    served_cgroup2: Served, shim: Shim, dgx: Path, profile: Profile, tmp_path: Path
) -> None:
    """nvhook-runtime on cgroup v2: runc's eBPF program from the edited spec, GPU 1 only."""
    config = _shim_config(shim, f"{served_cgroup2.engine.name}-cg2", "jit", dgx, tmp_path)
    podman = served_cgroup2.podman.with_conmon_env("jit", config.extra_env)
    result = podman.run(
        CGROUP2_SCRIPT,
        runtime=shim.binary,
        env={"NVIDIA_VISIBLE_DEVICES": "1"},
        options=["--cap-add", "MKNOD"],
    )
    assert _cgroup2_seen(result) == _cgroup2_expected(profile)


# --------------------------------------------------------------------------- rootless


class Rootless:
    """A rootless podman of the module: its root, the mock (``root:video 0660``), and two
    users: ``gpuuser`` (in ``video``) and ``outsider`` (not), each with its own podman."""

    def __init__(
        self, engine: Engine, machine: Path, spec: dict[str, Any], users: dict[str, EnginePodman]
    ) -> None:
        self.engine = engine
        self.machine = machine
        self.spec = spec
        self.users = users


USERS = {"gpuuser": (1500, ["video"]), "outsider": (1501, [])}


@pytest.fixture(scope="module", params=list(PODMANS))
def _rootless(
    request: pytest.FixtureRequest, suite_root: Callable[[str], Path], busybox_image: Path
) -> Iterator[Rootless]:
    """A cgroup2-only, pivoted root whose ``/dev`` holds the restricted mock's nodes; its work
    dir outside pytest's (which is root's, 0700), readable by the users."""
    suite, minor = PODMANS[request.param]
    work = Path(tempfile.mkdtemp(prefix="nvh-rootless-"))
    try:
        work.chmod(0o755)
        machine = work / "dgx"
        create("dgx-a100", machine, nodes="char", device_file_gid=VIDEO, device_file_mode=0o660)
        spec = _generate(machine, work / "nvidia.json")
        image = work / "busybox.tar"
        shutil.copy(busybox_image, image)
        image.chmod(0o644)
        with PrivateRoot(suite_root(suite), work / "root", [work], cgroup2=True) as root:
            version = root.version("podman", "--version")
            assert minor in version, version
            engine = Engine(request.param, suite, root, work, version, 5)
            private_dev(root, machine / "dev")
            root.run("sh", "-c", f"mkdir -p /etc/cdi && cp {work}/nvidia.json /etc/cdi/")
            users = {}
            for i, (name, (uid, groups)) in enumerate(USERS.items()):
                user = RootlessUser(name, uid, groups, subids=200000 + 65536 * i)
                user.create(root)
                podman = EnginePodman(root, work / name, runtime="/usr/bin/crun", user=user)
                podman.load(image)
                users[name] = podman
            yield Rootless(engine, machine, spec, users)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def rootless(_rootless: Rootless, print_version: Callable[[Engine], None]) -> Rootless:
    print_version(_rootless.engine)
    return _rootless


def _run_rootless(rootless: Rootless, user: str, *options: str) -> Any:
    return rootless.users[user].run(
        _script("/dev/nvidia1"), devices=["nvidia.com/gpu=1"], options=options
    )


def test_rootless_spec_carries_the_nodes_group(rootless: Rootless) -> None:
    """The spec of the restricted driver: nodes ``root:video 0660``, group ``video`` for the
    process (``additionalGids``, cdiVersion 0.7.0)."""
    spec = rootless.spec
    assert spec["cdiVersion"] == "0.7.0"
    assert spec["containerEdits"]["additionalGids"] == [VIDEO]
    [gpu1] = [d for d in spec["devices"] if d["name"] == "1"]
    [node] = gpu1["containerEdits"]["deviceNodes"]
    assert (node["path"], node["fileMode"], node["gid"]) == ("/dev/nvidia1", 0o660, VIDEO)
    st = os.stat(rootless.machine / "dev/nvidia1")
    assert (st.st_mode & 0o777, st.st_gid) == (0o660, VIDEO)


def test_rootless_keep_groups_opens_the_gpu(rootless: Rootless) -> None:
    """gpuuser, in ``video``, with ``--group-add keep-groups``: GPU 1 listed and its node open."""
    result = _run_rootless(rootless, "gpuuser", "--group-add", "keep-groups")
    assert result.returncode == 0, result.stderr
    probe = parse_probe(result.stdout)
    assert probe.gpu_uuids == expected_smi_uuids(load_profile("dgx-a100"), [1])
    assert probe.lib_magic == ELF_MAGIC  # the createContainer hook ran, rootless
    assert _opened(result.stdout) == [_cant_open("/dev/nvidia1", ENXIO)]


def test_rootless_without_keep_groups_or_the_group_sees_no_gpu(rootless: Rootless) -> None:
    """Without ``keep-groups``, or a user outside ``video``: EACCES, nothing listed."""
    for user, options in (("gpuuser", ()), ("outsider", ("--group-add", "keep-groups"))):
        result = _run_rootless(rootless, user, *options)
        assert result.returncode == 0, result.stderr
        probe = parse_probe(result.stdout)
        assert probe.gpu_uuids == [], (user, probe.smi)
        assert _opened(result.stdout) == [_cant_open("/dev/nvidia1", "Permission denied")]


def test_rootless_runc_drops_the_groups(rootless: Rootless) -> None:
    """Why crun: podman's keep-groups is crun's (podman-run(1), ``--group-add``); runc sets
    the spec's groups, and the user's ``video`` is gone in the container."""
    podman = rootless.users["gpuuser"]
    result = podman.run(
        ["sh", "-c", "id -G; cat /dev/nvidia1 2>&1; true"],
        runtime="/usr/sbin/runc",
        devices=["nvidia.com/gpu=1"],
        options=["--group-add", "keep-groups"],
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == _cant_open("/dev/nvidia1", "Permission denied")


def _doctor(rootless: Rootless, user: str) -> list[dict[str, str]]:
    podman = rootless.users[user]
    argv = podman.as_user(str(BIN / "nvhook"), "doctor", "--json", "--root", str(rootless.machine))
    done = rootless.engine.root.run(*argv, "--dev-root", "/", env=podman.env, check=False)
    checks: list[dict[str, str]] = json.loads(done.stdout)["checks"]
    return [c for c in checks if c["area"] == "driver"]


def test_rootless_doctor_names_what_is_missing(rootless: Rootless) -> None:
    """``nvhook doctor`` as each user: outsider is told, in one line, the group it lacks and
    the fix; gpuuser gets an ok line naming keep-groups."""
    outsider = [c for c in _doctor(rootless, "outsider") if c["status"] == "fail"]
    assert len(outsider) == 1, outsider
    [problem] = outsider
    assert problem["message"].startswith(
        "user outsider (uid 1501) is not in group video (gid 44), which alone may open "
        "/dev/nvidiactl and 10 more (0660)"
    ), problem
    assert "\n" not in problem["message"]
    assert problem["fix"] == (
        "usermod -aG video outsider (then log in again) and run rootless podman with "
        "--group-add keep-groups"
    )
    gpuuser = _doctor(rootless, "gpuuser")
    assert not [c for c in gpuuser if c["status"] == "fail"], gpuuser
    assert any(
        c["status"] == "ok"
        and "through group video (gid 44)" in c["message"]
        and "--group-add keep-groups" in c["message"]
        for c in gpuuser
    ), gpuuser


def test_rootful_user_gets_the_nodes_group(served: Served, shim: Shim, tmp_path: Path) -> None:
    """Rootful podman, a container process of uid 1000: the restricted spec's
    ``additionalGids`` give it ``video``, so GPU 1's node (``root:video 0660``) opens; and
    nvhook-runtime's jit mode gives it the same group."""
    machine = tmp_path / "video"
    create("dgx-a100", machine, nodes="char", device_file_gid=VIDEO, device_file_mode=0o660)
    spec_file = tmp_path / "video.json"
    spec = _generate(machine, spec_file)
    assert spec["containerEdits"]["additionalGids"] == [VIDEO]
    # a vendor of its own beside the module's nvidia.com spec
    spec_file.write_text(json.dumps({**spec, "kind": "video.test/gpu"}))
    root = served.engine.root
    root.run("cp", str(spec_file), "/etc/cdi/video.json")
    try:
        result = served.podman.run(
            ["sh", "-c", "id -G; cat /dev/nvidia1 2>&1; true"],
            devices=["video.test/gpu=1"],
            options=["--user", "1000:1000"],
        )
    finally:
        root.run("rm", "-f", "/etc/cdi/video.json")
    config = shim.with_config(f"{served.engine.name}-video", host={"root": str(machine)})
    jit = served.podman.with_conmon_env("video", config.extra_env).run(
        ["sh", "-c", "id -G; cat /dev/nvidia1 2>&1; true"],
        runtime=shim.binary,
        env={"NVIDIA_VISIBLE_DEVICES": "1"},
        options=["--user", "1000:1000"],
    )
    for done in (result, jit):
        assert done.returncode == 0, done.stderr
        groups, opened = done.stdout.splitlines()[:2]
        assert groups.split() == ["1000", str(VIDEO)], groups
        assert opened == _cant_open("/dev/nvidia1", ENXIO)


@pytest.mark.parametrize("how", ["engine-cdi", "shim-jit"])
def test_amd_partition_through_the_vendors_spec_and_jit(
    served: Served, shim: Shim, tmp_path: Path, how: str
) -> None:
    """Another vendor: ``nvhook cdi generate --vendor amd`` on the ``mi300x-8`` mock (CPX:
    64 devices), installed in the root's ``/etc/cdi`` under the kind ``amd-ctk`` writes,
    ``amd.com/gpu``; ``podman run --device amd.com/gpu=9 --user 1000:1000`` (and
    nvhook-runtime's jit mode with ``AMD_VISIBLE_DEVICES=9``) sees exactly ``/dev/kfd`` and
    partition 9's card and render nodes, gets their groups (``video``, ``render``) from
    ``additionalGids``, and the mock ``rocm-smi`` (the image's, mounted in) lists GPU[9] alone:
    its nodes open as far as the driver for a process of another user."""
    from nvhook.mock.vendors import RENDER_GID
    from nvhook.mock.vendors import create as create_vendor

    machine = tmp_path / "amd"
    create_vendor("mi300x-8", machine, nodes="char")
    spec_file = tmp_path / "amd.json"
    argv = ["cdi", "generate", "--root", str(machine), "--vendor", "amd", "-o", str(spec_file)]
    assert main(argv) == 0
    spec = json.loads(spec_file.read_text())
    assert (spec["kind"], spec["cdiVersion"]) == ("amd.com/gpu", "0.7.0")
    look = ["sh", "-c", "id -G; ls /dev /dev/dri; echo '--- smi'; rocm-smi"]
    options = ["--user", "1000:1000", "-v", f"{machine}/opt/rocm/bin/rocm-smi:/usr/bin/rocm-smi:ro"]
    root = served.engine.root
    if how == "engine-cdi":
        root.run("cp", str(spec_file), "/etc/cdi/amd.json")
        try:
            done = served.podman.run(look, devices=["amd.com/gpu=9"], options=options)
        finally:
            root.run("rm", "-f", "/etc/cdi/amd.json")
    else:
        config = shim.with_config(f"{served.engine.name}-amd", host={"root": str(machine)})
        done = served.podman.with_conmon_env("amd", config.extra_env).run(
            look, runtime=shim.binary, env={"AMD_VISIBLE_DEVICES": "9"}, options=options
        )
    assert done.returncode == 0, done.stderr
    head, _, smi = done.stdout.partition("--- smi\n")
    groups, *listing = head.splitlines()
    assert sorted(groups.split()) == sorted(["1000", str(VIDEO), str(RENDER_GID)])
    names = set(" ".join(listing).split())
    dri = {n for n in names if n.startswith(("card", "renderD"))}
    assert "kfd" in names and dri == {"card10", "renderD137"}, names
    assert smi.splitlines() == ["GPU[9] : 0000:26:00.0 renderD137 CPX/NPS1 partition 1"]
