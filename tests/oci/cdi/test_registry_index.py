"""Indexed resolution (:func:`oci.cdi.index.resolve`): the full-scan Registry's answers,
parsing only new or changed files and the files that define what is asked for."""

from __future__ import annotations

import json
import marshal
import os
import random
import shutil
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oci.cdi import index
from oci.cdi.edits import Edits
from oci.cdi.index import resolve
from oci.cdi.parse import load_spec
from oci.cdi.registry import Registry
from oci.cdi.spec import Spec
from oci.errors import CdiError, CdiResolveError
from tests.support.unprivileged import NOBODY, call_unprivileged

GOLDEN = Path(__file__).parents[2] / "golden"
GPU = "nvidia.com/gpu"


class Counting:
    """A spec loader that records the files it parsed."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, path: str) -> Spec:
        self.paths.append(path)
        return load_spec(path)

    def take(self) -> list[str]:
        paths, self.paths = self.paths, []
        return paths


def outcome(call: Callable[..., Edits], *args: Any, **kwargs: Any) -> tuple[object, ...]:
    """The edits, or the error's type, message and names: what a caller can see."""
    try:
        return ("ok", call(*args, **kwargs))
    except CdiError as e:
        return (type(e).__name__, str(e), getattr(e, "names", None))


def write_spec(path: Path, kind: str, devices: dict[str, list[str]], **extra: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "cdiVersion": "0.5.0",
        "kind": kind,
        **extra,
        "devices": [{"name": n, "containerEdits": {"env": env}} for n, env in devices.items()],
    }
    path.write_text(json.dumps(body))
    return path


def tick() -> None:
    """Let the filesystem's clock move on, so the next change gets another ctime."""
    time.sleep(0.05)


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files count as settled at once (no racy window): the index remembers them."""
    monkeypatch.setattr(index, "RACY_NS", 0)


@pytest.fixture
def cache(tmp_path: Path) -> str:
    return str(tmp_path / "cache")


def index_files(cache: str) -> list[Path]:
    return sorted(Path(cache).glob("cdi-index-*.marshal"))


# --------------------------------------------------------------------------- same answers


def _golden_cases() -> list[Path]:
    return sorted(p for p in GOLDEN.glob("cdi-*") if (p / "case.toml").is_file())


@pytest.mark.parametrize("case_dir", _golden_cases(), ids=lambda p: p.name)
def test_same_answers_as_the_registry_for_golden_cases(
    case_dir: Path, cache: str, settled: None
) -> None:
    case = tomllib.loads((case_dir / "case.toml").read_text())
    dirs = [str(case_dir / d) for d in case.get("spec_dirs", ["cdi"])]
    full = Registry(dirs)
    requests: list[list[str]] = [case["devices"], list(full.devices), *([n] for n in full.devices)]
    for names in requests:
        expected = outcome(full.resolve, names)
        for _ in range(2):  # cold, then from the index
            assert outcome(resolve, dirs, names, cache_dir=cache) == expected, names
    assert index_files(cache)


@pytest.mark.slow  # seconds long: the whole suite runs it, ./dev test quick does not
def test_same_answers_on_random_layouts(tmp_path: Path, settled: None) -> None:
    """Random directories of specs (kinds, overlaps, broken files), changed between calls."""
    rng = random.Random(20240611)
    kinds = ["a.io/x", "a.io/y", "b.io/x"]
    devices = ["0", "1", "2", "all"]

    def lay_out(dirs: list[Path]) -> None:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            for i in range(rng.randint(0, 4)):
                path = d / f"{rng.choice('abc')}{i}.{rng.choice(['json', 'yaml', 'txt'])}"
                if rng.random() < 0.15:
                    path.write_text("{ broken")
                    continue
                chosen = rng.sample(devices, rng.randint(1, 3))
                write_spec(path, rng.choice(kinds), {n: [f"{path.name}={n}"] for n in chosen})

    for round_ in range(40):
        dirs = [tmp_path / f"r{round_}" / str(i) for i in range(rng.randint(1, 3))]
        cache = str(tmp_path / "cache")
        for _ in range(3):  # a layout, then two changed ones, with the same index
            lay_out(dirs)
            tick()
            spec_dirs = [str(d) for d in dirs]
            full = Registry(spec_dirs)
            for _ in range(6):
                names = [f"{rng.choice(kinds)}={rng.choice(devices)}" for _ in range(3)]
                expected = outcome(full.resolve, names)
                for _ in range(2):
                    got = outcome(resolve, spec_dirs, names, cache_dir=cache)
                    assert got == expected, (round_, names)


def test_same_answers_with_odd_directory_lists(tmp_path: Path, cache: str, settled: None) -> None:
    """Missing, not a directory, listed twice, trailing slash, links to files and dirs."""
    real = tmp_path / "real"
    write_spec(real / "a.json", GPU, {"0": ["A=0"], "1": ["A=1"]})
    (real / "b.yaml").symlink_to(real / "a.json")  # the same spec under another name
    (real / "c.json").symlink_to(tmp_path / "nowhere.json")
    (real / "d.yml").mkdir()
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "file").write_text("")
    layouts = [
        [str(tmp_path / "missing"), str(tmp_path / "file"), str(real)],
        [str(real), str(real)],
        [str(real) + "/", str(tmp_path / "link")],
        [str(tmp_path / "file")],
    ]
    for dirs in layouts:
        for names in ([f"{GPU}=0"], [f"{GPU}=1", "other.io/x=0"]):
            expected = outcome(Registry(dirs).resolve, names)
            for _ in range(2):
                assert outcome(resolve, dirs, names, cache_dir=cache) == expected, (dirs, names)


# --------------------------------------------------------------------------- what is parsed


def test_with_1000_unrelated_specs_only_the_requested_file_is_parsed(
    tmp_path: Path, cache: str, settled: None
) -> None:
    d = tmp_path / "cdi"
    gpu = write_spec(d / "nvidia.json", GPU, {"0": ["G=0"], "1": ["G=1"]}, containerEdits={
        "env": ["COMMON=1"]
    })  # fmt: skip
    for i in range(1000):
        write_spec(d / f"claim-{i:04}.json", "k8s.example.com/claim", {f"c{i}": [f"C={i}"]})
    loader = Counting()
    first = resolve([str(d)], [f"{GPU}=1"], cache_dir=cache, loader=loader)
    assert len(loader.take()) == 1001
    assert first == Registry([str(d)]).resolve([f"{GPU}=1"])
    assert first.env == ("COMMON=1", "G=1")
    assert resolve([str(d)], [f"{GPU}=1", f"{GPU}=0"], cache_dir=cache, loader=loader).env == (
        "COMMON=1",
        "G=1",
        "G=0",
    )
    assert loader.take() == [str(gpu)]
    # another claim's spec appears: it and the requested file are parsed, nothing else
    new = write_spec(d / "claim-new.json", "k8s.example.com/claim", {"new": ["C=new"]})
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache, loader=loader)
    assert sorted(loader.take()) == sorted([str(new), str(gpu)])
    # a claim's device is asked for: only its file
    assert resolve([str(d)], ["k8s.example.com/claim=c7"], cache_dir=cache, loader=loader).env == (
        "C=7",
    )
    assert loader.take() == [str(d / "claim-0007.json")]


def test_lower_priority_and_conflicting_definitions_are_not_parsed(
    tmp_path: Path, cache: str, settled: None
) -> None:
    low = write_spec(tmp_path / "etc" / "a.json", GPU, {"0": ["FROM=etc"]})
    high = write_spec(tmp_path / "run" / "a.json", GPU, {"0": ["FROM=run"]})
    write_spec(tmp_path / "run" / "b.json", GPU, {"1": ["B=1"]})
    write_spec(tmp_path / "run" / "c.json", GPU, {"1": ["C=1"]})
    dirs = [str(tmp_path / "etc"), str(tmp_path / "run")]
    loader = Counting()
    resolve(dirs, [f"{GPU}=0"], cache_dir=cache, loader=loader)
    loader.take()
    assert resolve(dirs, [f"{GPU}=0"], cache_dir=cache, loader=loader).env == ("FROM=run",)
    assert loader.take() == [str(high)]
    with pytest.raises(CdiResolveError) as info:
        resolve(dirs, [f"{GPU}=1"], cache_dir=cache, loader=loader)
    assert loader.take() == []
    assert str(tmp_path / "run" / "b.json") in str(info.value)
    assert str(tmp_path / "run" / "c.json") in str(info.value)
    assert str(low) not in str(info.value)


def test_a_broken_file_is_remembered_and_still_named(
    tmp_path: Path, cache: str, settled: None
) -> None:
    d = tmp_path / "cdi"
    d.mkdir()
    broken = d / "broken.json"
    broken.write_text("{")
    write_spec(d / "gpu.json", GPU, {"0": ["G=0"]})
    loader = Counting()
    for _ in range(2):
        assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache, loader=loader).env == ("G=0",)
    assert loader.take() == [str(broken), str(d / "gpu.json"), str(d / "gpu.json")]
    with pytest.raises(CdiResolveError, match="problems in 1 file") as info:
        resolve([str(d)], [f"{GPU}=1"], cache_dir=cache, loader=loader)
    assert str(broken) in str(info.value)
    assert loader.take() == []


def test_a_just_written_file_is_parsed_until_it_settles(
    tmp_path: Path, cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change within one timestamp tick keeps size, mtime and ctime: not yet trusted."""
    d = tmp_path / "cdi"
    other = write_spec(d / "other.json", "other.io/x", {"0": ["O=0"]})
    write_spec(d / "gpu.json", GPU, {"0": ["G=0"]})
    loader = Counting()
    for _ in range(2):
        resolve([str(d)], [f"{GPU}=0"], cache_dir=cache, loader=loader)
        assert str(other) in loader.take()
    monkeypatch.setattr(index, "RACY_NS", 0)
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache, loader=loader)
    assert str(other) in loader.take()
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache, loader=loader)
    assert str(other) not in loader.take()


# --------------------------------------------------------------------------- files that change


def test_file_edited_in_place_with_same_size_and_mtime(
    tmp_path: Path, cache: str, settled: None
) -> None:
    """Another file starts defining the requested name: only its ctime tells."""
    d = tmp_path / "cdi"
    write_spec(d / "a.json", GPU, {"0": ["A=0"]})
    b = write_spec(d / "b.json", GPU, {"8": ["B=8"]})
    assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("A=0",)
    before = b.stat()
    tick()
    with open(b, "r+b") as f:  # same inode, same size
        text = f.read()
        f.seek(0)
        f.write(text.replace(b'"8"', b'"0"'))
    os.utime(b, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = b.stat()
    same = (after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns)
    assert same == (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns)
    with pytest.raises(CdiResolveError) as info:
        resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    assert str(b) in str(info.value)


def test_file_replaced_with_same_size_and_mtime(tmp_path: Path, cache: str, settled: None) -> None:
    d = tmp_path / "cdi"
    write_spec(d / "a.json", GPU, {"0": ["A=0"]})
    b = write_spec(d / "b.json", GPU, {"8": ["B=8"]})
    assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("A=0",)
    before = b.stat()
    tick()
    new = write_spec(tmp_path / "new.json", GPU, {"0": ["B=8"]})
    os.utime(new, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(new, b)
    assert (b.stat().st_size, b.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    with pytest.raises(CdiResolveError) as info:
        resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    assert str(b) in str(info.value)


def test_requested_file_edited_in_place(tmp_path: Path, cache: str, settled: None) -> None:
    d = tmp_path / "cdi"
    path = write_spec(d / "gpu.json", GPU, {"0": ["G=1"]})
    assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("G=1",)
    tick()
    path.write_text(path.read_text().replace("G=1", "G=2"))
    assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("G=2",)


def test_file_removed_and_added(tmp_path: Path, cache: str, settled: None) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    write_spec(etc / "gpu.json", GPU, {"0": ["FROM=etc"]})
    high = write_spec(run / "gpu.json", GPU, {"0": ["FROM=run"]})
    dirs = [str(etc), str(run)]
    assert resolve(dirs, [f"{GPU}=0"], cache_dir=cache).env == ("FROM=run",)
    high.unlink()
    assert resolve(dirs, [f"{GPU}=0"], cache_dir=cache).env == ("FROM=etc",)
    (etc / "gpu.json").unlink()
    with pytest.raises(CdiResolveError):
        resolve(dirs, [f"{GPU}=0"], cache_dir=cache)
    write_spec(run / "late.yaml", GPU, {"0": ["FROM=late"]})
    assert resolve(dirs, [f"{GPU}=0"], cache_dir=cache).env == ("FROM=late",)


def test_conflicting_definition_in_an_unrelated_looking_file(
    tmp_path: Path, cache: str, settled: None
) -> None:
    d = tmp_path / "cdi"
    gpu = write_spec(d / "nvidia.json", GPU, {"0": ["G=0"], "1": ["G=1"]})
    for i in range(20):
        write_spec(d / f"claim-{i}.json", "k8s.example.com/claim", {f"c{i}": ["C=1"]})
    assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("G=0",)
    sneaky = write_spec(d / "claim-20.json", GPU, {"0": ["SNEAKY=1"]})
    loader = Counting()
    with pytest.raises(CdiResolveError) as info:
        resolve([str(d)], [f"{GPU}=0", f"{GPU}=1"], cache_dir=cache, loader=loader)
    assert info.value.names == (f"{GPU}=0",)
    assert str(gpu) in str(info.value) and str(sneaky) in str(info.value)
    assert loader.take() == [str(sneaky)]
    assert resolve([str(d)], [f"{GPU}=1"], cache_dir=cache).env == ("G=1",)


def test_requested_file_changes_between_scan_and_parse(
    tmp_path: Path, cache: str, settled: None
) -> None:
    """The index says gpu.json defines =0; by the time it is read, it no longer does."""
    d = tmp_path / "cdi"
    path = write_spec(d / "gpu.json", GPU, {"0": ["G=0"]})
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)

    def rewriting_loader(p: str) -> Spec:
        if p == str(path):
            write_spec(path, GPU, {"9": ["G=9"]})
        return load_spec(p)

    with pytest.raises(CdiResolveError) as info:
        resolve([str(d)], [f"{GPU}=0"], cache_dir=cache, loader=rewriting_loader)
    assert info.value.names == (f"{GPU}=0",)
    assert resolve([str(d)], [f"{GPU}=9"], cache_dir=cache).env == ("G=9",)


def test_requested_file_becomes_a_conflict_between_scan_and_parse(
    tmp_path: Path, cache: str, settled: None
) -> None:
    """Decisions are made again with what the parse found (here: a second definition)."""
    d = tmp_path / "cdi"
    a = write_spec(d / "a.json", GPU, {"0": ["A=0"]})
    b = write_spec(d / "b.json", "other.io/x", {"0": ["B=0"]})
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    tick()
    seen: list[str] = []

    def loader(p: str) -> Spec:
        seen.append(p)
        if p == str(a):
            write_spec(b, GPU, {"0": ["B=0"]})  # b is already listed: its entry is stale
        return load_spec(p)

    # b was stat'ed before it changed: its old entry stands for this call, a wins
    assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache, loader=loader).env == ("A=0",)
    assert seen == [str(a)]
    with pytest.raises(CdiResolveError):  # the next call sees b's new definition
        resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)


# --------------------------------------------------------------------------- the cache itself


def test_index_is_written_only_when_something_changed(
    tmp_path: Path, cache: str, settled: None
) -> None:
    d = tmp_path / "cdi"
    write_spec(d / "gpu.json", GPU, {"0": ["G=0"]})
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    (index,) = index_files(cache)
    first = index.stat().st_ino
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    assert index.stat().st_ino == first
    write_spec(d / "more.json", "other.io/x", {"0": ["O=0"]})
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    assert index.stat().st_ino != first
    kept = [p.name for p in Path(cache).glob("cdi-parsed-*.marshal")]  # the winner, parsed
    assert sorted(p.name for p in Path(cache).iterdir()) == sorted([index.name, *kept])  # no temp


def test_one_index_per_set_of_spec_dirs(tmp_path: Path, cache: str, settled: None) -> None:
    write_spec(tmp_path / "a" / "gpu.json", GPU, {"0": ["A=0"]})
    write_spec(tmp_path / "b" / "gpu.json", GPU, {"0": ["B=0"]})
    dirs_a, dirs_ab = [str(tmp_path / "a")], [str(tmp_path / "a"), str(tmp_path / "b")]
    for _ in range(2):  # each set's index, then each set's index again
        assert resolve(dirs_a, [f"{GPU}=0"], cache_dir=cache).env == ("A=0",)
        assert resolve(dirs_ab, [f"{GPU}=0"], cache_dir=cache).env == ("B=0",)
    assert len(index_files(cache)) == 2


def _corruptions(real: bytes, dirs: tuple[str, ...]) -> list[bytes]:
    fmt, _, index = marshal.loads(real)
    ((directory, table),) = index.items()
    ((name, record),) = table.items()
    ident = record[:5]

    def with_record(rec: object, **more: object) -> bytes:
        return marshal.dumps((fmt, dirs, {directory: {name: rec, **more}}))

    return [
        b"",
        b"garbage",
        real[: len(real) // 2],
        marshal.dumps([1, 2, 3]),
        marshal.dumps((fmt + 1, dirs, index)),
        marshal.dumps((fmt, (*dirs, "/elsewhere"), index)),
        marshal.dumps((fmt, dirs, {directory: [record]})),
        with_record(ident),
        with_record((*ident[:4], "ok", GPU, ("9",))),
        with_record((*ident, "ok", GPU, "9")),
        with_record((*ident, "ok", GPU, (9,))),
        with_record((*ident, "ok", 9, ("9",))),
        with_record((*ident, "maybe", GPU, ("9",))),
        with_record((*ident, "error", "bad", ("9",))),
        with_record(record, **{"x": None, "y.json": (1, 2)}),  # junk beside: dropped
        marshal.dumps((fmt, dirs, {directory: table, "/elsewhere": None, "": 7})),
    ]


def test_corrupt_or_stale_index_is_ignored_and_replaced(
    tmp_path: Path, cache: str, settled: None
) -> None:
    """Each would hide =0 if its record for gpu.json were believed (a malformed record
    only means that file is parsed again); the index is then written afresh."""
    d = tmp_path / "cdi"
    write_spec(d / "gpu.json", GPU, {"0": ["G=0"]})
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    (index,) = index_files(cache)
    real = index.read_bytes()
    for bad in _corruptions(real, (str(d),)):
        index.write_bytes(bad)
        loader = Counting()
        assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache, loader=loader).env == ("G=0",)
        assert loader.take() == [str(d / "gpu.json")]
        assert index.read_bytes() == real  # rewritten whole


def _lie(index: Path) -> None:
    """Rewrite the index's one record: same identity, but the file "defines" only =9."""
    fmt, dirs, entries = marshal.loads(index.read_bytes())
    ((directory, table),) = entries.items()
    ((name, record),) = table.items()
    lie = {directory: {name: (*record[:5], "ok", GPU, ("9",))}}
    index.write_bytes(marshal.dumps((fmt, dirs, lie)))


def test_a_believed_index_decides_which_file_to_read(
    tmp_path: Path, cache: str, settled: None
) -> None:
    """The control for the corruption tests: a well-formed index is trusted as is."""
    d = tmp_path / "cdi"
    write_spec(d / "gpu.json", GPU, {"0": ["G=0"]})
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    (index,) = index_files(cache)
    _lie(index)
    with pytest.raises(CdiResolveError):
        resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_index_owned_by_someone_else_is_ignored(tmp_path: Path, cache: str, settled: None) -> None:
    d = tmp_path / "cdi"
    write_spec(d / "gpu.json", GPU, {"0": ["G=0"]})
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    (index,) = index_files(cache)
    _lie(index)
    os.chown(index, 65534, 65534)
    assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("G=0",)


@pytest.mark.parametrize("how", ["cache dir is a file", "index is a directory", "no cache"])
def test_cache_that_cannot_be_written_is_no_error(tmp_path: Path, how: str, settled: None) -> None:
    d = tmp_path / "cdi"
    write_spec(d / "gpu.json", GPU, {"0": ["G=0"]})
    cache: str | None = str(tmp_path / "cache")
    if how == "cache dir is a file":
        Path(str(cache)).write_text("")
    elif how == "index is a directory":
        resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
        (index,) = index_files(str(cache))
        index.unlink()
        index.mkdir()
    else:
        cache = None
    loader = Counting()
    for _ in range(2):
        assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache, loader=loader).env == ("G=0",)
    assert len(loader.take()) == 2  # nothing remembered: parsed each time
    if cache is not None and Path(cache).is_dir():
        assert not list(Path(cache).glob("*.tmp"))


def test_read_only_cache_directory_is_no_error(unprivileged_tmp: Path, settled: None) -> None:
    d = unprivileged_tmp / "cdi"
    write_spec(d / "gpu.json", GPU, {"0": ["G=0"]})
    cache = unprivileged_tmp / "cache"

    def ask() -> tuple[object, ...]:
        return outcome(resolve, [str(d)], [f"{GPU}=0"], cache_dir=str(cache))

    cache.mkdir(mode=0o700)
    os.chown(cache, NOBODY, NOBODY)  # control: the caller's own, the index is written there
    assert call_unprivileged(ask) == ("ok", Edits(env=("G=0",)))
    assert len(index_files(str(cache))) == 1
    shutil.rmtree(cache)
    cache.mkdir()
    os.chown(cache, NOBODY, NOBODY)
    cache.chmod(0o500)  # the caller's own, but read-only (to everyone but root)
    assert call_unprivileged(ask) == ("ok", Edits(env=("G=0",)))
    assert list(cache.iterdir()) == []


# --------------------------------------------------------------------------- the runtime


def test_runtime_cdi_mode_keeps_its_index_in_the_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settled: None
) -> None:
    from nvhook.create import decide_spec
    from nvhook.settings import defaults

    d = tmp_path / "cdi"
    write_spec(d / "gpu.json", GPU, {"1": ["G=1"]})
    monkeypatch.setenv("NVHOOK_CACHE_DIR", str(tmp_path / "cache"))
    settings = defaults()._replace(runtime_mode="cdi", cdi_spec_dirs=(str(d),))
    decision = decide_spec({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=1"]}}, settings)
    assert (decision.mode, decision.cdi_names) == ("cdi", (f"{GPU}=1",))
    assert decision.edits == Edits(env=("G=1",))
    assert len(index_files(str(tmp_path / "cache"))) == 1


# --------------------------------------------------------------------------- kept parsed specs


class Decodes:
    """Counts the spec files decoded (JSON or YAML) from their bytes: the one function every
    read goes through (untrusted warned of, or refused; the index's and the registry's)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from oci.cdi import parse

        self.count = 0
        real = parse.decode_spec_file

        def counting(raw: bytes, path: str) -> object:
            self.count += 1
            return real(raw, path)

        monkeypatch.setattr(parse, "decode_spec_file", counting)

    def take(self) -> int:
        count, self.count = self.count, 0
        return count


def kept_files(cache: str) -> list[Path]:
    return sorted(Path(cache).glob("cdi-parsed-*.marshal"))


YAML_SPEC = """\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
containerEdits:
  env: [COMMON=1]
devices:
  - name: "0"
    containerEdits:
      env: [G=0]
      deviceNodes: [{path: /dev/nvidia0, type: c, major: 195, minor: 0}]
"""


def write_yaml_or_json(d: Path, suffix: str, text: str = YAML_SPEC) -> Path:
    import yaml

    d.mkdir(exist_ok=True)
    path = d / f"gpu{suffix}"
    path.write_text(text if suffix == ".yaml" else json.dumps(yaml.safe_load(text)))
    return path


def kept_after_one_call(tmp_path: Path, cache: str, suffix: str) -> Path:
    """The spec directory of a settled spec (``write_yaml_or_json``) resolved once: its
    parsed value is kept from then on."""
    d = tmp_path / "cdi"
    write_yaml_or_json(d, suffix)
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    return d


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_winner_is_parsed_once_then_kept(
    tmp_path: Path, cache: str, settled: None, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """The strict parser's value is kept by the file's identity: the next calls read neither
    the file nor a decoded document (a 40 KB spec's parse is most of a cold create)."""
    d = tmp_path / "cdi"
    spec = write_yaml_or_json(d, suffix)
    decodes = Decodes(monkeypatch)
    first = resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    assert decodes.take() == 1
    assert first.env == ("COMMON=1", "G=0")
    assert len(kept_files(cache)) == 1
    for _ in range(2):
        assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache) == first
    assert decodes.take() == 0  # from the kept value
    assert Registry([str(d)]).resolve([f"{GPU}=0"]) == first
    assert decodes.take() == 1  # the full scan reads every file itself
    # edited in place (same size, mtime restored): the ctime changes, so it is read again
    st = spec.stat()
    spec.write_text(spec.read_text().replace("G=0", "G=1"))
    os.utime(spec, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("COMMON=1", "G=1")
    assert decodes.take() == 1


MANY_DEVICES = YAML_SPEC + "".join(
    f"""\
  - name: "{i}"
    containerEdits:
      env: [G={i}]
      deviceNodes: [{{path: /dev/nvidia{i}, type: c, major: 195, minor: {i}}}]
"""
    for i in range(1, 4)
)


def test_a_kept_spec_makes_only_the_devices_asked_for_and_the_index_still_knows_them_all(
    tmp_path: Path, cache: str, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept value gives a spec of just the requested devices (the rest are not made), yet
    the index entry written from it names every device of the file: a later call asking for
    another one resolves it from the index and the kept value, as the full scan does."""
    d = tmp_path / "cdi"
    write_yaml_or_json(d, ".json", MANY_DEVICES)
    decodes = Decodes(monkeypatch)
    assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("COMMON=1", "G=0")
    assert decodes.take() == 1
    made: list[tuple[str, ...]] = []
    real = index.spec_from_data

    def recording(data: object, source: str, wanted: object = None) -> object:
        result = real(data, source, wanted)  # type: ignore[arg-type]
        assert result is not None
        made.append(tuple(dev.name for dev in result[0].devices))
        return result

    monkeypatch.setattr(index, "spec_from_data", recording)
    for index_file in index_files(cache):
        index_file.unlink()  # the entry is made again, from the kept value
    assert resolve([str(d)], [f"{GPU}=2"], cache_dir=cache).env == ("COMMON=1", "G=2")
    assert made == [("2",)]
    for names in ([f"{GPU}=3"], [f"{GPU}=1", f"{GPU}=0"]):
        assert resolve([str(d)], names, cache_dir=cache) == Registry([str(d)]).resolve(names)
    assert decodes.take() == len(([f"{GPU}=3"], [f"{GPU}=1", f"{GPU}=0"]))  # the full scans
    assert made[1:] == [("3",), ("0", "1")]


def test_a_just_written_winner_is_not_kept(
    tmp_path: Path, cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "cdi"
    write_yaml_or_json(d, ".yaml")
    decodes = Decodes(monkeypatch)
    for _ in range(2):
        assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("COMMON=1", "G=0")
    assert decodes.take() == 2
    assert kept_files(cache) == []


def test_a_kept_value_someone_else_wrote_is_not_believed(
    tmp_path: Path, cache: str, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same hardening as the index: only this user's 0600 files are read."""
    d = kept_after_one_call(tmp_path, cache, ".yaml")
    (kept,) = kept_files(cache)
    stamp, path, ident, data = marshal.loads(kept.read_bytes())
    version, kind, vendor, class_name, devices, edits, notes = data
    ((name, device_edits, device_notes),) = devices
    forged_edits = (("FORGED=1",), *device_edits[1:])
    forged = (
        version,
        kind,
        vendor,
        class_name,
        ((name, forged_edits, device_notes),),
        edits,
        notes,
    )
    kept.write_bytes(marshal.dumps((stamp, path, ident, forged)))
    decodes = Decodes(monkeypatch)
    # control: a well-formed kept value of ours is believed as it is
    assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("COMMON=1", "FORGED=1")
    assert decodes.take() == 0
    if os.geteuid() == 0:
        os.chown(kept, 65534, 65534)
    else:
        kept.chmod(0o644)
    assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("COMMON=1", "G=0")
    assert decodes.take() == 1
    # corrupt, for another path or identity, made by another parser, or of another shape:
    # read from the file
    other_stamp = (stamp[0] + 1, *stamp[1:])
    for bad in (b"garbage", marshal.dumps((stamp, path + "x", ident, data)),
                marshal.dumps((stamp, path, (0, 0, 0, 0, 0), data)),
                marshal.dumps((other_stamp, path, ident, data)),
                marshal.dumps((stamp, path, ident, data[:-1])),
                marshal.dumps((stamp, path, ident, (*data[:4], ((name, device_edits[:3], {}),),
                                                    edits, notes)))):  # fmt: skip
        kept.unlink(missing_ok=True)
        kept.write_bytes(bad)
        kept.chmod(0o600)
        assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("COMMON=1", "G=0")
        assert decodes.take() == 1


def test_a_value_kept_by_other_parser_code_is_not_used(
    tmp_path: Path, cache: str, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upgrade (or an edit of the parser's sources) changes the stamp: parsed again."""
    d = kept_after_one_call(tmp_path, cache, ".json")
    decodes = Decodes(monkeypatch)
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    assert decodes.take() == 0
    stamp = index.parser_stamp()
    assert stamp is not None
    fmt, layout, files = stamp
    assert len(files) == len(index._PARSER_SOURCES)
    changed = (fmt, layout, ((*files[0][:1], files[0][1] + 1, *files[0][2:]), *files[1:]))
    monkeypatch.setattr(index, "_STAMP", [changed])
    assert resolve([str(d)], [f"{GPU}=0"], cache_dir=cache).env == ("COMMON=1", "G=0")
    assert decodes.take() == 1
    monkeypatch.setattr(index, "_STAMP", [None])  # a source cannot be stat'ed: nothing kept
    for kept in kept_files(cache):
        kept.unlink()
    resolve([str(d)], [f"{GPU}=0"], cache_dir=cache)
    assert decodes.take() == 1
    assert kept_files(cache) == []


def test_a_document_with_a_duplicate_key_is_not_kept(
    tmp_path: Path, cache: str, settled: None
) -> None:
    d = tmp_path / "cdi"
    d.mkdir()
    (d / "gpu.yaml").write_text(YAML_SPEC + "kind: nvidia.com/gpu\n")  # kind twice
    outcome_first = outcome(resolve, [str(d)], [f"{GPU}=0"], cache_dir=cache)
    assert outcome_first == outcome(Registry([str(d)]).resolve, [f"{GPU}=0"])
    assert kept_files(cache) == []
