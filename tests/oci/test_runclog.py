"""oci.runclog: error lines in runc's own --log format, checked against the real runc."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path

import pytest

from oci.runclog import format_runc_log, write_runc_log
from tests.support.containers import require, require_root

JAN_1_2024 = 1704067200.0
TIME = r'"time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"'


def test_json_line_format() -> None:
    line = format_runc_log("error", "nvhook: no GPU 3", when=JAN_1_2024)
    assert line == '{"level":"error","msg":"nvhook: no GPU 3","time":"2024-01-01T00:00:00Z"}\n'


def test_json_escaping_is_go_html_safe() -> None:
    line = format_runc_log("error", 'a"b\\c\n<&>\u2028é\ud800', when=JAN_1_2024)
    assert line == (
        '{"level":"error","msg":"a\\"b\\\\c\\n\\u003c\\u0026\\u003e\\u2028\\u00e9\\ud800",'
        '"time":"2024-01-01T00:00:00Z"}\n'
    )
    assert json.loads(line)["msg"] == 'a"b\\c\n<&>\u2028é\ud800'


def test_text_line_format() -> None:
    assert format_runc_log("error", "plain", log_format="text", when=JAN_1_2024) == (
        'time="2024-01-01T00:00:00Z" level=error msg=plain\n'
    )
    assert format_runc_log("warning", 'a "b"\n\x01é', log_format="text", when=0) == (
        'time="1970-01-01T00:00:00Z" level=warning msg="a \\"b\\"\\n\\x01é"\n'
    )


def test_write_appends_lines(tmp_path: Path) -> None:
    log = tmp_path / "log.json"
    log.write_text('{"level":"info","msg":"before","time":"2024-01-01T00:00:00Z"}\n')
    assert write_runc_log(log, "error", "first", when=JAN_1_2024) is True
    assert write_runc_log(str(log), "error", "second") is True
    lines = log.read_text().splitlines()
    assert [json.loads(line)["msg"] for line in lines] == ["before", "first", "second"]
    assert re.search(TIME, lines[2])


def test_new_file_mode_is_0644(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        assert write_runc_log(tmp_path / "new.json", "error", "x") is True
    finally:
        os.umask(old)
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize(
    "where",
    ["missing/dir/log.json", "", "is-a-directory"],
)
def test_write_never_raises(tmp_path: Path, where: str) -> None:
    (tmp_path / "is-a-directory").mkdir()
    path = str(tmp_path / where) if where else ""
    assert write_runc_log(path, "error", "x") is False


def test_write_never_raises_on_bad_arguments(tmp_path: Path) -> None:
    assert write_runc_log(tmp_path / "x.json", "error", object()) is False  # type: ignore[arg-type]
    assert write_runc_log(tmp_path / "y.json", "error", "x", when=float("nan")) is False


def test_concurrent_writers_do_not_interleave(tmp_path: Path) -> None:
    log = tmp_path / "log.json"
    message = "m" * 3000

    def writer(n: int) -> None:
        for _ in range(50):
            write_runc_log(log, "error", f"{n}:{message}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = log.read_text().splitlines()
    assert len(lines) == 200
    assert all(json.loads(line)["msg"].endswith(message) for line in lines)


@pytest.mark.root
@pytest.mark.parametrize("log_format", ["json", "text"])
def test_same_line_as_runc_itself(tmp_path: Path, log_format: str) -> None:
    runc = require("runc")
    require_root()
    log = tmp_path / "runc.log"
    bundle = '/nonexistent/b"<&>é'  # quoting and Go's HTML escaping
    runc_log = ["--log", str(log), "--log-format", log_format]
    subprocess.run(
        [runc, "--root", str(tmp_path / "state"), *runc_log, "create", "--bundle", bundle, "id"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    theirs = log.read_text().splitlines()[-1]
    msg = f"runc create failed: chdir {bundle}: no such file or directory"
    assert write_runc_log(log, "error", msg, log_format=log_format) is True
    ours = log.read_text().splitlines()[-1]
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)")
    assert stamp.sub("T", ours) == stamp.sub("T", theirs)
