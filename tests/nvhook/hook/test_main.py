"""nvhook.hook.args and nvhook.hook.dispatch: the command line of ``nvhook-hook`` (by hand)."""

from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvhook.errors import UsageError
from nvhook.hook.args import COMMANDS, USAGE, parse_args
from nvhook.hook.dispatch import main
from oci.errors import ExitCode

from .conftest import HookRunner

MODULES = ["nvhook.hook.dispatch", "nvhook.discover.hooks",
           "nvhook.rootfs.safepath", "nvhook.rootfs.spec",
           *(f"nvhook.hook.{m}" for m in ("args", "create_container", "create_symlinks", "netdev",
                                          "update_ldcache", "device_files"))]  # fmt: skip


def test_parse_args_forms() -> None:
    assert parse_args(["update-ldcache", "--folder", "/a", "--folder=/b", "--ldconfig=/x"]) == (
        "update-ldcache",
        {"--folder": ["/a", "/b"], "--ldconfig": ["/x"]},
    )
    assert parse_args(["netdev", "--device", "a=b"]) == ("netdev", {"--device": ["a=b"]})
    assert parse_args(["create-container", "--link", "t::/l", "--folder", "/a"]) == (
        "create-container",
        {
            "--params": [],
            "--link": ["t::/l"],
            "--device-link": [],
            "--folder": ["/a"],
            "--ldconfig": [],
            "--cuda-compat": [],
            "--application-profile": [],
        },
    )
    assert parse_args(["create-container", "--device-link", "../card1::/dev/dri/c"])[1][
        "--device-link"
    ] == ["../card1::/dev/dri/c"]
    assert parse_args(["create-container", "--params", "/p"])[1]["--params"] == ["/p"]
    assert parse_args(["create-container", "--folder=/a"])[1]["--folder"] == ["/a"]
    profile = parse_args(["create-container", "--application-profile", "/etc/p.conf"])[1]
    assert profile["--application-profile"] == ["/etc/p.conf"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no command given"),
        (["bogus"], "unknown command 'bogus'"),
        (["netdev", "--device"], "--device needs a value"),
        (["netdev", "--link", "a::/b"], "unknown option '--link'"),
        (
            ["update-ldcache", "--folder", "/a", "--ldconfig", "/x", "--ldconfig", "/y"],
            "more than once",
        ),
        (["create-symlinks"], "at least one --link"),
        (
            ["create-container", "--ldconfig", "/x"],
            "at least one --params or --link or --device-link or --folder or --cuda-compat or"
            " --application-profile",
        ),
        (["create-container", "--params", "/p", "--params=/q"], "--params given more than once"),
    ],
)
def test_parse_args_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_args(argv)


def test_main_usage_error_and_help(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["bogus"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "nvhook-hook: unknown command 'bogus' "
        "(one of: create-container, update-ldcache, create-symlinks, netdev, prestart)",
        "run `nvhook-hook --help` for usage",
    ]
    assert main(["--help"]) == 0
    assert capsys.readouterr().out == USAGE
    for command in COMMANDS:
        assert command in USAGE


def test_main_reads_the_state_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = {"ociVersion": "1.0.2", "id": "c", "status": "stopped", "bundle": "/b"}
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(state).encode())))
    assert main(["netdev", "--device", "a=b"]) == ExitCode.HOOK
    assert "the container state has no pid" in capsys.readouterr().err


def test_config_without_root_path(run_hook: HookRunner, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"ociVersion": "1.0.2"}))
    proc = run_hook(["create-symlinks", "--link", "a::/b"], bundle=tmp_path)
    assert proc.returncode == ExitCode.HOOK
    assert (
        proc.stderr.strip()
        == f"nvhook-hook create-symlinks: {tmp_path}/config.json: root.path is missing"
    )


def test_relative_root_path_is_relative_to_the_bundle(run_hook: HookRunner, tmp_path: Path) -> None:
    (tmp_path / "rootfs").mkdir()
    (tmp_path / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    proc = run_hook(["create-symlinks", "--link", "t::/l"], bundle=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "rootfs" / "l").is_symlink()


def test_create_container_makes_the_links_then_the_cache(
    run_hook: HookRunner, tmp_path: Path
) -> None:
    """One process does both jobs, links first: ldconfig then sees the SONAME link."""
    rootfs = tmp_path / "rootfs"
    (rootfs / "lib64").mkdir(parents=True)
    (rootfs / "lib64" / "ld-linux-x86-64.so.2").write_bytes(b"")  # an image with a loader
    (tmp_path / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    proc = run_hook(
        ["create-container", "--link", "t::/usr/lib/l", "--folder", "/usr/lib"], bundle=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert os.readlink(tmp_path / "rootfs" / "usr" / "lib" / "l") == "t"
    assert (rootfs / "etc" / "ld.so.conf.d" / "00-nvhook.conf").read_text().endswith("/usr/lib\n")
    assert (rootfs / "etc" / "ld.so.cache").is_file()
    # only links: no ld.so.conf.d is written
    other = tmp_path / "other"
    (other / "rootfs").mkdir(parents=True)
    (other / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    proc = run_hook(["create-container", "--link", "t::/l"], bundle=other)
    assert proc.returncode == 0, proc.stderr
    assert (other / "rootfs" / "l").is_symlink()
    assert not (other / "rootfs" / "etc").exists()


def test_import_stays_light() -> None:
    """No click, pydantic or pyroute2 on the hook's path (each is tens to hundreds of ms)."""
    code = (
        "import sys; import nvhook.hook, nvhook.hook.update_ldcache, nvhook.hook.create_symlinks, "
        "nvhook.discover.hooks; "
        "print(sorted(m for m in ('click', 'pydantic', 'pyroute2', 'argparse') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", MODULES)
def test_all_is_complete_and_sorted(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    public = {
        n for n, v in vars(module).items()
        if not n.startswith("_") and getattr(v, "__module__", name) == name
        and (callable(v) or n.isupper()) and n not in ("TYPE_CHECKING",)
    }  # fmt: skip
    assert public <= set(exported), public - set(exported)
