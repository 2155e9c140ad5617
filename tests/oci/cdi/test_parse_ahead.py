"""Specs parsed ahead (:func:`oci.cdi.index.parse_ahead`, what ``nvhook-shim-server``'s parent
does for its children): a call uses the value only for a file it lists as trusted with the
identity the value was read with; anything else is read and parsed in the call as before."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oci.cdi import index, parse, registry
from oci.cdi.index import parse_ahead, resolve
from oci.cdi.registry import Registry
from oci.errors import CdiResolveError
from tests.oci.cdi.test_registry_index import GOLDEN, outcome, tick, write_spec

KIND = "vendor.example/gpu"


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Nothing parsed ahead before or after a test; a file settles 20 ms after its change."""
    monkeypatch.setattr(index, "RACY_NS", 20_000_000)
    index._AHEAD.clear()
    yield
    index._AHEAD.clear()


def no_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, a spec file read or parsed in a call fails the test."""

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("a spec file was read in the call")

    readers = [(parse, "parse_spec"), (parse, "read_spec_data"), (parse, "decode_spec_file")]
    readers += [(registry, "read_checked_stat")]
    for module, name in readers:
        monkeypatch.setattr(module, name, refuse)


def env_of(dirs: list[str], name: str, **kwargs: Any) -> tuple[str, ...]:
    return resolve(dirs, [name], **kwargs).env


def laid_out(tmp_path: Path, value: str = "A=1") -> tuple[Path, Path]:
    d = tmp_path / "cdi"
    spec = write_spec(d / "gpu.json", KIND, {"0": [value]})
    tick()  # settled (20 ms)
    return d, spec


@pytest.mark.parametrize("cached", [False, True])
def test_a_spec_parsed_ahead_is_used_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
) -> None:
    d, _ = laid_out(tmp_path)
    assert parse_ahead([str(d)]) == 1
    no_reads(monkeypatch)
    cache = str(tmp_path / "cache") if cached else None
    assert env_of([str(d)], f"{KIND}=0", cache_dir=cache) == ("A=1",)


def test_a_rewrite_keeping_inode_size_and_mtime_is_never_served_stale(
    tmp_path: Path,
) -> None:
    d, spec = laid_out(tmp_path)
    assert parse_ahead([str(d)]) == 1
    before = spec.stat()
    tick()
    spec.write_text(spec.read_text().replace("A=1", "A=2"))  # in place: the same inode
    os.utime(spec, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = spec.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    assert after.st_ctime_ns != before.st_ctime_ns  # what utime cannot set
    assert env_of([str(d)], f"{KIND}=0") == ("A=2",)


def test_a_replacement_renamed_over_it_is_read(tmp_path: Path) -> None:
    """As ``nvhook watch`` and ``cdi generate`` replace a spec: a new file renamed over it."""
    d, spec = laid_out(tmp_path)
    assert parse_ahead([str(d)]) == 1
    before = spec.stat()
    new = write_spec(d / ".gpu.json.tmp", KIND, {"0": ["A=2"]})
    os.utime(new, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.rename(new, spec)
    assert env_of([str(d)], f"{KIND}=0") == ("A=2",)


def test_a_spec_that_became_untrusted_is_still_refused(tmp_path: Path) -> None:
    d, spec = laid_out(tmp_path)
    assert parse_ahead([str(d)]) == 1
    os.chmod(d, 0o777)  # the directory's verdict: the file's identity is unchanged
    with pytest.raises(CdiResolveError, match="untrusted spec files are not read"):
        resolve([str(d)], [f"{KIND}=0"])
    os.chmod(d, 0o755)
    os.chmod(spec, 0o666)
    with pytest.raises(CdiResolveError, match="writable by group or others"):
        resolve([str(d)], [f"{KIND}=0"])


def test_untrusted_unsettled_and_broken_files_are_not_parsed_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, spec = laid_out(tmp_path)
    os.chmod(spec, 0o666)
    (d / "broken.json").write_text("{ broken")
    (d / "link.json").symlink_to(spec)
    tick()
    assert parse_ahead([str(d)]) == 0
    os.chmod(spec, 0o644)
    monkeypatch.setattr(index, "RACY_NS", 60_000_000_000)  # changed within a minute
    assert parse_ahead([str(d)]) == 0


def test_the_oldest_files_are_kept_within_the_bounds(tmp_path: Path) -> None:
    d = tmp_path / "cdi"
    for name in ("c", "a", "b"):  # c is the oldest
        write_spec(d / f"{name}.json", KIND, {name: [f"{name.upper()}=1"]})
        tick()
    assert parse_ahead([str(d)], files=2) == 2
    assert sorted(index._AHEAD) == [str(d / "a.json"), str(d / "c.json")]
    size = (d / "c.json").stat().st_size
    assert parse_ahead([str(d)], size=size) == 1
    assert list(index._AHEAD) == [str(d / "c.json")]
    assert parse_ahead([]) == 0 and not index._AHEAD


def _golden_cases() -> list[Path]:
    return sorted(p for p in GOLDEN.glob("cdi-*") if (p / "case.toml").is_file())


@pytest.mark.parametrize("case_dir", _golden_cases(), ids=lambda p: p.name)
def test_golden_cases_answer_the_same_when_parsed_ahead(case_dir: Path, tmp_path: Path) -> None:
    case = tomllib.loads((case_dir / "case.toml").read_text())
    dirs = [str(case_dir / d) for d in case.get("spec_dirs", ["cdi"])]
    full = Registry(dirs)
    requests: list[list[str]] = [case["devices"], list(full.devices), *([n] for n in full.devices)]
    parse_ahead(dirs, files=1000)
    for names in requests:
        expected = outcome(full.resolve, names)
        assert outcome(resolve, dirs, names, cache_dir=str(tmp_path)) == expected, names


def _faults_of_a_resolve_in_a_child(dirs: list[str], name: str, touch: bool) -> int:
    """The minor faults of one resolve in a forked child (``touch``: after touch_ahead)."""
    import resource

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            if touch:
                index.touch_ahead()
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            resolve(dirs, [name])
            os.write(w, str(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = f.read()
    os.waitpid(pid, 0)
    return int(got)


def test_touching_what_was_parsed_ahead_takes_a_childs_faults_before_the_call(
    tmp_path: Path,
) -> None:
    d = tmp_path / "cdi"
    devices = {str(i): [f"GPU_{i}={'x' * 200}"] * 20 for i in range(200)}  # ~1 MB of values
    write_spec(d / "gpu.json", KIND, devices)
    tick()
    assert parse_ahead([str(d)]) == 1
    assert index.touch_ahead() > 200 * 20
    name = f"{KIND}=0"
    resolve([str(d)], [name])  # the code's first run is not the child's
    untouched = min(_faults_of_a_resolve_in_a_child([str(d)], name, False) for _ in range(3))
    touched = min(_faults_of_a_resolve_in_a_child([str(d)], name, True) for _ in range(3))
    assert touched * 2 < untouched, (touched, untouched)  # 19 and 188 here
