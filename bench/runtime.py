"""What nvhook-runtime adds to each runtime call: time over the runtime it execs, and peak RSS.

    .venv/bin/python bench/runtime.py [--runs N] [--profile] [--parts] [--anchor PATH]
                                      [--machine NAME]

The low-level runtime behind the shim is a no-op stand-in (a static C program that exits
0; ``/bin/true`` without a C compiler), so no container starts and each row isolates the
shim: its median wall time minus the median of calling the stand-in directly with the same
argv, both measured in the same loop, interleaved. Each run is started by a tiny static C
helper that forks, execs and reports the wall time and the child's ``ru_maxrss`` from
``wait4`` (Linux keeps the high-water mark across the shim's exec of the runtime). Started
from Python instead, the child would inherit Python's own high-water mark: ``posix_spawn``
and ``subprocess`` use ``vfork``, so the exec'd child starts out on the parent's memory.
Without a C compiler the runs are spawned from Python and RSS is not shown.

Cases, on the ``dgx-a100`` mock machine (laid out in a temporary directory):

- pass-through ``state`` (containerd's most frequent call);
- ``create`` of a bundle that asks for nothing (containerd's argv: ``--root --log
  --log-format json create --bundle --pid-file``);
- ``create`` with ``NVIDIA_VISIBLE_DEVICES=1`` and ``=all``, each in mode ``jit`` (the host
  discovered through procfs) and mode ``cdi`` (``nvidia.com/gpu=1``/``=all`` from a spec
  shaped like ``nvhook cdi generate``'s, built here from the jit edits: common edits at the
  spec level, a device per GPU index, UUID and MIG device, and ``all``);
- ``create`` with ``NVIDIA_VISIBLE_DEVICES=1`` in mode ``cdi`` from the same spec written as
  YAML (the registry keeps winning files decoded by identity, so it should cost what JSON
  does once the file has settled);
- ``create`` with ``NVIDIA_VISIBLE_DEVICES=1`` in mode ``cdi`` with 1,000 other specs beside
  that one (one per DRA claim, another kind), older than the index's racy window
  (:data:`oci.cdi.index.RACY_NS`), so later runs read them from the index.

Those rows run the Python shim (``nvhook-runtime.py`` where ``nvhook-runtime`` is the native
front-end, else ``nvhook-runtime``). Where the front-end is installed, ``front-end:`` rows
run it for pass-through, the create that asks for nothing (both execed by it) and the 1-GPU
creates (handed to the Python shim), against issue 16's budgets (2, 3 and 12 ms). Where
``nvhook-shim-server`` is installed too, it is started on ``shim.sock`` in a cache directory
of its own (0700, in the work directory), and ``front-end + server:`` rows run the 1-GPU
creates with ``NVHOOK_CACHE_DIR`` naming it: the front-end hands them to the server
(docs/architecture.md D12), against the same 12 ms. Their peak RSS is the front-end's (then
the stand-in's); the server's own is printed above the table.

config.json is restored from a pristine copy before every run, outside the timed region.
The settings cache is warmed first, and ``oci``/``nvhook`` are byte-compiled with
``compileall`` (this environment sets ``PYTHONDONTWRITEBYTECODE=1``, which would otherwise
leave new modules uncompiled and charge their compilation to every run).

``--anchor PATH`` runs NVIDIA's ``nvidia-container-runtime`` beside each of the Python shim's
rows in the same loop (:func:`anchor_cases`: cdi over the same spec directory, jit as its
``jit-cdi`` on the fake NVML), adds a cdi row of each on NVIDIA's own spec of the mock
(``nvidia-ctk cdi generate``, from beside PATH), and prints each row's overhead as a
multiple of the anchor's; it re-executes the bench in a private mount namespace that shows
the mock's MIG minors at ``/proc/driver/nvidia-caps`` (:func:`private_proc_driver`).
``--machine NAME`` lays out another mock (default ``dgx-a100``; the 1-GPU rows use GPU 0
on a one-GPU machine). With the server, every GPU create has a ``front-end + server:`` row;
``--parts`` breaks a create through the front-end and the server into its steps
(:func:`trace_parts`, ``nvhook-shim-server --trace``).

``--profile`` then shows where a create with GPUs spends its time: ``-X importtime``
(modules by cumulative import time) and cProfile (functions by cumulative time), for the
1-GPU jit and cdi cases (the crowded one too). The machine is shared and noisy: compare rows
of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PROFILE = "dgx-a100"
BUDGET_RSS_MB = 40.0
NOOP_C = "int main(void) { return 0; }\n"
#: ``measure OUT PROG ARGS…``: fork, exec PROG, wait4; write "ns maxrss_kib exit_code" to OUT.
MEASURE_C = r"""
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>
int main(int argc, char **argv) {
    struct timespec a, b;
    struct rusage ru;
    int status = 0;
    if (argc < 3) return 2;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pid_t pid = fork();
    if (pid == 0) { execv(argv[2], argv + 2); _exit(127); }
    if (pid < 0 || wait4(pid, &status, 0, &ru) < 0) return 3;
    clock_gettime(CLOCK_MONOTONIC, &b);
    FILE *out = fopen(argv[1], "w");
    if (!out) return 4;
    fprintf(out, "%lld %ld %d\n",
            (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec),
            ru.ru_maxrss, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return fclose(out) != 0;
}
"""

#: The modes a case runs the shim in; each gets a config file of its own.
MODES = ("auto", "jit", "cdi")
#: A config of its own: mode cdi over a spec directory that also holds OTHER_SPECS claim specs.
CDI_CROWDED = "cdi-crowded"
OTHER_SPECS = 1000
#: A config of its own: mode cdi over a directory holding the same spec as YAML.
CDI_YAML = "cdi-yaml"
#: A config of its own (``--anchor``): mode cdi over NVIDIA's own spec of the mock
#: (``nvidia-ctk cdi generate``, from beside the anchor).
CDI_NVIDIA = "cdi-nvidia"


@dataclass
class Case:
    name: str
    argv: list[str]  # after the program name
    budget_ms: float | None  # None: a reference row (the program alone, no shim)
    mode: str
    bundle: Path | None = None
    visible: str | None = None  # NVIDIA_VISIBLE_DEVICES in config.json; None: no request
    expect_gpus: int | None = None  # /dev/nvidiaN nodes the shim must add (None: some)
    program: str | None = None  # reference rows, front-end rows: what runs instead of the shim
    env_extra: dict[str, str] = field(default_factory=dict)  # server rows: their cache dir
    anchor: bool = False  # NVIDIA's nvidia-container-runtime (--anchor): overhead, no budget
    shim_ms: list[float] = field(default_factory=list)
    direct_ms: list[float] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Setup:
    work: Path
    shim: str  # the Python shim's launcher
    frontend: str | None  # the native front-end, when installed
    server: str | None  # nvhook-shim-server's launcher, when installed with the front-end
    noop: str
    noop_kind: str
    measure: str | None  # the C helper, None without a compiler
    machine: Path
    configs: dict[str, Path]
    env_base: dict[str, str]
    profile: str = PROFILE  # the mock machine (--machine)

    def env(self, mode: str) -> dict[str, str]:
        return {**self.env_base, "NVHOOK_CONFIG": str(self.configs[mode])}

    @property
    def gpus(self) -> int:
        from nvhook.mock import load_profile

        return len(load_profile(self.profile).gpus)

    @property
    def one(self) -> str:
        """The GPU of the 1-GPU rows: ``1`` (``dgx-a100``'s MIG-enabled GPU without
        instances, as before), ``0`` on a one-GPU machine."""
        return "1" if self.gpus > 1 else "0"


# --------------------------------------------------------------------------- set-up


def compile_bytecode() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "oci", "nvhook"], cwd=REPO, env=env, check=True
    )


def shim_launcher(given: str | None) -> tuple[str, str | None]:
    """The Python shim's launcher, and the native front-end in front of it (or None)."""
    path = Path(given) if given else Path(sys.executable).parent / "nvhook-runtime"
    if not path.is_file():
        raise SystemExit(
            f"{path} not found: run {Path(sys.executable).parent}/nvhook install-entrypoints"
        )
    with path.open("rb") as f:
        native = f.read(4) == b"\x7fELF"
    if not native:
        return str(path), None
    launcher = path.with_name(path.name + ".py")
    if not launcher.is_file():
        raise SystemExit(f"{path} is the native front-end but {launcher} is missing")
    return str(launcher), str(path)


def build_c(work: Path, name: str, source: str) -> str | None:
    """Compile ``source`` statically to ``work/name``; None without a working C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    src, out = work / f"{name}.c", work / name
    src.write_text(source)
    built = subprocess.run([cc, "-O2", "-static", "-o", str(out), str(src)], check=False)
    return str(out) if built.returncode == 0 else None


def build_noop(work: Path) -> tuple[str, str]:
    """A static C program that exits 0 (the fastest possible runtime), else /bin/true."""
    noop = build_c(work, "noop-runtime", NOOP_C)
    if noop is not None:
        return noop, "static C no-op"
    return shutil.which("true") or "/bin/true", "/bin/true"


def pristine_spec() -> dict[str, Any]:
    """``runc spec`` output when runc is here (what real bundles look like), else a close copy."""
    runc = shutil.which("runc")
    if runc:
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([runc, "spec", "--bundle", d], check=True, capture_output=True)
            spec: dict[str, Any] = json.loads(Path(d, "config.json").read_text())
            spec["process"]["terminal"] = False
            return spec
    return {
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "runc",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
        ],
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
        },
    }


def cdi_spec(machine: Path, profile_name: str = PROFILE) -> dict[str, Any]:
    """A spec shaped like ``nvhook cdi generate``'s, made from the jit edits of each device."""
    from nvhook.mock import load_profile
    from nvhook.planner import Host, plan
    from nvhook.requests.parse import parse_requests
    from nvhook.requests.policy import Policy

    host = Host(root=str(machine))

    def edits(visible: str) -> dict[str, Any]:
        spec = {"process": {"env": [f"NVIDIA_VISIBLE_DEVICES={visible}"]}}
        result: dict[str, Any] = plan(parse_requests(spec, Policy()), host).edits.to_dict()
        return result

    common = edits("none")
    shared = {k: {json.dumps(x, sort_keys=True) for x in v} for k, v in common.items()}

    def own(visible: str) -> dict[str, Any]:
        """The device's edits less the spec's: what ``nvhook cdi generate`` puts in a device
        (its nodes and its ``NVHOOK_GPU_*`` env entry). Before, any difference besides the
        nodes kept the whole set in every device: a 280 KB spec, 7x what generate writes."""
        out: dict[str, Any] = {}
        for key, items in edits(visible).items():
            mine = [x for x in items if json.dumps(x, sort_keys=True) not in shared.get(key, ())]
            if mine:
                out[key] = mine
        return out

    devices = []
    profile = load_profile(profile_name)
    for gpu in profile.gpus:
        gpu_edits = own(str(gpu.minor))
        devices += [
            {"name": str(gpu.minor), "containerEdits": gpu_edits},
            {"name": gpu.uuid, "containerEdits": gpu_edits},
        ]
        for mig in gpu.mig_devices:
            mig_edits = own(f"{gpu.minor}:{mig.index}")
            devices += [
                {"name": f"{gpu.minor}:{mig.index}", "containerEdits": mig_edits},
                {"name": mig.uuid, "containerEdits": mig_edits},
            ]
    devices.append({"name": "all", "containerEdits": own("all")})
    return {
        "cdiVersion": "0.8.0",
        "kind": "nvidia.com/gpu",
        "devices": devices,
        "containerEdits": common,
    }


def other_spec(i: int) -> dict[str, Any]:
    """A spec like a DRA driver's for one claim: one device, a few edits, another kind."""
    uid = f"{i:08x}-0000-4000-8000-{i:012x}"
    return {
        "cdiVersion": "0.5.0",
        "kind": "k8s.gpu.example.com/claim",
        "devices": [
            {
                "name": f"{uid}-gpu-0",
                "containerEdits": {
                    "env": [f"CLAIM_UID={uid}"],
                    "deviceNodes": [{"path": f"/dev/example{i % 8}"}],
                },
            }
        ],
    }


def prepare(work: Path, shim: str, frontend: str | None, profile: str = PROFILE,
            anchor_ctk: str | None = None) -> Setup:  # fmt: skip
    server = Path(shim).with_name("nvhook-shim-server")
    from nvhook.mock import create
    from oci.cdi.index import RACY_NS

    crowded_dir = work / "cdi-crowded"
    crowded_dir.mkdir()
    for i in range(OTHER_SPECS):
        name = f"k8s.gpu.example.com-claim_{i:04}.json"
        (crowded_dir / name).write_text(json.dumps(other_spec(i), indent=2))
    settled_at = time.monotonic() + RACY_NS / 1e9
    machine = work / "machine"
    create(profile, machine, nodes="auto")
    if anchor_ctk is not None:
        private_proc_driver(machine)
    noop, noop_kind = build_noop(work)
    cdi_dir = work / "cdi"
    cdi_dir.mkdir()
    gpu_spec = json.dumps(cdi_spec(machine, profile), indent=2)
    (cdi_dir / "nvidia.json").write_text(gpu_spec)
    (crowded_dir / "nvidia.json").write_text(gpu_spec)
    import yaml

    yaml_dir = work / "cdi-yaml"
    yaml_dir.mkdir()
    (yaml_dir / "nvidia.yaml").write_text(yaml.safe_dump(json.loads(gpu_spec), sort_keys=False))
    dirs = [*((m, m, cdi_dir) for m in MODES), (CDI_CROWDED, "cdi", crowded_dir),
            (CDI_YAML, "cdi", yaml_dir)]  # fmt: skip
    if anchor_ctk is not None:
        nvidia_dir = work / SPEC_DIRS[CDI_NVIDIA]
        nvidia_dir.mkdir()
        nvidia_spec(anchor_ctk, machine, nvidia_dir / "nvidia.yaml")
        dirs.append((CDI_NVIDIA, "cdi", nvidia_dir))
    configs = {}
    for name, mode, spec_dir in dirs:
        path = work / f"config-{name}.toml"
        path.write_text(
            "[runtime]\n"
            f"runtimes = [{json.dumps(noop)}]\n"
            f"mode = {json.dumps(mode)}\n"
            f"log_file = {json.dumps(str(work / 'shim.log'))}\n"
            "[host]\n"
            f"root = {json.dumps(str(machine))}\n"
            "[cdi]\n"
            f"spec_dirs = [{json.dumps(str(spec_dir))}]\n"
        )
        configs[name] = path
    # The server's own settings, as a node's server reads the node's config: its spec files are
    # parsed ahead (nvhook.server._Ahead). Every row's spec directory but the crowded one,
    # whose 1,000 claim specs are older here than its nvidia.json (the oldest are kept).
    ahead_dirs = [str(d) for name, _, d in dirs if name in ("cdi", CDI_YAML, CDI_NVIDIA)]
    server_config = work / f"config-{SERVER_CONFIG}.toml"
    server_config.write_text(
        configs["cdi"]
        .read_text()
        .replace(
            f"spec_dirs = [{json.dumps(str(cdi_dir))}]\n",
            f"spec_dirs = {json.dumps(list(dict.fromkeys(ahead_dirs)))}\n",
        )
    )
    configs[SERVER_CONFIG] = server_config
    env_base = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "NVHOOK_CACHE_DIR": str(work / "cache"),
    }
    measure = build_c(work, "measure", MEASURE_C)
    time.sleep(max(0.0, settled_at - time.monotonic()))  # the crowded and YAML specs settle
    server_path = str(server) if frontend and server.is_file() else None
    return Setup(work, shim, frontend, server_path, noop, noop_kind, measure, machine, configs,
                 env_base, profile)  # fmt: skip


def nvidia_spec(ctk: str, machine: Path, out: Path) -> None:
    """NVIDIA's own spec of the mock: ``nvidia-ctk cdi generate`` with the mock as its driver
    and device root (it finds the fake ``libnvidia-ml.so.1`` there). It reads the MIG minors
    from the host's ``/proc/driver/nvidia-caps`` (NVIDIA's ``internal/nvcaps``), which
    :func:`private_proc_driver` binds from the mock first."""
    proc = subprocess.run(
        [ctk, "cdi", "generate", "--driver-root", str(machine), "--dev-root", str(machine),
         "--output", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0 or not out.is_file():
        raise SystemExit(f"{ctk} cdi generate failed:\n{proc.stderr[-2000:]}")


def private_proc_driver(machine: Path) -> None:
    """Show the mock's ``proc/driver/nvidia-caps`` at ``/proc/driver/nvidia-caps`` in this
    process's mount namespace (:func:`main` re-executes the bench in a private one with
    ``--anchor``): NVIDIA's toolkit reads the MIG minors from the host's procfs only
    (``internal/nvcaps``), nvhook from the mock's root, which this does not change. Only
    that directory, on a tmpfs over ``/proc/driver``: with the mock's ``nvidia/params`` there
    too, NVIDIA's ``disable-device-node-modification`` hook would mount a copy over the
    container's, which a container's procfs on this kernel does not have."""
    caps = machine / "proc/driver/nvidia-caps"
    if not caps.is_dir():
        return
    for argv in (["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "nvhook-bench",
                  "/proc/driver"],
                 ["mkdir", "/proc/driver/nvidia-caps"],
                 ["mount", "--bind", str(caps), "/proc/driver/nvidia-caps"]):  # fmt: skip
        subprocess.run(argv, check=True)


#: Set in the environment of the bench re-executed in a private mount namespace (``--anchor``).
PRIVATE_NS = "NVHOOK_BENCH_PRIVATE_NS"
#: The cache directory of the server rows (the server's socket is in it).
SERVER_CACHE = "server-cache"
#: ``--compare-ahead``: the cache directory of a second server, whose settings name none of
#: the bench's spec directories (nothing parsed ahead: the calls parse as before).
UNPARSED_CACHE = "server-cache-unparsed"
#: The name of the config the server itself reads (``NVHOOK_CONFIG`` in its environment).
SERVER_CONFIG = "server"
#: The row prefix of the second server's rows.
UNPARSED = "front-end + server, not parsed ahead: "


def launch_server(server: str, cache: Path, env: dict[str, str]) -> subprocess.Popen[bytes] | None:
    """``server`` (``nvhook-shim-server``) on ``shim.sock`` in ``cache`` (made 0700, as the
    front-end wants it), listening; None, with a line saying so, when it does not start."""
    cache.mkdir(mode=0o700, exist_ok=True)
    sock = cache / "shim.sock"
    proc = subprocess.Popen([server, "--socket", str(sock)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 30
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            print(f"{server} did not start")
            return None
        time.sleep(0.05)
    return proc


def start_server(setup: Setup, *, ahead: bool = True) -> subprocess.Popen[bytes] | None:
    """``nvhook-shim-server`` on ``shim.sock`` in :data:`SERVER_CACHE`, listening, with
    :data:`SERVER_CONFIG` as its settings (``ahead``; else in :data:`UNPARSED_CACHE`, with
    the default settings file, absent here); None where it is not installed or cannot run
    (then the server rows are left out)."""
    if setup.server is None or os.geteuid() != 0:
        return None
    env = {**setup.env_base, "NVHOOK_CONFIG": str(setup.configs[SERVER_CONFIG])}
    if not ahead:
        env = setup.env_base
    proc = launch_server(setup.server, setup.work / (SERVER_CACHE if ahead else UNPARSED_CACHE),
                         env)  # fmt: skip
    if proc is None:
        print("no server rows")
    return proc


def server_rss(proc: subprocess.Popen[bytes] | None) -> str:
    if proc is None:
        return "not running (no server rows)"
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
    )
    return (f"pid {proc.pid}, RSS {fields['VmRSS'].strip()}, peak {fields['VmHWM'].strip()} "
            "(the parent; each call's child shares its pages copy-on-write)")  # fmt: skip


#: The reference row of a Python shim's floor (:func:`make_cases`).
FLOOR = "python: start, import os, exec"


def make_cases(setup: Setup, *, server: bool = False, unparsed: bool = False) -> list[Case]:
    from nvhook.tools.entrypoints import FLAGS

    state_root = str(setup.work / "state")
    python = sys.executable
    exec_noop = f"import os; os.execv({setup.noop!r}, ['runtime'])"
    cases = [
        Case("python -I -c pass", ["-I", "-c", "pass"], None, "auto", program=python),
        Case("python -I -S -c pass", ["-I", "-S", "-c", "pass"], None, "auto", program=python),
        # What any Python shim pays before its own code: the launchers' interpreter start, the
        # `os` every program imports, the exec of the runtime (no interpreter finalization,
        # which `-c pass` pays at its exit and a shim skips by exec'ing).
        Case(FLOOR, [FLAGS, "-c", exec_noop], None, "auto", program=python),
        Case("pass-through state", ["--root", state_root, "state", "bench"], 15, "auto"),
    ]
    one, every, n = setup.one, "all", setup.gpus
    creates = [
        ("create, no request", None, 20, "auto", None),
        ("create 1 GPU, jit", one, 30, "jit", 1),
        ("create 1 GPU, cdi", one, 30, "cdi", 1),
        ("create 1 GPU, cdi, YAML spec", one, 30, CDI_YAML, 1),
        (f"create all ({n}), jit", every, 30, "jit", n),
        (f"create all ({n}), cdi", every, 30, "cdi", n),
        (f"create all ({n}), cdi, YAML spec", every, 30, CDI_YAML, n),
        (f"create 1 GPU, cdi, {OTHER_SPECS} other specs", one, 30, CDI_CROWDED, 1),
    ]
    if CDI_NVIDIA in setup.configs:
        import yaml

        spec_file = setup.work / SPEC_DIRS[CDI_NVIDIA] / "nvidia.yaml"
        names = [d["name"] for d in yaml.safe_load(spec_file.read_text())["devices"]]
        # NVIDIA's spec names no MIG-enabled GPU by its index (dgx-a100's GPU 1): the first
        # GPU it does name, then
        theirs = one if one in names else min((x for x in names if x.isdigit()), key=int)
        creates += [
            ("create 1 GPU, cdi, NVIDIA's spec", theirs, 30, CDI_NVIDIA, 1),
            (f"create all ({n}), cdi, NVIDIA's spec", every, 30, CDI_NVIDIA, None),
        ]
    spec = pristine_spec()
    for n, (name, visible, budget, mode, gpus) in enumerate(creates):
        bundle = setup.work / f"bundle{n}"
        bundle.mkdir()
        this = json.loads(json.dumps(spec))
        if visible is not None:
            this["process"]["env"].append(f"NVIDIA_VISIBLE_DEVICES={visible}")
        (bundle / "pristine.json").write_text(json.dumps(this, indent=2) + "\n")
        argv = ["--root", state_root, "--log", str(bundle / "log.json"), "--log-format", "json",
                "create", "--bundle", str(bundle), "--pid-file", str(bundle / "init.pid"),
                "bench"]  # fmt: skip
        cases.append(Case(name, argv, budget, mode, bundle, visible, gpus))
    if setup.frontend is None:
        return cases
    fronted = {  # issue 16's budgets
        "pass-through state": 2,
        "create, no request": 3,
        "create 1 GPU, jit": 12,
        "create 1 GPU, cdi": 12,
    }
    for case in list(cases):
        if case.name in fronted:
            bundle = None
            if case.bundle is not None:  # a bundle of its own: the runs restore it
                bundle = setup.work / f"front-{case.bundle.name}"
                shutil.copytree(case.bundle, bundle)
            argv = (
                [a.replace(str(case.bundle), str(bundle)) for a in case.argv]
                if bundle
                else case.argv
            )
            cases.append(
                Case(f"front-end: {case.name}", argv, fronted[case.name], case.mode, bundle,
                     case.visible, case.expect_gpus, program=setup.frontend)
            )  # fmt: skip
    if not server:
        return cases
    for case in list(cases):
        if case.visible is not None and case.program is None:  # every GPU create
            assert case.bundle is not None
            bundle = setup.work / f"server-{case.bundle.name}"
            shutil.copytree(case.bundle, bundle)
            argv = [a.replace(str(case.bundle), str(bundle)) for a in case.argv]
            cases.append(
                Case(f"front-end + server: {case.name}", argv, 12, case.mode, bundle,
                     case.visible, case.expect_gpus, program=setup.frontend,
                     env_extra={"NVHOOK_CACHE_DIR": str(setup.work / SERVER_CACHE)})
            )  # fmt: skip
            if unparsed and case.mode != "jit":  # jit resolves no spec
                own = setup.work / f"unparsed-{case.bundle.name}"
                shutil.copytree(case.bundle, own)
                argv = [a.replace(str(case.bundle), str(own)) for a in case.argv]
                cases.append(
                    Case(f"{UNPARSED}{case.name}", argv, 12, case.mode, own, case.visible,
                         case.expect_gpus, program=setup.frontend,
                         env_extra={"NVHOOK_CACHE_DIR": str(setup.work / UNPARSED_CACHE)})
                )  # fmt: skip
    return cases


#: NVIDIA's runtime runs beside each of nvhook's own rows (``--anchor``), in the mode that does
#: the same: cdi over the same spec directory (``NVIDIA_VISIBLE_DEVICES=1`` becomes
#: ``nvidia.com/gpu=1`` there as here), ``jit-cdi`` for jit (it asks the fake NVML of the mock,
#: its driver root, and generates the device's spec in the call, as NVIDIA's auto mode does),
#: ``cdi`` for the pass-through and the create without a request (``auto`` here).
ANCHOR_MODES = {"auto": "cdi", "jit": "jit-cdi", "cdi": "cdi", CDI_YAML: "cdi",
                CDI_CROWDED: "cdi", CDI_NVIDIA: "cdi"}  # fmt: skip
SPEC_DIRS = {"cdi": "cdi", CDI_YAML: "cdi-yaml", CDI_CROWDED: "cdi-crowded", "auto": "cdi",
             "jit": "cdi", CDI_NVIDIA: "cdi-nvidia"}  # fmt: skip


def anchor_config(setup: Setup, mode: str, ctk: str) -> str:
    """NVIDIA's config.toml for ``mode`` (its ``nvidia-ctk config default``, with the runtime
    behind it, the mode, the spec directory, the mock as driver root and ``ctk`` as the hooks'
    program; no ``debug`` log file, as by default)."""
    return (
        "[nvidia-container-cli]\n"
        f"root = {json.dumps(str(setup.machine))}\n"
        "[nvidia-container-runtime]\n"
        f"runtimes = [{json.dumps(setup.noop)}]\n"
        f"mode = {json.dumps(ANCHOR_MODES[mode])}\n"
        'log-level = "info"\n'
        "[nvidia-container-runtime.modes.cdi]\n"
        f"spec-dirs = [{json.dumps(str(setup.work / SPEC_DIRS[mode]))}]\n"
        'default-kind = "nvidia.com/gpu"\n'
        'annotation-prefixes = ["cdi.k8s.io/"]\n'
        "[nvidia-ctk]\n"
        f"path = {json.dumps(ctk)}\n"
    )


def anchor_cases(setup: Setup, cases: list[Case], anchor: str) -> list[Case]:
    """``anchor: ROW`` for each of nvhook's own rows (the shim's, not the front-end's):
    NVIDIA's runtime with the same argv, a bundle of its own, and a config of its own in
    ``$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml`` (:func:`anchor_config`)."""
    out = []
    ctk = str(Path(anchor).with_name("nvidia-ctk"))
    for case in cases:
        if case.program is not None or case.mode not in ANCHOR_MODES:
            continue
        home = setup.work / f"anchor-{case.mode}"
        config = home / "nvidia-container-runtime" / "config.toml"
        if not config.exists():
            config.parent.mkdir(parents=True)
            config.write_text(anchor_config(setup, case.mode, ctk))
        bundle = argv = None
        if case.bundle is not None:
            bundle = setup.work / f"anchor-{case.bundle.name}"
            shutil.copytree(case.bundle, bundle)
        argv = (
            [a.replace(str(case.bundle), str(bundle)) for a in case.argv] if bundle else case.argv
        )
        # NVIDIA's "all" leaves out a MIG-enabled GPU without instances (dgx-a100's GPU 1):
        # its own count, checked to be one at least.
        gpus = case.expect_gpus if case.visible != "all" else None
        out.append(Case(f"anchor: {case.name}", argv, None, case.mode, bundle, case.visible,
                        gpus, program=anchor, anchor=True,
                        env_extra={"XDG_CONFIG_HOME": str(home)}))  # fmt: skip
    return out


# --------------------------------------------------------------------------- measuring


def spawn(
    setup: Setup, argv: list[str], env: dict[str, str], errfile: Path
) -> tuple[float, int, int | None]:
    """Run ``argv``: (wall seconds, exit status, peak RSS in KiB or None)."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, str(errfile), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
    ]
    if setup.measure is not None:
        out = setup.work / "measured"
        pid = os.posix_spawn(setup.measure, [setup.measure, str(out), *argv], env,
                             file_actions=actions)  # fmt: skip
        _, status, _ = os.wait4(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"the measuring helper failed on {argv}")
        ns, kib, code = (int(x) for x in out.read_text().split())
        return ns / 1e9, code, kib
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    _, status, _ = os.wait4(pid, 0)
    return time.perf_counter() - start, os.waitstatus_to_exitcode(status), None


def reset(case: Case) -> None:
    if case.bundle is not None:
        shutil.copyfile(case.bundle / "pristine.json", case.bundle / "config.json")
        (case.bundle / "log.json").unlink(missing_ok=True)


def run_shim(setup: Setup, case: Case) -> tuple[float, int | None]:
    reset(case)
    err = setup.work / "stderr"
    program = case.program or setup.shim
    env = {**setup.env(case.mode), **case.env_extra}
    elapsed, code, rss = spawn(setup, [program, *case.argv], env, err)
    if code != 0:
        raise SystemExit(f"{case.name}: the shim failed ({code}):\n{err.read_text()}")
    return elapsed, rss


def run_direct(setup: Setup, case: Case) -> float:
    reset(case)
    argv = [setup.noop, *case.argv]
    env = {**setup.env(case.mode), **case.env_extra}
    elapsed, code, _ = spawn(setup, argv, env, setup.work / "stderr")
    if code != 0:
        raise SystemExit(f"{case.name}: the stand-in runtime failed ({code})")
    return elapsed


def check(setup: Setup, case: Case) -> None:
    """One untimed run that proves the case does what it says (and warms caches)."""
    _, rss = run_shim(setup, case)
    if "NVHOOK_CACHE_DIR" in case.env_extra and rss is not None and rss > 4 * 1024:  # no server
        raise SystemExit(f"{case.name}: the server did not serve the call (peak RSS {rss} KiB)")
    if case.bundle is None:
        return
    written = (case.bundle / "config.json").read_bytes()
    if case.visible is None and case.anchor:
        return  # nvhook's promise (the file untouched), not the anchor's
    if case.visible is None:
        if written != (case.bundle / "pristine.json").read_bytes():
            raise SystemExit(f"{case.name}: config.json changed without a request")
        return
    devices = json.loads(written)["linux"].get("devices", [])
    gpus = [d for d in devices if d["path"].removeprefix("/dev/nvidia").isdigit()]
    if (case.expect_gpus is None and not gpus) or (
        case.expect_gpus is not None and len(gpus) != case.expect_gpus
    ):
        raise SystemExit(f"{case.name}: expected {case.expect_gpus} GPUs, got {gpus}")


def measure(setup: Setup, cases: list[Case], runs: int) -> None:
    for case in cases:
        check(setup, case)
        check(setup, case)
    order = list(cases)
    for _ in range(runs):
        random.shuffle(order)
        for case in order:
            elapsed, rss = run_shim(setup, case)
            case.shim_ms.append(elapsed * 1000)
            if rss is not None:
                case.rss_kb.append(rss)
            if case.budget_ms is not None or case.anchor:
                case.direct_ms.append(run_direct(setup, case) * 1000)


def report(setup: Setup, cases: list[Case], runs: int, server: str) -> None:
    load = os.getloadavg()
    print(f"nvhook-runtime overhead, {runs} runs per row, medians; machine {setup.profile} (mock)")
    print(f"  shim: {setup.shim}")
    print(f"  native front-end: {setup.frontend or 'not installed (no front-end rows)'}")
    print(f"  nvhook-shim-server: {server}")
    print(f"  runtime behind it: {setup.noop_kind} ({setup.noop}), also timed directly")
    print("  bytecode: oci/ and nvhook/ compiled with compileall first (PYTHONDONTWRITEBYTECODE)")
    print(f"  cpus {os.cpu_count()}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print()
    floor = statistics.median(next(c for c in cases if c.name == "python -I -c pass").shim_ms)
    header = (f"{'case':<40} {'ms':>6} {'direct':>7} {'overhead':>9} {'budget':>7}  "
              f"{'':<4}  {'-floor':>6}  {'peak RSS':>9} {'budget':>7}")  # fmt: skip
    print(header)
    print("-" * len(header))
    for case in cases:
        shim = statistics.median(case.shim_ms)
        if case.anchor:
            direct = statistics.median(case.direct_ms)
            line = (f"{case.name:<40} {shim:>6.1f} {direct:>7.1f} {shim - direct:>9.1f} "
                    f"{'-':>7}  {'':<4}  {'-':>6}")  # fmt: skip
        elif case.budget_ms is None:
            line = f"{case.name:<40} {shim:>6.1f} {'-':>7} {'-':>9} {'-':>7}  {'':<4}  {'-':>6}"
        else:
            direct = statistics.median(case.direct_ms)
            overhead = shim - direct
            verdict = "PASS" if overhead <= case.budget_ms else "OVER"
            line = (f"{case.name:<40} {shim:>6.1f} {direct:>7.1f} {overhead:>9.1f} "
                    f"{case.budget_ms:>5.0f}ms  {verdict:<4}  {shim - floor:>6.1f}")  # fmt: skip
        if case.rss_kb:
            rss = max(case.rss_kb) / 1024
            rss_verdict = "PASS" if rss <= BUDGET_RSS_MB else "OVER"
            if case.budget_ms is None:
                line += f"  {rss:>6.1f} MB"
            else:
                line += f"  {rss:>6.1f} MB {BUDGET_RSS_MB:>4.0f}MB  {rss_verdict}"
        else:
            line += "  (no RSS: no C compiler for the measuring helper)"
        print(line)
    anchors = {c.name.removeprefix("anchor: "): c for c in cases if c.anchor}
    if anchors:
        print()
        print(
            "against NVIDIA's nvidia-container-runtime in the same run (overhead / its overhead):"
        )
        for case in cases:
            base = case.name.removeprefix(UNPARSED).removeprefix("front-end + server: ")
            base = base.removeprefix("front-end: ")
            if case.anchor or base not in anchors or not case.direct_ms:
                continue
            theirs = anchors[base]
            ours = statistics.median(case.shim_ms) - statistics.median(case.direct_ms)
            over = statistics.median(theirs.shim_ms) - statistics.median(theirs.direct_ms)
            ratio = f"{ours / over:>5.2f}x" if over > 0.1 else "-"  # noise over nothing
            print(f"  {case.name:<40} {ours:>6.1f} ms / {over:>6.1f} ms = {ratio}")
        floor = next((c for c in cases if c.name == FLOOR), None)
        passing = next((c for c in cases if c.name == "pass-through state"), None)
        theirs = anchors.get("create 1 GPU, cdi")
        if floor is not None and passing is not None and passing.direct_ms and theirs:
            alone = statistics.median(floor.shim_ms) - statistics.median(passing.direct_ms)
            over = statistics.median(theirs.shim_ms) - statistics.median(theirs.direct_ms)
            print(f"  {'the floor: ' + FLOOR:<40} {alone:>6.1f} ms / {over:>6.1f} ms = "
                  f"{alone / over:>5.2f}x (of the anchor's 1 GPU, cdi create: what any Python "
                  "shim pays before its own code, without the server)")  # fmt: skip
    print()
    print("overhead = shim median - direct median (the stand-in runtime alone, same argv);")
    print("peak RSS = the highest ru_maxrss of the case's runs (the shim, then the stand-in).")
    print("-floor = ms - the median of `python -I -c pass` (the shim's own work above the")
    print("interpreter's start in this venv; -S shows that start without site and .pth files).")


# --------------------------------------------------------------------------- parts

#: ``stamp``: a no-op runtime that first writes its start time (CLOCK_MONOTONIC ns) to the
#: file named by NVHOOK_BENCH_STAMP: the moment the front-end's exec of the runtime is done.
STAMP_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    const char *path = getenv("NVHOOK_BENCH_STAMP");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) return 1;
    fprintf(f, "%lld\n", (long long)t.tv_sec * 1000000000LL + t.tv_nsec);
    return fclose(f) != 0;
}
"""

#: The steps of a create through the front-end and the server, from the marks of
#: ``nvhook-shim-server --trace`` (nvhook/server.py): (from, to, what the span is).
SPANS = (
    ("spawned", "accepted", "front-end: exec, settings data, connect; server wakes"),
    ("accepted", "child", "server: accept, until the child runs (spare or forked)"),
    ("child", "peer_checked", "child: peer check (SO_PEERCRED, /proc, pidfd)"),
    ("peer_checked", "request_received", "child: request received (with 4 fds)"),
    ("request_received", "request_parsed", "child: request parsed"),
    ("request_parsed", "ack_sent", "child: ack sent"),
    ("ack_sent", "caller's_cwd,_streams,_env_taken_on", "child: caller's cwd, streams, env"),
    ("caller's_cwd,_streams,_env_taken_on", "call_handled", "child: the call (below)"),
    ("call_handled", "reply_sent", "child: streams flushed, reply sent"),
    ("reply_sent", "runtime", "front-end: reply read, runtime exec'd"),
    ("spawned", "runtime", "total: spawn of the front-end to the runtime's start"),
)
#: The parent's check that its code is the code on disk runs after the call (nvhook.server
#: CHECK_AFTER_S), no longer beside the child: it has no row.


def _await_spare(trace: Path, timeout_s: float = 3.0) -> None:
    """Until the server's next spare child is ready (its mark in ``trace``), at most
    ``timeout_s``: a create then takes the path calls a moment apart take (the rows above,
    interleaved), not that of calls back to back, each forked for (~0.5 ms more here)."""
    deadline = time.monotonic() + timeout_s
    while b" spare_ready " not in trace.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)


def trace_parts(setup: Setup, runs: int) -> None:
    """Where a 1-GPU create through the front-end and the server spends its time: a server
    started with ``--trace``, ``runs`` creates per mode, the medians of each span."""
    if setup.frontend is None or setup.server is None or os.geteuid() != 0:
        print("parts: need the native front-end, nvhook-shim-server and root")
        return
    stamp = build_c(setup.work, "stamp-runtime", STAMP_C)
    if stamp is None:
        print("parts: need a C compiler")
        return
    cache = setup.work / "trace-cache"
    trace = setup.work / "server.trace"
    stamp_file = setup.work / "stamp"
    env = {**setup.env_base, "NVHOOK_CACHE_DIR": str(cache)}
    cache.mkdir(mode=0o700)
    server_env = {**env, "NVHOOK_CONFIG": str(setup.configs[SERVER_CONFIG])}  # parses ahead
    proc = subprocess.Popen([setup.server, "--socket", str(cache / "shim.sock"), "--trace",
                             str(trace)], env=server_env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (cache / "shim.sock").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                print("parts: the tracing server did not start")
                return
            time.sleep(0.05)
        for mode in ("jit", "cdi"):
            bundle = setup.work / f"trace-{mode}"
            bundle.mkdir()
            spec = pristine_spec()
            spec["process"]["env"].append(f"NVIDIA_VISIBLE_DEVICES={setup.one}")
            (bundle / "pristine.json").write_text(json.dumps(spec, indent=2) + "\n")
            config = setup.work / f"config-trace-{mode}.toml"
            text = setup.configs[mode].read_text()
            config.write_text(text.replace(json.dumps(setup.noop), json.dumps(stamp)))
            case = Case(f"trace {mode}", ["--root", str(setup.work / "state"), "--log",
                        str(bundle / "log.json"), "--log-format", "json", "create", "--bundle",
                        str(bundle), "--pid-file", str(bundle / "init.pid"), "bench"], None,
                        mode, bundle)  # fmt: skip
            call_env = {**env, "NVHOOK_CONFIG": str(config), "NVHOOK_BENCH_STAMP": str(stamp_file)}
            spans: dict[str, list[float]] = {}
            spare = 0  # runs served by a spare child (forked ahead, as calls apart find it)
            for n in range(runs + 2):  # two untimed: caches, the front-end's data file
                reset(case)
                _await_spare(trace)
                trace.write_text("")
                spawned = time.monotonic_ns()
                done = subprocess.run([setup.frontend, *case.argv], env=call_env,
                                      capture_output=True, check=False)  # fmt: skip
                if done.returncode != 0:
                    raise SystemExit(f"parts: the create failed: {done.stderr.decode()}")
                if n < 2:
                    continue
                for _ in range(200):  # the child's last mark may come after the exec
                    if b" reply_sent " in trace.read_bytes():
                        break
                    time.sleep(0.005)
                marks: dict[str, int] = {"spawned": spawned,
                                         "runtime": int(stamp_file.read_text())}  # fmt: skip
                calls: dict[str, int] = {}
                for line in trace.read_text().splitlines():
                    _, name, start, end = line.split()
                    if start == end:
                        marks[name] = int(start)
                    else:
                        calls[name] = calls.get(name, 0) + int(end) - int(start)
                if "child" not in marks:
                    raise SystemExit("parts: the server did not serve the call (fell back?)")
                spare += "handed_to_the_spare" in marks or "taken_by_the_spare" in marks
                for first, last, what in SPANS:
                    spans.setdefault(what, []).append((marks[last] - marks[first]) / 1e6)
                for name, ns in calls.items():
                    spans.setdefault("  " + name, []).append(ns / 1e6)
            print(
                f"parts of a 1-GPU create ({mode}) through the front-end and "
                f"nvhook-shim-server --trace, {runs} runs, medians (ms); {spare} of them "
                "served by the spare child (the server: _Spare), as calls apart find it:"
            )
            for what, values in spans.items():
                values += [0.0] * (runs - len(values))  # a call some runs did not make
                print(f"  {statistics.median(values):>6.2f}  {what}")
            print()
    finally:
        proc.terminate()
        proc.wait()


# --------------------------------------------------------------------------- profiling


_PROFILE_DRIVER = """\
import cProfile, os, pstats, sys
class _Exec(BaseException):
    pass
def _execv(path, argv):
    raise _Exec()
os.execv = _execv
sys.argv = ["nvhook-runtime", *sys.argv[1:]]
profile = cProfile.Profile()
profile.enable()
try:
    from nvhook.shim import main
    main(sys.argv[1:])
except _Exec:
    pass
profile.disable()
stats = pstats.Stats(profile, stream=sys.stdout)
stats.sort_stats("cumulative").print_stats(28)
stats.sort_stats("tottime").print_stats(12)
"""


def importtime(setup: Setup, case: Case, top: int = 22) -> None:
    reset(case)
    proc = subprocess.run(
        [sys.executable, "-I", "-X", "importtime", setup.shim, *case.argv],
        env=setup.env(case.mode),
        capture_output=True,
        text=True,
        check=False,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        parts = line[len("import time:") :].split("|")
        self_us, cumulative_us, name = int(parts[0]), int(parts[1]), parts[2].rstrip()
        rows.append((cumulative_us, self_us, name))
    total = sum(s for _, s, _ in rows) / 1000
    print(f"-X importtime, {case.name}: {len(rows)} modules, {total:.1f} ms of imports in all")
    print(f"  {'cumul ms':>8} {'self ms':>8}  module")
    for cumulative_us, self_us, name in sorted(rows, reverse=True)[:top]:
        print(f"  {cumulative_us / 1000:>8.1f} {self_us / 1000:>8.1f}  {name}")
    print()


def cprofile(setup: Setup, case: Case) -> None:
    reset(case)
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _PROFILE_DRIVER, *case.argv],
        env=setup.env(case.mode),
        capture_output=True,
        text=True,
        check=False,
    )
    print(f"cProfile, {case.name} (shim main() up to the exec, imports included):")
    keep = [line for line in proc.stdout.splitlines() if line.strip()]
    print("\n".join("  " + line for line in keep if not line.lstrip().startswith("Ordered")))
    if proc.returncode != 0:
        print(proc.stderr)
    print()


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="timed runs per case (default 30)")
    parser.add_argument("--shim", help="the nvhook-runtime launcher (default: next to python)")
    parser.add_argument("--profile", action="store_true", help="then profile the GPU creates")
    parser.add_argument(
        "--parts", action="store_true", help="then time a create's parts through the server"
    )
    parser.add_argument("--anchor", help="NVIDIA's nvidia-container-runtime, run beside")
    parser.add_argument("--machine", default=PROFILE, help=f"the mock (default {PROFILE})")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--compare-ahead",
        action="store_true",
        help="also run the cdi server rows through a server that parses no spec ahead",
    )
    args = parser.parse_args()
    ctk = None
    if args.anchor:
        if not os.access(args.anchor, os.X_OK):
            raise SystemExit(f"--anchor {args.anchor}: not an executable file")
        ctk = str(Path(args.anchor).with_name("nvidia-ctk"))
        if not os.access(ctk, os.X_OK):
            raise SystemExit(f"--anchor: no {ctk} beside it (its spec, its jit-cdi hooks)")
        if os.environ.get(PRIVATE_NS) != "1":  # the mock's /proc/driver for NVIDIA's toolkit
            argv = ["unshare", "--mount", "--propagation", "private", sys.executable, *sys.argv]
            os.execvpe("unshare", argv, {**os.environ, PRIVATE_NS: "1"})
    compile_bytecode()
    work = Path(tempfile.mkdtemp(prefix="nvhook-bench-runtime-"))
    server = unparsed = None
    try:
        setup = prepare(work, *shim_launcher(args.shim), args.machine, ctk)
        server = start_server(setup)
        if server is not None and args.compare_ahead:
            unparsed = start_server(setup, ahead=False)
        cases = make_cases(setup, server=server is not None, unparsed=unparsed is not None)
        if args.anchor:
            cases += anchor_cases(setup, cases, args.anchor)
        measure(setup, cases, args.runs)
        report(setup, cases, args.runs, server_rss(server))
        if args.parts:
            print()
            trace_parts(setup, args.runs)
        if args.profile:
            print()
            for case in cases:
                if case.name.startswith(("create 1 GPU, jit", "create 1 GPU, cdi")):
                    importtime(setup, case)
                    cprofile(setup, case)
    finally:
        for proc in (server, unparsed):
            if proc is not None:
                proc.terminate()
                proc.wait()
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
