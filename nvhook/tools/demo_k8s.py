"""``nvhook demo --kubernetes``: the device plugin's chain on the mock DGX A100, narrated.

1. lay out the ``dgx-a100`` mock and generate its CDI spec (``nvhook cdi generate``);
2. register: ``nvhook device-plugin`` (``migStrategy: mixed``, ``deviceListStrategy:
   cdi-annotations``) serves its resources and registers each with a kubelet stand-in
   (:class:`nvhook.deviceplugin.server.Kubelet`) on a private device-plugin directory;
3. list: kubelet's ``ListAndWatch`` on ``nvidia.com/gpu``;
4. allocate: ``GetPreferredAllocation`` for 2 GPUs, then ``Allocate``;
5. CRI: the ``ContainerConfig`` kubelet builds from the ``AllocateResponse``, and the
   config.json containerd's CRI makes of it (the ``cdi.k8s.io/`` annotation is copied because
   ``nvhook runtime configure`` listed it in the runtime's ``container_annotations``);
6. runtime: that bundle started through ``nvhook-runtime`` and runc, which resolves the
   annotation's CDI names; the container's ``nvidia-smi -L`` lists the two allocated GPUs.

Steps 2 to 5 need no privilege. Without root, runc or busybox, step 6 says why and shows what
nvhook-runtime would do (``nvhook explain``) instead, as ``nvhook demo`` does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["run_kubernetes_demo"]

PROFILE = "dgx-a100"
ALLOCATE = 2


def run_kubernetes_demo(workdir: str, echo: Callable[[str], None]) -> int:
    from nvhook.deviceplugin.model import PluginConfig
    from nvhook.deviceplugin.plugin import DevicePlugin
    from nvhook.deviceplugin.resources import GPU_RESOURCE
    from nvhook.deviceplugin.server import Kubelet, create_container_config
    from nvhook.edits import Host
    from nvhook.tools.demo import cannot_run, explain_bundle, mock_host
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
    echo("== 5. CRI: CreateContainer with those annotations and envs, runtime handler nvidia")
    bundle = os.path.join(workdir, "k8s-bundle")
    why_not = cannot_run()
    _write_bundle(bundle, allocation, why_not is None)
    echo(
        "   containerd's CRI copies annotations matching the runtime's container_annotations "
        '(["cdi.k8s.io/*"], written by nvhook runtime configure) into config.json: '
        f"{bundle}/config.json"
    )
    settings = os.path.join(workdir, "k8s-config.toml")
    with open(settings, "w") as f:
        f.write(
            f'[runtime]\nlog_file = "{workdir}/nvhook-runtime.log"\n'
            f'[host]\nroot = "{root}"\n'
            f'[cdi]\nspec_dirs = ["{spec_dir}"]\n'
        )
    cache = os.path.join(workdir, "cache")
    if why_not is not None:
        echo(f"== 6. runtime: not starting a container: {why_not}; what nvhook-runtime would do:")
        return explain_bundle(bundle, settings, cache, echo)
    env = {**os.environ, "NVHOOK_CONFIG": settings, "NVHOOK_CACHE_DIR": cache}
    runtime = os.path.join(bin_dir, "nvhook-runtime")
    cid = f"nvhook-demo-k8s-{os.getpid()}"
    argv = [runtime, "--root", os.path.join(workdir, "runc"), "run", "--bundle", bundle, cid]
    echo(f"== 6. runtime: {' '.join(argv[1:])}   (nvhook-runtime, then runc)")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    for line in (proc.stdout + proc.stderr).splitlines():
        echo(f"   | {line}")
    if proc.returncode != 0:
        echo(f"   the container failed (exit {proc.returncode})")
        return proc.returncode
    echo(f"   the container sees the {ALLOCATE} GPUs kubelet allocated, and no other")
    return 0


def _write_bundle(bundle: str, allocation: dict[str, Any], have_runc: bool) -> None:
    from nvhook.tools.demo import base_spec, rootfs

    shutil.rmtree(bundle, ignore_errors=True)
    os.makedirs(bundle)
    spec = base_spec(bundle, have_runc, "echo '$ nvidia-smi -L'; nvidia-smi -L")
    process = spec["process"]
    assert isinstance(process, dict)
    process["env"] = [*process["env"], *(f"{k}={v}" for k, v in allocation["envs"].items())]
    spec["annotations"] = dict(allocation["annotations"])
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(spec, f, indent="\t")
    if have_runc:
        rootfs(os.path.join(bundle, "rootfs"))
