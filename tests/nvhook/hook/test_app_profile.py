"""``create-container --application-profile FILE`` (nvhook/hook/app_profile.py): the bytes
NVIDIA's ``update-application-profile`` hook writes, from the container's /dev/nvidiaN nodes."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from nvhook.hook.app_profile import PROFILE_PATH, profile
from tests.support.containers import require_root

from .conftest import HookRunner, escape_forms, snapshot, write_bundle

PROFILE = PROFILE_PATH.lstrip("/")
ARGS = ["create-container", "--application-profile", PROFILE_PATH]
#: nvidia-container-toolkit's TestBuildApplicationProfileConfig, "single GPU, minor 0"
ONE_GPU = (
    b'{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x1]}],'
    b'"rules":[{"pattern":[],"profile":"_container_"}]}'
)


def node(path: Path, minor: int, *, major: int = 195, kind: int = stat.S_IFCHR) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o666 | kind, os.makedev(major, minor))


def container(tmp_path: Path) -> tuple[Path, Path]:
    rootfs = tmp_path / "bundle" / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    return write_bundle(tmp_path / "bundle", rootfs), rootfs


def test_profile_is_nvidias_bytes() -> None:
    """The reference's own test vectors (update-application-profile_test.go)."""
    assert profile(1) == ONE_GPU
    assert b",0x100]" in profile(1 << 8)
    assert b",0x8001]" in profile(1 | 1 << 15)


@pytest.mark.root
def test_one_gpu(run_hook: HookRunner, tmp_path: Path) -> None:
    require_root()
    bundle, rootfs = container(tmp_path)
    node(rootfs / "dev/nvidia0", 0)
    node(rootfs / "dev/nvidiactl", 255)
    node(rootfs / "dev/nvidia-uvm", 0, major=511)
    proc = run_hook(ARGS, bundle=bundle)
    assert (proc.returncode, proc.stderr) == (0, "")
    written = rootfs / PROFILE
    assert written.read_bytes() == ONE_GPU
    assert stat.S_IMODE(written.stat().st_mode) == 0o444
    assert written.stat().st_uid == 0
    assert stat.S_IMODE(written.parent.stat().st_mode) == 0o555  # made, as MkdirAll(0555)
    assert stat.S_IMODE((rootfs / "etc/nvidia").stat().st_mode) == 0o555
    assert stat.S_IMODE((rootfs / "etc").stat().st_mode) == 0o755  # there before: untouched


@pytest.mark.root
def test_two_gpus_by_their_minors(run_hook: HookRunner, tmp_path: Path) -> None:
    """The minors count, not the names (nvidia1 may be minor 5); a symlink, a regular file
    or a block device by such a name is no GPU node."""
    require_root()
    bundle, rootfs = container(tmp_path)
    node(rootfs / "dev/nvidia0", 0)
    node(rootfs / "dev/nvidia1", 5)
    node(rootfs / "dev/nvidia7", 7, kind=stat.S_IFBLK)
    (rootfs / "dev/nvidia8").symlink_to("nvidia0")
    (rootfs / "dev/nvidia9").write_text("not a node\n")
    proc = run_hook(ARGS, bundle=bundle)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (rootfs / PROFILE).read_bytes() == ONE_GPU.replace(b",0x1]", b",0x21]")


@pytest.mark.root
def test_no_gpu_node_writes_nothing(run_hook: HookRunner, tmp_path: Path) -> None:
    """As NVIDIA's hook: no /dev/nvidiaN (or only minors beyond the mask: each noted), no file."""
    require_root()
    bundle, rootfs = container(tmp_path)
    node(rootfs / "dev/nvidiactl", 255)
    node(rootfs / "dev/nvidia64", 64)
    proc = run_hook(ARGS, bundle=bundle)
    assert proc.returncode == 0
    assert "minor 64 does not fit" in proc.stderr
    assert sorted(p.name for p in rootfs.iterdir()) == ["dev", "etc"]
    assert not any((rootfs / "etc").iterdir())


def test_no_dev_writes_nothing(run_hook: HookRunner, tmp_path: Path) -> None:
    bundle, rootfs = container(tmp_path)
    proc = run_hook(ARGS, bundle=bundle)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert not any((rootfs / "etc").iterdir())


@pytest.mark.root
def test_an_existing_file_is_replaced(run_hook: HookRunner, tmp_path: Path) -> None:
    """An image's own 10-container.conf (or one a previous start wrote) gets this
    container's GPUs; a symlink there is replaced, never followed (to a host file here)."""
    require_root()
    bundle, rootfs = container(tmp_path)
    node(rootfs / "dev/nvidia0", 0)
    host = tmp_path / "host-file"
    host.write_text("host\n")
    (rootfs / PROFILE).parent.mkdir(parents=True)
    (rootfs / PROFILE).write_text("stale")
    (rootfs / PROFILE).chmod(0o600)
    before = snapshot(host)
    assert run_hook(ARGS, bundle=bundle).returncode == 0
    assert (rootfs / PROFILE).read_bytes() == ONE_GPU
    assert stat.S_IMODE((rootfs / PROFILE).stat().st_mode) == 0o444
    (rootfs / PROFILE).unlink()
    for form in escape_forms(rootfs, host):
        (rootfs / PROFILE).symlink_to(form)
        assert run_hook(ARGS, bundle=bundle).returncode == 0, form
        assert not (rootfs / PROFILE).is_symlink(), form
        assert (rootfs / PROFILE).read_bytes() == ONE_GPU
        (rootfs / PROFILE).unlink()
    assert snapshot(host) == before


@pytest.mark.root
def test_a_folder_in_the_way_fails(run_hook: HookRunner, tmp_path: Path) -> None:
    """As NVIDIA's hook fails: a folder at the file's path, or a file where a folder is needed."""
    require_root()
    bundle, rootfs = container(tmp_path)
    node(rootfs / "dev/nvidia0", 0)
    (rootfs / PROFILE).mkdir(parents=True)
    proc = run_hook(ARGS, bundle=bundle)
    assert proc.returncode == 11
    assert "cannot write the application profile" in proc.stderr
    assert "a folder is in the way" in proc.stderr
    assert os.listdir((rootfs / PROFILE).parent) == [(rootfs / PROFILE).name]  # no temp file
    shutil.rmtree(rootfs / "etc/nvidia")
    (rootfs / "etc/nvidia").write_text("a file\n")
    proc = run_hook(ARGS, bundle=bundle)
    assert proc.returncode == 11
    assert f"/etc/nvidia: {os.strerror(20)}" in proc.stderr  # ENOTDIR
    assert (rootfs / "etc/nvidia").read_text() == "a file\n"


@pytest.mark.root
@pytest.mark.parametrize("folder", ["etc/nvidia", "etc/nvidia/nvidia-application-profiles-rc.d"])
def test_a_folder_linked_to_the_host_stays_inside(
    run_hook: HookRunner, tmp_path: Path, folder: str
) -> None:
    """A folder on the way that links to a host folder (absolute, ../.., /proc/self/root):
    followed inside the root, where it names nothing, so the hook refuses (exit 11), and
    the host folder is unchanged."""
    require_root()
    bundle, rootfs = container(tmp_path)
    node(rootfs / "dev/nvidia0", 0)
    host = tmp_path / "host-etc"
    (host / "nvidia-application-profiles-rc.d").mkdir(parents=True)
    target = host if folder == "etc/nvidia" else host / "nvidia-application-profiles-rc.d"
    (rootfs / folder).parent.mkdir(parents=True, exist_ok=True)
    before = snapshot(host)
    for form in escape_forms(rootfs, target):
        (rootfs / folder).symlink_to(form)
        proc = run_hook(ARGS, bundle=bundle)
        assert proc.returncode == 11, (form, proc.stderr)
        assert snapshot(host) == before, form
        (rootfs / folder).unlink()


@pytest.mark.root
def test_dev_linked_to_the_host_counts_no_host_node(run_hook: HookRunner, tmp_path: Path) -> None:
    """/dev a link to a host folder with GPU nodes: resolved inside the root, where it is not,
    so no GPU counts and nothing is written."""
    require_root()
    bundle, rootfs = container(tmp_path)
    host_dev = tmp_path / "host-dev"
    node(host_dev / "nvidia0", 0)
    for form in escape_forms(rootfs, host_dev):
        (rootfs / "dev").symlink_to(form)
        proc = run_hook(ARGS, bundle=bundle)
        assert (proc.returncode, proc.stderr) == (0, ""), form
        assert not (rootfs / PROFILE).exists(), form
        (rootfs / "dev").unlink()


@pytest.mark.parametrize("bad", ["etc/nvidia/x.conf", "/etc/../x.conf", "/", "/etc//x.conf"])
def test_a_path_that_is_not_clean_is_a_usage_error(
    run_hook: HookRunner, tmp_path: Path, bad: str
) -> None:
    bundle, _ = container(tmp_path)
    proc = run_hook(["create-container", "--application-profile", bad], bundle=bundle)
    assert proc.returncode == 2
    assert "--application-profile must be a clean absolute file path" in proc.stderr


@pytest.mark.root
def test_hook_mode_runs_the_step_in_process(tmp_path: Path) -> None:
    """Hook mode (prestart) runs the injected hook's steps in process: the profile too."""
    require_root()
    from nvhook.discover.hooks import create_container_hook
    from nvhook.hook.prestart import _hook_step

    _, rootfs = container(tmp_path)
    node(rootfs / "dev/nvidia0", 0)
    hook = create_container_hook(
        application_profile=PROFILE_PATH, hook_path="/usr/local/bin/nvhook-hook"
    )
    _hook_step(hook, "", {})(str(rootfs))
    assert (rootfs / PROFILE).read_bytes() == ONE_GPU


def test_the_injected_hook_names_the_profile() -> None:
    from nvhook.discover.hooks import create_container_hook

    hook = create_container_hook(application_profile=PROFILE_PATH, hook_path="/x/nvhook-hook")
    assert hook.args == ("nvhook-hook", "create-container", "--application-profile", PROFILE_PATH)
    with pytest.raises(ValueError, match="clean absolute"):
        create_container_hook(application_profile="etc/x", hook_path="/x/nvhook-hook")
