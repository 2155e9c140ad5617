"""Every parser refuses a document nested deeper than its format's limit with one line.

For each file nvhook reads from a user (its settings, the device plugin's YAML, CDI specs
as JSON and YAML, a bundle's config.json, engines' configs), through the command that
reads it: a document nested 5,000 deep is refused with one line naming the file and the
limit and the exit code of that file's other errors, and no traceback; one at the limit is
read (it may fail for another reason, never for its depth). The OCI state on a hook's
stdin is tested in tests/oci/test_state.py and, against the native hook, in
tests/nvhook/hook/test_native.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nvhook.cli import main
from oci.errors import ExitCode
from oci.jsoncodec import MAX_DEPTH as JSON
from oci.nesting import TOML_MAX_DEPTH as TOML
from oci.nesting import YAML_MAX_DEPTH as YAML

DEEP = 5000


def arrays(depth: int, inner: str = "1") -> str:
    """``inner`` inside ``depth`` flow arrays (JSON, YAML and TOML alike)."""
    return "[" * depth + inner + "]" * depth


def tables(depth: int) -> str:
    """A TOML key inside ``depth`` tables, the document's included."""
    return "[" + ".".join(["t"] * (depth - 1)) + "]\nk = 1\n"


def spec(inner: str) -> str:
    return f'{{"cdiVersion": "0.5.0", "kind": "vendor.com/gpu", "devices": [], "x": {inner}}}'


def config(inner: str) -> str:
    return f'{{"ociVersion": "1.0.2", "root": {{"path": "rootfs"}}, "x": {inner}}}'


def chain(depth: int, links: int) -> str:
    """YAML: an anchored value ``depth`` deep, then ``links`` aliases each one deeper."""
    lines = [f"a0: &a0 {arrays(depth)}"]
    lines += [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, links + 1)]
    return "\n".join(lines) + "\n"


def _bundle(tmp_path: Path, text: str) -> Path:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(text)
    return bundle


#: name: (file name, text at the limit, text too deep, argv, exit code, limit).
#: In the argv, "{f}" is the file, "{d}" its directory, "{b}" a bundle asking for GPUs.
Case = tuple[str, str, str, list[str], int, int]
EXPLAIN = ["explain", "-b", "{b}"]
PLUGIN = ["device-plugin", "--check-config", "{f}"]
LIST = ["cdi", "list", "--spec-dir", "{d}"]
CONFIGURE = ["runtime", "configure", "--config", "{f}", "--dry-run", "--runtime"]
INLINE = "{a = " * (TOML - 2) + "1" + "}" * (TOML - 2)
CASES: dict[str, Case] = {
    "settings, arrays": (
        "config.toml", f"[runtime]\nx = {arrays(TOML - 2, '[]')}\n",
        f"[runtime]\nx = {arrays(DEEP)}\n", EXPLAIN, ExitCode.CONFIG, TOML,
    ),
    "settings, inline tables": (
        "config.toml", f"[runtime]\nx = {INLINE}\n",
        "x = " + "{a = " * DEEP + "1" + "}" * DEEP, EXPLAIN, ExitCode.CONFIG, TOML,
    ),
    "settings, tables": ("config.toml", tables(TOML), tables(DEEP), EXPLAIN, ExitCode.CONFIG, TOML),
    "device plugin": (
        "plugin.yaml", f"flags: {arrays(YAML - 1)}\n", arrays(DEEP), PLUGIN, ExitCode.CONFIG, YAML,
    ),
    "device plugin, block style": (
        "plugin.yaml", "".join("  " * i + "-\n" for i in range(YAML)),
        "".join("  " * i + "-\n" for i in range(DEEP)), PLUGIN, ExitCode.CONFIG, YAML,
    ),
    "device plugin, aliases": (
        "plugin.yaml", chain(YAML - 4, 3), chain(YAML - 4, 50), PLUGIN, ExitCode.CONFIG, YAML,
    ),
    "CDI spec, YAML": (
        "spec.yaml", spec(arrays(YAML - 1)), spec(arrays(DEEP)), LIST, ExitCode.INVALID_CDI, YAML,
    ),
    "CDI spec, JSON": (
        "spec.json", spec(arrays(JSON - 1)), spec(arrays(DEEP)), LIST, ExitCode.INVALID_CDI, JSON,
    ),
    "CDI spec, validate": (
        "spec.yaml", spec(arrays(YAML - 1)), spec(arrays(DEEP)), ["cdi", "validate", "{f}"],
        ExitCode.VALIDATION, YAML,
    ),
    "config.json": (
        "config.json", config(arrays(JSON - 1)), config(arrays(DEEP)),
        ["cdi", "inject", "-b", "{d}", "--spec-dir", "{d}/none", "vendor.com/gpu=0"],
        ExitCode.INVALID_SPEC, JSON,
    ),
    "CRI-O config": (
        "crio.conf", f"[crio.runtime]\nx = {arrays(TOML - 3)}\n",
        f"[crio.runtime]\nx = {arrays(DEEP)}\n", [*CONFIGURE, "crio"], ExitCode.CONFIG, TOML,
    ),
    "containerd config, tables": (
        "config.toml", "version = 2\n" + tables(TOML), "version = 2\n" + tables(DEEP),
        [*CONFIGURE, "containerd"], ExitCode.CONFIG, TOML,
    ),
    "toolkit config, arrays": (
        "toolkit.toml", f"[nvidia-container-runtime]\nx = {arrays(TOML - 2, '[]')}\n",
        f"x = {arrays(DEEP)}\n", ["config", "import", "{f}"], ExitCode.CONFIG, TOML,
    ),
    "toolkit config, tables": (
        "toolkit.toml", tables(TOML), tables(DEEP), ["config", "import", "{f}"],
        ExitCode.CONFIG, TOML,
    ),
    "docker daemon.json": (
        "daemon.json", f'{{"x": {arrays(JSON - 1)}}}', f'{{"x": {arrays(DEEP)}}}',
        [*CONFIGURE, "docker"], ExitCode.CONFIG, JSON,
    ),
}  # fmt: skip


def _run(
    tmp_path: Path, case: Case, text: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, str, Path]:  # fmt: skip
    name, _, _, argv, _, _ = case
    directory = tmp_path / "files"
    directory.mkdir()
    path = directory / name
    bundle = _bundle(tmp_path, '{"ociVersion": "1.0.2", "root": {"path": "rootfs"}}')
    if name == "config.json":
        path = directory / "config.json"
        (directory / "rootfs").mkdir()
    path.write_text(text)
    if argv[0] == "explain":
        monkeypatch.setenv("NVHOOK_CONFIG", str(path))
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "all")
    args = [a.format(f=path, d=directory, b=bundle) for a in argv]
    if argv[0] == "runtime":
        args += ["--backup-dir", str(tmp_path / "backups"), "--runtime-path", "/bin/true"]
    code = main(args)
    out, err = capsys.readouterr()
    return code, out + err, path


@pytest.mark.parametrize("name", sorted(CASES))
def test_too_deep_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    case = CASES[name]
    code, output, path = _run(tmp_path, case, case[2], capsys, monkeypatch)
    assert "Traceback" not in output and "RecursionError" not in output
    lines = [line for line in output.splitlines() if "nested deeper" in line]
    if case[3][0] == "explain":  # its verdict first, then the same error as its result
        verdict, *lines = lines
        error = verdict.removeprefix("Verdict: will NOT start: ")
        assert output.startswith("Verdict: will NOT start: ") and error in lines[0], output
    assert len(lines) == 1, output
    assert f"{path}: " in lines[0] or lines[0].startswith(f"{path.name}: "), output
    assert f"nested deeper than {case[5]} levels" in lines[0]
    assert code == case[4], output


@pytest.mark.parametrize("name", sorted(CASES))
def test_at_the_limit_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    case = CASES[name]
    code, output, _ = _run(tmp_path, case, case[1], capsys, monkeypatch)
    assert "Traceback" not in output and "nested deeper" not in output, output
    assert code != ExitCode.BUG
