"""``nvhook demo --kubernetes``: the device plugin's chain on the mock DGX A100, narrated.

1. lay out the ``dgx-a100`` mock and generate its CDI spec (``nvhook cdi generate``);
2. register: ``nvhook device-plugin`` (``migStrategy: mixed``, ``deviceListStrategy:
   cdi-annotations``) serves its resources and registers each with a kubelet stand-in
   (:class:`nvhook.deviceplugin.server.Kubelet`) on a private device-plugin directory;
3. list: kubelet's ``ListAndWatch`` on ``nvidia.com/gpu``;
4. allocate: ``GetPreferredAllocation`` for 2 GPUs, then ``Allocate``;
5. CRI: a private containerd 1.6 (:class:`nvhook.tools.containerd.Containerd`: its own root,
   state and sockets under the demo directory) whose config ``nvhook runtime configure
   --runtime containerd`` gave the runtime handler ``nvidia`` (with ``container_annotations =
   ["cdi.k8s.io/*"]``), with a busybox and a pause image built offline
   (:mod:`nvhook.tools.images`); kubelet's CRI calls (:mod:`nvhook.cri.client`):
   ``RunPodSandbox`` with handler ``nvidia``, ``CreateContainer`` carrying the
   ``AllocateResponse``'s envs, mounts, devices and annotations as kubelet copies them,
   ``StartContainer``;
6. runtime: what nvhook-runtime did for the pod's two containers (its log: the pause container
   untouched, ours given the annotation's CDI devices), then the container's ``nvidia-smi -L``
   from its CRI log: the two allocated GPUs; then the pod is stopped and removed, containerd
   stopped and what it left under ``/run/containerd`` removed.

Steps 2 to 4 need no privilege. Without root, containerd, ctr, umoci, skopeo or a static
busybox, step 5 says why in one line and falls back to the bundle containerd's CRI would
write, started through ``nvhook-runtime`` and runc directly; without root, runc or busybox
either, step 6 shows what nvhook-runtime would do (``nvhook explain``), as ``nvhook demo``
does.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nvhook.cri.client import CriClient
    from nvhook.tools.containerd import Containerd

__all__ = ["cannot_run_cri", "run_kubernetes_demo"]

PROFILE = "dgx-a100"
ALLOCATE = 2
HANDLER = "nvidia"
K8S = "k8s.io"  # the containerd namespace of CRI
SHIM_SOCKETS = "/run/containerd/s"
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # the pod spec's env: the busybox image sets none
INSIDE = "echo '$ nvidia-smi -L'; nvidia-smi -L"


def run_kubernetes_demo(workdir: str, echo: Callable[[str], None]) -> int:
    from nvhook.deviceplugin.model import PluginConfig
    from nvhook.deviceplugin.plugin import DevicePlugin
    from nvhook.deviceplugin.resources import GPU_RESOURCE
    from nvhook.deviceplugin.server import Kubelet, create_container_config
    from nvhook.planner import Host
    from nvhook.tools import demo
    from nvhook.tools.demo import explain_bundle, mock_host
    from nvhook.tools.generate import generate_spec
    from oci.cdi.write import write_spec

    root = mock_host(workdir, PROFILE, echo, step="1.")
    bin_dir = os.path.dirname(sys.executable)
    host = Host(root=root, hook_path=os.path.join(bin_dir, "nvhook-hook"))
    spec_dir = os.path.join(workdir, "cdi")
    os.makedirs(spec_dir, exist_ok=True)
    write_spec(os.path.join(spec_dir, "nvidia.json"), generate_spec(host).spec, format="json")
    echo(f"   CDI spec for its GPUs: {spec_dir}/nvidia.json (nvhook cdi generate)")

    # a socket's path has at most 107 bytes: kubelet's directory stand-in is short, in /tmp
    directory = tempfile.mkdtemp(prefix="nvhook-dp-", dir="/tmp")
    kubelet = Kubelet(Path(directory))
    kubelet.start()
    config = PluginConfig(mig_strategy="mixed", device_list_strategies=("cdi-annotations",))
    plugin = DevicePlugin(
        Host(root=root), config, directory, log=lambda line: echo(f"   plugin: {line}")
    )
    stop = threading.Event()
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    echo("== 2. register: nvhook device-plugin (migStrategy mixed, cdi-annotations)")
    thread.start()
    try:
        plugin.ready.wait(30)
        requests = kubelet.wait_registered(len(plugin.servers) or 1)
        for r in requests:
            echo(f"   kubelet: Register {r.resource_name} at {r.endpoint} ({r.version})")
        gpu = next(r for r in requests if r.resource_name == GPU_RESOURCE)
        client = kubelet.client(gpu)
        echo(f"== 3. list: ListAndWatch on {GPU_RESOURCE}")
        client.watch()
        listed = client.wait_for(lambda devices: bool(devices))
        for d in listed:
            numa = ",".join(str(n.ID) for n in d.topology.nodes) or "-"
            echo(f"   {d.ID}  {d.health}  NUMA {numa}")
        ids = [d.ID for d in listed]
        echo(f"== 4. allocate: GetPreferredAllocation for {ALLOCATE} GPUs, then Allocate")
        chosen = client.preferred(ids, [], ALLOCATE)
        echo(f"   preferred: {', '.join(chosen)}")
        response = client.allocate(chosen)
        allocation = create_container_config(response.container_responses[0])
        for key, value in allocation["annotations"].items():
            echo(f"   annotation {key}={value}")
        for key, value in allocation["envs"].items():
            echo(f"   env {key}={value}")
    finally:
        stop.set()
        thread.join(10)
        kubelet.stop()
        shutil.rmtree(directory, ignore_errors=True)
    settings = os.path.join(workdir, "k8s-config.toml")
    log_file = os.path.join(workdir, "nvhook-runtime.log")
    with open(settings, "w") as f:
        f.write(
            f'[runtime]\nlog_file = "{log_file}"\n'
            f'[host]\nroot = "{root}"\n'
            f'[cdi]\nspec_dirs = ["{spec_dir}"]\n'
        )
    cache = os.path.join(workdir, "cache")
    shim_env = {"NVHOOK_CONFIG": settings, "NVHOOK_CACHE_DIR": cache}
    runtime = os.path.join(bin_dir, "nvhook-runtime")
    why_not_cri = cannot_run_cri()
    if why_not_cri is None:
        return _through_cri(workdir, allocation, runtime, shim_env, log_file, echo)

    echo("== 5. CRI: CreateContainer with those annotations and envs, runtime handler nvidia")
    echo(f"   not through containerd's CRI: {why_not_cri}; the bundle its CRI would write instead")
    bundle = os.path.join(workdir, "k8s-bundle")
    why_not = demo.cannot_run()
    _write_bundle(bundle, allocation, why_not is None)
    echo(
        "   containerd's CRI copies annotations matching the runtime's container_annotations "
        '(["cdi.k8s.io/*"], written by nvhook runtime configure) into config.json: '
        f"{bundle}/config.json"
    )
    if why_not is not None:
        echo(f"== 6. runtime: not starting a container: {why_not}; what nvhook-runtime would do:")
        return explain_bundle(bundle, settings, cache, echo)
    env = {**os.environ, **shim_env}
    from nvhook.tools.demo import run_container

    cid = f"nvhook-demo-k8s-{os.getpid()}"
    code = run_container(runtime, workdir, bundle, cid, env, echo, step="== 6. runtime:")
    if code != 0:
        return code
    echo(f"   the container sees the {ALLOCATE} GPUs kubelet allocated, and no other")
    return 0


def cannot_run_cri() -> str | None:
    """Why this machine cannot run the demo's pod through containerd's CRI (None: it can)."""
    from nvhook.tools import demo
    from nvhook.tools.images import BUSYBOX, is_static

    why = demo.cannot_run()  # looked up now: tests replace it
    if why is not None:
        return why
    for tool in ("containerd", "ctr", "umoci", "skopeo"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.path.isfile(BUSYBOX) or not is_static(BUSYBOX):
        return f"{BUSYBOX} is not a static busybox (install busybox-static)"
    return None


def _through_cri(
    workdir: str,
    allocation: dict[str, Any],
    runtime: str,
    shim_env: dict[str, str],
    log_file: str,
    echo: Callable[[str], None],
) -> int:
    """Steps 5 and 6 through a private containerd's CRI; always cleans up."""
    from nvhook.cri.client import CriClient
    from nvhook.engines import apply_plan, plan_configure
    from nvhook.tools.containerd import Containerd
    from nvhook.tools.images import (
        BUSYBOX_IMAGE,
        PAUSE_IMAGE,
        busybox_image_tar,
        pause_image_tar,
    )

    echo(f"== 5. CRI: a private containerd, runtime handler {HANDLER}, kubelet's CRI calls")
    top = Path(workdir)
    busybox = busybox_image_tar(top / "images" / "busybox")
    pause = pause_image_tar(busybox, top / "images" / "pause")
    echo(f"   images {BUSYBOX_IMAGE} and {PAUSE_IMAGE} (sandbox), built offline: umoci, skopeo")
    containerd = Containerd(
        top / "containerd", cri=True, sandbox_image=PAUSE_IMAGE, namespace=K8S, env=shim_env
    )
    plan = plan_configure(
        "containerd", config=str(containerd.config), name=HANDLER, runtime_path=runtime
    )
    apply_plan(plan, str(top / "backups"))
    echo(
        f"   nvhook runtime configure --runtime containerd --config {containerd.config} "
        f"--name {HANDLER}"
    )
    for line in _runtime_entry(containerd.config.read_text()):
        echo(f"   | {line}")
    if os.path.exists(log_file):
        os.unlink(log_file)  # this run's records only
    started = False
    try:
        containerd.start()
        started = True
        echo(f"   containerd {_version(containerd)} started: {containerd.address}")
        containerd.import_image(busybox)
        containerd.import_image(pause)
        with CriClient(containerd.address) as cri:
            return _run_pod(cri, top / "pods", allocation, log_file, echo)
    finally:
        containerd.stop()
        if started:
            echo(
                f"   clean-up: containerd stopped; its sockets under {SHIM_SOCKETS} and the "
                "empty /run/containerd directories removed"
            )


def _run_pod(
    cri: CriClient,
    logs: Path,
    allocation: dict[str, Any],
    log_file: str,
    echo: Callable[[str], None],
) -> int:
    """One pod with handler ``nvidia``, its container given ``allocation`` as kubelet gives it;
    what nvhook-runtime did and what the container printed. The pod is always removed."""
    from nvhook.cri.client import container_config, pod_config, read_log
    from nvhook.tools.images import BUSYBOX_IMAGE

    shutil.rmtree(logs, ignore_errors=True)
    pod = pod_config(f"nvhook-demo-{os.getpid()}", namespace="default", log_directory=logs)
    sandbox = cri.run_pod_sandbox(pod, HANDLER)
    echo(f"   RunPodSandbox (runtime_handler {HANDLER}, host network): {sandbox[:12]}")
    try:
        config = container_config(
            "cuda",
            BUSYBOX_IMAGE,
            ["/bin/sh", "-c", INSIDE],
            envs={"PATH": PATH},
            allocation=allocation,
            log_path="cuda.log",
        )
        container = cri.create_container(sandbox, config, pod)
        echo(
            f"   CreateContainer: {container[:12]}, with the allocation's "
            f"{len(config.annotations)} annotation, {len(allocation['envs'])} env, "
            f"{len(config.mounts)} mounts, {len(config.devices)} devices"
        )
        cri.start_container(container)
        echo("   StartContainer")
        status = cri.wait_exited(container)
        echo("== 6. runtime: containerd's runc shim ran nvhook-runtime for both containers")
        for cid, role in ((sandbox, "pause container"), (container, "container")):
            for record in _records(log_file, cid):
                echo(f"   nvhook-runtime {record}  ({role})")
        for line in read_log(logs / "cuda.log").splitlines():
            echo(f"   | {line}")
        if status.exit_code != 0:
            echo(f"   the container failed (exit {status.exit_code}: {status.reason})")
            return 1
        echo(f"   the container sees the {ALLOCATE} GPUs kubelet allocated, and no other")
        return 0
    finally:
        cri.stop_pod_sandbox(sandbox)
        cri.remove_pod_sandbox(sandbox)
        echo("   clean-up: StopPodSandbox, RemovePodSandbox")


def _records(log_file: str, container: str) -> list[str]:
    """nvhook-runtime's log about ``container``'s create, one line each."""
    if not os.path.exists(log_file):
        return []
    out = []
    with open(log_file) as f:
        for line in f:
            r = json.loads(line)
            if r.get("id") != container or r.get("command") != "create":
                continue
            if r.get("mode") is None:
                out.append("create: asks for no GPU, config.json untouched")
            else:
                edited = "edited" if r.get("written") else "untouched"
                out.append(f"create: mode {r['mode']}, {r['devices']}, config.json {edited}")
    return out


def _runtime_entry(config: str) -> list[str]:
    """The lines of containerd's config that name the handler's runtime."""
    keep = f".runtimes.{HANDLER}"
    lines, inside = [], False
    for line in config.splitlines():
        if line.lstrip().startswith("["):
            inside = keep in line
        if inside and line.strip():
            lines.append(line.strip())
    return lines


def _version(containerd: Containerd) -> str:
    out = containerd.ctr("version", check=False).stdout
    versions = [line.split(":", 1)[1].strip() for line in out.splitlines() if "Version:" in line]
    return versions[-1] if versions else "?"


def _write_bundle(bundle: str, allocation: dict[str, Any], have_runc: bool) -> None:
    from nvhook.tools.demo import base_spec, rootfs

    shutil.rmtree(bundle, ignore_errors=True)
    os.makedirs(bundle)
    spec = base_spec(bundle, have_runc, INSIDE)
    process = spec["process"]
    assert isinstance(process, dict)
    process["env"] = [*process["env"], *(f"{k}={v}" for k, v in allocation["envs"].items())]
    spec["annotations"] = dict(allocation["annotations"])
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(spec, f, indent="\t")
    if have_runc:
        rootfs(os.path.join(bundle, "rootfs"))
