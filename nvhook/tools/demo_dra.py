"""``nvhook demo --kubernetes --dra``: the DRA driver's chain on the mock DGX A100, narrated.

1. lay out the ``dgx-a100`` mock;
2. publish: ``nvhook dra-plugin``'s daemon (:class:`nvhook.dra.plugin.DraPlugin`, in a thread)
   publishes the node's ResourceSlice to an in-memory API (:class:`MemoryApi`: the five calls
   the driver makes; no API server here), and a kubelet stand-in
   (:class:`nvhook.dra.server.Kubelet`) registers it through its registration socket;
3. allocate: a simple allocator standing in for the scheduler (:func:`allocate`: the first
   free devices of the slice that match a type, and a MIG profile) writes two claims'
   allocations: two whole GPUs, and one ``3g.40gb`` MIG device;
4. prepare: kubelet's ``NodePrepareResources`` for both: the CDI ids, and the claims'
   transient specs in the demo's CDI directory;
5. CRI: what kubelet sends is ``CreateContainer`` with ``CDIDevices`` = those ids; the
   engine's own CDI applies them. No CDI-capable containerd is on this machine (the tests run
   containerd 2.1 from a Debian root for that, ``tests/e2e/engines/test_dra_containerd.py``),
   so the demo applies them as an engine's CDI does (:func:`oci.cdi.inject.inject`: the same
   specs, the same registry) to a busybox bundle each, run by plain runc (no nvhook-runtime),
   and shows each container's ``nvidia-smi -L``. Without root, runc or busybox it says why
   and shows the devices' nodes instead;
6. unprepare: both claims, their specs gone; the daemon stopped.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["MemoryApi", "allocate", "run_dra_demo"]

NODE = "demo-node"
INSIDE = "echo '$ nvidia-smi -L'; nvidia-smi -L"


class MemoryApi:
    """The driver's five API calls over a dict (the demo's API server: none here)."""

    def __init__(self) -> None:
        self.slices: dict[str, dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._version = 0

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        from nvhook.kubeapi import ApiError

        with self._lock:
            claim = self.claims.get((namespace, name))
        if claim is None:
            raise ApiError(f"claim {namespace}/{name} not found", 404)
        return copy.deepcopy(claim)

    def list_slices(self, driver: str, node: str) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(s)
                for s in self.slices.values()
                if s["spec"]["driver"] == driver and s["spec"].get("nodeName") == node
            ]

    def create_slice(self, body: Mapping[str, Any]) -> Any:
        return self._store(body)

    def replace_slice(self, body: Mapping[str, Any]) -> Any:
        return self._store(body)

    def _store(self, body: Mapping[str, Any]) -> Any:
        obj = copy.deepcopy(dict(body))
        with self._lock:
            self._version += 1
            obj["metadata"]["resourceVersion"] = str(self._version)
            self.slices[obj["metadata"]["name"]] = obj
        return obj

    def delete_slice(self, name: str) -> None:
        with self._lock:
            self.slices.pop(name, None)

    def add_claim(self, name: str, results: list[dict[str, Any]]) -> tuple[str, str, str]:
        uid = str(uuid.uuid4())
        claim = {
            "metadata": {"namespace": "default", "name": name, "uid": uid},
            "status": {"allocation": {"devices": {"results": results}}},
        }
        with self._lock:
            self.claims[("default", name)] = claim
        return "default", name, uid


def allocate(
    slices: list[dict[str, Any]],
    kind: str,
    count: int,
    taken: set[str],
    *,
    profile: str | None = None,
    request: str = "devices",
) -> list[dict[str, Any]]:
    """The scheduler's part, simply: the first ``count`` devices of ``kind`` (and MIG
    ``profile``) not in ``taken``, as allocation results; [] when there are not enough."""
    from nvhook.dra.inventory import DRIVER

    out = []
    for s in slices:
        for d in s["spec"].get("devices", []):
            attrs = d.get("attributes", {})
            if attrs.get("type", {}).get("string") != kind or d["name"] in taken:
                continue
            if profile is not None and attrs.get("profile", {}).get("string") != profile:
                continue
            out.append(
                {
                    "request": request,
                    "driver": DRIVER,
                    "pool": s["spec"]["pool"]["name"],
                    "device": d["name"],
                }
            )
            if len(out) == count:
                taken.update(r["device"] for r in out)
                return out
    return []


def run_dra_demo(workdir: str, echo: Callable[[str], None]) -> int:
    from nvhook.dra.plugin import DraPlugin
    from nvhook.dra.prepare import spec_file
    from nvhook.dra.server import Kubelet
    from nvhook.planner import Host
    from nvhook.tools.demo import base_spec, cannot_run, mock_host, rootfs

    root = mock_host(workdir, "dgx-a100", echo, step="1.")
    dirs = {n: os.path.join(workdir, "dra", n) for n in ("plugins", "registry", "cdi", "devplug")}
    shutil.rmtree(os.path.join(workdir, "dra"), ignore_errors=True)
    for d in dirs.values():
        os.makedirs(d)
    api = MemoryApi()
    lines: list[str] = []
    plugin = DraPlugin(
        Host(root=root),
        node=NODE,
        api=api,
        plugins_dir=dirs["plugins"],
        registry_dir=dirs["registry"],
        cdi_root=dirs["cdi"],
        device_plugin_dir=dirs["devplug"],
        log=lines.append,
    )
    stop = threading.Event()
    failed: list[BaseException] = []

    def serve() -> None:
        try:
            plugin.run(stop)
        except BaseException as e:  # shown below, the demo's one line
            failed.append(e)
            plugin.ready.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    plugin.ready.wait(60)
    if failed:
        raise failed[0]
    kubelet = Kubelet(dirs["registry"])
    try:
        info = kubelet.register()
        (s,) = api.list_slices(info.name, NODE)
        devices = s["spec"].get("devices", [])
        echo(
            f"== 2. publish: {info.name} registered with the kubelet stand-in "
            f"(endpoint {info.endpoint}, {', '.join(info.supported_versions)}); "
            f"ResourceSlice {s['metadata']['name']}: pool {NODE} generation "
            f"{s['spec']['pool']['generation']}, {len(devices)} devices"
        )
        for d in devices:
            a = d["attributes"]
            echo(f"   {d['name']:16} {a['type']['string']:4} {a['uuid']['string']}"
                 + (f"  {a['profile']['string']}" if "profile" in a else ""))  # fmt: skip
        taken: set[str] = set()
        gpus = allocate([s], "gpu", 2, taken, request="gpus")
        migs = allocate([s], "mig", 1, taken, profile="3g.40gb", request="mig")
        two, mig = api.add_claim("two-gpus", gpus), api.add_claim("a-mig", migs)
        echo(
            "== 3. allocate (the stand-in scheduler): two-gpus <- "
            + ", ".join(r["device"] for r in gpus)
            + "; a-mig (3g.40gb) <- "
            + ", ".join(r["device"] for r in migs)
        )
        answer = kubelet.prepare(two, mig).claims
        echo("== 4. prepare (NodePrepareResources v1):")
        ids: dict[str, list[str]] = {}
        for _, name, uid in (two, mig):
            r = answer[uid]
            if r.error:
                echo(f"   {name}: {r.error}")
                return 1
            ids[name] = [i for d in r.devices for i in d.cdi_device_ids]
            echo(f"   {name}: {' '.join(ids[name])}")
            echo(f"      spec {spec_file(dirs['cdi'], uid)}")
        why_not = cannot_run()
        echo("== 5. CRI: CreateContainer with CDIDevices = those ids; the engine's CDI applies "
             "them (here: oci.cdi.inject, then plain runc)")  # fmt: skip
        code = 0
        for name, names in ids.items():
            bundle = os.path.join(workdir, "dra", f"bundle-{name}")
            os.makedirs(bundle)
            spec = base_spec(bundle, why_not is None, INSIDE)
            with open(os.path.join(bundle, "config.json"), "w") as f:
                json.dump(spec, f, indent="\t")
            from oci.cdi.inject import inject

            result = inject(bundle, names, spec_dirs=[dirs["cdi"]], dry_run=why_not is not None)
            nodes = [n["path"] for n in result.spec["linux"].get("devices", [])]
            echo(f"   {name}: {len(nodes)} device nodes: {' '.join(nodes)}")
            if why_not is not None:
                continue
            rootfs(os.path.join(bundle, "rootfs"))
            argv = ["runc", "--root", os.path.join(workdir, "dra", "runc"), "run",
                    "--bundle", bundle, f"nvhook-dra-demo-{name}-{os.getpid()}"]  # fmt: skip
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
            for line in (proc.stdout + proc.stderr).splitlines():
                echo(f"   | {line}")
            code = code or proc.returncode
        if why_not is not None:
            echo(f"   not starting containers: {why_not}")
        unprepared = kubelet.unprepare(two, mig).claims
        gone = all(not os.path.exists(spec_file(dirs["cdi"], uid)) for _, _, uid in (two, mig))
        errors = [r.error for r in unprepared.values() if r.error]
        echo(f"== 6. unprepare: {'; '.join(errors) or 'both claims'}; "
             f"their specs {'removed' if gone else 'STILL THERE'}")  # fmt: skip
        return code or (1 if errors or not gone else 0)
    finally:
        kubelet.close()
        stop.set()
        thread.join(10)
