"""nvhook.create: one function decides (and writes nothing); prepare applies its decision;
choose_mode: which mode a create uses for what the container asks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.create import Decision, cdi_names, choose_mode, decide, prepare
from nvhook.errors import RequirementError, UnknownDeviceError
from nvhook.requests.ids import Requests
from nvhook.requests.parse import parse_requests
from nvhook.requests.policy import Policy
from nvhook.settings import Settings, defaults
from nvhook.tools.explain import describe
from oci.argv import RuntimeArgs
from oci.bundle import Bundle

SPECS = Path(__file__).parents[1] / "data" / "specs"


@pytest.fixture
def settings(mock_machine: Callable[..., Path]) -> Settings:
    return defaults()._replace(host_root=str(mock_machine("dgx-a100")))


@pytest.fixture
def bundle(tmp_path: Path) -> Callable[..., Path]:
    def make(*env: str) -> Path:
        spec = json.loads((SPECS / "runc-spec.json").read_text())
        spec["process"]["env"] += list(env)
        path = tmp_path / f"b{len(list(tmp_path.iterdir()))}"
        path.mkdir()
        (path / "config.json").write_text(json.dumps(spec))
        return path

    return make


def _snapshot(path: Path) -> tuple[bytes, int, int]:
    st = (path / "config.json").stat()
    return (path / "config.json").read_bytes(), st.st_ino, st.st_mtime_ns


def test_decide_writes_nothing_and_prepare_writes_what_it_decided(
    bundle: Callable[..., Path], settings: Settings
) -> None:
    b = bundle("NVIDIA_VISIBLE_DEVICES=1")
    before = _snapshot(b)
    decision = decide(Bundle(b), settings)
    assert _snapshot(b) == before
    assert decision.error is None and decision.changes_config
    assert (decision.mode, decision.cdi_names) == ("jit", ())
    assert decision.plan is not None and decision.edits == decision.plan.edits
    assert [d.name for d in decision.plan.selected] == ["1"]
    assert decision.policy is not None and decision.requests is not None
    outcome = prepare(RuntimeArgs.parse(["create", "--bundle", str(b), "c1"]), settings)
    assert outcome.written and outcome.decision.result == decision.result
    assert Bundle(b).load() == decision.result
    assert outcome.fields() == {"mode": "jit", "devices": "1", "written": True}
    assert "NVIDIA_VISIBLE_DEVICES=void" in decision.result["process"]["env"]
    again = decide(Bundle(b), settings)  # served: void asks for nothing more
    assert again.mode is None and again.edits is None and not again.changes_config


def test_nothing_asked_decides_nothing(bundle: Callable[..., Path], settings: Settings) -> None:
    b = bundle()
    decision = decide(Bundle(b), settings)
    assert decision.error is None and decision.mode is None and not decision.changes_config
    assert (decision.edits, decision.result, decision.plan) == (None, None, None)
    assert decision.requests is not None and not decision.requests.wants_anything
    outcome = prepare(RuntimeArgs.parse(["create", "--bundle", str(b), "c1"]), settings)
    assert outcome.fields() == {"mode": None, "devices": "", "written": False}


def test_a_failure_is_the_decision_with_the_stages_done(
    bundle: Callable[..., Path], settings: Settings
) -> None:
    b = bundle("NVIDIA_VISIBLE_DEVICES=9", "NVIDIA_REQUIRE_CUDA=cuda>=12.0")
    before = _snapshot(b)
    decision = decide(Bundle(b), settings)
    assert isinstance(decision.error, UnknownDeviceError)
    assert decision.mode == "jit" and decision.requests is not None
    assert (decision.plan, decision.edits, decision.result) == (None, None, None)
    assert [s for _, s in decision.requirement_checks()] == [
        "not checked: the create fails before they are"
    ]
    with pytest.raises(UnknownDeviceError):
        prepare(RuntimeArgs.parse(["create", "--bundle", str(b), "c1"]), settings)
    assert _snapshot(b) == before


def test_broken_config_json_is_a_decision_too(tmp_path: Path, settings: Settings) -> None:
    decision = decide(Bundle(tmp_path / "nowhere"), settings)
    assert decision.error is not None and "no such file" in decision.error.message
    assert decision == Decision(str(tmp_path / "nowhere"), settings, error=decision.error)


@pytest.mark.parametrize(
    ("env", "statuses"),
    [
        (["NVIDIA_REQUIRE_CUDA=cuda>=12.0"], ["met (CUDA 12.4, driver 550.54.15)"]),
        (
            ["NVIDIA_REQUIRE_CUDA=cuda>=12.0", "NVIDIA_DISABLE_REQUIRE=1"],
            ["not checked: NVIDIA_DISABLE_REQUIRE is set"],
        ),
        (
            ["NVIDIA_REQUIRE_CUDA=cuda>=99.0", "NVIDIA_REQUIRE_DRIVER=driver>=500"],
            ["NOT MET", "not checked (another is not met)"],
        ),
        ([], []),
    ],
)
def test_requirement_checks(
    bundle: Callable[..., Path], settings: Settings, env: list[str], statuses: list[str]
) -> None:
    decision = decide(Bundle(bundle("NVIDIA_VISIBLE_DEVICES=0", *env)), settings)
    assert [s for _, s in decision.requirement_checks()] == statuses
    assert isinstance(decision.error, RequirementError) == ("NOT MET" in statuses)


def test_explain_renders_the_decision(bundle: Callable[..., Path], settings: Settings) -> None:
    from nvhook.tools.explain import explain

    b = bundle("NVIDIA_VISIBLE_DEVICES=0,3")
    decision = decide(Bundle(b), settings)
    data = describe(decision, config_file="given")
    assert data == explain(str(b), settings=settings) | {"settings": data["settings"]}
    assert data["settings"]["config_file"] == "given"
    assert data["mode"] == decision.mode and data["outcome"]["result"] == "edit"
    assert len(data["edits"]["device_nodes"]) == len(decision.edits.device_nodes)  # type: ignore[union-attr]


def _asking(visible: str) -> Requests:
    spec = {"process": {"env": [f"NVIDIA_VISIBLE_DEVICES={visible}"]}}
    return parse_requests(spec, Policy())


@pytest.mark.parametrize(
    ("configured", "visible", "mode"),
    [
        ("auto", "nvidia.com/gpu=0", "cdi"),
        ("auto", "nvidia.com/gpu=0,vendor.io/fpga=x", "cdi"),  # every one a CDI name
        ("auto", "nvidia.com/gpu=1,0", "jit"),  # mixed: not every one a CDI name
        ("auto", "0,nvidia.com/gpu=1", "jit"),
        ("auto", "GPU-8d3f6c2a-0d4c-4f5e-9a70-1b2c3d4e5f60,nvidia.com/gpu=1", "jit"),
        ("auto", "0,1", "jit"),
        ("auto", "all", "jit"),
        ("auto", "none", "jit"),
        ("cdi", "nvidia.com/gpu=1,0", "cdi"),  # a configured mode is used as it is
        ("jit", "nvidia.com/gpu=0", "jit"),
    ],
)
def test_choose_mode(configured: str, visible: str, mode: str) -> None:
    chosen, reason = choose_mode(configured, _asking(visible))
    assert chosen == mode
    assert reason.startswith(f"runtime.mode is {configured}")


def test_a_mixed_list_in_cdi_mode_names_each_device_in_request_order() -> None:
    assert cdi_names(_asking("nvidia.com/gpu=1,0"), "nvidia.com/gpu") == (
        "nvidia.com/gpu=1",
        "nvidia.com/gpu=0",
    )
