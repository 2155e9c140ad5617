"""``nvhook bug-report``: one bounded archive, secrets redacted, without the driver too."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.cli import main
from nvhook.engines import apply_plan, plan_configure
from nvhook.tools.bugreport import MEMBER_LIMIT, PREFIX, TOTAL_LIMIT, bug_report

SPECS = Path(__file__).parents[2] / "data" / "specs"
BUNDLE_TOKEN = "tok-bundle-8f3a9c1d"
SETTINGS_TOKEN = "nvapi-settings-77aa0b"
ENGINE_TOKEN = "pw-engine-5e5e2f71"


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        out = {}
        for m in tar.getmembers():
            f = tar.extractfile(m)
            assert f is not None
            out[m.name.removeprefix(PREFIX + "/")] = f.read()
    return out


def _bundle(tmp_path: Path, env: list[str]) -> Path:
    spec = json.loads((SPECS / "runc-spec.json").read_text())
    spec["process"]["env"] += env
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(spec))
    return bundle


@pytest.fixture
def host(make_mock_machine: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path, Path]:
    """A dgx-a100 with settings, containerd configured by nvhook (a backup kept), a
    shim log, and a bundle: each holding a planted secret."""
    root = make_mock_machine("dgx-a100")
    settings = tmp_path / "config.toml"
    settings.write_text(
        f'# registry login: NGC_API_KEY={SETTINGS_TOKEN}\n[host]\nroot = "{root}"\n'
        '[runtime]\nlog_file = "/var/log/nvhook-runtime.log"\n'  # a host path: under root
    )
    log = root / "var/log/nvhook-runtime.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(
        '{"msg": "create", "pid": 1}\n' * 9
        + f'{{"msg": "create failed", "argv": ["env", "DATABASE_URL={BUNDLE_TOKEN}"]}}\n'
    )
    config = root / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri".registry.configs."reg.example".auth]\n'
        f'  password = "{ENGINE_TOKEN}"\n'
    )
    plan = plan_configure(
        "containerd", config=str(config), name="nvidia", runtime_path="/usr/bin/nvhook-runtime"
    )
    apply_plan(plan, str(root / "var/lib/nvhook/backups"))
    bundle = _bundle(
        tmp_path, [f"DATABASE_URL={BUNDLE_TOKEN}", "NVIDIA_VISIBLE_DEVICES=2", "HOME=/root"]
    )
    return root, settings, bundle


def test_archive_has_every_part_and_no_planted_secret(
    host: tuple[Path, Path, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    root, settings, bundle = host
    out = tmp_path / "report.tar.gz"
    argv = [
        "bug-report",
        str(bundle),
        "-o",
        str(out),
        "--root",
        str(root),
        "--config",
        str(settings),
    ]
    assert main(argv) == 0
    assert capfd.readouterr().out.startswith(f"{out}: ")
    members = _members(out)
    assert set(members) == {
        "versions.json", "settings.toml", "settings.json", "doctor.json", "cdi-check.json",
        "explain.json", "engines/containerd.diff", "shim-log.txt", "mig.json",
    }  # fmt: skip
    blob = out.read_bytes()
    everything = b"".join(members.values())
    for token in (BUNDLE_TOKEN, SETTINGS_TOKEN, ENGINE_TOKEN):
        assert token.encode() not in everything, token
        assert token.encode() not in blob
    assert b"<redacted>" in members["settings.toml"]
    assert b"<redacted>" in members["engines/containerd.diff"]
    # what a maintainer needs is there
    explain = json.loads(members["explain.json"])
    assert explain["verdict"]["text"].startswith("will see 1 GPU (host 2 as 0)")
    assert json.loads(members["doctor.json"])["checks"]
    diff = members["engines/containerd.diff"].decode()
    assert "+" in diff and "nvhook-runtime" in diff  # configure's change, as a diff
    mig = json.loads(members["mig.json"])
    assert [gi["gi"] for gi in mig["gpus"][0]["gpu_instances"]] == [2, 3, 4]
    assert members["shim-log.txt"].count(b"\n") == 10
    assert json.loads(members["versions.json"])["nvhook"]


def test_without_a_secret_nothing_is_redacted(
    make_mock_machine: Callable[..., Path], tmp_path: Path
) -> None:
    """The control: nothing planted, nothing redacted (redaction does not eat the report)."""
    root = make_mock_machine("h100-pcie")
    settings = tmp_path / "config.toml"
    settings.write_text(f'[host]\nroot = "{root}"\n')
    report = bug_report(str(tmp_path / "r.tar.gz"), root=str(root), config=str(settings))
    assert b"<redacted>" not in b"".join(_members(Path(report.path)).values())


def test_size_is_bounded(host: tuple[Path, Path, Path], tmp_path: Path) -> None:
    root, settings, _ = host
    log = root / "var/log/nvhook-runtime.log"
    with log.open("w") as f:
        for i in range(4_000):  # ~20 MB of lines longer than the 4 KiB kept of each
            f.write(f'{{"msg": "create", "n": {i}, "pad": "{"x" * 5000}"}}\n')
        f.write('{"msg": "the last line"}\n')
    with (root / "etc/containerd/config.toml").open("a") as f:  # larger than a member
        f.write(("# " + "y" * 1000 + "\n") * (MEMBER_LIMIT // 500))
    report = bug_report(str(tmp_path / "r.tar.gz"), root=str(root), config=str(settings))
    members = _members(Path(report.path))
    assert all(len(data) <= MEMBER_LIMIT for data in members.values())
    assert sum(len(d) for d in members.values()) <= TOTAL_LIMIT
    assert report.size < 2 * 1024 * 1024
    assert members["shim-log.txt"].endswith(b'{"msg": "the last line"}\n')
    diff = members["engines/containerd.diff"]
    assert diff.endswith(b")\n") and f"\n# cut at {MEMBER_LIMIT} bytes (of ".encode() in diff


def test_written_without_the_driver(make_mock_machine: Callable[..., Path], tmp_path: Path) -> None:
    root = make_mock_machine("no-gpu")
    settings = tmp_path / "config.toml"
    settings.write_text(f'[host]\nroot = "{root}"\n')
    bundle = _bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    report = bug_report(
        str(tmp_path / "r.tar.gz"), bundle=str(bundle), root=str(root), config=str(settings)
    )
    members = _members(Path(report.path))
    assert json.loads(members["mig.json"])["error"].startswith(
        "the NVIDIA kernel module is not loaded"
    )
    assert json.loads(members["explain.json"])["verdict"]["text"].startswith("will NOT start: ")
    checks = json.loads(members["doctor.json"])["checks"]
    assert checks[0]["message"].startswith("the NVIDIA kernel module is not loaded")


@pytest.mark.parametrize(("setting", "severity"), [("refuse", "error"), ("warn", "warning")])
def test_cdi_check_reports_an_untrusted_spec_under_the_setting(
    make_mock_machine: Callable[..., Path], tmp_path: Path, setting: str, severity: str
) -> None:
    root = make_mock_machine("h100-pcie")
    spec = root / "etc/cdi/other.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text('{"cdiVersion": "0.5.0", "kind": "example.com/dev", "devices": [{"name": '
                    '"d0", "containerEdits": {"env": ["A=1"]}}]}')  # fmt: skip
    spec.chmod(0o666)
    settings = tmp_path / "config.toml"
    settings.write_text(f'[host]\nroot = "{root}"\n[cdi]\nuntrusted_specs = "{setting}"\n')
    report = bug_report(str(tmp_path / "r.tar.gz"), root=str(root), config=str(settings))
    found = json.loads(_members(Path(report.path))["cdi-check.json"])
    mine = [f for f in found if f["file"] == str(spec)]
    assert [(f["kind"], f["severity"]) for f in mine] == [("untrusted", severity)]
    assert "writable by group or others" in mine[0]["message"]
