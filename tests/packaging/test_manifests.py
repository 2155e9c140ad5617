"""The Kubernetes manifests: well-formed, and consistent with each other and with nvhook.

The RuntimeClass handler is the runtime name ``nvhook runtime configure`` gives containerd by
default; the example pod and the installer DaemonSet use the same name; the DaemonSet runs the
installer from where its image (the Dockerfile) puts it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvhook.engines import DEFAULT_NAME
from tests.packaging.conftest import PACKAGING
from tests.support.containers import require

KUBE = PACKAGING / "kubernetes"

Doc = dict[str, Any]


def load(name: str) -> Doc:
    """The one document of ``packaging/kubernetes/NAME``, with the fields every object has."""
    docs = list(yaml.safe_load_all((KUBE / name).read_text()))
    assert len(docs) == 1, f"{name}: expected one document, found {len(docs)}"
    (doc,) = docs
    assert isinstance(doc, dict), name
    for field in ("apiVersion", "kind"):
        assert isinstance(doc.get(field), str) and doc[field], f"{name}: no {field}"
    assert isinstance(doc.get("metadata", {}).get("name"), str), f"{name}: no metadata.name"
    return doc


def test_every_manifest_is_checked_here() -> None:
    assert sorted(p.name for p in KUBE.glob("*.yaml")) == [
        "example-pod.yaml",
        "installer-daemonset.yaml",
        "runtimeclass.yaml",
    ]


def test_runtimeclass_handler_is_the_configure_default() -> None:
    rc = load("runtimeclass.yaml")
    assert (rc["apiVersion"], rc["kind"]) == ("node.k8s.io/v1", "RuntimeClass")
    assert rc["handler"] == DEFAULT_NAME
    assert rc["metadata"]["name"] == DEFAULT_NAME


def test_example_pod_uses_the_runtimeclass_and_one_gpu() -> None:
    pod = load("example-pod.yaml")
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    spec = pod["spec"]
    assert spec["runtimeClassName"] == load("runtimeclass.yaml")["metadata"]["name"]
    (container,) = spec["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert container["image"] and container["command"]


def _daemonset() -> tuple[Doc, Doc, Doc]:
    """The DaemonSet, its pod spec and its one container."""
    ds = load("installer-daemonset.yaml")
    assert (ds["apiVersion"], ds["kind"]) == ("apps/v1", "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return ds, pod, container


def test_daemonset_selector_matches_its_pods() -> None:
    ds, _, _ = _daemonset()
    selector = ds["spec"]["selector"]["matchLabels"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert selector and selector.items() <= labels.items()


def test_daemonset_reaches_the_host() -> None:
    """Host root at /host (chroot: the node's Python makes the venv), hostPID, privileged."""
    _, pod, container = _daemonset()
    assert pod["hostPID"] is True
    assert container["securityContext"]["privileged"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounts["/host"]]["hostPath"]["path"] == "/"
    tolerations = pod["tolerations"]
    assert {"operator": "Exists"} in tolerations  # GPU nodes are usually tainted


def test_daemonset_installs_with_the_runtimeclass_name() -> None:
    _, _, container = _daemonset()
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["RUNTIME_NAME"] == load("runtimeclass.yaml")["handler"]
    assert env["NVHOOK_UNINSTALL_ON_STOP"] == "false"
    assert container["command"] == ["/bin/sh", "-c"]
    (script,) = container["args"]
    assert 'chroot /host /bin/bash "$stage/install.sh" install' in script
    assert 'chroot /host /bin/bash "$stage/install.sh" uninstall' in script
    # Kubernetes expands $(NAME) in args itself: the script must not use that form
    assert "$(" not in script


def test_daemonset_script_is_valid_sh() -> None:
    (script,) = _daemonset()[2]["args"]
    proc = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    shellcheck = require("shellcheck")
    proc = subprocess.run(
        [shellcheck, "--shell=sh", "-"], input=script, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout


def test_image_holds_what_the_daemonset_and_installer_use() -> None:
    """The Dockerfile copies install.sh and what install.sh reads next to it into /nvhook."""
    copies = re.findall(r"^COPY (.+) (\S+)$", (KUBE / "Dockerfile").read_text(), re.M)
    placed: set[str] = set()
    for sources, dest in copies:
        srcs = sources.split()
        if len(srcs) == 1 and srcs[0].endswith("/"):  # a directory's contents into dest
            placed.add(dest)
        else:
            placed.update(f"{dest.rstrip('/')}/{Path(src).name}" for src in srcs)
    assert placed == {
        "/nvhook/install.sh",
        "/nvhook/config.toml",
        "/nvhook/systemd/",
        "/nvhook/wheels/",
    }
    for sources, _dest in copies:  # the build context is packaging/
        for src in sources.split():
            if not src.startswith("build/"):
                assert (PACKAGING / src).exists(), src
    (script,) = _daemonset()[2]["args"]
    assert "cp -R /nvhook/. " in script
    install = (PACKAGING / "install.sh").read_text()
    assert 'CONFIG_TEMPLATE="$HERE/config.toml"' in install
    assert '"$HERE/systemd' in install and '"$HERE/wheels"' in install


def test_installer_default_runtime_name_is_the_configure_default() -> None:
    install = (PACKAGING / "install.sh").read_text()
    match = re.search(r'^RUNTIME_NAME="\$\{RUNTIME_NAME:-([^}]*)\}"$', install, re.M)
    assert match, "install.sh sets no RUNTIME_NAME default"
    assert match.group(1) == DEFAULT_NAME


@pytest.mark.parametrize("name", ["runtimeclass.yaml", "example-pod.yaml"])
def test_manifest_names_are_dns_labels(name: str) -> None:
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", load(name)["metadata"]["name"])
