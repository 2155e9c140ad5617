"""oci.bundle: config.json load (errors naming file and field) and careful atomic save."""

from __future__ import annotations

import copy
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from oci.bundle import Bundle, check_spec
from oci.errors import BundleError, SpecError
from tests.support.containers import require_root

SPECS_DIR = Path(__file__).resolve().parents[1] / "data" / "specs"
RUNC_SPEC = (SPECS_DIR / "runc-spec.json").read_bytes()  # tab-indented, as `runc spec` writes
NOBODY = 65534


@pytest.fixture
def bundle_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_bytes(RUNC_SPEC)
    return tmp_path


def files_in(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


class Snapshot:
    """config.json's bytes, inode and mode, to assert that a failure left it untouched."""

    def __init__(self, config: Path) -> None:
        self.config = config
        st = config.stat()
        self.data, self.inode, self.mode = config.read_bytes(), st.st_ino, st.st_mode

    def assert_untouched(self) -> None:
        st = self.config.stat()
        assert self.config.read_bytes() == self.data
        assert (st.st_ino, st.st_mode) == (self.inode, self.mode)
        assert files_in(self.config.parent) == ["config.json"]  # no temporary file left


def edited(spec: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    out["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=0")
    return out


# -- load ----------------------------------------------------------------------------------


def test_load_returns_the_whole_spec_and_a_relative_path_becomes_absolute(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(bundle_dir.parent)
    bundle = Bundle(bundle_dir.name)
    assert bundle.path == str(bundle_dir)
    assert bundle.config_path == str(bundle_dir / "config.json")
    assert bundle.load() == json.loads(RUNC_SPEC)


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"/config\.json: no such file: the bundle has no config"):
        Bundle(tmp_path).load()


def test_load_missing_bundle_directory(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file: the bundle directory does not exist"):
        Bundle(tmp_path / "gone").load()


@pytest.mark.parametrize("make", [os.mkdir, os.mkfifo], ids=["directory", "fifo"])
def test_load_refuses_what_is_not_a_regular_file(
    tmp_path: Path, make: Callable[[Path], None]
) -> None:
    make(tmp_path / "config.json")  # a FIFO must not hang the runtime
    with pytest.raises(SpecError, match=r"config\.json: cannot read: not a regular file"):
        Bundle(tmp_path).load()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b'{"ociVersion": "1.0.2",\n "x": "\xc3\x28"}',
            "invalid UTF-8 at byte offset 31 (byte 0xc3)",
        ),
        (
            b'{"ociVersion": "1.0.2",\n  "process": {,}}',
            "invalid JSON at line 2 column 15: expecting a key",
        ),
        (b"", "invalid JSON: no value: the text is empty or only whitespace"),
        (b'{"a": 1} {"b": 2}', "invalid JSON at line 1 column 10: unexpected data after"),
        (b'{"a": NaN}', "invalid JSON: NaN is not a JSON value"),
        (b'\xef\xbb\xbf{"a": 1}', "invalid JSON at line 1 column 1: a byte order mark"),
        (b'[{"ociVersion": "1.0.2"}]', "the top level must be a JSON object, not array"),
        (b'"config"', "the top level must be a JSON object, not string"),
    ],
)
def test_load_reports_bad_content_with_file_and_position(
    tmp_path: Path, data: bytes, message: str
) -> None:
    (tmp_path / "config.json").write_bytes(data)
    with pytest.raises(SpecError, match="^" + re.escape(f"{tmp_path}/config.json: {message}")):
        Bundle(tmp_path).load()


BASE = json.loads(RUNC_SPEC)


def set_at(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change to BASE: set the dotted ``path`` (list items by index) to ``value``."""
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]

    def change(spec: Any) -> None:
        for step in parents:
            spec = spec[step]
        spec[last] = value

    return change


def delete_at(path: str) -> Callable[[dict[str, Any]], None]:
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]

    def change(spec: Any) -> None:
        for step in parents:
            spec = spec[step]
        del spec[last]

    return change


M = "must be"
STRUCTURE_CASES = [
    (set_at("process", None), f"process {M} an object, not null"),
    (set_at("process.env", "PATH=/bin"), f"process.env {M} an array of strings, not string"),
    (set_at("process.env", ["A=1", "B=2", "C=3", 4]), f"process.env[3] {M} a string, not number"),
    (set_at("process.user", []), f"process.user {M} an object, not array"),
    (set_at("process.user.uid", "0"), f"process.user.uid {M} an integer, not string"),
    (set_at("process.user.gid", True), f"process.user.gid {M} an integer, not boolean"),
    (
        set_at("process.user.uid", -1),
        f"process.user.uid {M} an integer from 0 to 4294967295, not -1",
    ),
    (
        set_at("process.user.gid", 2**32),
        f"process.user.gid {M} an integer from 0 to 4294967295, not 4294967296",
    ),
    (
        set_at("process.user.additionalGids", [5, 1.5]),
        f"process.user.additionalGids[1] {M} an integer, not number",
    ),
    (set_at("root", "rootfs"), f"root {M} an object, not string"),
    (set_at("root.path", None), f"root.path {M} a string, not null"),
    (set_at("mounts", {}), f"mounts {M} an array of objects, not object"),
    (set_at("mounts.2", "/proc"), f"mounts[2] {M} an object, not string"),
    (delete_at("mounts.1.destination"), "mounts[1].destination is missing"),
    (set_at("mounts.0.destination", 7), f"mounts[0].destination {M} a string, not number"),
    (set_at("hooks", []), f"hooks {M} an object, not array"),
    (
        set_at("hooks", {"prestart": {"path": "/x"}}),
        f"hooks.prestart {M} an array of objects, not object",
    ),
    (set_at("hooks", {"poststop": [{"args": []}]}), "hooks.poststop[0].path is missing"),
    (set_at("annotations", []), f"annotations {M} an object, not array"),
    (
        set_at("annotations", {"a": "1", "io.x/y": 2}),
        f'annotations["io.x/y"] {M} a string, not number',
    ),
    (set_at("linux", None), f"linux {M} an object, not null"),
    (
        set_at("linux.devices", [{"path": "/dev/x"}, "/dev/y"]),
        f"linux.devices[1] {M} an object, not string",
    ),
    (set_at("linux.devices", [{"type": "c"}]), "linux.devices[0].path is missing"),
    (set_at("linux.resources", []), f"linux.resources {M} an object, not array"),
    (
        set_at("linux.resources.devices", {"allow": False}),
        f"linux.resources.devices {M} an array of objects, not object",
    ),
    (
        set_at("linux.resources.devices", [{"allow": False}, None]),
        f"linux.resources.devices[1] {M} an object, not null",
    ),
]


@pytest.mark.parametrize(("change", "problem"), STRUCTURE_CASES)
def test_load_checks_the_fields_nvhook_edits(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], problem: str
) -> None:
    spec = copy.deepcopy(BASE)
    change(spec)
    assert check_spec(BASE) is None
    (tmp_path / "config.json").write_text(json.dumps(spec))
    with pytest.raises(SpecError) as info:
        Bundle(tmp_path).load()
    assert str(info.value) == f"{tmp_path}/config.json: {problem}"


def test_check_accepts_absent_fields_and_unknown_ones() -> None:
    assert check_spec({}) is None
    assert check_spec({"ociVersion": "1.2.0", "process": {}, "linux": {"x": None}}) is None
    assert check_spec({"vendor": {"process": 1}, "hooks": {"future": []}}) is None


def test_duplicate_keys_last_wins_and_an_unchanged_save_keeps_them(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(b'{"ociVersion": "1.0.0", "hostname": "a", "hostname": "b"}')
    bundle = Bundle(tmp_path)
    spec = bundle.load()
    assert list(spec.items()) == [("ociVersion", "1.0.0"), ("hostname", "b")]  # as Go reads it
    before = Snapshot(config)
    assert bundle.save(spec) is False
    before.assert_untouched()


# -- save: when to write ------------------------------------------------------------------


def test_unchanged_spec_is_not_rewritten(bundle_dir: Path) -> None:
    before = Snapshot(bundle_dir / "config.json")
    bundle = Bundle(bundle_dir)
    spec = bundle.load()
    assert bundle.save(spec) is False
    assert bundle.save(copy.deepcopy(spec)) is False
    before.assert_untouched()


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s.update(ociVersion=s.pop("ociVersion")),  # same value, keys reordered
        lambda s: s["process"].update(terminal=1),  # true -> 1: equal in Python, not in JSON
        lambda s: s["process"]["rlimits"][0].update(hard=1024.0),  # 1024 -> 1024.0
    ],
    ids=["key-order", "true-vs-1", "int-vs-float"],
)
def test_changes_python_equality_misses_are_written(
    bundle_dir: Path, change: Callable[[dict[str, Any]], None]
) -> None:
    bundle = Bundle(bundle_dir)
    spec = bundle.load()
    change(spec)
    assert spec == json.loads(RUNC_SPEC)  # Python sees no difference
    assert bundle.save(spec) is True
    written = (bundle_dir / "config.json").read_text()
    assert written == json.dumps(spec, separators=(",", ":"))
    assert list(Bundle(bundle_dir).load()) == list(spec)


def test_an_edited_spec_is_told_apart_without_serialising_what_was_read(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The common save (a create that added devices): one serialisation, the new value's."""
    from oci import jsoncodec

    bundle = Bundle(bundle_dir)
    spec = bundle.load()
    spec["process"]["env"] = [*spec["process"]["env"], "NVIDIA_VISIBLE_DEVICES=0"]
    encoded: list[object] = []
    real = jsoncodec.dumpb

    def counting(value: object) -> bytes:
        encoded.append(value)
        return real(value)

    monkeypatch.setattr(jsoncodec, "dumpb", counting)
    assert bundle.save(spec) is True
    assert encoded == [spec]
    assert json.loads((bundle_dir / "config.json").read_text()) == spec


def test_changed_spec_is_written_compact_with_mode_kept(bundle_dir: Path) -> None:
    config = bundle_dir / "config.json"
    config.chmod(0o640)
    inode = config.stat().st_ino
    bundle = Bundle(bundle_dir)
    spec = edited(bundle.load())
    assert bundle.save(spec) is True
    assert config.read_bytes() == json.dumps(spec, separators=(",", ":")).encode()
    assert config.stat().st_mode & 0o7777 == 0o640
    assert config.stat().st_ino != inode  # a new file renamed over the old one
    assert files_in(bundle_dir) == ["config.json"]
    # the bundle now tracks what it wrote
    assert bundle.save(spec) is False
    spec["hostname"] = "gpu"
    assert bundle.save(spec) is True
    assert json.loads(config.read_bytes())["hostname"] == "gpu"


def test_save_renames_a_whole_file_in_and_fsyncs_nothing(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No journal commit on a create's path: no engine reads a bundle back after a crash."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync-file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    bundle = Bundle(bundle_dir)
    spec = edited(bundle.load())
    assert bundle.save(spec) is True
    assert events == ["rename"]
    assert json.loads((bundle_dir / "config.json").read_bytes()) == spec


@pytest.mark.root
def test_owner_is_kept_when_running_as_root(bundle_dir: Path) -> None:
    require_root()
    config = bundle_dir / "config.json"
    os.chown(config, 1234, 5678)
    config.chmod(0o4750)  # a setuid bit survives too: chown comes before chmod
    bundle = Bundle(bundle_dir)
    assert bundle.save(edited(bundle.load())) is True
    st = config.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (1234, 5678, 0o4750)


def test_save_without_load_compares_with_the_file_there_and_keeps_its_mode(
    bundle_dir: Path,
) -> None:
    config = bundle_dir / "config.json"
    config.chmod(0o600)
    before = Snapshot(config)
    assert Bundle(bundle_dir).save(json.loads(RUNC_SPEC)) is False
    before.assert_untouched()
    assert Bundle(bundle_dir).save(edited(json.loads(RUNC_SPEC))) is True
    assert config.stat().st_mode & 0o7777 == 0o600


def test_save_without_load_creates_a_missing_file_0644(tmp_path: Path) -> None:
    assert Bundle(tmp_path).save({"ociVersion": "1.0.2"}) is True
    assert (tmp_path / "config.json").read_bytes() == b'{"ociVersion":"1.0.2"}'
    assert (tmp_path / "config.json").stat().st_mode & 0o7777 == 0o644


def test_a_symlinked_config_is_replaced_in_the_bundle_and_its_target_left_alone(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "template.json"
    shared.write_bytes(RUNC_SPEC)
    bundle_dir = tmp_path / "bundle"
    bundle_dir.mkdir()
    (bundle_dir / "config.json").symlink_to(shared)
    bundle = Bundle(bundle_dir)
    spec = edited(bundle.load())
    assert bundle.save(spec) is True
    assert shared.read_bytes() == RUNC_SPEC
    assert not (bundle_dir / "config.json").is_symlink()
    assert json.loads((bundle_dir / "config.json").read_bytes()) == spec


# -- save: failures leave the original untouched --------------------------------------------


def test_a_file_changed_on_disk_since_load_is_not_overwritten(bundle_dir: Path) -> None:
    bundle = Bundle(bundle_dir)
    spec = bundle.load()
    other = b'{"ociVersion":"1.0.2","written":"by someone else"}'
    (bundle_dir / "config.json").write_bytes(other)
    with pytest.raises(BundleError, match="changed on disk since it was loaded"):
        bundle.save(edited(spec))
    assert (bundle_dir / "config.json").read_bytes() == other


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": {1, 2}}, "cannot write the spec as JSON: a value of type set cannot be written"),
        ({"a": float("nan")}, "cannot write the spec as JSON: Out of range float values"),
        ({"process": {"env": [1]}}, r"not writing an invalid spec: process.env\[0\] must be"),
        ([], "the spec must be a JSON object, not array"),
    ],
)
def test_a_spec_that_cannot_be_written_is_refused(
    bundle_dir: Path, value: Any, message: str
) -> None:
    before = Snapshot(bundle_dir / "config.json")
    bundle = Bundle(bundle_dir)
    bundle.load()
    with pytest.raises(BundleError, match=rf"^{bundle_dir}/config\.json: {message}"):
        bundle.save(value)
    before.assert_untouched()


def _raise_eio(*args: object) -> None:
    raise OSError(5, "Input/output error")


@pytest.mark.parametrize(
    ("name", "fake", "step"),
    [
        ("open", None, "create a temporary file in"),
        ("write", None, "write "),
        ("fchmod", _raise_eio, "give .* the mode 0644"),
        ("close", None, "close "),
        ("replace", _raise_eio, "rename .* over it"),
    ],
)
def test_a_failing_step_leaves_the_original_and_no_temporary_file(
    bundle_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    fake: Callable[..., Any] | None,
    step: str,
) -> None:
    before = Snapshot(bundle_dir / "config.json")
    bundle = Bundle(bundle_dir)
    spec = edited(bundle.load())
    real = getattr(os, name)
    if fake is None:
        # fail only on the temporary file's descriptor / path, after it was created
        state: dict[str, Any] = {"tmp_fd": None}
        real_open = os.open

        def tracking_open(path: str, flags: int, mode: int = 0o777) -> int:
            if ".tmp" in os.fspath(path) and name == "open":
                raise OSError(13, "Permission denied")
            fd = real_open(path, flags, mode)
            if ".tmp" in os.fspath(path):
                state["tmp_fd"] = fd
            return fd

        def failing(*args: Any) -> Any:
            if args and args[0] == state["tmp_fd"]:
                if name == "write":
                    real(args[0], bytes(args[1])[:7])  # a partial write first
                    raise OSError(28, "No space left on device")
                real(*args)  # really close, then report a failure (as NFS may)
                raise OSError(5, "Input/output error")
            return real(*args)

        monkeypatch.setattr(os, "open", tracking_open)
        if name != "open":
            monkeypatch.setattr(os, name, failing)
    else:
        monkeypatch.setattr(os, name, fake)
    with pytest.raises(BundleError, match=rf"^{bundle_dir}/config\.json: cannot {step}") as info:
        bundle.save(spec)
    monkeypatch.undo()
    assert "\n" not in str(info.value)
    before.assert_untouched()


def test_an_interrupt_while_writing_removes_the_temporary_file(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = Snapshot(bundle_dir / "config.json")
    bundle = Bundle(bundle_dir)
    spec = edited(bundle.load())

    def interrupted(fd: int, mode: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fchmod", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bundle.save(spec)
    monkeypatch.undo()
    before.assert_untouched()


# -- permissions: as an unprivileged user -------------------------------------------------


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A bundle directory that another user can enter (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="nvhook-bundle-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for child in path.iterdir():
            child.unlink()
        path.rmdir()


def unprivileged(action: Callable[[], object]) -> str:
    """Run ``action`` as nobody when root (else as is); return its error message, or ''."""
    if os.geteuid() != 0:
        try:
            action()
        except (SpecError, BundleError) as e:
            return str(e)
        return ""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop privileges, report through the pipe, never return to pytest
        code = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            action()
        except (SpecError, BundleError) as e:
            os.write(write_end, str(e).encode())
        except BaseException as e:
            os.write(write_end, f"unexpected {type(e).__name__}: {e}".encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        message = f.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, message
    return message


def test_save_into_a_read_only_directory_fails_cleanly(shared_dir: Path) -> None:
    config = shared_dir / "config.json"
    config.write_bytes(RUNC_SPEC)
    config.chmod(0o666)  # writable file, but the directory is not: no temp file possible
    if os.geteuid() != 0:
        shared_dir.chmod(0o555)
    before = Snapshot(config)

    def save() -> None:
        bundle = Bundle(shared_dir)
        bundle.save(edited(bundle.load()))

    message = unprivileged(save)
    shared_dir.chmod(0o755)
    assert message == (
        f"{config}: cannot create a temporary file in {shared_dir}: Permission denied"
    )
    before.assert_untouched()


def test_load_of_an_unreadable_file(shared_dir: Path) -> None:
    config = shared_dir / "config.json"
    config.write_bytes(RUNC_SPEC)
    config.chmod(0o600)
    if os.geteuid() != 0:
        config.chmod(0o000)
    message = unprivileged(lambda: Bundle(shared_dir).load())
    assert message == f"{config}: cannot read: Permission denied"
