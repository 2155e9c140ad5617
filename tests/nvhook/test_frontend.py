"""The native front-end (nvhook/native): it execs the runtime only where the shim would.

The front-end is built here with the sanitizers (``-fsanitize=address,undefined``) and a
stand-in Python launcher; both the stand-in launcher and the stand-in runtime record their
argv, so each call shows who got it. The data file comes from the real writer
(:func:`nvhook.native.ensure_data`, as the runtime call runs it after loading the
settings). Checks: runc's argv conformance table of
``tests/oci/test_argv.py`` (the front-end must read the same bundle as ``oci.argv``), a
fuzz test against :func:`nvhook.requests.parse.parse_requests` (whenever the shim would
edit, the call is handed over), and the data file's hardening.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook import native
from nvhook.errors import NvhookError
from nvhook.legacyhook import LEGACY_HOOK
from nvhook.native import FORMAT, SOURCE, build, data_name, ensure_data
from nvhook.requests.parse import parse_requests
from nvhook.requests.policy import Policy
from nvhook.settings import load_settings
from oci import argv as oci_argv
from oci.argv import CREATE_COMMANDS, RuntimeArgs
from oci.bundle import Bundle
from oci.errors import ArgvError, ExitCode, OciError
from tests.oci import test_argv
from tests.support.native import build_sanitized_program, require_cc

RECORDER = '#!/bin/sh\nprintf "%s\\n" "{who}" "$PWD" "$@" > "$FRONTEND_RECORD"\n'


def build_sanitized(work: Path, recorder: str, *defines: str) -> tuple[Path, Path]:
    """The front-end built in ``work`` with ASan and UBSan and ``defines`` (``-DNAME=…``),
    handing over to a stand-in launcher written from ``recorder`` (``{who}``: "launcher");
    the binary and the launcher."""
    launcher = work / "launcher"
    launcher.write_text(recorder.format(who="launcher"))
    launcher.chmod(0o755)
    binary = build_sanitized_program(SOURCE, work / "nvhook-runtime", str(launcher), *defines)
    return binary, launcher


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The front-end with the sanitizers, handing over to a recording stand-in launcher."""
    return build_sanitized(tmp_path_factory.mktemp("frontend"), RECORDER)[0]


class Frontend:
    def __init__(self, binary: Path, tmp: Path) -> None:
        self.binary = binary
        self.tmp = tmp
        self.record = tmp / "record"
        self.runtime = tmp / "runc"
        self.runtime.write_text(RECORDER.format(who="runtime"))
        self.runtime.chmod(0o755)
        self.config = tmp / "config.toml"
        self.cache = tmp / "cache"
        self.log = tmp / "shim.log"
        self.configure()

    def configure(self, extra: str = "", *, log: bool = True) -> None:
        log_file = str(self.log) if log else ""
        self.config.write_text(
            f'[runtime]\nruntimes = ["{self.runtime}"]\nlog_file = "{log_file}"\n{extra}'
        )
        self.settings = load_settings(
            str(self.config), cache_dir=str(self.cache), loaded=ensure_data
        )

    def data_file(self) -> Path:
        return self.cache / data_name(str(self.config), os.stat(self.config))

    def env(self) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "NVHOOK_CONFIG": str(self.config),
            "NVHOOK_CACHE_DIR": str(self.cache),
            "FRONTEND_RECORD": str(self.record),
            "ASAN_OPTIONS": "detect_leaks=0",
        }

    def call(self, argv: list[str], cwd: Path | None = None, **env: str) -> tuple[str, list[str]]:
        """Who got the call ("runtime" or "launcher") and the argv it got (after argv[0])."""
        self.record.unlink(missing_ok=True)
        proc = subprocess.run(
            [str(self.binary), *argv],
            cwd=cwd or self.tmp,
            env={**self.env(), **env},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        who, _cwd, *got = self.record.read_text().split("\n")[:-1]
        return who, got

    def bundle(self, spec: dict[str, object] | bytes, name: str = "b") -> Path:
        b = self.tmp / name
        b.mkdir(exist_ok=True)
        data = spec if isinstance(spec, bytes) else json.dumps(spec).encode()
        (b / "config.json").write_bytes(data)
        return b


@pytest.fixture
def fe(built: Path, tmp_path: Path) -> Frontend:
    return Frontend(built, tmp_path)


PLAIN = {"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": ["PATH=/bin"]}}
EXAMPLE_PREFIX = '[cdi]\nannotation_prefixes = ["example.com/"]\n'
MOUNTS_ON = "[policy]\naccept_volume_mounts = true\n"


def _mount(destination: str) -> dict[str, str]:
    return {"destination": destination, "source": "/dev/null"}


def _with_env(*env: str) -> dict[str, object]:
    return {"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": ["PATH=/bin", *env]}}


# -- what it execs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line", ["state c1", "--root /r start c1", "kill c1 9", "delete --force c1", "features", ""]
)
def test_pass_through_goes_to_the_runtime_with_the_argv_unchanged(fe: Frontend, line: str) -> None:
    assert fe.call(line.split()) == ("runtime", line.split())


def test_create_without_request_goes_to_the_runtime_and_is_logged(fe: Frontend) -> None:
    b = fe.bundle(PLAIN)
    argv = ["--root", "/r", "create", "--bundle", str(b), "--pid-file", "p", "c1"]
    assert fe.call(argv) == ("runtime", argv)
    (record,) = [json.loads(line) for line in fe.log.read_text().splitlines()]
    assert record.pop("time") and record.pop("pid") and record.pop("duration_ms") >= 0
    assert record == {"level": "info", "id": "c1", "command": "create", "mode": None,
                      "devices": "", "written": False}  # fmt: skip


@pytest.mark.parametrize(
    ("env", "extra"),
    [
        (["NVIDIA_VISIBLE_DEVICES=0"], ""),
        (["NVIDIA_VISIBLE_DEVICES=void"], ""),  # no edit, but a trigger: handed over
        (["CUDA_VERSION=12.4"], ""),
        (["NVIDIA_IMEX_CHANNELS=0"], ""),
    ],
)
def test_a_trigger_hands_the_create_over(fe: Frontend, env: list[str], extra: str) -> None:
    b = fe.bundle(_with_env(*env))
    argv = ["create", "--bundle", str(b), "c1"]
    assert fe.call(argv) == ("launcher", argv)
    assert not fe.log.exists()


@pytest.mark.parametrize(
    ("spec", "extra"),
    [
        ({**PLAIN, "annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=0"}}, ""),
        ({**PLAIN, "annotations": {"example.com/gpus": "x"}}, EXAMPLE_PREFIX),
        ({**PLAIN, "mounts": [_mount("/var//run/nvidia-container-devices/0")]}, MOUNTS_ON),
        ({"process": {"capabilities": {"bounding": ["CAP_SYS_ADMIN"]}}},
         "[policy]\nprivileged_gets_all = true\n"),
        ({**PLAIN, "note": "\\u004eVIDIA_VISIBLE_DEVICES=0"}, ""),  # written as \u escape below
    ],
)  # fmt: skip
def test_every_kind_of_request_is_handed_over(
    fe: Frontend, spec: dict[str, object], extra: str
) -> None:
    fe.configure(extra)
    data = json.dumps(spec).encode().replace(b"\\\\u004e", b"\\u004e")
    b = fe.bundle(data)
    assert fe.call(["create", "--bundle", str(b), "c1"])[0] == "launcher"


@pytest.mark.parametrize(
    ("spec", "extra"),
    [
        ({**PLAIN, "annotations": {"example.com/gpus": "x"}}, ""),
        ({**PLAIN, "mounts": [_mount("/var/run/nvidia-container-devices/0")]}, ""),
        ({"process": {"capabilities": {"bounding": ["CAP_SYS_ADMIN"]}}}, ""),
    ],
)  # fmt: skip
def test_what_the_policy_ignores_is_not_a_trigger(
    fe: Frontend, spec: dict[str, object], extra: str
) -> None:
    fe.configure(extra)
    b = fe.bundle(spec)
    assert fe.call(["create", "--bundle", str(b), "c1"])[0] == "runtime"


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_the_front_end_never_picks_itself(fe: Frontend, tmp_path: Path, link: str) -> None:
    """``runc`` on PATH that is the front-end itself, through a symbolic or a hard link, is
    skipped (the call would run through nvhook twice), as the shim skips itself."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    if link == "symbolic":
        (first / "runc").symlink_to(fe.binary)
    else:
        os.link(fe.binary, first / "runc")
    shutil.copy(fe.runtime, second / "runc")
    fe.configure()
    fe.config.write_text(fe.config.read_text().replace(str(fe.runtime), "runc"))
    fe.settings = load_settings(str(fe.config), cache_dir=str(fe.cache), loaded=ensure_data)
    who, argv = fe.call(["state", "c1"], PATH=f"{first}:{second}")
    assert (who, argv) == ("runtime", ["state", "c1"])
    b = fe.bundle(PLAIN)
    create = ["create", "--bundle", str(b), "c1"]
    assert fe.call(create, PATH=f"{first}:{second}") == ("runtime", create)
    assert len(fe.log.read_text().splitlines()) == 1  # one pass through the front-end, not two


# -- escapes: what the byte search cannot read is the shim's -----------------------------------

#: config.json texts with an escape that could spell a trigger character (the front-end
#: searches bytes, so each is a doubt wherever it stands); ``{}`` in each is filled twice:
#: with the escape, and with the plain character it spells (which must pass through).
ESCAPED: dict[str, tuple[str, str, str]] = {
    # name: (text with {} for the escape, the escape, what it spells)
    "\\u in a value": ('{{"ociVersion":"1.0.2","process":{{"env":["A={}"]}}}}', "\\u0041", "A"),
    "\\u in a key": ('{{"{}ciVersion":"1.0.2"}}', "\\u006f", "o"),
    "\\u uppercase hex": ('{{"ociVersion":"1.0.2","x":"{}"}}', "\\u004E", "N"),
    "\\u first in a string": ('{{"ociVersion":"{}.0.2"}}', "\\u0031", "1"),
    "\\u last before the end": ('{{"ociVersion":"1.0.2","x":"a{}"}}', "\\u0062", "b"),
    "a surrogate pair": ('{{"ociVersion":"1.0.2","x":"{}"}}', "\\ud83d\\ude00", "\U0001f600"),
    "\\/ in a value": ('{{"ociVersion":"1.0.2","x":"a{}b"}}', "\\/", "/"),
    "\\/ in a key": ('{{"ociVersion":"1.0.2","{}x":"b"}}', "\\/", "/"),
    "\\/ last before the end": ('{{"ociVersion":"1.0.2","x":"{}"}}', "\\/", "/"),
    # an escaped backslash followed by u is no \u escape, but the byte search cannot tell
    "\\\\ then u": ('{{"ociVersion":"1.0.2","x":"{}"}}', "\\\\u0041", "?"),
}


@pytest.mark.parametrize("case", sorted(ESCAPED))
def test_an_escape_that_could_spell_a_trigger_is_a_doubt(fe: Frontend, case: str) -> None:
    text, escape, plain = ESCAPED[case]
    escaped = fe.bundle(text.format(escape).encode("utf-8"), "escaped")
    spelled = fe.bundle(text.format(plain).encode("utf-8"), "plain")
    assert json.loads((escaped / "config.json").read_bytes()) is not None  # JSON, for the shim
    assert fe.call(["create", "-b", str(escaped), "c1"])[0] == "launcher"
    assert fe.call(["create", "-b", str(spelled), "c1"])[0] == "runtime"


@pytest.mark.parametrize("where", ["first bytes", "last bytes"])
@pytest.mark.parametrize("escape", ["\\u", "\\/"])
def test_the_escape_search_covers_every_byte(fe: Frontend, where: str, escape: str) -> None:
    """The search runs over the whole file, its first and last bytes included (such a file is
    no JSON: the shim says why, not runc)."""
    body = json.dumps(PLAIN)
    text = escape + body if where == "first bytes" else body + escape
    b = fe.bundle(text.encode())
    assert fe.call(["create", "-b", str(b), "c1"])[0] == "launcher"


@pytest.mark.parametrize("escape", ['\\"', "\\\\", "\\n", "\\t", "\\r", "\\b", "\\f"])
def test_an_escape_that_spells_no_trigger_character_is_no_doubt(fe: Frontend, escape: str) -> None:
    """The other escapes spell a quote, a backslash or a control character, which no trigger
    holds (``nvhook.native._SEARCHABLE``): the create passes through."""
    b = fe.bundle(('{"ociVersion":"1.0.2","x":"a' + escape + 'b"}').encode())
    assert fe.call(["create", "-b", str(b), "c1"])[0] == "runtime"


def test_a_byte_order_mark_only_at_the_start_is_the_shim_s(fe: Frontend) -> None:
    """U+FEFF inside a string is text (the shim reads it as JSON): no doubt."""
    b = fe.bundle(('{"ociVersion":"1.0.2","x":"\ufeff"}').encode())
    assert fe.call(["create", "-b", str(b), "c1"])[0] == "runtime"


def test_every_trigger_of_the_data_file_is_searched(fe: Frontend) -> None:
    """Each trigger line, the first and the last included, hands a create over by itself; a
    trigger the data file does not have is no doubt: the triggers come from the file."""
    fe.configure(EXAMPLE_PREFIX + MOUNTS_ON + "privileged_gets_all = true\n")
    data = fe.data_file()
    lines = data.read_text().splitlines()
    found = [line.split(" ", 1)[1] for line in lines if line.startswith("trigger ")]
    assert len(found) >= 6 and found[-1] == "CAP_SYS_ADMIN"
    for trigger in found:
        b = fe.bundle({**PLAIN, "x": trigger}, "t")
        assert fe.call(["create", "-b", str(b), "c1"])[0] == "launcher", trigger
    b = fe.bundle({**PLAIN, "x": "XYZZY"}, "t")
    assert fe.call(["create", "-b", str(b), "c1"])[0] == "runtime"
    for at in (lines.index(f"trigger {found[0]}"), lines.index(f"trigger {found[-1]}") + 1):
        data.write_text("\n".join([*lines[:at], "trigger XYZZY", *lines[at:]]) + "\n")
        assert fe.call(["create", "-b", str(b), "c1"])[0] == "launcher", at


# -- the data file, line by line: each one is compared ---------------------------------------

Lines = list[str]


def _swap(lines: Lines, key_a: str, key_b: str) -> Lines:
    a = next(i for i, line in enumerate(lines) if line.split(" ")[0] == key_a)
    b = next(i for i, line in enumerate(lines) if line.split(" ")[0] == key_b)
    out = list(lines)
    out[a], out[b] = out[b], out[a]
    return out


def _edit(lines: Lines, key: str, change: Callable[[str], list[str]]) -> Lines:
    """Each line of ``key`` (its first one when ``key`` ends with ``!``) replaced by
    ``change(line)``."""
    first = key.endswith("!")
    key = key.rstrip("!")
    out: Lines = []
    done = False
    for line in lines:
        if line.split(" ")[0] == key and not (first and done):
            out += change(line)
            done = True
        else:
            out.append(line)
    assert done, key
    return out


MAGIC = "nvhook-runtime-frontend"


def _other_identity(line: str) -> list[str]:
    return [line[:-1] + ("0" if line[-1] != "0" else "1")]


#: A change of the data file's lines -> the lines after it; each must hand every call over.
DATA_LINES: dict[str, Callable[[Lines], Lines]] = {
    "magic: another word": lambda ls: _edit(ls, MAGIC, lambda x: [x.replace("runtime", "hook")]),
    "magic: missing": lambda ls: _edit(ls, MAGIC, lambda x: []),
    "magic: twice": lambda ls: _edit(ls, MAGIC, lambda x: [x, x]),
    "magic: after config": lambda ls: _swap(ls, MAGIC, "config"),
    "magic: no format": lambda ls: _edit(ls, MAGIC, lambda x: [MAGIC]),
    "format: the next": lambda ls: _edit(ls, MAGIC, lambda x: [f"{MAGIC} {FORMAT + 1}"]),
    "format: the last": lambda ls: _edit(ls, MAGIC, lambda x: [f"{MAGIC} {FORMAT - 1}"]),
    "format: a zero before": lambda ls: _edit(ls, MAGIC, lambda x: [f"{MAGIC} 0{FORMAT}"]),
    "format: trailing garbage": lambda ls: _edit(ls, MAGIC, lambda x: [x + " x"]),
    "format: two spaces": lambda ls: _edit(ls, MAGIC, lambda x: [f"{MAGIC}  {FORMAT}"]),
    "config: another file": lambda ls: _edit(ls, "config", lambda x: [x + ".other"]),
    "config: its folder": lambda ls: _edit(ls, "config", lambda x: [x.rsplit("/", 1)[0]]),
    "config: trailing garbage": lambda ls: _edit(ls, "config", lambda x: [x + " x"]),
    "config: missing": lambda ls: _edit(ls, "config", lambda x: []),
    "config: twice": lambda ls: _edit(ls, "config", lambda x: [x, x]),
    "config: after settings": lambda ls: _swap(ls, "config", "settings"),
    "config: no value": lambda ls: _edit(ls, "config", lambda x: ["config "]),
    "settings: another identity": lambda ls: _edit(ls, "settings", _other_identity),
    "settings: absent": lambda ls: _edit(ls, "settings", lambda x: ["settings absent"]),
    "settings: trailing garbage": lambda ls: _edit(ls, "settings", lambda x: [x + " x"]),
    "settings: missing": lambda ls: _edit(ls, "settings", lambda x: []),
    "settings: twice": lambda ls: _edit(ls, "settings", lambda x: [x, x]),
    "settings: after log": lambda ls: _swap(ls, "settings", "log"),
    "log: relative": lambda ls: _edit(ls, "log", lambda x: ["log shim.log"]),
    "log: no value": lambda ls: _edit(ls, "log", lambda x: ["log "]),
    "log: twice": lambda ls: _edit(ls, "log", lambda x: [x, x]),
    "log: after a runtime": lambda ls: _swap(ls, "log", "runtime"),
    "log: last": lambda ls: [*_edit(ls, "log", lambda x: [])[:-1], ls[3], "end"],
    "runtime: none": lambda ls: _edit(ls, "runtime", lambda x: []),
    "runtime: no value": lambda ls: _edit(ls, "runtime!", lambda x: ["runtime "]),
    "runtime: after a trigger": lambda ls: _swap(ls, "runtime", "trigger"),
    "runtime: after the end": lambda ls: [*_edit(ls, "runtime", lambda x: []), "runtime runc"],
    "trigger: none": lambda ls: _edit(ls, "trigger", lambda x: []),
    "trigger: no value": lambda ls: _edit(ls, "trigger!", lambda x: ["trigger "]),
    "trigger: a quote": lambda ls: _edit(ls, "trigger!", lambda x: [x, 'trigger a"b']),
    "trigger: a backslash": lambda ls: _edit(ls, "trigger!", lambda x: [x, "trigger a\\b"]),
    "trigger: a tab": lambda ls: _edit(ls, "trigger!", lambda x: [x, "trigger a\tb"]),
    "trigger: not ASCII": lambda ls: _edit(ls, "trigger!", lambda x: [x, "trigger é"]),
    "trigger: a DEL": lambda ls: _edit(ls, "trigger!", lambda x: [x, "trigger a\x7fb"]),
    "end: missing": lambda ls: ls[:-1],
    "end: twice": lambda ls: [*ls, "end"],
    "end: trailing garbage": lambda ls: [*ls[:-1], "end x"],
    "end: a line after it": lambda ls: [*ls, "trigger X"],
    "end: not last but one": lambda ls: [*ls[:-2], "end", ls[-2]],
    "a handover line": lambda ls: [*ls[:3], "handover debug logging", *ls[3:]],
    "an unknown key": lambda ls: [*ls[:-1], "runtimes runc", "end"],
    "a key with a space before": lambda ls: _edit(ls, "config", lambda x: [" " + x]),
    "a key in capitals": lambda ls: _edit(ls, "config", lambda x: [x.replace("config", "CONFIG")]),
}


@pytest.mark.parametrize("case", sorted(DATA_LINES))
def test_each_line_of_the_data_file_is_compared(fe: Frontend, case: str) -> None:
    data = fe.data_file()
    lines = data.read_text().splitlines()
    assert [line.split(" ")[0] for line in lines[:4]] == [MAGIC, "config", "settings", "log"]
    b = fe.bundle(PLAIN)
    for argv in (["state", "c1"], ["create", "-b", str(b), "c1"]):
        assert fe.call(argv)[0] == "runtime"  # as written: the front-end acts
    changed = DATA_LINES[case](lines)
    assert changed != lines
    data.write_bytes(("\n".join(changed) + "\n").encode())
    assert stat.S_IMODE(data.stat().st_mode) == 0o600
    for argv in (["state", "c1"], ["create", "-b", str(b), "c1"]):
        assert fe.call(argv) == ("launcher", argv)


@pytest.mark.parametrize("change", ["no newline at the end", "a CR before each newline"])
def test_the_data_file_s_line_ends_are_compared(fe: Frontend, change: str) -> None:
    data = fe.data_file()
    text = data.read_bytes()
    data.write_bytes(text[:-1] if change.startswith("no") else text.replace(b"\n", b"\r\n"))
    assert fe.call(["state", "c1"])[0] == "launcher"


@pytest.mark.parametrize("key", ["runtime", "trigger"])
def test_the_data_file_s_lists_are_bounded(fe: Frontend, key: str) -> None:
    """At most 64 runtime lines and 64 trigger lines (the front-end's arrays): 64 are read,
    one more is a doubt."""
    data = fe.data_file()
    lines = data.read_text().splitlines()
    mine = [line for line in lines if line.startswith(f"{key} ")]
    at = lines.index(mine[0])
    filler = f"{key} /nonexistent/r" if key == "runtime" else f"{key} XYZZY"
    rest = [line for line in lines if line not in mine]
    b = fe.bundle(PLAIN)
    for count, who in ((64, "runtime"), (65, "launcher")):
        # the written lines last (the real runtime, the triggers that matter), filler before
        padded = [f"{filler}{n}" for n in range(count - len(mine))] + mine
        data.write_text("\n".join([*rest[:at], *padded, *rest[at:]]) + "\n")
        assert fe.call(["create", "-b", str(b), "c1"])[0] == who, count
    trigger = fe.bundle(_with_env("NVIDIA_VISIBLE_DEVICES=0"), "asks")
    data.write_text("\n".join([*rest[:at], *padded[1:], *rest[at:]]) + "\n")
    assert fe.call(["create", "-b", str(trigger), "c1"])[0] == "launcher"


def test_the_runtime_lines_are_tried_in_their_order(fe: Frontend, tmp_path: Path) -> None:
    """The runtime comes from the data file: the first candidate that is there, in order."""
    other = tmp_path / "other-runc"
    other.write_text(RECORDER.format(who="other"))
    other.chmod(0o755)
    data = fe.data_file()
    lines = data.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("runtime "))
    for before, who in ((["/nonexistent/runc", str(other)], "other"),
                        (["/nonexistent/runc"], "runtime")):  # fmt: skip
        data.write_text("\n".join([*lines[:first], *(f"runtime {r}" for r in before),
                                   *lines[first:]]) + "\n")  # fmt: skip
        assert fe.call(["state", "c1"]) == (who, ["state", "c1"])


def _version_through(tmp_path: Path, launcher: Path) -> subprocess.CompletedProcess[str]:
    """``--version`` through a front-end built to hand over to ``launcher`` (no data file:
    it hands over)."""
    binary = build_sanitized_program(SOURCE, tmp_path / "nvhook-runtime", str(launcher))
    return subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False,
        env={"PATH": "/usr/bin:/bin", "NVHOOK_CACHE_DIR": str(tmp_path / "cache"),
             "ASAN_OPTIONS": "detect_leaks=0"},
    )  # fmt: skip


def test_a_launcher_that_cannot_be_exec_d_fails_with_the_runtime_s_code(tmp_path: Path) -> None:
    """A broken install (the launcher gone): one line naming it, ExitCode.RUNTIME."""
    launcher = tmp_path / "gone" / "nvhook-runtime.py"
    proc = _version_through(tmp_path, launcher)
    assert (proc.returncode, proc.stderr) == (
        ExitCode.RUNTIME,
        f"nvhook-runtime: cannot exec {launcher}: No such file or directory\n",
    )


def _venv_launcher(tmp: Path) -> tuple[Path, Path, Path]:
    """A venv's launcher as install-entrypoints writes it, ``#!VENV/bin/python FLAG``, where
    bin/python -> python3 -> the system's python3.11 (here a copy of ``sh``, which runs the
    recorder below the ``#!`` line; FLAG is ``-f``, which sh takes, for ``-IS``); the launcher,
    bin/python, the system's file."""
    system = tmp / "usr/bin/python3.11"
    system.parent.mkdir(parents=True)
    shutil.copy("/bin/sh", system)
    bin_dir = tmp / "venv/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").symlink_to(system)
    (bin_dir / "python").symlink_to("python3")
    launcher = bin_dir / "nvhook-runtime.py"
    launcher.write_text(f"#!{bin_dir / 'python'} -f\n" + RECORDER.format(who="launcher")[10:])
    launcher.chmod(0o755)
    return launcher, bin_dir / "python", system


@pytest.mark.parametrize("setup", [False, True], ids=["no-package-setup", "package-setup"])
def test_a_venv_whose_python_is_gone_fails_gpu_creates_naming_it(
    tmp_path: Path, setup: bool
) -> None:
    """A distribution upgrade removed the Python the venv was made with: a GPU create gets one
    line naming the missing interpreter (and the link that dangles) and the repair (the
    packages' setup where it is installed, else install.sh's reinstall), ExitCode.RUNTIME;
    every call that asks for nothing still goes straight to the runtime."""
    launcher, python, system = _venv_launcher(tmp_path)
    setup_path = tmp_path / "lib/nvhook/setup"
    if setup:
        setup_path.parent.mkdir(parents=True)
        setup_path.write_text("#!/bin/sh\n")
        setup_path.chmod(0o755)
    binary = build_sanitized_program(SOURCE, tmp_path / "nvhook-runtime", str(launcher),
                                     f'-DNVHOOK_SETUP_PATH="{setup_path}"')  # fmt: skip
    fe = Frontend(binary, tmp_path)
    gpu = fe.bundle(_with_env("NVIDIA_VISIBLE_DEVICES=0"), "gpu")
    plain = fe.bundle(PLAIN, "plain")
    assert fe.call(["create", "--bundle", str(gpu), "c1"])[0] == "launcher"  # it runs

    system.unlink()
    assert fe.call(["state", "c1"]) == ("runtime", ["state", "c1"])
    assert fe.call(["create", "--bundle", str(plain), "c2"])[0] == "runtime"
    assert fe.call(["delete", "--force", "c2"]) == ("runtime", ["delete", "--force", "c2"])
    fe.record.unlink()
    proc = subprocess.run([str(binary), "create", "--bundle", str(gpu), "c3"], env=fe.env(),
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    repair = f"run {setup_path} to make the venv again" if setup else native.REINSTALL
    assert (proc.returncode, proc.stderr) == (
        ExitCode.RUNTIME,
        f"nvhook-runtime: cannot start {launcher}: its interpreter {python} is missing "
        f"(a link to {system}, which is gone): the Python nvhook's venv was made with was "
        f"removed or upgraded; {repair}\n",
    )
    assert not fe.record.exists()
    # an interpreter named by the file itself, no link: no "link" clause
    launcher.write_text(f"#!{system}\n")
    proc = subprocess.run([str(binary), "--version"], env=fe.env(), capture_output=True,
                          text=True, timeout=30, check=False)  # fmt: skip
    assert proc.stderr.startswith(
        f"nvhook-runtime: cannot start {launcher}: its interpreter {system} is missing: "
    ), proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.returncode == ExitCode.RUNTIME
    # the interpreter back: the launcher gets the call again
    shutil.copy("/bin/sh", system)
    launcher.write_text(f"#!{python} -f\n" + RECORDER.format(who="launcher")[10:])
    assert fe.call(["create", "--bundle", str(gpu), "c4"])[0] == "launcher"


def test_a_launcher_whose_interpreter_is_there_keeps_exec_s_reason(tmp_path: Path) -> None:
    """ENOENT from exec with the interpreter there (its own loader is missing): the plain
    "cannot exec" line, not a claim that the interpreter is gone."""
    launcher, _python, system = _venv_launcher(tmp_path)
    elf = bytearray(Path("/bin/sh").read_bytes())
    interp = elf.find(b"/lib64/ld-linux-x86-64.so.2")
    if interp < 0:
        pytest.skip("/bin/sh names no /lib64/ld-linux-x86-64.so.2")
    elf[interp : interp + 8] = b"/nolib64"
    system.write_bytes(bytes(elf))
    proc = _version_through(tmp_path, launcher)
    assert (proc.returncode, proc.stderr) == (
        ExitCode.RUNTIME,
        f"nvhook-runtime: cannot exec {launcher}: No such file or directory\n",
    )


# -- runc's argv conformance table: the same bundle as oci.argv reads --------------------------


def _lines() -> list[str]:
    lines = list(test_argv.CONFORMANCE)
    for function in [
        test_argv.test_bundle_forms,
        test_argv.test_other_commands_pass_through,
        test_argv.test_help_and_version_run_nothing,
        test_argv.test_errors_where_runc_refuses_the_command_line,
        test_argv.test_global_flag_forms,
    ]:
        marks = function.pytestmark  # type: ignore[attr-defined]
        (mark,) = [m for m in marks if m.name == "parametrize"]
        for case in mark.args[1]:
            line = case if isinstance(case, str) else case[0]
            lines.append(line)
    lines += ["--root create create --bundle /nvb8 id", "create --bundle /a -- --bundle /b id",
              "run -d --keep id -b /nvb30", "create -h=false -b /nvb31 id",
              "--help=false create -b /nvb32 id", "-v=0 run -b /nvb33 id",
              "create --help=false --help=1 -b /nvb34 id",
              "--rootless create create -b /x id"]  # fmt: skip
    return list(dict.fromkeys(lines))


def _expected(argv: list[str], cwd: Path) -> tuple[str, str | None]:
    """Who must get the call (per oci.argv) and, for a create, the bundle it reads."""
    try:
        args = RuntimeArgs.parse(argv, cwd=str(cwd))
    except ArgvError:
        try:
            i = oci_argv._parse_flags(argv, 0, oci_argv._GLOBAL, {}, [], "global options")
        except ArgvError:
            return "launcher", None  # runc refuses the global flags: handed over
        return ("launcher" if i < len(argv) and argv[i] in CREATE_COMMANDS else "runtime"), None
    if args.version:
        return "launcher", None  # the shim prints nvhook's version, then the runtime's
    if not args.creates:
        return "runtime", None
    return "create", args.bundle


def _under(root: Path, arg: str) -> str:
    """``arg`` with an absolute path in it moved under ``root`` (the test writes bundles)."""
    if arg.startswith("/"):
        return f"{root}{arg}"
    flag, eq, value = arg.partition("=")
    return f"{flag}={root}{value}" if eq and value.startswith("/") else arg


@pytest.mark.parametrize("line", _lines())
def test_conformance_table(fe: Frontend, line: str) -> None:
    assert _check_line(fe, fe.tmp, line) == []


def _check_line(
    fe: Frontend, top: Path, line: str, *, both: bool = True
) -> list[tuple[str, tuple[str, list[str]], tuple[str, list[str]]]]:
    """``line`` (its absolute paths moved under ``top``, run in ``top/cwd``) goes where
    oci.argv says. A create is judged by the bundle oci.argv reads: the front-end hands it
    over when that bundle asks for a GPU and (``both``) passes it through when only that
    bundle does not. A line runc refuses finds a config.json asking for nothing wherever an
    argument could name a bundle: a front-end that took it for a create would pass it on.
    Returns each call that went elsewhere: (line, where it went, where it should have)."""
    cwd = top / "cwd"
    cwd.mkdir(parents=True)
    argv = [_under(top, arg) for arg in line.split()]
    who, bundle = _expected(argv, cwd)
    # every directory an argument could name, and the working directory
    candidates = {cwd, *([Path(bundle)] if bundle else [])}
    for arg in argv:
        for text in (arg, arg.partition("=")[2]):
            if text and ".." not in text:
                candidates.add(cwd / text)
    assert all(str(d).startswith(str(top)) for d in candidates)
    wrong: list[tuple[str, tuple[str, list[str]], tuple[str, list[str]]]] = []
    if who != "create":
        for d in candidates if who == "launcher" else ():
            d.mkdir(parents=True, exist_ok=True)
            (d / "config.json").write_text(json.dumps(PLAIN))
        got = fe.call(argv, cwd)
        return [] if got == (who, argv) else [(line, got, (who, argv))]
    assert bundle is not None
    for plain_elsewhere in (True, False) if both else (True,):
        for d in candidates:
            d.mkdir(parents=True, exist_ok=True)
            is_bundle = os.path.realpath(d) == os.path.realpath(bundle)
            request = is_bundle if plain_elsewhere else not is_bundle
            spec = _with_env("NVIDIA_VISIBLE_DEVICES=0") if request else PLAIN
            (d / "config.json").write_text(json.dumps(spec))
        # the bundle asks: handed over; the bundle does not (every other one does): runc
        want = ("launcher" if plain_elsewhere else "runtime", argv)
        got = fe.call(argv, cwd)
        if got != want:
            wrong.append((line, got, want))
    return wrong


def _flag_lines() -> list[tuple[str, bool]]:
    """Every flag of oci.argv's tables for the global options, create and run (the first and
    last of each table included), in each form: ``--f``, ``-f``, ``=value``, a separate
    value, none where one is needed, a bad boolean; before and after the container id, after
    a ``--``, and global flags after the subcommand; each with whether to judge a create
    both ways (:func:`_check_line`)."""
    lines: list[str] = []
    both: list[str] = []
    table = oci_argv._GLOBAL
    for name in sorted(table.names):
        if name in table.values:
            forms = [f"--{name} /gv", f"-{name}=/gv", f"--{name}="]
        else:
            forms = [f"--{name}", f"-{name}=false", f"--{name}=0", f"--{name}=maybe"]
        lines += [f"{form} create -b /gb id" for form in forms]
        lines.append(f"create {forms[0]} -b /gb id")  # after the subcommand: not a global flag
    lines.append("--root")
    for command in sorted(CREATE_COMMANDS):
        table = oci_argv._COMMANDS[command]
        for name in sorted(table.names):
            if name in ("b", "bundle"):
                forms = [f"-{name} /cb", f"--{name}=/cb", f"-{name}"]
                lines += [f"{command} {forms[0]} id", f"{command} id {forms[1]}",
                          f"{command} {forms[2]}", f"{command} -- {forms[0]} id",
                          f"{command} id {forms[0]} --", f"{command} {forms[2]}="]  # fmt: skip
                continue
            if name in table.values:
                forms = [f"--{name} /cv", f"-{name}=/cv", f"--{name}"]
            else:
                forms = [f"--{name}", f"-{name}=false", f"--{name}=T", f"--{name}=maybe"]
            lines += [f"{command} {forms[0]} -b /cb id", f"{command} id {forms[1]} -b /cb",
                      f"{command} -b /cb {forms[-1]}", f"{command} -b /cb -- {forms[0]} id",
                      f"{command} {forms[0]} id -b /cb"]  # fmt: skip
            # where urfave's reordering differs: a "=" form before the id, "--" as a value
            both += [
                f"{command} {forms[1]} id -b /cb",
                f"{command} id {forms[0].split()[0]} -- -b /cb",
            ]
            if len(forms) > 3:
                lines.append(f"{command} {forms[2]} -b /cb id")
    lines += ["create -b /cb - ", "create - -b /cb", "create -b /cb -- -", "create --- -b /cb id",
              "create -b /cb id --", "create -b -- id", "create -- id"]  # fmt: skip
    # every create both ways (the bundle asks / only the bundle does not) would take twice the
    # time: alternate, but both ways where the reordering matters
    return [(line, n % 2 == 0) for n, line in enumerate(dict.fromkeys(lines))] + [
        (line, True) for line in dict.fromkeys(both)
    ]


@pytest.mark.slow  # seconds long: the whole suite runs it, ./dev test quick does not
def test_every_flag_of_runc_s_tables_in_every_form(fe: Frontend) -> None:
    """The flag tables at their boundaries, each flag's forms and places, against
    ``RuntimeArgs.parse``: who gets the call and, for a create, which bundle is read."""
    lines = _flag_lines()
    creates = 0
    wrong = []
    for n, (line, both) in enumerate(lines):
        wrong += _check_line(fe, fe.tmp / f"l{n}", line, both=both)
        creates += _expected(line.split(), fe.tmp)[0] == "create"
    assert wrong == []
    assert len(lines) > 150 and creates > 60


# -- fuzz: whenever the shim would edit, the call is handed over -------------------------------

_ENV = [
    "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=",
    "NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_VISIBLE_DEVICE=0",
    "nvidia_visible_devices=0", "NVIDIA_DRIVER_CAPABILITIES=all", "NVIDIA_REQUIRE_CUDA=cuda>=12",
    "CUDA_VERSION=12.4", "CUDA_VERSION=", "NVIDIA_IMEX_CHANNELS=0", "NVIDIA_IMEX_CHANNELS=",
    "NVIDIA_GDS=enabled", "HOME=/root", "X=NVIDIA_VISIBLE_DEVICES=1",
]  # fmt: skip
_ANNOTATIONS = [
    ("cdi.k8s.io/gpu", "nvidia.com/gpu=0"), ("cdi.k8s.io/", ""), ("CDI.k8s.io/x", "a/b=c"),
    ("example.com/gpus", "nvidia.com/gpu=1"), ("io.kubernetes.cri.sandbox-id", "abc"),
]  # fmt: skip
_MOUNTS = [
    "/var/run/nvidia-container-devices/0", "/var//run/nvidia-container-devices/all",
    "/var/run/./nvidia-container-devices/cdi/nvidia.com/gpu/0", "/var/run/nvidia-container-devices",
    "/var/run/nvidia-container-devicesX/0", "/tmp/x",
]  # fmt: skip
_POLICIES = [
    "",
    "[policy]\naccept_volume_mounts = true\n",
    "[policy]\nprivileged_gets_all = true\naccept_env_unprivileged = false\n",
    '[cdi]\nannotation_prefixes = ["example.com/", "cdi.k8s.io/"]\n',
    "[cdi]\nannotation_prefixes = []\n[policy]\naccept_volume_mounts = true\n",
]


def _random_spec(rng: random.Random) -> bytes:
    spec: dict[str, object] = {"ociVersion": "1.0.2"}
    process: dict[str, object] = {"args": ["sh"], "env": rng.sample(_ENV, rng.randint(0, 3))}
    if rng.random() < 0.3:
        caps = rng.sample(["CAP_SYS_ADMIN", "CAP_CHOWN", "CAP_NET_RAW"], rng.randint(0, 2))
        process["capabilities"] = {"bounding": caps}
    spec["process"] = process
    if rng.random() < 0.4:
        spec["annotations"] = dict(rng.sample(_ANNOTATIONS, rng.randint(1, 2)))
    if rng.random() < 0.4:
        spec["mounts"] = [
            {"destination": d, "source": rng.choice(["/dev/null", "/x"]), "type": "bind"}
            for d in rng.sample(_MOUNTS, rng.randint(1, 2))
        ]
    text = json.dumps(spec, indent=rng.choice([None, 1]))
    words = [w for w in ("NVIDIA_", "CUDA_", "cdi.k8s", "container-devices", "SYS_ADMIN")
             if w in text]  # fmt: skip
    if words and rng.random() < 0.3:  # a trigger spelled with an escape
        i = text.index(rng.choice(words))
        text = text[:i] + f"\\u{ord(text[i]):04x}" + text[i + 1 :]
    elif "/" in text and rng.random() < 0.2:
        i = rng.choice([i for i, c in enumerate(text) if c == "/"])
        text = text[:i] + "\\/" + text[i + 1 :]
    elif rng.random() < 0.2:  # an escape may spell any character
        i = rng.randrange(len(text))
        if text[i].isalpha():
            text = text[:i] + f"\\u{ord(text[i]):04x}" + text[i + 1 :]
        elif text[i] == "/":
            text = text[:i] + "\\/" + text[i + 1 :]
    return text.encode()


@pytest.mark.slow  # seconds long: the whole suite runs it, ./dev test quick does not
def test_fuzz_never_passes_through_a_create_the_shim_would_edit(fe: Frontend) -> None:
    rng = random.Random(16)
    outcomes: dict[tuple[bool, str], int] = {}
    for n in range(250):
        if n % 50 == 0:
            fe.configure(_POLICIES[(n // 50) % len(_POLICIES)])
        data = _random_spec(rng)
        try:
            spec = json.loads(data)
            wants = parse_requests(spec, Policy.from_settings(fe.settings)).wants_anything
        except NvhookError:
            wants = False  # the shim fails it: no edit
        b = fe.bundle(data)
        argv = rng.choice(
            [["create", "--bundle", str(b), "c"], ["--root", "/r", "run", "-d", "c", "-b", str(b)],
             ["create", f"--bundle={b}", "--pid-file", "p", "c"]]
        )  # fmt: skip
        who, got = fe.call(argv)
        assert got == argv
        if wants:
            assert who == "launcher", data
        outcomes[wants, who] = outcomes.get((wants, who), 0) + 1
    # both sides were exercised: edits handed over, and plain creates passed through
    assert outcomes.get((True, "launcher"), 0) > 20 and outcomes.get((False, "runtime"), 0) > 20


@pytest.mark.slow  # seconds long: the whole suite runs it, ./dev test quick does not
def test_fuzz_argv_never_passes_a_create_through_elsewhere(fe: Frontend) -> None:
    """Random command lines: where oci.argv sees a create of the bundle that asks for GPUs,
    the front-end hands over (whatever bundle it thinks it is)."""
    rng = random.Random(2)
    cwd = fe.tmp / "cwd"
    cwd.mkdir()
    (cwd / "config.json").write_text(json.dumps(_with_env("NVIDIA_VISIBLE_DEVICES=0")))
    asks = fe.bundle(_with_env("NVIDIA_VISIBLE_DEVICES=0"), "asks")
    words = ["create", "run", "state", "--bundle", "-b", "--bundle=" + str(asks), str(asks),
             "--root", "--rootless", "true", "--", "-", "id", "--help", "-h=false", "--debug",
             "--pid-file", "--log-format", "json", "--no-pivot", "-d", "--x=1", "-v",
             "--=x"]  # fmt: skip
    for _ in range(300):
        argv = [rng.choice(words) for _ in range(rng.randint(0, 7))]
        who, _bundle = _expected(argv, cwd)
        # every config.json here asks for a GPU: each create is handed over
        assert fe.call(argv, cwd) == ("runtime" if who == "runtime" else "launcher", argv)


# -- the data file: any doubt hands over ----------------------------------------------------


@pytest.mark.parametrize(
    "change",
    ["missing", "foreign owner", "mode 0644", "symlink", "directory group-writable",
     "directory foreign", "handover line", "extra line", "no end", "settings changed",
     "relative NVHOOK_CONFIG", "explicit config missing", "debug logging", "bad policy",
     "NUL"],
)  # fmt: skip
def test_any_doubt_about_the_data_hands_over(fe: Frontend, change: str) -> None:
    data = fe.data_file()
    env: dict[str, str] = {}
    text = data.read_bytes()
    if change == "missing":
        data.unlink()
    elif change == "foreign owner":
        os.chown(data, 1, 1) if os.geteuid() == 0 else pytest.skip("needs root")
    elif change == "mode 0644":
        data.chmod(0o644)
    elif change == "symlink":
        copy = fe.tmp / "copy"
        copy.write_bytes(text)
        copy.chmod(0o600)
        data.unlink()
        data.symlink_to(copy)
    elif change == "directory group-writable":
        fe.cache.chmod(0o770)
    elif change == "directory foreign":
        os.chown(fe.cache, 1, 1) if os.geteuid() == 0 else pytest.skip("needs root")
    elif change == "handover line":
        data.write_bytes(text.replace(b"\nruntime ", b"\nhandover x\nruntime ", 1))
    elif change == "extra line":
        data.write_bytes(text.replace(b"\nend\n", b"\nmore x\nend\n"))
    elif change == "no end":
        data.write_bytes(text.replace(b"\nend\n", b"\n"))
    elif change == "NUL":
        data.write_bytes(text.replace(b"trigger CUDA_VERSION", b"trigger CUDA\0VERSION"))
    elif change == "settings changed":
        os.utime(fe.config, ns=(1, 1))
    elif change == "relative NVHOOK_CONFIG":
        env["NVHOOK_CONFIG"] = os.path.relpath(fe.config, fe.tmp)
    elif change == "explicit config missing":
        env["NVHOOK_CONFIG"] = str(fe.tmp / "nothing.toml")
    elif change == "debug logging":
        fe.configure('log_level = "debug"\n')
    elif change == "bad policy":
        fe.configure('[policy]\ndefault_capabilities = ["bogus"]\n')
    assert fe.call(["state", "c1"], **env) == ("launcher", ["state", "c1"])


@pytest.mark.parametrize("change", ["symlink", "fifo", "too big", "unreadable", "missing"])
def test_any_doubt_about_config_json_hands_over(fe: Frontend, change: str) -> None:
    b = fe.bundle(PLAIN)
    config = b / "config.json"
    if change == "symlink":
        (fe.tmp / "real.json").write_text(json.dumps(PLAIN))
        config.unlink()
        config.symlink_to(fe.tmp / "real.json")
    elif change == "fifo":
        config.unlink()
        os.mkfifo(config)
    elif change == "too big":
        with open(config, "ab") as f:
            f.truncate(17 * 1024 * 1024)
    elif change == "unreadable":
        config.unlink()
        config.mkdir()
    elif change == "missing":
        config.unlink()
    assert fe.call(["create", "-b", str(b), "c1"])[0] == "launcher"
    assert not fe.log.exists()


def test_a_byte_order_mark_is_the_shim_s_to_refuse(fe: Frontend) -> None:
    """The shim refuses a config.json with a UTF-8 BOM (oci.jsoncodec.loadb, as Go does):
    the front-end must not pass it to runc."""
    b = fe.bundle(b"\xef\xbb\xbf" + json.dumps(PLAIN).encode())
    with pytest.raises(OciError, match="byte order mark"):
        Bundle(str(b)).load()
    line = ["create", "-b", str(b), "c1"]
    assert fe.call(line) == ("launcher", line)
    assert not fe.log.exists()


def test_an_edit_keeping_size_and_mtime_is_noticed(fe: Frontend) -> None:
    """The settings identity has the ctime: an edit of the same size with the mtime put back
    (``touch -r``) is seen by the shim's settings cache and by the front-end."""
    fe.configure(EXAMPLE_PREFIX.replace("example.com/", "aaaaaaa.com/"))
    before = os.stat(fe.config)
    assert fe.settings.cdi_annotation_prefixes == ("aaaaaaa.com/",)
    assert fe.call(["state", "c1"])[0] == "runtime"  # the data file is there
    time.sleep(0.05)  # past the file system's timestamp granularity
    fe.config.write_text(fe.config.read_text().replace("aaaaaaa.com/", "bbbbbbb.com/"))
    os.utime(fe.config, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(fe.config)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns)  # fmt: skip
    assert after.st_ctime_ns != before.st_ctime_ns
    # the front-end: no data file for this identity yet, so the shim must see the call
    assert fe.call(["state", "c1"]) == ("launcher", ["state", "c1"])
    # the shim: the settings cache is not believed, the file is read again
    settings = load_settings(str(fe.config), cache_dir=str(fe.cache), loaded=ensure_data)
    assert settings.cdi_annotation_prefixes == ("bbbbbbb.com/",)
    # and the data file it wrote for the new identity has the new trigger
    assert "trigger bbbbbbb.com/" in fe.data_file().read_text()
    assert fe.call(["state", "c1"])[0] == "runtime"


def test_the_data_file_is_hardened_and_names_the_settings(fe: Frontend) -> None:
    data = fe.data_file()
    st = data.stat()
    assert (st.st_mode & 0o7777, st.st_uid) == (0o600, os.geteuid())
    lines = data.read_text().splitlines()
    assert lines[:3] == [f"nvhook-runtime-frontend {FORMAT}", f"config {fe.config}",
                         "settings " + data.name.split("-", 4)[4]]  # fmt: skip
    assert f"runtime {fe.runtime}" in lines and lines[-1] == "end"
    assert {"trigger NVIDIA_VISIBLE_DEVICES", "trigger cdi.k8s.io/"} <= set(lines)
    fe.config.write_text(fe.config.read_text() + "\n")  # a new identity: a new file, old gone
    load_settings(str(fe.config), cache_dir=str(fe.cache), loaded=ensure_data)
    assert not data.exists() and fe.data_file().exists()


def test_no_log_line_when_the_level_is_above_info(fe: Frontend) -> None:
    fe.configure('log_level = "warning"\n')
    b = fe.bundle(PLAIN)
    assert fe.call(["create", "-b", str(b), "c1"])[0] == "runtime"
    assert not fe.log.exists()


def test_an_id_the_log_cannot_hold_as_is_hands_over(fe: Frontend) -> None:
    b = fe.bundle(PLAIN)
    assert fe.call(["create", "-b", str(b), 'c"1'])[0] == "launcher"
    fe.configure(log=False)
    assert fe.call(["create", "-b", str(b), 'c"1'])[0] == "runtime"


# -- install-entrypoints ---------------------------------------------------------------------


def test_install_entrypoints_builds_it_in_front_of_the_python_launcher(tmp_path: Path) -> None:
    require_cc()
    from nvhook.tools.entrypoints import install_entrypoints
    from oci._preload import image_name

    bin_dir = tmp_path / "bin"
    written = install_entrypoints(str(bin_dir), sys.executable)
    names = sorted(p.name for p in written)
    assert names == ["nvhook", "nvhook-hook", "nvhook-hook.py", "nvhook-runtime",
                     "nvhook-runtime.py", "nvhook-shim-server", image_name(),
                     "nvidia-cdi-hook", LEGACY_HOOK]  # fmt: skip
    for name in ("nvhook-runtime", "nvhook-hook"):  # each native, in front of its launcher
        native = (bin_dir / name).read_bytes()
        assert native[:4] == b"\x7fELF" and f"{bin_dir / name}.py\0".encode() in native
        launcher = (bin_dir / f"{name}.py").read_text()
        assert launcher.startswith(f"#!{sys.executable} -ISXutf8\n")
        assert f"sys.argv[0] = {str(bin_dir / name)!r}" in launcher
    runc = shutil.which("runc")
    if runc is None:
        pytest.skip("runc is not installed")
    # installed as runc earlier on PATH: neither the front-end nor the shim picks it
    first = tmp_path / "first"
    first.mkdir()
    (first / "runc").symlink_to(bin_dir / "nvhook-runtime")
    env = {
        "PATH": f"{first}:{os.environ.get('PATH', '')}",
        "NVHOOK_CONFIG": str(tmp_path / "c.toml"),
        "NVHOOK_CACHE_DIR": str(tmp_path / "cache"),
    }
    (tmp_path / "c.toml").write_text('[runtime]\nruntimes = ["runc"]\nlog_file = ""\n')

    def call(*argv: str) -> str:
        result = subprocess.run([str(first / "runc"), *argv], env=env, timeout=30,
                                capture_output=True, text=True, check=False)  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout

    # --version: always the shim's (nvhook's version first), which skips the front-end too
    assert call("--version").splitlines()[1].startswith("runc version")
    assert json.loads(call("features"))  # the front-end's own pass-through, to runc
    # a prebuilt front-end must hand over to this directory's launcher
    with pytest.raises(ValueError, match="not built for"):
        install_entrypoints(str(tmp_path / "other"), sys.executable,
                            frontend=str(bin_dir / "nvhook-runtime"))  # fmt: skip
    again = install_entrypoints(
        str(bin_dir), sys.executable, frontend=str(bin_dir / "nvhook-runtime")
    )
    assert bin_dir / "nvhook-runtime.py" in again
    assert bin_dir / "nvhook-hook.py" in again  # the prebuilt hook beside the front-end
    # a prebuilt front-end with no hook beside it: nvhook-hook is the Python launcher
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(bin_dir / "nvhook-runtime", alone / "nvhook-runtime")
    solo = install_entrypoints(str(bin_dir), sys.executable, frontend=str(alone / "nvhook-runtime"))
    assert bin_dir / "nvhook-hook.py" not in solo and not (bin_dir / "nvhook-hook.py").exists()
    assert (bin_dir / "nvhook-hook").read_text().startswith("#!")
    off = install_entrypoints(str(tmp_path / "off"), sys.executable, frontend="off")
    assert (tmp_path / "off" / "nvhook-runtime").read_text().startswith("#!")
    assert sorted(p.name for p in off) == ["nvhook", "nvhook-hook", "nvhook-runtime",
                                           "nvhook-shim-server", image_name(),
                                           "nvidia-cdi-hook", LEGACY_HOOK]  # fmt: skip


def test_build_refuses_a_launcher_path_it_cannot_compile_in(tmp_path: Path) -> None:
    assert build('/x/"evil', tmp_path / "out") is not None
    assert build("relative", tmp_path / "out") is not None
    assert not (tmp_path / "out").exists()


def test_build_keeps_the_symbols_only_when_asked(tmp_path: Path) -> None:
    """``strip=False`` (bench/instructions.py: callgrind finds ``execve`` by name): the same
    program with its symbol table; the default strips it."""
    require_cc()
    nm = shutil.which("nm")
    assert nm is not None, "nm not found (binutils: ./dev setup installs it)"
    assert build("/x/nvhook-runtime.py", tmp_path / "stripped") is None
    assert build("/x/nvhook-runtime.py", tmp_path / "symbols", strip=False) is None
    named = subprocess.run([nm, str(tmp_path / "symbols")], capture_output=True, text=True)
    assert re.search(r" T (execve|main)$", named.stdout, re.MULTILINE), named.stdout[:500]
    bare = subprocess.run([nm, str(tmp_path / "stripped")], capture_output=True, text=True)
    assert "no symbols" in bare.stderr


def test_the_native_programs_link_against_musl_where_musl_gcc_is(tmp_path: Path) -> None:
    """musl-gcc on PATH (./dev setup installs musl-tools): both programs are static musl ones
    (a static glibc start costs ~0.5 ms of every call, musl's ~0.06 ms); with ``cc`` named
    they are the glibc build as before, so the preference is the only difference."""
    from nvhook.native import HOOK_SOURCE
    from tests.support.basics import require

    require("musl-gcc")
    launcher = str(tmp_path / "launcher.py")
    glibc_marker = b"Fatal glibc error"  # in every static glibc program's TLS set-up
    for source in (SOURCE, HOOK_SOURCE):
        musl, glibc = tmp_path / "musl", tmp_path / "glibc"
        assert build(launcher, musl, source=source) is None
        assert build(launcher, glibc, source=source, cc=require_cc()) is None
        assert glibc_marker not in musl.read_bytes() and glibc_marker in glibc.read_bytes()
        assert b"/lib64/ld-linux" not in musl.read_bytes()  # static: no dynamic loader
