"""Golden cases: data under tests/golden/<case>/, one parametrized test.

Each case folder holds ``case.toml`` (``kind``, ``description`` and the kind's
inputs), the input spec (``config.in.json``, or ``base`` naming a file in
tests/data/specs/) and the expectation: ``expected.json`` (the resulting
config.json) or ``expected.err`` (the one-line error, with the case folder
written as ``<case>``). ``pytest --update-golden`` rewrites the expectations;
review the diff before committing it. It is refused when ``CI`` is set
(tests/conftest.py): there it would make every case pass.

Kinds:
- ``cdi``: ``devices`` resolved through a registry over the case's spec
  directories (``spec_dirs``, default ``["cdi"]``), then applied.
- ``jit``: the runtime shim's create path (:func:`nvhook.create.prepare`) on a
  bundle, against a mock machine (``profile``). The input spec is read as bytes
  and, when the case changes it, parsed by :func:`oci.bundle.parse_spec` (so a
  broken ``config.in.json`` fails as the shim would see it); then ``env``
  entries are set by name (``env_generated = [{name, text, times}]`` builds long
  values), ``annotations`` set by key, ``mounts`` set by destination and
  ``privileged = true`` adds CAP_SYS_ADMIN to the bounding set. Settings: the
  defaults with ``host.root`` = the mock, the ``policy`` table (Policy field
  names), ``mode`` (default ``jit``), ``resolver`` (default ``procfs``); in
  modes ``cdi`` and ``auto`` the registry holds one spec that ``nvhook cdi
  generate`` wrote for the mock (``generate_capabilities``, default its default).
  Paths of the mock, the hook launcher, the bundle and that spec directory are
  written as ``<mock>``, ``<hook>``, ``<bundle>`` and ``<cdi>`` in expectations.
- ``generate``: the spec :func:`nvhook.tools.generate.generate_spec` makes for a mock
  machine (``profile``), with the keyword arguments of the ``[generate]`` table (``kind``,
  ``capabilities``, ``name_strategies``, ``all_device``, ``vendor``, ``class_name``);
  ``expected.json`` is the spec as ``nvhook cdi generate`` writes it (JSON), no input
  spec, a node's ``uid``/``gid`` of the user running the tests (who laid out the mock)
  written as ``<uid>``/``<gid>``. Running it again must give the same spec.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvhook.errors import NvhookError
from oci.cdi.apply import apply
from oci.cdi.registry import Registry
from oci.errors import OciError

GOLDEN = Path(__file__).parent / "golden"
SPECS = Path(__file__).parent / "data" / "specs"


class Golden:
    """What runners share in a session: mock machines, generated CDI specs, placeholders."""

    def __init__(
        self, mock_machine: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        from nvhook.discover.hooks import default_hook_path

        self._mock_machine = mock_machine
        self._tmp = tmp_path_factory
        self._cdi: dict[tuple[str, tuple[str, ...]], Path] = {}
        self.hook_path = default_hook_path()
        self.placeholders: dict[str, str] = {self.hook_path: "<hook>"}

    def mock(self, profile: str) -> Path:
        root = self._mock_machine(profile)
        self.placeholders[str(root)] = "<mock>"
        return root

    def cdi_dir(self, profile: str, capabilities: tuple[str, ...]) -> Path:
        """A spec directory holding what ``nvhook cdi generate`` writes for the mock."""
        key = (profile, capabilities)
        if key not in self._cdi:
            from nvhook.planner import Host
            from nvhook.tools.generate import generate_spec
            from oci.cdi.write import write_spec

            directory = self._tmp.mktemp(f"golden-cdi-{profile}")
            host = Host(root=str(self.mock(profile)), hook_path=self.hook_path)
            generated = generate_spec(host, capabilities=capabilities or None)
            write_spec(directory / "nvidia.json", generated.spec)
            self._cdi[key] = directory
        self.placeholders[str(self._cdi[key])] = "<cdi>"
        return self._cdi[key]

    def rewrite(self, text: str) -> str:
        for path in sorted(self.placeholders, key=len, reverse=True):
            text = text.replace(path, self.placeholders[path])
        return text


Runner = Callable[[Path, dict[str, Any], Any, Golden], dict[str, Any]]


def _run_cdi(
    case_dir: Path, case: dict[str, Any], base: dict[str, Any], golden: Golden
) -> dict[str, Any]:
    dirs = [str(case_dir / d) for d in case.get("spec_dirs", ["cdi"])]
    edits = Registry(dirs).resolve(case["devices"])
    return apply(edits, base)


def _set_env(spec: dict[str, Any], entries: list[str]) -> None:
    env = spec.setdefault("process", {}).setdefault("env", [])
    for entry in entries:
        prefix = entry.split("=", 1)[0] + "="
        at = next((i for i, e in enumerate(env) if e.startswith(prefix)), None)
        if at is None:
            env.append(entry)
        else:
            env[at] = entry


def _compose(case: dict[str, Any], raw: bytes) -> bytes:
    """The case's changes to the input spec (idempotent: set by name, key, destination)."""
    from oci import jsoncodec
    from oci.bundle import parse_spec

    keys = ("env", "env_generated", "annotations", "mounts", "privileged")
    if not any(k in case for k in keys):
        return raw
    spec = parse_spec(raw, source="config.in.json")
    env = list(case.get("env", []))
    env += [f"{g['name']}={g['text'] * g['times']}" for g in case.get("env_generated", [])]
    _set_env(spec, env)
    if "annotations" in case:
        spec.setdefault("annotations", {}).update(case["annotations"])
    for mount in case.get("mounts", []):
        mounts = spec.setdefault("mounts", [])
        mounts[:] = [m for m in mounts if m.get("destination") != mount["destination"]]
        mounts.append(mount)
    if case.get("privileged"):
        caps = spec.setdefault("process", {}).setdefault("capabilities", {})
        bounding = caps.setdefault("bounding", [])
        if "CAP_SYS_ADMIN" not in bounding:
            bounding.append("CAP_SYS_ADMIN")
    return jsoncodec.dumpb(spec)


def _run_jit(
    case_dir: Path, case: dict[str, Any], base: bytes | dict[str, Any], golden: Golden
) -> dict[str, Any]:
    from nvhook.create import prepare
    from nvhook.requests.policy import SETTINGS_KEYS
    from nvhook.settings import defaults, field_name
    from oci import jsoncodec
    from oci.argv import RuntimeArgs
    from oci.bundle import Bundle

    raw = base if isinstance(base, bytes) else jsoncodec.dumpb(base)
    settings = defaults()._replace(
        host_root=str(golden.mock(case["profile"])),
        hook_path=golden.hook_path,
        runtime_mode=case.get("mode", "jit"),
        host_resolver=case.get("resolver", "procfs"),
    )
    policy = case.get("policy", {})
    settings = settings._replace(
        **{
            field_name(SETTINGS_KEYS[field]): tuple(value) if isinstance(value, list) else value
            for field, value in policy.items()
        }
    )
    if settings.runtime_mode != "jit":
        caps = tuple(case.get("generate_capabilities", ()))
        settings = settings._replace(cdi_spec_dirs=(str(golden.cdi_dir(case["profile"], caps)),))
    with tempfile.TemporaryDirectory(prefix="nvhook-golden-") as bundle:
        golden.placeholders[bundle] = "<bundle>"
        with open(f"{bundle}/config.json", "wb") as f:
            f.write(_compose(case, raw))
        prepare(RuntimeArgs.parse(["create", "--bundle", bundle, "golden"]), settings)
        return Bundle(bundle).load()


def _run_generate(
    case_dir: Path, case: dict[str, Any], base: None, golden: Golden
) -> dict[str, Any]:
    from nvhook.planner import Host
    from nvhook.tools.generate import generate_spec
    from oci.cdi.write import dump_spec

    host = Host(root=str(golden.mock(case["profile"])), hook_path=golden.hook_path)
    options: dict[str, Any] = {
        key: tuple(value) if isinstance(value, list) else value
        for key, value in case.get("generate", {}).items()
    }
    spec = generate_spec(host, **options).spec
    value = json.loads(dump_spec(spec, format="json"))
    assert isinstance(value, dict)
    # the owner of a restricted node is whoever laid out the mock (root, or the runner)
    ids = {"uid": (os.getuid(), "<uid>"), "gid": (os.getgid(), "<gid>")}
    edits = [value.get("containerEdits", {})] + [d["containerEdits"] for d in value["devices"]]
    for node in (n for e in edits for n in e.get("deviceNodes", [])):
        for key, (mine, placeholder) in ids.items():
            if node.get(key) == mine:
                node[key] = placeholder
    return value


RUNNERS: dict[str, Runner] = {"cdi": _run_cdi, "jit": _run_jit, "generate": _run_generate}


def _cases() -> list[Path]:
    return sorted(p for p in GOLDEN.iterdir() if (p / "case.toml").is_file())


def _base_path(case_dir: Path, case: dict[str, Any]) -> Path:
    return case_dir / "config.in.json" if "base" not in case else SPECS / case["base"]


def _load_base(case_dir: Path, case: dict[str, Any]) -> dict[str, Any]:
    value = json.loads(_base_path(case_dir, case).read_text())
    assert isinstance(value, dict)
    return value


def _load_bytes(case_dir: Path, case: dict[str, Any]) -> bytes:
    return _base_path(case_dir, case).read_bytes()


Loader = Callable[[Path, dict[str, Any]], Any]
#: How each kind reads its input spec (default: JSON as a dict).
LOADERS: dict[str, Loader] = {"jit": _load_bytes, "generate": lambda case_dir, case: None}


@pytest.fixture(scope="session")
def golden(mock_machine: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> Golden:
    return Golden(mock_machine, tmp_path_factory)


@pytest.mark.parametrize("case_dir", _cases(), ids=lambda p: p.name)
def test_golden(case_dir: Path, request: pytest.FixtureRequest, golden: Golden) -> None:
    case = tomllib.loads((case_dir / "case.toml").read_text())
    assert case.get("description"), f"{case_dir.name}: case.toml needs a description"
    runner = RUNNERS[case["kind"]]
    loader: Loader = LOADERS.get(case["kind"], _load_base)
    base = loader(case_dir, case)
    try:
        result: dict[str, Any] | None = runner(case_dir, case, base, golden)
        actual = json.dumps(result, indent=2, ensure_ascii=False) + "\n"
        name, other = "expected.json", "expected.err"
    except (OciError, NvhookError) as e:
        result = None
        actual = str(e).replace(str(case_dir), "<case>") + "\n"
        name, other = "expected.err", "expected.json"
    actual = golden.rewrite(actual)
    expected_path = case_dir / name
    if request.config.getoption("--update-golden"):
        expected_path.write_text(actual)
        (case_dir / other).unlink(missing_ok=True)
        return
    assert not (case_dir / other).exists(), f"{case_dir.name}: expected {other}, got {name}"
    assert expected_path.exists(), f"{case_dir.name}: no {name}; run pytest --update-golden"
    assert actual == expected_path.read_text()
    if result is not None:
        # the engine is idempotent: applying the same request again changes nothing
        assert runner(case_dir, case, result, golden) == result


def test_every_case_folder_is_a_case() -> None:
    strays = [p.name for p in GOLDEN.iterdir() if p.is_dir() and not (p / "case.toml").is_file()]
    assert strays == []


@pytest.mark.parametrize("ci", ["true", "1"])
def test_update_golden_is_refused_under_ci(ci: str) -> None:
    """Under CI, ``--update-golden`` would turn every golden failure into a rewrite: pytest
    stops before running anything, and the case's expectation is left as it was."""
    case = "jit-void"
    expected = GOLDEN / case / "expected.json"
    before = (expected.read_bytes(), expected.stat().st_mtime_ns)
    selected = f"{Path(__file__)}::test_golden[{case}]"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--update-golden",
            selected,
        ],
        cwd=Path(__file__).parents[1],
        env={**os.environ, "CI": ci},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert f"ERROR: --update-golden is refused under CI (CI='{ci}')" in proc.stderr
    assert "passed" not in proc.stdout
    assert (expected.read_bytes(), expected.stat().st_mtime_ns) == before
