"""oci.argv: runtime command lines as real callers send them, read as runc 1.1.5 reads them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from oci.argv import RuntimeArgs
from oci.errors import ArgvError, ExitCode
from tests.support.containers import require, require_root

CWD = "/run/bundles/current"


def parse(line: str | list[str], cwd: str | None = CWD) -> RuntimeArgs:
    return RuntimeArgs.parse(line.split() if isinstance(line, str) else line, cwd=cwd)


# -- what real callers send ----------------------------------------------------------------

B = "/run/containerd/io.containerd.runtime.v2.task/default/c1"


def test_containerd_create() -> None:
    argv = [
        "--root",
        "/run/containerd/runc/default",
        "--log",
        f"{B}/log.json",
        "--log-format",
        "json",
        "create",
        "--bundle",
        B,
        "--pid-file",
        f"{B}/init.pid",
        "c1",
    ]
    args = RuntimeArgs.parse(argv, cwd=B)
    assert args.argv == tuple(argv)
    assert args.command == "create"
    assert args.command_index == 6
    assert args.creates
    assert args.bundle == B
    assert args.container_id == "c1"
    assert args.pid_file == f"{B}/init.pid"
    assert args.root == "/run/containerd/runc/default"
    assert args.log_path == f"{B}/log.json"
    assert args.log_format == "json"
    assert args.global_flags == {
        "root": "/run/containerd/runc/default",
        "log": f"{B}/log.json",
        "log-format": "json",
    }
    assert args.command_flags == {"bundle": B, "pid-file": f"{B}/init.pid"}
    assert args.positionals == ("c1",)
    assert args.unknown_flags == ()
    assert not (args.debug or args.systemd_cgroup or args.help or args.version)


@pytest.mark.parametrize(
    ("line", "command", "container_id"),
    [
        (
            f"--root /run/containerd/runc/default --log {B}/log.json --log-format json start c1",
            "start",
            "c1",
        ),
        ("--root /r --log /l --log-format json delete c1", "delete", "c1"),
        ("--root /r --log /l --log-format json delete --force c1", "delete", "c1"),
        ("--root /r kill c1 9", "kill", "c1"),
        ("--root /r kill --all c1 9", "kill", "c1"),
        ("state c1", "state", "c1"),
        ("start c1", "start", "c1"),
        ("delete --force c1", "delete", "c1"),
        ("exec --process /tmp/p.json --detach --pid-file /p c1", "exec", "c1"),
        ("exec -t --cwd / c1 sh -c true", "exec", "c1"),
        ("ps --format json c1", "ps", "c1"),
        ("events --stats c1", "events", "c1"),
        ("update --resources - c1", "update", "c1"),
        ("pause c1", "pause", "c1"),
        ("features", "features", None),
        ("spec --rootless --bundle /x", "spec", None),
        ("list -q", "list", None),
        ("help create", "help", None),
        ("checkpoint --image-path /i c1", "checkpoint", "c1"),
        ("restore --bundle /b --image-path /i c1", "restore", "c1"),
    ],
)
def test_other_commands_pass_through(line: str, command: str, container_id: str | None) -> None:
    args = parse(line)
    assert args.command == command
    assert args.container_id == container_id
    assert not args.creates
    assert args.bundle is None
    assert args.argv == tuple(line.split())


def test_podman_create_without_global_flags() -> None:
    args = parse("create --bundle /var/lib/c/b --pid-file /run/c/pidfile abc123", cwd="/home/u")
    assert (args.command, args.bundle, args.container_id, args.pid_file) == (
        "create",
        "/var/lib/c/b",
        "abc123",
        "/run/c/pidfile",
    )
    assert args.global_flags == {}


def test_go_runc_create_with_every_option() -> None:
    args = parse(
        "--root /r --log /l --log-format json --systemd-cgroup --rootless=true create"
        " --bundle /b --pid-file /p --console-socket /s --no-pivot --no-new-keyring"
        " --preserve-fds 2 c1"
    )
    assert args.creates
    assert (args.bundle, args.container_id, args.console_socket) == ("/b", "c1", "/s")
    assert args.systemd_cgroup
    assert args.rootless == "true"
    assert args.command_flags == {
        "bundle": "/b",
        "pid-file": "/p",
        "console-socket": "/s",
        "no-pivot": None,
        "no-new-keyring": None,
        "preserve-fds": "2",
    }


def test_a_flag_value_that_is_the_word_create() -> None:
    args = parse("--root create create --bundle B id")
    assert args.root == "create"
    assert args.command == "create"
    assert args.command_index == 2
    assert args.bundle == f"{CWD}/B"
    assert args.container_id == "id"


@pytest.mark.parametrize(
    ("line", "bundle"),
    [
        ("create --bundle /b id", "/b"),
        ("create --bundle=/b id", "/b"),
        ("create -b /b id", "/b"),
        ("create -b=/b id", "/b"),
        ("create -bundle /b id", "/b"),
        ("create --bundle rel/dir id", f"{CWD}/rel/dir"),
        ("create --bundle ../up id", f"{CWD}/../up"),  # as chdir sees it: not normalised
        ("create id", CWD),
        ("create --bundle= id", CWD),
        ("create id --bundle /late", "/late"),  # urfave moves flags before the id
        ("create --bundle /a --bundle /b id", "/b"),  # the last one wins, as in Go
        ("run --bundle /b id", "/b"),
        ("run -d --keep --no-subreaper -b /b id", "/b"),
        ("-- create --bundle /b id", "/b"),
    ],
)
def test_bundle_forms(line: str, bundle: str) -> None:
    args = parse(line)
    assert args.bundle == bundle
    assert args.container_id == "id"
    assert args.creates


def test_bundle_defaults_to_the_process_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse("create id", cwd=None).bundle == str(tmp_path)
    assert parse("create -b sub id", cwd=None).bundle == f"{tmp_path}/sub"
    assert parse("create -b sub id", cwd="rel").bundle == f"{tmp_path}/rel/sub"


def test_no_working_directory_and_no_absolute_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert parse("create --bundle /b id", cwd=None).bundle == "/b"  # getcwd() not needed
    with pytest.raises(ArgvError, match="no absolute --bundle and no working directory"):
        parse("create id", cwd=None)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("--debug start c", {"debug": None}),
        ("-debug=false start c", {"debug": "false"}),
        ("--log=/l --log-format=text start c", {"log": "/l", "log-format": "text"}),
        ("--criu /usr/sbin/criu start c", {"criu": "/usr/sbin/criu"}),
        ("--rootless=auto start c", {"rootless": "auto"}),
        ("--rootless false start c", {"rootless": "false"}),
        ("--systemd-cgroup=1 start c", {"systemd-cgroup": "1"}),
        ("--cgroup-manager systemd start c", {"cgroup-manager": "systemd"}),  # crun's
    ],
)
def test_global_flag_forms(line: str, expected: dict[str, str | None]) -> None:
    args = parse(line)
    assert args.global_flags == expected
    assert (args.command, args.container_id) == ("start", "c")


def test_typed_global_flags() -> None:
    args = parse("--debug=false --systemd-cgroup=T --rootless=auto start c")
    assert (args.debug, args.systemd_cgroup, args.rootless) == (False, True, "auto")


def test_rootless_takes_a_value_as_in_runc() -> None:
    # runc 1.1.5: `--rootless value` is a string flag, so the next argument is its value
    # (runc then fails on `--bundle`, an unknown global flag: not a create)
    args = parse("--rootless create --bundle /b id")
    assert args.rootless == "create"
    assert args.unknown_flags == ("--bundle",)
    assert args.command == "/b"
    assert not args.creates


def test_unknown_flags_are_kept_in_place_and_skipped() -> None:
    argv = [
        "--bogus",
        "--new-flag=1",
        "--root",
        "/r",
        "create",
        "--future",
        "--bundle",
        "/b",
        "--x=y",
        "id",
    ]
    args = RuntimeArgs.parse(argv, cwd=CWD)
    assert args.argv == tuple(argv)
    assert args.unknown_flags == ("--bogus", "--new-flag=1", "--future", "--x=y")
    assert (args.root, args.command, args.bundle, args.container_id) == ("/r", "create", "/b", "id")


@pytest.mark.parametrize(
    "line",
    [
        "--version",
        "-v",
        "--help",
        "-h",
        "-version=true",
        "--version create --bundle /b id",
        "--help create",
        "create --help",
        "create -h --bundle /b",
        "run --help",
    ],
)
def test_help_and_version_run_nothing(line: str) -> None:
    args = parse(line)
    assert not args.creates
    assert args.bundle is None
    assert args.help or args.version


def test_no_arguments_at_all() -> None:
    args = parse([])
    assert (args.command, args.command_index, args.creates) == (None, None, False)


def test_the_input_is_never_modified() -> None:
    argv = ["--root", "/r", "create", "id", "--bundle", "/b"]
    copy = list(argv)
    args = RuntimeArgs.parse(argv, cwd=CWD)
    assert argv == copy
    assert args.argv == tuple(copy)  # the original order, not urfave's reordering
    assert args.positionals == ("id",)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("create --bundle", "create: flag needs a value: --bundle"),
        ("run --pid-file", "run: flag needs a value: --pid-file"),
        ("--root", "global options: flag needs a value: --root"),
        ("--root /r --log-format", "global options: flag needs a value: --log-format"),
        ("--debug=yes start c", "global options: invalid boolean value 'yes' for --debug=yes"),
        (
            "create --no-pivot=maybe id",
            "create: invalid boolean value 'maybe' for --no-pivot=maybe",
        ),
        (
            "create -b /x --bundle /y id",
            "create: cannot use two forms of the same flag: -b and -bundle",
        ),
        ("create", '"create" requires exactly 1 argument, the container id (got 0: none)'),
        (
            "create --bundle /b a b",
            '"create" requires exactly 1 argument, the container id (got 2: a b)',
        ),
        (
            "create --no-pivot id --bundle /b",
            '"create" requires exactly 1 argument, the container id (got 3: id --bundle /b)',
        ),
        ("---x create id", "global options: bad flag syntax: ---x"),
        ("create -=x id", "create: bad flag syntax: -=x"),
    ],
)
def test_errors_where_runc_refuses_the_command_line(line: str, message: str) -> None:
    with pytest.raises(ArgvError) as info:
        parse(line)
    assert str(info.value) == f"runtime arguments: {message}"
    assert info.value.exit_code == ExitCode.USAGE


def test_errors_after_the_subcommand_do_not_matter_for_other_commands() -> None:
    assert parse("kill c1 9 --whatever").container_id == "c1"
    assert parse("exec c1 --cwd").positionals == ("c1", "--cwd")  # exec: no reordering


def test_value_object() -> None:
    a, b = parse("create -b /b id"), parse("create -b /b id")
    assert a == b
    assert a != parse("create -b /c id")
    with pytest.raises(AttributeError):
        a.bundle = "/x"  # type: ignore[misc]
    assert repr(a).startswith("RuntimeArgs(argv=('create', '-b', '/b', 'id'), bundle='/b'")


# -- the same command lines through the real runc -------------------------------------------

CONFORMANCE = [
    "create --bundle /nvb1 id",
    "create --bundle=/nvb2 id",
    "create -b /nvb3 id",
    "create -bundle /nvb4 id",
    "create id --bundle /nvb5",
    "create --bundle rel6 id",
    "create id",
    "create --bundle= id",
    "create --pid-file -x --bundle /nvb7 id",
    "--root create create --bundle /nvb8 id",
    "--rootless=true create --bundle /nvb9 id",
    "--rootless true create --bundle /nvb10 id",
    "--debug=false --log-format json create --bundle /nvb11 id",
    "-- create --bundle /nvb12 id",
    "run -d --bundle /nvb13 id",
    "create --bundle /a --bundle /nvb14 id",
    "create --bundle",
    "create --no-pivot id --bundle /nvb15",
    "create",
    "create --bundle /nvb16 a b",
    "create -b /x --bundle /nvb17 id",
    "--debug=yes create --bundle /nvb18 id",
    "--version create --bundle /nvb19 id",
    "create --help --bundle /nvb20 id",
    "---x create --bundle /nvb21 id",
    "create id --bundle /nvb22 --",
    "create --bundle /nvb23 -- id",
    "create id -- --bundle /nvb24",
    "create --pid-file --bundle /nvb25 id",
    "create --bundle -- id",
]

_REFUSED = re.compile(
    r"Incorrect Usage|requires exactly|flag needs an argument|Cannot use two forms|invalid boolean"
    r"|bad flag syntax"
)


@pytest.mark.root
@pytest.mark.parametrize("line", CONFORMANCE)
def test_runc_reads_the_command_line_the_same_way(line: str, tmp_path: Path) -> None:
    runc = require("runc")
    require_root()
    cwd = tmp_path / "cwd"
    cwd.mkdir()  # no config.json here: runc fails before creating anything
    argv = line.split()
    state = ["--root", str(tmp_path / "state")] if not line.startswith("--root") else []
    proc = subprocess.run(
        [runc, *state, *argv], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )
    output = proc.stdout + proc.stderr
    try:
        ours: RuntimeArgs | None = RuntimeArgs.parse([*state, *argv], cwd=str(cwd))
    except ArgvError:
        ours = None

    if ours is None:
        assert _REFUSED.search(output), output
        return
    if not ours.creates:  # help or version: runc prints and succeeds
        assert proc.returncode == 0, output
        return
    chdir = re.search(r"chdir (\S+): no such file or directory", output)
    if chdir is not None:
        expected = chdir.group(1)
        assert ours.bundle == (expected if expected.startswith("/") else f"{cwd}/{expected}")
    else:
        assert "JSON specification file config.json not found" in output, output
        assert ours.bundle == str(cwd)
    assert proc.returncode != 0
    assert not os.path.exists(tmp_path / "state" / "id")
