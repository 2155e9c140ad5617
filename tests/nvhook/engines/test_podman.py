"""``nvhook runtime configure --runtime podman``: containers.conf edits (the real podman runs
a container through them in tests/e2e/test_podman_runtime_config.py)."""

from __future__ import annotations

from pathlib import Path

from nvhook.engines import DEFAULT_CONFIGS
from nvhook.engines.podman import DEFAULT_CONFIG, plan_configure

SHIM = "/usr/local/bin/nvhook-runtime"


def _new(path: Path, **kwargs: bool) -> str:
    change = plan_configure(str(path), name="nvidia", runtime_path=SHIM, **kwargs).changes[0]
    assert change.new is not None
    return change.new.decode()


def test_default_path() -> None:
    assert DEFAULT_CONFIG == DEFAULT_CONFIGS["podman"] == "/etc/containers/containers.conf"


def test_new_file(tmp_path: Path) -> None:
    assert _new(tmp_path / "containers.conf") == (
        "# Written by `nvhook runtime configure --runtime podman`: runtime 'nvidia'.\n"
        "# `nvhook runtime unconfigure --runtime podman` removes this file.\n"
        "\n"
        "[engine.runtimes]\n"
        f'nvidia = ["{SHIM}"]\n'
    )


def test_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "containers.conf"
    text = (
        "[containers]\n"
        'netns = "none"\n'
        "\n"
        "[engine]\n"
        'runtime = "runc"   # crun fails here\n'
        'cgroup_manager = "cgroupfs"\n'
        "\n"
        "[engine.runtimes]\n"
        'runc = ["/usr/sbin/runc"]\n'
        'nvidia = ["/old/path"]\n'
        "\n"
        "[network]\n"
        'network_config_dir = "/x"\n'
    )
    path.write_text(text)
    new = _new(path, set_as_default=True)
    assert new == text.replace('"runc"   #', '"nvidia"   #').replace('"/old/path"', f'"{SHIM}"')
