"""The README's main command: the whole chain on the built-in mock DGX A100.

1. lay out the ``dgx-a100`` mock machine (8 GPUs, MIG on GPU 0);
2. make a busybox bundle (config.json from ``runc spec``) asking for
   ``NVIDIA_VISIBLE_DEVICES=0,3`` and running the mock ``nvidia-smi -L``;
3. start it through ``nvhook-runtime`` and runc, configured (``$NVHOOK_CONFIG``)
   to treat the mock as the host, and show what the container saw;
4. show the edits that made it so.

Where the machine cannot run containers (not root, no runc, no busybox), it
says why and shows the edits that would be applied instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable

__all__ = [
    "base_spec",
    "cannot_run",
    "explain_bundle",
    "mock_host",
    "rootfs",
    "run_container",
    "run_demo",
]

PROFILE = "dgx-a100"
REQUEST = "0,3"
INSIDE = (
    "echo '$ nvidia-smi -L'; nvidia-smi -L; "
    "echo '$ ls /dev | grep nvidia'; ls /dev | grep nvidia; "
    "echo '$ head -c 4 /usr/lib/x86_64-linux-gnu/libcuda.so.1 | od -c | head -1'; "
    "head -c 4 /usr/lib/x86_64-linux-gnu/libcuda.so.1 | od -c | head -1"
)


def mock_host(workdir: str, profile: str, echo: Callable[[str], None], *, step: str) -> str:
    """Lay out the mock ``profile`` afresh under ``workdir/host`` (made writable first)."""
    from nvhook.errors import MockError, WorkdirError
    from nvhook.mock import create
    from nvhook.mock.layout import DATA_DIR

    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as e:
        raise WorkdirError(
            f"cannot create --dir {workdir}: {e.strerror}; choose a directory you can write"
        ) from e
    if not os.access(workdir, os.W_OK | os.X_OK):
        raise WorkdirError(f"--dir {workdir} is not writable; choose a directory you can write")
    root = os.path.join(workdir, "host")
    echo(f"== {step} a mock {profile} host at {root}")
    if os.path.lexists(root):
        if not os.path.isfile(os.path.join(root, DATA_DIR, "profile.json")):
            raise MockError(f"{root} exists and is not a mock machine: choose another --dir")
        shutil.rmtree(root)  # the previous run's mock host: lay it out afresh
    machine = create(profile, root)
    echo(f"   {len(os.listdir(os.path.join(root, 'proc/driver/nvidia/gpus')))} GPUs in /proc")
    return str(machine.root)


def run_demo(workdir: str, echo: Callable[[str], None]) -> int:
    root = mock_host(workdir, PROFILE, echo, step="1.")
    config = os.path.join(workdir, "config.toml")
    with open(config, "w") as f:
        f.write(
            f'[runtime]\nlog_file = "{workdir}/nvhook-runtime.log"\n'
            f'[host]\nroot = "{root}"\n'
            f'[cdi]\nspec_dirs = ["{workdir}/cdi"]\n'
        )
    env = {**os.environ, "NVHOOK_CONFIG": config, "NVHOOK_CACHE_DIR": f"{workdir}/cache"}

    bundle = os.path.join(workdir, "bundle")
    shutil.rmtree(bundle, ignore_errors=True)
    os.makedirs(bundle)
    why_not = cannot_run()
    echo(f"== 2. a busybox bundle at {bundle} asking for NVIDIA_VISIBLE_DEVICES={REQUEST}")
    spec = base_spec(bundle, why_not is None, INSIDE)
    process = spec["process"]
    assert isinstance(process, dict)
    process["env"] = [*process["env"], f"NVIDIA_VISIBLE_DEVICES={REQUEST}"]
    # the bundle as written, for explain: the run leaves NVIDIA_VISIBLE_DEVICES=void in it
    as_written = os.path.join(workdir, "bundle-as-written")
    shutil.rmtree(as_written, ignore_errors=True)
    os.makedirs(as_written)
    for directory in (bundle, as_written):
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(spec, f, indent="\t")

    if why_not is None:
        rootfs(os.path.join(bundle, "rootfs"))
        runtime = os.path.join(os.path.dirname(sys.executable), "nvhook-runtime")
        code = run_container(runtime, workdir, bundle, f"nvhook-demo-{os.getpid()}", env, echo,
                             step="== 3.")  # fmt: skip
        if code != 0:
            return code
    else:
        echo(f"== 3. not starting a container: {why_not}; showing the edits instead")

    echo(f"== 4. why: nvhook explain --bundle {as_written}   (the bundle before it was edited)")
    return explain_bundle(as_written, config, f"{workdir}/cache", echo)


def run_container(
    runtime: str,
    workdir: str,
    bundle: str,
    cid: str,
    env: dict[str, str],
    echo: Callable[[str], None],
    *,
    step: str,
) -> int:
    """``runtime run`` of ``bundle`` (runc's state under ``workdir``), its output echoed;
    the exit code, with a line saying so when the container failed."""
    argv = [runtime, "--root", os.path.join(workdir, "runc"), "run", "--bundle", bundle, cid]
    echo(f"{step} {' '.join(argv[1:])}   (nvhook-runtime, then runc)")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    for line in (proc.stdout + proc.stderr).splitlines():
        echo(f"   | {line}")
    if proc.returncode != 0:
        echo(f"   the container failed (exit {proc.returncode})")
    return proc.returncode


def cannot_run() -> str | None:
    """Why this machine cannot start the demo's container (None: it can)."""
    if os.geteuid() != 0:
        return "not root (runc needs root here)"
    for tool in ("runc", "busybox"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def base_spec(bundle: str, have_runc: bool, inside: str) -> dict[str, object]:
    """``runc spec``'s config.json (or a stored copy without runc) running ``sh -c inside``."""
    if have_runc:
        subprocess.run(["runc", "spec", "--bundle", bundle], check=True, capture_output=True)
        with open(os.path.join(bundle, "config.json")) as f:
            spec: dict[str, object] = json.load(f)
    else:
        from importlib.resources import files

        spec = json.loads(files("nvhook").joinpath("data/runc-spec.json").read_text())
    process = spec["process"]
    assert isinstance(process, dict)
    process["terminal"] = False
    process["args"] = ["sh", "-c", inside]
    root = spec["root"]
    assert isinstance(root, dict)
    root["readonly"] = False
    return spec


def rootfs(path: str) -> None:
    """A busybox root filesystem at ``path``."""
    busybox = shutil.which("busybox")
    assert busybox is not None
    os.makedirs(os.path.join(path, "bin"))
    for d in ("etc", "proc", "sys", "dev", "tmp", "usr/bin", "usr/lib/x86_64-linux-gnu"):
        os.makedirs(os.path.join(path, d), exist_ok=True)
    shutil.copy2(busybox, os.path.join(path, "bin", "busybox"))
    for applet in ("sh", "ls", "grep", "head", "od", "echo", "cat"):
        os.symlink("busybox", os.path.join(path, "bin", applet))
    with open(os.path.join(path, "etc", "passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\n")


def explain_bundle(bundle: str, config: str, cache_dir: str, echo: Callable[[str], None]) -> int:
    """Print ``nvhook explain --bundle`` for ``bundle`` under the settings ``config``."""
    from nvhook.settings import load_settings
    from nvhook.tools.explain import explain, render_text

    settings = load_settings(config, cache_dir=cache_dir)
    report = explain(bundle, config_path=config, settings=settings)
    for line in render_text(report).splitlines():
        echo(f"   {line}")
    return 0
