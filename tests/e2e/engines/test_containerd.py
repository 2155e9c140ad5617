"""containerd 2.1 (Debian unstable) and 1.7 (Debian 13), each from its Debian root, run privately
(tests/support/engines.py).

``nvhook runtime configure --runtime containerd`` on the three configs a node has: that
version's ``containerd config default`` (version 3 on 2.x, 2 on 1.7), the file the Debian
package installs (a short version 2 file on both), and a config with ``imports``, which gets a
drop-in. Each is then loaded by that containerd: ``containerd config dump`` shows the ``nvidia``
runtime running nvhook-runtime (in 2.x's migrated plugin for a version 2 file), with what the
other files set kept.

Then one containerd per version, on the Debian file so configured, serves CRI as kubelet talks
to it (:mod:`tests.e2e.test_cri`'s helpers): a pod with runtime handler ``nvidia`` whose container
asked for GPU 1 sees exactly that GPU (the mock's ``nvidia-smi -L``); and, with nvhook-runtime
not in the path at all, containerd's own CDI (on by default in 2.x; ``runtime configure
--enable-cdi`` on 1.7) applies nvhook's generated spec to a CRI ``CDIDevices`` request under
plain runc: GPU 1 only, and the library link that nvhook's createContainer hook makes is there.

The engine's socket, state and config are its own, in a private mount namespace; the shim runs
as the root's runc (1.3 in sid, 1.1 in trixie) behind nvhook-runtime, with the root's Python.
"""

from __future__ import annotations

import shutil
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from nvhook.cli import main
from nvhook.cri.client import CriClient
from nvhook.mock import Profile
from tests.e2e.conftest import PROBE, Shim, expected_smi_uuids, parse_probe
from tests.e2e.engines.conftest import Engine, private_root
from tests.e2e.test_cri import run_pod
from tests.support.engines import EngineContainerd
from tests.support.images import PAUSE_IMAGE, pause_image_tar

pytestmark = [pytest.mark.root, pytest.mark.runtime, pytest.mark.slow]

#: engine -> (Debian suite, containerd's major version)
CONTAINERDS = {"containerd2": ("sid", 2), "containerd17": ("trixie", 1)}
#: the plugin whose table holds ``containerd.runtimes`` in ``config dump``, by major version
CRI_RUNTIME_PLUGIN = {2: "io.containerd.cri.v1.runtime", 1: "io.containerd.grpc.v1.cri"}
#: the version ``containerd config default`` writes, by major version
DEFAULT_VERSION = {2: 3, 1: 2}
K8S = "k8s.io"
LIBCUDA_LINK = "/usr/lib/x86_64-linux-gnu/libcuda.so"
#: PROBE, then where the link the hook makes points (``--link libcuda.so.1::…/libcuda.so``)
LINK_PROBE = f"{PROBE}; echo '--- link'; readlink {LIBCUDA_LINK}"


@pytest.fixture(scope="module", params=list(CONTAINERDS))
def _containerd(
    request: pytest.FixtureRequest,
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Engine]:
    yield from containerds(request.param, suite_root, tmp_path_factory)


def containerds(
    param: str,
    suite_root: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    prefix: str = "",
) -> Iterator[Engine]:
    """A module fixture's containerd of ``CONTAINERDS[param]``, its work dir ``PREFIXparam``."""
    suite, major = CONTAINERDS[param]
    yield from private_root(
        suite_root, tmp_path_factory, prefix + param, suite, ("containerd", "--version"), major
    )


@pytest.fixture
def ctrd(_containerd: Engine, print_version: Callable[[Engine], None]) -> Engine:
    print_version(_containerd)
    return _containerd


def configure(shim: Shim, config: Path, *options: str) -> None:
    args = ["--runtime", "containerd", "--config", str(config), "--runtime-path", shim.binary]
    args += ["--backup-dir", str(config.parent / "backups"), *options]
    assert main(["runtime", "configure", *args]) == 0


def runtimes(dump: dict[str, Any], plugin: str) -> dict[str, Any]:
    found: dict[str, Any] = dump["plugins"][plugin]["containerd"]["runtimes"]
    return found


def assert_nvidia_handler(dump: dict[str, Any], engine: Engine, shim: Shim) -> None:
    """The dump has runtime ``nvidia`` running nvhook-runtime, and runc still."""
    handlers = runtimes(dump, CRI_RUNTIME_PLUGIN[engine.major])
    nvidia = handlers["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == shim.binary
    assert "cdi.k8s.io/*" in nvidia["container_annotations"]
    assert "runc" in handlers


def sources(engine: Engine, case: Path) -> dict[str, Path]:
    """The three configs of a node, written under ``case``: ``config default``, the Debian
    package's file, and the default with an ``imports`` glob (and one file it matches)."""
    default = engine.root.run("containerd", "config", "default").stdout
    out = {}
    for name, text in (
        ("default", default),
        ("debian", (engine.root.lower / "etc/containerd/config.toml").read_text()),
    ):
        (case / name).mkdir(parents=True)
        out[name] = case / name / "config.toml"
        out[name].write_text(text)
    conf_d = case / "imports" / "conf.d"
    conf_d.mkdir(parents=True)
    assert "\nimports = []\n" in default
    main_file = case / "imports" / "config.toml"
    main_file.write_text(default.replace("\nimports = []\n", f'\nimports = ["{conf_d}/*.toml"]\n'))
    cri = "[plugins.'io.containerd.cri.v1.runtime']" if engine.major == 2 else (
        '[plugins."io.containerd.grpc.v1.cri"]'
    )  # fmt: skip
    version = DEFAULT_VERSION[engine.major]
    (conf_d / "10-cri.toml").write_text(
        f"version = {version}\n{cri}\n  max_container_log_line_size = 12345\n"
    )
    out["imports"] = main_file
    return out


@pytest.mark.parametrize("source", ["default", "debian", "imports"])
def test_configure_is_loaded(ctrd: Engine, shim: Shim, source: str, tmp_path: Path) -> None:
    config = sources(ctrd, tmp_path)[source]
    version = tomllib.loads(config.read_text())["version"]
    if source == "default":
        assert version == DEFAULT_VERSION[ctrd.major]
    if source == "debian":
        assert version == 2  # on 2.1.9 too: 2.x migrates it
    original = config.read_text()
    before = runtimes(ctrd_dump(ctrd, config), CRI_RUNTIME_PLUGIN[ctrd.major])
    assert "nvidia" not in before

    configure(shim, config)

    dump = ctrd_dump(ctrd, config)
    assert_nvidia_handler(dump, ctrd, shim)
    assert dump["version"] == DEFAULT_VERSION[ctrd.major]
    if source == "imports":
        drop_in = config.parent / "conf.d/99-nvhook.toml"
        assert drop_in.is_file()
        assert config.read_text() == original  # its glob takes the drop-in: not edited
        assert (
            dump["plugins"][CRI_RUNTIME_PLUGIN[ctrd.major]]["max_container_log_line_size"] == 12345
        )
    configure(shim, config)  # a second run changes nothing
    assert _ordered(ctrd_dump(ctrd, config)) == _ordered(dump)


def _ordered(dump: dict[str, Any]) -> dict[str, Any]:
    """containerd 1.7 dumps the files it loaded, ``imports``, in no fixed order."""
    return {**dump, "imports": sorted(dump.get("imports", []))}


def ctrd_dump(engine: Engine, config: Path) -> dict[str, Any]:
    dumped: dict[str, Any] = EngineContainerd(engine.root, config.parent, config).dump()
    return dumped


# --------------------------------------------------------------------------- CRI


def restrict_oom_score_adj(config: Path) -> None:
    """What CRI needs on this VM (docs/facts.md), added to a version 2 file: root lacks
    ``CAP_SYS_RESOURCE``, so the sandbox's ``oom_score_adj`` of -998 fails runc's create
    ("can't get final child's PID from pipe: EOF") unless CRI keeps it at containerd's own."""
    doc = tomlkit.parse(config.read_text())
    assert doc["version"] == 2
    doc["plugins"]["io.containerd.grpc.v1.cri"]["restrict_oom_score_adj"] = True
    config.write_text(tomlkit.dumps(doc))


def sandbox_image(dump: dict[str, Any], major: int) -> str:
    """The pause image's name that containerd ``major``'s CRI (its ``config dump``) runs."""
    if major == 2:
        return str(dump["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"])
    return str(dump["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"])


def import_pod_images(
    daemon: EngineContainerd, busybox_image: Path, sandbox: str, workdir: Path
) -> None:
    """What a CRI pod needs, into the running ``daemon``: the busybox image, and a pause image
    made from it (in ``workdir``) under the name ``sandbox``."""
    pause = pause_image_tar(busybox_image, workdir / "pause")
    daemon.ctr("images", "import", str(busybox_image))
    daemon.ctr("images", "import", str(pause))
    daemon.ctr("images", "tag", PAUSE_IMAGE, sandbox)


class Served:
    """A started containerd of the module and the CRI client talking to it."""

    def __init__(self, engine: Engine, daemon: EngineContainerd, client: CriClient):
        self.engine = engine
        self.daemon = daemon
        self.client = client


@pytest.fixture(scope="module")
def _served(_containerd: Engine, shim: Shim, busybox_image: Path, dgx: Path) -> Iterator[Served]:
    """containerd on the Debian package's file, configured by nvhook (with ``--enable-cdi``),
    nvhook's CDI spec in the root's ``/etc/cdi``, the busybox image and the pause image (under
    the sandbox image's name of this version) imported."""
    engine = _containerd
    case = engine.work / "served"
    case.mkdir()
    config = case / "config.toml"
    shutil.copy(engine.root.lower / "etc/containerd/config.toml", config)
    configure(shim, config, "--enable-cdi")
    restrict_oom_score_adj(config)
    spec = case / "nvidia.json"
    assert main(["cdi", "generate", "--root", str(dgx), "--output", str(spec)]) == 0
    engine.root.run("sh", "-c", f"mkdir -p /etc/cdi && cp {spec} /etc/cdi/nvidia.json")
    daemon = EngineContainerd(engine.root, case, config, env=shim.extra_env)
    dump = daemon.dump()
    assert_nvidia_handler(dump, engine, shim)
    sandbox = sandbox_image(dump, engine.major)
    with daemon:
        import_pod_images(daemon, busybox_image, sandbox, case)
        with CriClient(daemon.address) as client:
            yield Served(engine, daemon, client)


@pytest.fixture
def served(_served: Served, print_version: Callable[[Engine], None]) -> Served:
    print_version(_served.engine)
    return _served


def test_cri_pod_with_the_nvidia_handler_sees_its_gpu(
    served: Served, shim: Shim, profile: Profile, tmp_path: Path
) -> None:
    version = served.client.version()
    assert (version.runtime_name, version.runtime_api_version) == ("containerd", "v1")
    assert served.engine.version.split()[2].lstrip("v") in version.runtime_version

    sandbox, container, output = run_pod(
        served.client, "nvidia", tmp_path / "gpu", {"NVIDIA_VISIBLE_DEVICES": "1"}
    )

    probe = parse_probe(output)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [1])
    assert probe.gpu_nodes == {"/dev/nvidia1"}
    [ours] = shim.log_records(container)
    assert (ours["command"], ours["written"], ours["devices"]) == ("create", True, "1")
    [pause] = shim.log_records(sandbox)
    assert (pause["command"], pause["written"]) == ("create", False)


def test_containers_own_cdi_applies_nvhooks_spec_under_plain_runc(
    served: Served, shim: Shim, profile: Profile, tmp_path: Path
) -> None:
    sandbox, container, output = run_pod(
        served.client,
        "",
        tmp_path / "cdi",
        {},
        allocation={"cdi_devices": ["nvidia.com/gpu=1"]},
        command=LINK_PROBE,
    )

    probe = parse_probe(output)
    assert probe.gpu_uuids == expected_smi_uuids(profile, [1])
    assert probe.gpu_nodes == {"/dev/nvidia1"}
    assert "/dev/nvidiactl" in probe.nodes
    link = output.split("--- link\n", 1)[1].strip()
    assert link == "libcuda.so.1"  # made by nvhook-hook, the spec's createContainer hook
    assert shim.log_records(sandbox) == shim.log_records(container) == []


def test_containers_own_cdi_applies_nvhooks_amd_spec(served: Served, tmp_path: Path) -> None:
    """Another vendor through containerd's own CDI: ``nvhook cdi generate --vendor amd`` on
    the ``mi300x-8`` mock in the root's ``/etc/cdi``, and a CRI container given
    ``amd.com/gpu=9`` as kubelet passes a device plugin's CDI devices: exactly ``/dev/kfd``
    and partition 9's card and render nodes, which open as far as the driver (ENXIO: the
    mock has none), and no other render node."""
    from nvhook.mock.vendors import create as create_vendor

    machine = tmp_path / "amd"
    create_vendor("mi300x-8", machine, nodes="char")
    spec = tmp_path / "amd.json"
    argv = ["cdi", "generate", "--root", str(machine), "--vendor", "amd", "-o", str(spec)]
    assert main(argv) == 0
    root = served.engine.root
    root.run("cp", str(spec), "/etc/cdi/amd.json")
    look = "ls /dev /dev/dri; echo '--- open'; cat /dev/dri/renderD137 2>&1; true"
    try:
        _, _, output = run_pod(
            served.client,
            "",
            tmp_path / "logs",
            {},
            allocation={"cdi_devices": ["amd.com/gpu=9"]},
            command=look,
        )
    finally:
        root.run("rm", "-f", "/etc/cdi/amd.json")
    listing, _, opened = output.partition("--- open\n")
    names = set(listing.split())
    assert "kfd" in names
    assert {n for n in names if n.startswith(("card", "renderD"))} == {"card10", "renderD137"}
    assert "No such device or address" in opened, opened
