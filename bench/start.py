"""What a GPU costs a container start: create + start through a runtime shim, against plain runc.

    .venv/bin/python bench/start.py [--runs N] [--cases LIST] [--no-parts]
                                    [--runtime PATH] [--spec-dir DIR] [--keep] [--server]
                                    [--anchor PATH]

A busybox container (``true``) is created and started exactly as containerd 1.6 calls a
runtime (cwd = bundle, ``--root R --log B/log.json --log-format json create --bundle B
--pid-file B/init.pid ID``, then ``start ID``; ``delete --force`` afterwards, untimed),
its rootfs a fresh overlay over a busybox-static tree for each run, as a snapshotter gives
it. Each case asks for GPUs of a mock machine (``nvhook mock``, laid out as root with real
device nodes):

- cdi: the annotation ``cdi.k8s.io/bench = nvidia.com/gpu=NAME`` against the spec that
  ``nvhook cdi generate`` writes for the mock (its defaults: the spec every user gets);
- jit: ``NVIDIA_VISIBLE_DEVICES=NAME`` (default capabilities), the host discovered.

The reference, measured in the same loop, is the same container without a GPU request
through plain runc. Each case reports create, start and their sum (medians), the overhead
over the reference and that overhead as a multiple of the reference (budget: <= 80 ms and
<= 2x; the mark to aim for is 45 ms), and, unless ``--no-parts``, what each step takes,
from more runs of plain runc with the spec the shim wrote:

- shim create / shim start: the shim's calls minus runc's with the edited spec;
- each hook: the edited spec with only that hook, minus the edited spec without hooks; and
  the same with that hook replaced by a static no-op (busybox ``true``): what runc itself
  spends running a hook;
- runc's mounts and nodes: the edited spec without hooks, minus the reference.

Every variant is run interleaved (shuffled each round) and reported as a median; the
machine is shared and noisy, so read the ratios of one run. ``--runtime PATH`` points the
bench at any runc-compatible shim (NVIDIA's ``nvidia-container-runtime``, say) instead of
``nvhook-runtime``; it is given the same argv and environment (``NVHOOK_CONFIG`` is only
read by nvhook), so configure it to read the CDI specs of ``--spec-dir``. With
``--spec-dir`` no spec is generated: the runtime (nvhook too) reads the specs already
there, and the cdi cases name their devices ``nvidia.com/gpu=0`` and ``=all``; jit cases
need nvhook's mock and run only without ``--runtime``. ``--server`` starts
``nvhook-shim-server`` for the run (the native front-end then hands the GPU creates to it
instead of starting Python; docs/architecture.md D12). Needs root, runc, overlayfs and
``/usr/bin/busybox`` (busybox-static); with ``--server``, each case also runs the same
front-end with a cache directory of its own, where no server listens (it starts Python, as
on a node without the server), in the same loop.

``--anchor PATH`` adds NVIDIA's ``nvidia-container-runtime`` to each case in the same loop
(bench/README.md, "The anchor"): cdi cases on nvhook's spec and on NVIDIA's own
(``nvidia-ctk cdi generate`` of the mock, its hooks run by the ``nvidia-cdi-hook`` beside
PATH), jit cases in its ``jit-cdi`` mode (its hooks run by ``nvidia-ctk``); it re-executes
the bench in a private mount namespace, where the ``dgx-a100`` mock's MIG minors are shown
at ``/proc/driver/nvidia-caps`` (NVIDIA's toolkit reads them there only).
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
BUDGET_MS = 80.0
BUDGET_RATIO = 2.0
AIM_MS = 45.0
ANNOTATION = "cdi.k8s.io/bench"
BUSYBOX = "/usr/bin/busybox"
#: name -> (mock profile, device name, mode). "1 GPU" is a plain (non-MIG) GPU.
CASES: dict[str, tuple[str, str, str]] = {
    "h100-pcie 1 GPU cdi": ("h100-pcie", "0", "cdi"),
    "h100-pcie 1 GPU jit": ("h100-pcie", "0", "jit"),
    "dgx-a100 1 GPU cdi": ("dgx-a100", "2", "cdi"),
    "dgx-a100 1 GPU jit": ("dgx-a100", "2", "jit"),
    "dgx-a100 all cdi": ("dgx-a100", "all", "cdi"),
    "dgx-a100 all jit": ("dgx-a100", "all", "jit"),
}
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class Variant:
    """One way of starting the container, timed on its own."""

    name: str
    bundle: Path
    program: str  # the runtime called
    env: dict[str, str]
    create_ms: list[float] = field(default_factory=list)
    start_ms: list[float] = field(default_factory=list)

    @property
    def total_ms(self) -> list[float]:
        return [c + s for c, s in zip(self.create_ms, self.start_ms, strict=True)]


@dataclass
class Case:
    name: str
    shim: Variant
    runc_edited: Variant | None = None
    runc_no_hooks: Variant | None = None
    per_hook: list[tuple[str, Variant]] = field(default_factory=list)
    anchor: Variant | None = None  # NVIDIA's runtime on the same spec, or jit-cdi (--anchor)
    anchor_own: Variant | None = None  # NVIDIA's runtime on NVIDIA's spec (--anchor, cdi)
    no_server: Variant | None = None  # with --server: nvhook's front-end without it

    def variants(self) -> list[Variant]:
        out = [self.shim, *(v for _, v in self.per_hook)]
        out += [v for v in (self.anchor, self.anchor_own, self.no_server) if v is not None]
        return out + [v for v in (self.runc_edited, self.runc_no_hooks) if v is not None]


class Bench:
    def __init__(self, work: Path, runc: str) -> None:
        self.work = work
        self.runc = runc
        self.state = work / "state"
        self.template = work / "busybox"
        self.counter = 0
        self.overlay = True

    # ------------------------------------------------------------------ set-up

    def build_rootfs(self) -> None:
        with open(BUSYBOX, "rb") as f:
            if b"ld-linux" in f.read(4096):
                raise SystemExit(f"{BUSYBOX} is dynamically linked: install busybox-static")
        for d in ("bin", "etc", "dev", "proc", "sys", "tmp", "root"):
            (self.template / d).mkdir(parents=True)
        shutil.copy2(BUSYBOX, self.template / "bin" / "busybox")
        for applet in ("sh", "true", "ls", "cat"):
            (self.template / "bin" / applet).symlink_to("busybox")
        (self.template / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")

    def bundle(self, name: str, spec: dict[str, Any]) -> Path:
        bundle = self.work / "bundles" / name
        (bundle / "rootfs").mkdir(parents=True)
        (bundle / "pristine.json").write_text(json.dumps(spec, separators=(",", ":")))
        return bundle

    # ------------------------------------------------------------------ one run

    def _mount_rootfs(self, bundle: Path) -> None:
        upper = bundle / "layer"
        shutil.rmtree(upper, ignore_errors=True)
        (upper / "upper").mkdir(parents=True)
        (upper / "work").mkdir()
        if self.overlay:
            options = f"lowerdir={self.template},upperdir={upper}/upper,workdir={upper}/work"
            done = subprocess.run(
                ["mount", "-t", "overlay", "overlay", "-o", options, str(bundle / "rootfs")],
                capture_output=True,
                check=False,
            )
            if done.returncode == 0:
                return
            self.overlay = False
            print(f"(no overlayfs: {done.stderr.decode().strip()}; copying the rootfs instead)")
        shutil.rmtree(bundle / "rootfs")
        shutil.copytree(self.template, bundle / "rootfs", symlinks=True)

    def _unmount_rootfs(self, bundle: Path) -> None:
        if self.overlay:
            subprocess.run(["umount", str(bundle / "rootfs")], check=True)

    def _call(self, program: str, args: list[str], env: dict[str, str], cwd: Path) -> float:
        err = self.work / "stderr"
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, str(err), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        ]
        here = os.getcwd()
        os.chdir(cwd)
        try:
            start = time.perf_counter()
            pid = os.posix_spawn(program, [program, *args], env, file_actions=actions)
            _, status = os.waitpid(pid, 0)
            elapsed = time.perf_counter() - start
        finally:
            os.chdir(here)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise SystemExit(f"{program} {' '.join(args)} failed ({code}):\n{err.read_text()}")
        return elapsed * 1000

    def run(self, variant: Variant) -> dict[str, Any]:
        """Create and start the container once; return the config.json the runtime ran."""
        bundle = variant.bundle
        shutil.copyfile(bundle / "pristine.json", bundle / "config.json")
        (bundle / "log.json").unlink(missing_ok=True)
        self._mount_rootfs(bundle)
        self.counter += 1
        cid = f"nvhook-bench-{os.getpid()}-{self.counter}"
        root = ["--root", str(self.state)]
        log = ["--log", str(bundle / "log.json"), "--log-format", "json"]
        try:
            variant.create_ms.append(
                self._call(variant.program, [*root, *log, "create", "--bundle", str(bundle),
                           "--pid-file", str(bundle / "init.pid"), cid], variant.env, bundle)
            )  # fmt: skip
            variant.start_ms.append(
                self._call(variant.program, [*root, *log, "start", cid], variant.env, bundle)
            )
            ran: dict[str, Any] = json.loads((bundle / "config.json").read_text())
        finally:
            subprocess.run([self.runc, *root, "delete", "--force", cid], capture_output=True,
                           check=False)  # fmt: skip
            self._unmount_rootfs(bundle)
        return ran


# --------------------------------------------------------------------------- cases


def runc_spec(runc: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([runc, "spec", "--bundle", d], check=True, capture_output=True)
        spec: dict[str, Any] = json.loads(Path(d, "config.json").read_text())
    spec["process"]["terminal"] = False
    spec["process"]["args"] = ["true"]
    return spec


def prepare_machine(work: Path, profile: str, spec_dir: Path | None, runc: str) -> Path:
    """Lay out the mock, generate its CDI spec (unless given), write the shim's config."""
    from nvhook.mock import create

    machine = work / profile
    create(profile, machine, nodes="auto")
    specs = spec_dir
    if specs is None:
        specs = work / f"cdi-{profile}"
        specs.mkdir()
        subprocess.run(
            [str(Path(sys.executable).parent / "nvhook"), "cdi", "generate", "--root",
             str(machine), "--output", str(specs / "nvidia.json")],
            check=True, capture_output=True,
        )  # fmt: skip
    for mode in ("cdi", "jit"):
        (work / f"config-{profile}-{mode}.toml").write_text(
            "[runtime]\n"
            f"runtimes = [{json.dumps(runc)}]\n"
            f"mode = {json.dumps(mode)}\n"
            f"log_file = {json.dumps(str(work / 'shim.log'))}\n"
            "[host]\n"
            f"root = {json.dumps(str(machine))}\n"
            "[cdi]\n"
            f"spec_dirs = [{json.dumps(str(specs))}]\n"
        )
    return machine


def without_hooks(spec: dict[str, Any], keep: tuple[str, int] | None = None) -> dict[str, Any]:
    """``spec`` with no hooks, or with only hook ``keep`` = (stage, index)."""
    out = json.loads(json.dumps(spec))
    hooks = out.pop("hooks", {})
    if keep is not None:
        stage, index = keep
        out["hooks"] = {stage: [hooks[stage][index]]}
    return out


def hook_name(hook: dict[str, Any]) -> str:
    args = hook.get("args") or [hook.get("path", "?")]
    words = [a for a in args[1:] if not a.startswith("-")][:1]
    return " ".join([os.path.basename(args[0]), *words])


def anchor_config(
    work: Path, profile: str, specs: Path, runc: str, mode: str = "cdi", tag: str = ""
) -> Path:
    """``$XDG_CONFIG_HOME`` for NVIDIA's runtime in ``mode`` (cdi over ``specs``, or jit-cdi:
    the spec made in the call from the fake NVML of the mock, its driver root) (its
    ``cmd/nvidia-container-runtime/README.md`` and ``internal/config/runtime.go``)."""
    home = work / f"anchor-{profile}-{mode}{tag}"
    config = home / "nvidia-container-runtime" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    hooks = NVIDIA_TOOLS.get("nvidia-ctk")
    config.write_text(
        "[nvidia-container-cli]\n"
        f"root = {json.dumps(str(work / profile))}\n"
        + (f"[nvidia-ctk]\npath = {json.dumps(hooks)}\n" if hooks else "")
        + "[nvidia-container-runtime]\n"
        f"runtimes = [{json.dumps(runc)}]\n"
        f"mode = {json.dumps(mode)}\n"
        "[nvidia-container-runtime.modes.cdi]\n"
        f"spec-dirs = [{json.dumps(str(specs))}]\n"
        'default-kind = "nvidia.com/gpu"\n'
        f"annotation-prefixes = [{json.dumps(ANNOTATION.split('/')[0] + '/')}]\n"
    )
    return home


#: NVIDIA's other programs, from beside ``--anchor`` (:func:`main`): ``nvidia-ctk`` (its
#: spec of the mock; the hooks of jit-cdi) and ``nvidia-cdi-hook`` (the hooks of its spec).
NVIDIA_TOOLS: dict[str, str] = {}


def nvidia_spec_dir(work: Path, profile: str) -> Path:
    """NVIDIA's own spec of the mock, its hooks running the ``nvidia-cdi-hook`` given."""
    specs = work / f"cdi-nvidia-{profile}"
    if not specs.is_dir():
        specs.mkdir()
        subprocess.run(
            [NVIDIA_TOOLS["nvidia-ctk"], "cdi", "generate", "--driver-root", str(work / profile),
             "--dev-root", str(work / profile), "--nvidia-cdi-hook-path",
             NVIDIA_TOOLS["nvidia-cdi-hook"], "--output", str(specs / "nvidia.yaml")],
            check=True, capture_output=True,
        )  # fmt: skip
    return specs


def make_cases(
    bench: Bench, names: list[str], runtime: str, env_base: dict[str, str], parts: bool,
    anchor: str | None = None, spec_dir: Path | None = None, server: bool = False,
) -> list[Case]:  # fmt: skip
    base = runc_spec(bench.runc)
    cases = []
    for name in names:
        profile, device, mode = CASES[name]
        spec = json.loads(json.dumps(base))
        if mode == "cdi":
            spec["annotations"] = {ANNOTATION: f"nvidia.com/gpu={device}"}
        else:
            spec["process"]["env"].append(f"NVIDIA_VISIBLE_DEVICES={device}")
        env = {**env_base, "NVHOOK_CONFIG": str(bench.work / f"config-{profile}-{mode}.toml")}
        slug = name.replace(" ", "-")
        shim = Variant(f"{name}: runtime", bench.bundle(slug, spec), runtime, env)
        case = Case(name, shim)
        edited = bench.run(shim)  # once untimed: check it and keep what it wrote
        shim.create_ms.clear()
        shim.start_ms.clear()
        gpus = [d for d in edited.get("linux", {}).get("devices", [])
                if d.get("path", "").removeprefix("/dev/nvidia").isdigit()]  # fmt: skip
        if not gpus:
            raise SystemExit(f"{name}: the runtime gave the container no /dev/nvidiaN")
        if server:  # the same front-end without it: another cache directory, no socket
            fallback = {**env, "NVHOOK_CACHE_DIR": str(bench.work / "cache-no-server")}
            case.no_server = Variant(f"{name}: runtime, no server",
                                     bench.bundle(f"{slug}-no-server", spec), runtime,
                                     fallback)  # fmt: skip
        if anchor is not None:
            specs = spec_dir or bench.work / f"cdi-{profile}"
            theirs = "cdi" if mode == "cdi" else "jit-cdi"
            home = anchor_config(bench.work, profile, specs, bench.runc, theirs)
            anchor_env = {"PATH": PATH_ENV, "XDG_CONFIG_HOME": str(home)}
            case.anchor = Variant(f"{name}: anchor", bench.bundle(f"{slug}-anchor", spec),
                                  anchor, anchor_env)  # fmt: skip
            if mode == "cdi" and spec_dir is None and "nvidia-cdi-hook" in NVIDIA_TOOLS:
                own = nvidia_spec_dir(bench.work, profile)
                home = anchor_config(bench.work, profile, own, bench.runc, "cdi", "-own")
                case.anchor_own = Variant(
                    f"{name}: anchor, its spec", bench.bundle(f"{slug}-anchor-own", spec),
                    anchor, {"PATH": PATH_ENV, "XDG_CONFIG_HOME": str(home)})  # fmt: skip
        if parts:
            runc_env = {"PATH": PATH_ENV}
            case.runc_edited = Variant(f"{name}: runc, edited",
                                       bench.bundle(f"{slug}-edited", edited), bench.runc,
                                       runc_env)  # fmt: skip
            case.runc_no_hooks = Variant(f"{name}: runc, no hooks",
                                         bench.bundle(f"{slug}-nohooks", without_hooks(edited)),
                                         bench.runc, runc_env)  # fmt: skip
            for stage, hooks in edited.get("hooks", {}).items():
                for i, hook in enumerate(hooks):
                    label = f"{stage} {hook_name(hook)}"
                    only = without_hooks(edited, (stage, i))
                    variant = Variant(f"{name}: runc, {label}",
                                      bench.bundle(f"{slug}-hook-{stage}-{i}", only), bench.runc,
                                      runc_env)  # fmt: skip
                    case.per_hook.append((label, variant))
                    # the same hook slot running a static no-op: what runc itself spends
                    # starting a hook (fork, exec, the state on stdin, wait)
                    noop = json.loads(json.dumps(only))
                    noop["hooks"][stage][0].update(path=BUSYBOX, args=["true"])
                    variant = Variant(f"{name}: runc, a no-op {stage} hook",
                                      bench.bundle(f"{slug}-noop-{stage}-{i}", noop), bench.runc,
                                      runc_env)  # fmt: skip
                    case.per_hook.append(("    of which runc starting a no-op hook", variant))
        cases.append(case)
    return cases


# --------------------------------------------------------------------------- report


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(plain: Variant, cases: list[Case], runs: int, runtime: str, load: list[float]) -> None:
    base = med(plain.total_ms)
    print(f"create + start of a busybox container, {runs} runs per row, interleaved, medians")
    print(f"  runtime: {runtime}")
    print(f"  reference: plain runc, no GPU request: create {med(plain.create_ms):.1f} + start "
          f"{med(plain.start_ms):.1f} = {base:.1f} ms")  # fmt: skip
    print(f"  cpus {os.cpu_count()}, load average before {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}, after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    print()
    budget = f"budget (<= {BUDGET_MS:.0f} ms, {BUDGET_RATIO:.0f}x plain)"
    header = (f"{'case':<24} {'create':>7} {'start':>6} {'total':>6} {'overhead':>9} "
              f"{'/plain':>6}  {budget}")  # fmt: skip
    print(header)
    print("-" * len(header))
    for case in cases:
        total = med(case.shim.total_ms)
        over = total - base
        ratio = over / base
        verdict = "PASS" if over <= BUDGET_MS and ratio <= BUDGET_RATIO else "OVER"
        mark = f" (aim {AIM_MS:.0f} ms: {'met' if over <= AIM_MS else 'not yet'})"
        print(f"{case.name:<24} {med(case.shim.create_ms):>7.1f} {med(case.shim.start_ms):>6.1f} "
              f"{total:>6.1f} {over:>9.1f} {ratio:>5.2f}x  {verdict}{mark}")  # fmt: skip
    anchored = [c for c in cases if c.anchor is not None]
    if anchored:
        print()
        print("against NVIDIA's runtime, same run (overhead over plain runc; cdi: on nvhook's")
        print("spec, and on its own spec from nvidia-ctk cdi generate; jit: its jit-cdi mode):")
        for case in anchored:
            assert case.anchor is not None
            theirs = {"nvhook's spec" if case.name.endswith("cdi") else "jit-cdi":
                      med(case.anchor.total_ms) - base}  # fmt: skip
            if case.anchor_own is not None:
                theirs["its spec"] = med(case.anchor_own.total_ms) - base
            ours = {"": med(case.shim.total_ms) - base}
            if case.no_server is not None:
                ours = {" (server)": ours[""],
                        " (no server)": med(case.no_server.total_ms) - base}  # fmt: skip
            for label, mine in ours.items():
                for what, other in theirs.items():
                    ratio = f"{mine / other:.2f}x" if other > 0.5 else "-"
                    print(f"  {case.name:<24} nvhook{label} {mine:>6.1f} ms / anchor ({what}) "
                          f"{other:>6.1f} ms = {ratio}")  # fmt: skip
    if not any(c.runc_edited for c in cases):
        return
    print()
    print("the parts (ms; differences of medians, so they need not add up exactly):")
    for case in cases:
        assert case.runc_edited is not None and case.runc_no_hooks is not None
        edited, bare = case.runc_edited, case.runc_no_hooks
        parts = [
            ("shim create", med(case.shim.create_ms) - med(edited.create_ms)),
            ("shim start", med(case.shim.start_ms) - med(edited.start_ms)),
            ("hooks", med(edited.total_ms) - med(bare.total_ms)),
        ]
        parts += [
            (f"  {label}", med(v.total_ms) - med(bare.total_ms)) for label, v in case.per_hook
        ]
        parts.append(("runc's mounts and nodes", med(bare.total_ms) - base))
        mounts = len(json.loads((bare.bundle / "pristine.json").read_text()).get("mounts", []))
        print(f"  {case.name} ({mounts} mounts in the spec):")
        for label, value in parts:
            print(f"    {label:<44} {value:>6.1f}")


# --------------------------------------------------------------------------- main


def server_config(work: Path, names: list[str], spec_dir: Path | None) -> Path:
    """The server's own settings, as a node's server reads the node's config: the spec
    directories of the cases, so that it parses their files ahead (``nvhook.server._Ahead``;
    each call still names its own config). Waits until the generated specs have settled
    (``nvhook.tools.startcost.wait_until_settled``)."""
    from nvhook.tools.startcost import wait_until_settled

    dirs = [spec_dir] if spec_dir else [work / f"cdi-{CASES[n][0]}" for n in names]
    spec_dirs = list(dict.fromkeys(str(d) for d in dirs))
    config = work / "config-server.toml"
    config.write_text(f"[cdi]\nspec_dirs = {json.dumps(spec_dirs)}\n")
    wait_until_settled(str(f) for d in spec_dirs for f in Path(d).iterdir())
    return config


def start_server(runtime: str, cache: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``nvhook-shim-server`` (beside ``runtime``) on ``shim.sock`` in ``cache``, the cache
    directory every nvhook call of the bench names: the native front-end hands its GPU calls
    to it instead of starting Python."""
    from runtime import launch_server  # bench/runtime.py, beside this script

    server = Path(runtime).with_name("nvhook-shim-server")
    if not server.is_file():
        raise SystemExit(f"--server: {server} not found (nvhook install-entrypoints)")
    proc = launch_server(str(server), cache, env)
    if proc is None:
        raise SystemExit(f"--server: {server} did not start")
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per row (default 15)")
    parser.add_argument(
        "--cases", help=f"comma list of case names (default all: {', '.join(CASES)})"
    )
    parser.add_argument("--no-parts", action="store_true", help="only the runtime's rows")
    parser.add_argument("--runtime", help="a runc-compatible shim (default: nvhook-runtime)")
    parser.add_argument("--spec-dir", type=Path, help="CDI specs the runtime reads (no generate)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--anchor", help="NVIDIA's nvidia-container-runtime, run beside (cdi)")
    parser.add_argument(
        "--server",
        action="store_true",
        help="run nvhook-shim-server for the nvhook runtime's calls (docs/architecture.md D12)",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/start.py starts real containers: run it as root")
    runc = shutil.which("runc")
    if runc is None:
        raise SystemExit("runc not found")
    runtime = args.runtime or str(Path(sys.executable).parent / "nvhook-runtime")
    if not os.access(runtime, os.X_OK):
        raise SystemExit(f"{runtime} is not executable (nvhook install-entrypoints?)")
    if args.anchor:
        if not os.access(args.anchor, os.X_OK):
            raise SystemExit(f"--anchor {args.anchor}: not an executable file")
        for tool in ("nvidia-ctk", "nvidia-cdi-hook"):
            path = Path(args.anchor).with_name(tool)
            if os.access(path, os.X_OK):
                NVIDIA_TOOLS[tool] = str(path)
        from runtime import PRIVATE_NS  # bench/runtime.py, beside this script

        if os.environ.get(PRIVATE_NS) != "1":  # the mock's /proc/driver for NVIDIA's toolkit
            argv = ["unshare", "--mount", "--propagation", "private", sys.executable, *sys.argv]
            os.execvpe("unshare", argv, {**os.environ, PRIVATE_NS: "1"})
    names = [n.strip() for n in args.cases.split(",")] if args.cases else list(CASES)
    if args.runtime and not args.cases:
        names = [n for n in names if CASES[n][2] == "cdi"]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"unknown case {unknown[0]!r} (known: {', '.join(CASES)})")
    load = list(os.getloadavg())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", "oci", "nvhook"], cwd=REPO,
                   env=env, check=True)  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="nvhook-bench-start-"))
    server: subprocess.Popen[bytes] | None = None
    try:
        bench = Bench(work, runc)
        bench.build_rootfs()
        for profile in sorted({CASES[n][0] for n in names}):
            machine = prepare_machine(work, profile, args.spec_dir, runc)
            if args.anchor:
                from runtime import private_proc_driver

                private_proc_driver(machine)  # one MIG mock at most (dgx-a100)
        env_base = {"PATH": PATH_ENV, "NVHOOK_CACHE_DIR": str(work / "cache")}
        if args.server:
            server_env = {
                **env_base,
                "NVHOOK_CONFIG": str(server_config(work, names, args.spec_dir)),
            }
            server = start_server(runtime, work / "cache", server_env)
        cases = make_cases(bench, names, runtime, env_base, not args.no_parts, args.anchor,
                           args.spec_dir, server is not None)  # fmt: skip
        plain = Variant("plain runc", bench.bundle("plain", runc_spec(runc)), runc,
                        {"PATH": PATH_ENV})  # fmt: skip
        variants = [plain, *(v for c in cases for v in c.variants())]
        for v in variants:  # warm-up, untimed
            bench.run(v)
            v.create_ms.clear()
            v.start_ms.clear()
        for _ in range(args.runs):
            random.shuffle(variants)
            for v in variants:
                bench.run(v)
        if server is not None:
            runtime += f" (through {server.args[0]}, pid {server.pid})"
        report(plain, cases, args.runs, runtime, load)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            subprocess.run(["umount", "-R", str(work)], capture_output=True, check=False)
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
