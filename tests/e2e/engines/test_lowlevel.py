"""runc 1.3 and crun (1.28 from Debian unstable, 1.21 from Debian 13) as the low-level runtime
behind nvhook-runtime (``runtime.runtimes``), run inside their Debian roots
(tests/support/engines.py): the shim and the hook run there with the root's Python.

For each runtime, with the createContainer hook native (the static ``nvhook-hook``) and
Python (``nvhook-hook.py``), in jit mode (the shim resolves the GPUs from the host) and cdi
mode (from the spec ``nvhook cdi generate`` wrote): a container asking for GPU 1 sees that GPU
(the mock's ``nvidia-smi -L``), its ``/dev/nvidia1`` opens as far as the driver (ENXIO: the
mock has none), the library link the hook makes is there, and a node of another GPU that the
bundle carries but nobody allowed fails with EPERM (the runtime's device cgroup). One case per
runtime again under a cgroup2-only ``/sys/fs/cgroup`` (the runtime's device filter is then an
eBPF program).

crun on this VM: its hierarchy is hybrid (cgroup v1 controllers, and a cgroup2 mount at
``/sys/fs/cgroup/unified`` with ``hugetlb`` enabled), which crun refuses ("cgroups in hybrid
mode not supported, drop all controllers from cgroupv2"; asserted below), so crun runs under
the cgroup2-only view. crun 1.21 makes the rootfs read-only (``root.readonly``, true in ``runc
spec``) before it runs the createContainer hooks, so the hook cannot write its links there
(asserted below: exit 11, "Read-only file system"); 1.28 and runc do it after, as nvhook
needs, so crun 1.21's bundles are writable here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.mock import Profile
from tests.e2e.conftest import PROBE, Shim, expected_smi_uuids, parse_probe, probe_rootfs
from tests.e2e.engines.conftest import Engine, private_root
from tests.support.basics import Result, missing
from tests.support.bundles import char_device, make_bundle
from tests.support.containers import unique_id

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]

#: engine -> (Debian suite, the runtime's path in that root, its major version)
RUNTIMES = {
    "runc13": ("sid", "/usr/sbin/runc", 1),
    "crun128": ("sid", "/usr/bin/crun", 1),
    "crun121": ("trixie", "/usr/bin/crun", 1),
}
MINOR = {"runc13": "1.3.", "crun128": "1.28", "crun121": "1.21"}
LIBCUDA_LINK = "/usr/lib/x86_64-linux-gnu/libcuda.so"
NOT_GIVEN = "/dev/nvidia-not-given"
SCRIPT = (
    f"{PROBE}; echo '--- link'; readlink {LIBCUDA_LINK}; echo '--- open'; "
    f"cat /dev/nvidia1 2>&1; cat {NOT_GIVEN} 2>&1; true"
)


def _hook(name: str) -> str:
    """The venv's installed hook: the static native one or its Python launcher (the ASan
    build of the other tests links the host's libasan, which these roots lack)."""
    path = Path(__file__).resolve().parents[3] / ".venv/bin" / name
    if not path.is_file():
        missing(f"{path} missing: run `.venv/bin/nvhook install-entrypoints`")
    return str(path)


HOOKS = {"native": "nvhook-hook", "python": "nvhook-hook.py"}


@pytest.fixture(scope="module", params=list(RUNTIMES))
def runtime(
    request: pytest.FixtureRequest,
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Engine]:
    suite, binary, major = RUNTIMES[request.param]
    for engine in private_root(
        suite_root,
        tmp_path_factory,
        request.param,
        suite,
        (binary, "--version"),
        major,
        cgroup2=binary.endswith("crun"),
    ):
        assert MINOR[request.param] in engine.version, engine.version
        yield engine


def _config(shim: Shim, engine: Engine, hook: str, mode: str, work: Path, dgx: Path) -> Shim:
    binary = RUNTIMES[engine.name][1]
    sections: dict[str, dict[str, object]] = {
        "runtime": {"runtimes": [binary], "mode": mode},
        "hook": {"path": hook},
    }
    if mode == "cdi":
        spec_dir = work / "cdi"
        spec_dir.mkdir()
        generate = ["cdi", "generate", "--root", str(dgx), "--hook-path", hook]
        assert main([*generate, "--output", str(spec_dir / "nvidia.json")]) == 0
        sections["cdi"] = {"spec_dirs": [str(spec_dir)]}
    return shim.with_config(unique_id(f"{engine.name}-{mode}"), **sections)


def _launch(
    engine: Engine, shim: Shim, work: Path, busybox_copy: Path, *, readonly: bool
) -> tuple[str, Result]:
    """``nvhook-runtime run`` of a bundle asking for GPU 1 and carrying GPU 0's node, never
    allowed, as :data:`NOT_GIVEN`: (its id, the result)."""
    rootfs = probe_rootfs(work / "bundle/rootfs", busybox_copy)
    bundle = make_bundle(
        work / "bundle",
        ["sh", "-c", SCRIPT],
        ["NVIDIA_VISIBLE_DEVICES=1"],
        rootfs=rootfs,
        readonly=readonly,
        devices=[char_device(NOT_GIVEN, 195, 0)],
    )
    env = shim.extra_env
    version = engine.root.run(shim.binary, "--version", env=env).stdout.splitlines()
    assert MINOR[engine.name] in version[1], version  # the runtime behind the shim
    cid = unique_id(engine.name)
    argv = [shim.binary, "--root", str(work / "state"), "run", "--bundle", str(bundle), cid]
    result = engine.root.run(*argv, env=env, timeout=120, check=False)
    engine.root.run(shim.binary, "--root", str(work / "state"), "delete", "--force", cid,
                    env=env, check=False)  # fmt: skip
    return cid, result


def _run(engine: Engine, shim: Shim, work: Path, busybox_copy: Path, mode: str) -> str:
    """:func:`_launch`, which must succeed, the shim having edited it in ``mode``; the
    container's output."""
    readonly = engine.name != "crun121"  # see the module's docstring
    cid, result = _launch(engine, shim, work, busybox_copy, readonly=readonly)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    [record] = shim.log_records(cid)
    assert (record["written"], record["mode"]) == (True, mode)
    return result.stdout


def _check(output: str, profile: Profile) -> str:
    """Assert what the container saw (see the module's docstring); its nvidia-smi -L."""
    probe = parse_probe(output)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [1])
    assert probe.gpu_nodes == {"/dev/nvidia1"}
    link, opened = output.split("--- link\n", 1)[1].split("--- open\n", 1)
    assert link.strip() == "libcuda.so.1"  # the createContainer hook ran
    given, not_given = opened.splitlines()[:2]
    assert given == "cat: can't open '/dev/nvidia1': No such device or address", opened
    assert not_given == f"cat: can't open '{NOT_GIVEN}': Operation not permitted", opened
    return "\n".join(probe.smi)


@pytest.mark.parametrize("mode", ["jit", "cdi"])
@pytest.mark.parametrize("hook", list(HOOKS))
def test_runtime_behind_nvhook_runtime(
    runtime: Engine,
    shim: Shim,
    dgx: Path,
    profile: Profile,
    busybox_copy: Path,
    tmp_path: Path,
    hook: str,
    mode: str,
    print_version: Callable[[Engine], None],
) -> None:
    print_version(runtime)
    config = _config(shim, runtime, _hook(HOOKS[hook]), mode, tmp_path, dgx)
    smi = _check(_run(runtime, config, tmp_path, busybox_copy, mode), profile)
    assert smi.startswith("GPU 0: ") and smi.count("\n") == 0  # one GPU, index 0 inside


def test_runc_under_cgroup2_only(
    shim: Shim,
    dgx: Path,
    profile: Profile,
    busybox_copy: Path,
    tmp_path: Path,
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    print_version: Callable[[Engine], None],
) -> None:
    """runc 1.3 with the container of the matrix under a cgroup2-only ``/sys/fs/cgroup``: its
    device filter is an eBPF program there (crun runs only there: the matrix)."""
    for engine in private_root(
        suite_root, tmp_path_factory, "runc13", "sid", ("runc", "--version"), 1, cgroup2=True
    ):
        print_version(engine)
        fstype = engine.root.run("stat", "-f", "-c", "%T", "/sys/fs/cgroup").stdout.strip()
        assert fstype == "cgroup2fs"
        config = _config(shim, engine, _hook("nvhook-hook"), "jit", tmp_path, dgx)
        smi = _check(_run(engine, config, tmp_path, busybox_copy, "jit"), profile)
        assert smi.startswith("GPU 0: ")


def test_crun_refuses_this_vms_hybrid_cgroups(
    suite_root: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """Why crun runs under the cgroup2-only view: on the host's layout it refuses to start."""
    for engine in private_root(
        suite_root, tmp_path_factory, "crun128", "sid", ("crun", "--version"), 1
    ):
        print(f"crun128 from sid: {engine.version}")
        bundle = make_bundle(tmp_path / "b", ["true"])
        crun = ["crun", "--root", str(tmp_path / "state"), "run", "--bundle", str(bundle)]
        result = engine.root.run(*crun, unique_id("hybrid"), check=False)
        assert (result.returncode, result.stderr) == (
            1,
            "cgroups in hybrid mode not supported, drop all controllers from cgroupv2\n",
        )


def test_crun_121_read_only_rootfs_stops_the_hook(
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    shim: Shim,
    dgx: Path,
    busybox_copy: Path,
    tmp_path: Path,
) -> None:
    """Why crun 1.21's bundles are writable in the matrix: with ``root.readonly`` the rootfs is
    read-only when crun runs the createContainer hook (crun 1.28 and runc: not yet)."""
    for engine in private_root(
        suite_root, tmp_path_factory, "crun121", "trixie", ("crun", "--version"), 1, cgroup2=True
    ):
        print(f"crun121 from trixie: {engine.version}")
        config = _config(shim, engine, _hook("nvhook-hook"), "jit", tmp_path, dgx)
        _, result = _launch(engine, config, tmp_path, busybox_copy, readonly=True)
        hook = _hook("nvhook-hook")
        assert result.returncode == 1
        assert f"error executing hook `{hook}` (exit code: 11)" in result.stderr, result.stderr
