"""The Kubernetes manifests: well-formed, and consistent with each other and with nvhook.

The RuntimeClass handler is the runtime name ``nvhook runtime configure`` gives containerd by
default; the example pod and the installer DaemonSet use the same name; the DaemonSet runs the
installer from where its image (the Dockerfile) puts it. The device plugin's DaemonSet runs the
nvhook the installer put on the node, with the configuration of its ConfigMap (valid for
``nvhook device-plugin``), on nodes labelled as ``nvhook labels`` labels them.

Every object is checked against the real Kubernetes OpenAPI schemas of the oldest and newest
release the README names (:data:`KUBERNETES`), as PyPI's ``kubernetes-validate`` ships them
(strict: unknown keys refused), offline, so a misspelt or misplaced field fails here rather
than at ``kubectl apply``. What a schema cannot say is checked below: a cluster-wide apply
touches GPU nodes only and never a control-plane node, every DaemonSet carries requests,
limits, a priority class and a rolling update, and every host path is explained in its
manifest's header.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from nvhook.deviceplugin.config import parse_config
from nvhook.deviceplugin.healthstate import DEFAULT_STATE_FILE
from nvhook.deviceplugin.plugin import DEFAULT_DIRECTORY
from nvhook.engines import DEFAULT_NAME
from tests.packaging.conftest import PACKAGING
from tests.support.containers import require

KUBE = PACKAGING / "kubernetes"
#: the oldest and the newest Kubernetes release the README says the manifests are for
KUBERNETES = ("1.30.0", "1.37.0")

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


def load_all(name: str) -> list[Doc]:
    docs = list(yaml.safe_load_all((KUBE / name).read_text()))
    assert docs and all(isinstance(d, dict) for d in docs), name
    return docs


MANIFESTS = [
    "device-plugin.yaml",
    "example-pod.yaml",
    "installer-daemonset.yaml",
    "nri-plugin.yaml",
    "labeller.yaml",
    "presence-labeller.yaml",
    "runtimeclass.yaml",
]


#: The DRA driver's manifests: checked against the real schemas of the releases that serve
#: resource.k8s.io/v1 (DRA_KUBERNETES) and against the ``kubernetes`` client's models, below.
DRA_MANIFESTS = [
    "dra-deviceclasses.yaml",
    "dra-driver.yaml",
    "dra-driver-vendors.yaml",
    "dra-example-claims.yaml",
]


def test_every_manifest_is_checked_here() -> None:
    assert sorted(p.name for p in KUBE.glob("*.yaml")) == sorted(MANIFESTS + DRA_MANIFESTS)


def _errors(doc: Doc, version: str) -> str:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return f"{'/'.join(map(str, e.path))}: {e.message}"
    return ""


def test_the_readme_names_the_releases_checked() -> None:
    readme = " ".join((PACKAGING.parent / "README.md").read_text().split())
    oldest, newest = (v.rsplit(".", 1)[0] for v in KUBERNETES)
    assert f"Kubernetes {oldest} to {newest}" in readme


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("name", MANIFESTS)
def test_every_object_matches_the_api_schema(name: str, version: str) -> None:
    for doc in load_all(name):
        assert _errors(doc, version) == "", f"{name}: {doc.get('kind')} (Kubernetes {version})"


#: resource.k8s.io/v1 (DeviceClass, ResourceClaimTemplate) is served from Kubernetes 1.34 on.
DRA_KUBERNETES = ("1.34.0", KUBERNETES[-1])


@pytest.mark.parametrize("version", DRA_KUBERNETES)
@pytest.mark.parametrize("name", DRA_MANIFESTS)
def test_every_dra_object_matches_the_api_schema(name: str, version: str) -> None:
    for doc in load_all(name):
        assert _errors(doc, version) == "", f"{name}: {doc.get('kind')} (Kubernetes {version})"


@pytest.mark.parametrize(
    ("path", "key", "value"),
    [
        (("spec", "template", "spec"), "nodeSelecter", {"a": "b"}),  # misspelt
        (("spec", "template", "spec", "containers", 0), "hostPID", True),  # misplaced
        (("spec", "template", "spec"), "hostPID", "yes"),  # not a boolean
        (("spec", "template", "spec"), "containers", {"name": "x"}),  # not a list
    ],
)
def test_the_schema_refuses_a_wrong_field(
    path: tuple[str | int, ...], key: str, value: Any
) -> None:
    ds = load_all("device-plugin.yaml")[-1]
    node: Any = ds
    for step in path:
        node = node[step]
    node[key] = value
    assert _errors(ds, KUBERNETES[-1]) != ""


DAEMONSETS = [
    ("installer-daemonset.yaml", 0),
    ("device-plugin.yaml", 6),
    ("labeller.yaml", 5),
    ("nri-plugin.yaml", 0),
    ("dra-driver.yaml", 3),
    ("presence-labeller.yaml", 5),
]
#: The DaemonSets that talk to the API with the token kubelet mounts (the DRA driver's is
#: projected where its chroot reads it; the installer and the NRI plugin talk to none).
AUTOMOUNTED_TOKEN = {"device-plugin.yaml", "labeller.yaml", "presence-labeller.yaml"}
#: The DaemonSet that finds the GPU nodes runs on every Linux worker (no GPU label yet).
EVERY_WORKER = {"presence-labeller.yaml"}
#: One node, one inventory: the label that gives a GPU node to the DRA driver, whose
#: DaemonSet requires it and the device plugin's refuses it.
DRA_NODE = {"key": "nvidia.com/gpu.dra", "operator": "In", "values": ["true"]}
NOT_DRA_NODE = {"key": "nvidia.com/gpu.dra", "operator": "NotIn", "values": ["true"]}
SPLIT = {"dra-driver.yaml": [DRA_NODE], "device-plugin.yaml": [NOT_DRA_NODE]}


@pytest.mark.parametrize(("name", "at"), DAEMONSETS)
def test_daemonsets_are_safe_to_apply_to_a_whole_cluster(name: str, at: int) -> None:
    ds = load_all(name)[at]
    pod = ds["spec"]["template"]["spec"]
    # GPU nodes only (nvhook's label, or NFD's PCI label), never a control-plane node (its
    # label refused in every term, since terms are ORed; its taint not tolerated)
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    gpu_labels = ["nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"]
    if name in EVERY_WORKER:
        gpu_labels = ["kubernetes.io/os"]
    assert len(terms) == len(gpu_labels)
    for term, label in zip(terms, gpu_labels, strict=True):
        assert term["matchExpressions"] == [
            {
                "key": label,
                "operator": "In",
                "values": ["linux" if name in EVERY_WORKER else "true"],
            },
            *SPLIT.get(name, []),
            {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
        ]
    assert "nodeSelector" not in pod
    for t in pod["tolerations"]:
        assert t.get("key"), f"{name}: a toleration without a key tolerates every taint: {t}"
        assert "control-plane" not in t["key"] and "master" not in t["key"], t
        assert t["operator"] in ("Exists", "Equal"), t
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["automountServiceAccountToken"] is (name in AUTOMOUNTED_TOKEN)
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
    for c in pod["containers"]:
        resources = c["resources"]
        assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}, name
    assert not pod.get("hostNetwork")


#: The other vendors' DRA drivers (dra-driver-vendors.yaml): (index, vendor, PCI vendor id).
VENDOR_DRA = [(3, "amd", "1002"), (4, "intel", "8086"), (5, "ascend", "19e5")]


@pytest.mark.parametrize(("at", "vendor", "pci"), VENDOR_DRA)
def test_the_vendor_dra_daemonsets_are_safe_to_apply_to_a_whole_cluster(
    at: int, vendor: str, pci: str
) -> None:
    """Nodes with that vendor's devices (NFD's PCI label, or nvhook's labeller's count)
    that are given to DRA (``accelerator.nvhook.io/dra``), never a control-plane node."""
    ds = load_all("dra-driver-vendors.yaml")[at]
    pod = ds["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    dra = {"key": "accelerator.nvhook.io/dra", "operator": "In", "values": ["true"]}
    not_cp = {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}
    assert [t["matchExpressions"] for t in terms] == [
        [{"key": f"feature.node.kubernetes.io/pci-{pci}.present", "operator": "In",
          "values": ["true"]}, dra, not_cp],
        [{"key": f"accelerator.nvhook.io/{vendor}.count", "operator": "Exists"}, dra, not_cp],
    ]  # fmt: skip
    assert "nodeSelector" not in pod
    for t in pod["tolerations"]:
        assert t.get("key") and "control-plane" not in t["key"], t
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["automountServiceAccountToken"] is False
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
    (c,) = pod["containers"]
    assert set(c["resources"]["requests"]) == set(c["resources"]["limits"]) == {"cpu", "memory"}
    assert not pod.get("hostNetwork")


@pytest.mark.parametrize(
    ("name", "at"), [*DAEMONSETS, *(("dra-driver-vendors.yaml", at) for at, _, _ in VENDOR_DRA)]
)
def test_every_host_path_is_explained_in_the_header(name: str, at: int) -> None:
    text = (KUBE / name).read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    pod = load_all(name)[at]["spec"]["template"]["spec"]
    mounts = {m["name"]: m for c in pod["containers"] for m in c["volumeMounts"]}
    for v in pod["volumes"]:
        if "hostPath" not in v:
            continue
        path = v["hostPath"]["path"]
        assert v["hostPath"]["path"].startswith("/"), v
        mode = "read-only" if mounts[v["name"]].get("readOnly") else "read-write"
        said = f"#   hostPath {path} at {mounts[v['name']]['mountPath']}"
        assert said in header, f"{name}: {path} is not explained ({said!r})"
        lines = header.splitlines()
        at_line = next(i for i, x in enumerate(lines) if x.startswith(said))
        block = [lines[at_line]]
        for x in lines[at_line + 1 :]:
            if not x.startswith("#     "):  # the next item, or the end of the list
                break
            block.append(x)
        explained = " ".join(block).lower()
        assert mode in explained, f"{name}: {path}: the header does not say {mode}"


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
    tolerations = pod["tolerations"]  # GPU nodes are usually tainted
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations


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
    """The Dockerfile copies the context build.sh stages (FORMATS=image) as the image's root,
    and that holds install.sh and what install.sh reads next to it under /nvhook (the staging
    itself is run in test_installer_image.py)."""
    dockerfile = (KUBE / "Dockerfile").read_text()
    assert re.findall(r"^FROM (.+)$", dockerfile, re.M) == ["scratch"]
    copies = re.findall(r"^COPY (.+) (\S+)$", dockerfile, re.M)
    assert copies == [("bin/", "/bin/"), ("licenses/", "/licenses/"), ("nvhook/", "/nvhook/")]
    build = (PACKAGING / "build.sh").read_text()
    staged = re.search(r'cp -R ((?:"\$stage/[a-z.]+" \\?\s*)+)"\$ctx/nvhook/"', build)
    assert staged, "build.sh stages nothing into nvhook/"
    names = set(re.findall(r'"\$stage/([a-z.]+)"', staged.group(1)))
    assert names == {"install.sh", "preflight", "setup", "config.toml", "systemd", "wheels"}
    assert 'cp -a "$bundle" "$ctx/nvhook/python-$m"' in build
    for name in names - {"wheels"}:
        assert (PACKAGING / name).exists(), name
    (script,) = _daemonset()[2]["args"]
    assert "cp -R /nvhook/. " in script
    install = (PACKAGING / "install.sh").read_text()
    assert 'CONFIG_TEMPLATE="$HERE/config.toml"' in install
    assert '"$HERE/systemd' in install and '"$HERE/wheels"' in install
    assert '"$HERE/preflight"' in install and '"$HERE/setup"' in install
    assert '"$HERE/setup"' in (PACKAGING / "preflight").read_text()


def test_daemonset_checks_the_node_before_it_copies_anything() -> None:
    (script,) = _daemonset()[2]["args"]
    lines = [line.strip() for line in script.splitlines()]
    preflight = lines.index("/nvhook/preflight /host >/dev/null")
    first_change = next(i for i, x in enumerate(lines) if x.startswith(("rm ", "mkdir ", "cp ")))
    assert lines[0] == "set -eu" and preflight < first_change


def test_installer_default_runtime_name_is_the_configure_default() -> None:
    install = (PACKAGING / "install.sh").read_text()
    match = re.search(r'^RUNTIME_NAME="\$\{RUNTIME_NAME:-([^}]*)\}"$', install, re.M)
    assert match, "install.sh sets no RUNTIME_NAME default"
    assert match.group(1) == DEFAULT_NAME


@pytest.mark.parametrize("name", ["runtimeclass.yaml", "example-pod.yaml"])
def test_manifest_names_are_dns_labels(name: str) -> None:
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", load(name)["metadata"]["name"])


def _device_plugin() -> tuple[Doc, Doc, Doc, Doc]:
    """The device plugin's ConfigMap and DaemonSet, its pod spec and its one container."""
    cm, account, role, binding, cm_role, cm_binding, ds = load_all("device-plugin.yaml")
    assert (cm["apiVersion"], cm["kind"]) == ("v1", "ConfigMap")
    assert [account["kind"], role["kind"], binding["kind"], cm_role["kind"]] == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
    ]
    # it reads and watches its Node's label, and changes nothing
    rule = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    assert role["rules"] == [rule]
    # …and reads and watches its one ConfigMap, nothing else of its namespace
    assert cm_role["metadata"]["namespace"] == cm["metadata"]["namespace"]
    assert cm_role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "verbs": ["get", "list", "watch"],
            "resourceNames": [cm["metadata"]["name"]],
        }
    ]
    assert cm_binding["roleRef"]["name"] == cm_role["metadata"]["name"]
    assert cm_binding["subjects"][0]["name"] == account["metadata"]["name"]
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    assert (ds["apiVersion"], ds["kind"]) == ("apps/v1", "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return cm, ds, pod, container


def test_device_plugin_configs_are_valid_for_nvhook_device_plugin() -> None:
    cm, _, _, _ = _device_plugin()
    assert set(cm["data"]) == {"default", "time-sliced", "mps"}
    for name, text in cm["data"].items():
        config = parse_config(yaml.safe_load(text), source=f"ConfigMap {name}")
        # the strategy nvhook-runtime reads without trusting image env (README, Kubernetes)
        assert config.device_list_strategies == ("cdi-annotations",)
        assert config.notes == ()
        if name == "mps":
            assert (config.sharing_strategy, config.mps_root) == ("mps", "/run/nvhook/mps")


def test_device_plugin_runs_on_gpu_nodes_only_and_tolerates_their_taint() -> None:
    _, ds, pod, _ = _device_plugin()
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert ds["spec"]["selector"]["matchLabels"].items() <= (
        ds["spec"]["template"]["metadata"]["labels"].items()
    )


def test_device_plugin_mounts_the_host_and_reads_its_config_through_the_api() -> None:
    cm, _, pod, container = _device_plugin()
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert volumes[mounts["/host"]["name"]]["hostPath"]["path"] == "/"
    assert mounts["/host"]["readOnly"] is True  # the plugin writes only where it must:
    writable = {
        volumes[m["name"]]["hostPath"]["path"]: path
        for path, m in mounts.items()
        if not m.get("readOnly") and "hostPath" in volumes[m["name"]]
    }
    assert writable == {
        DEFAULT_DIRECTORY.rstrip("/"): "/host" + DEFAULT_DIRECTORY.rstrip("/"),
        os.path.dirname(DEFAULT_STATE_FILE): "/host" + os.path.dirname(DEFAULT_STATE_FILE),
        "/run/nvhook/mps": "/host/run/nvhook/mps",  # the MPS config's flags.mpsRoot
    }
    assert all("configMap" not in v for v in pod["volumes"])  # --config-map: the API's
    assert container["securityContext"]["privileged"] is True  # NVML opens /dev/nvidia*
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert (
        cm["metadata"]["namespace"] == load_all("device-plugin.yaml")[-1]["metadata"]["namespace"]
    )


def test_device_plugin_runs_the_installed_nvhook_on_kubelet_s_directory() -> None:
    _, _, _, container = _device_plugin()
    (installer,) = _daemonset()[1]["containers"]
    assert container["image"] == installer["image"]
    prefix = {e["name"]: e["value"] for e in installer["env"]}["PREFIX"]
    (script,) = container["args"]
    assert f"exec chroot /host {prefix}/bin/nvhook device-plugin" in script
    assert f"--device-plugin-path {DEFAULT_DIRECTORY}" in script
    assert "--config-map kube-system/nvhook-device-plugin" in script
    assert "--default-config default" in script and '--node-name "$NODE_NAME"' in script
    assert f"--health-state-file {DEFAULT_STATE_FILE}" in script
    assert "$(" not in script  # Kubernetes would expand it
    proc = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    shellcheck = require("shellcheck")
    proc = subprocess.run(
        [shellcheck, "--shell=sh", "-"], input=script, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout


def test_nri_plugin_daemonset_runs_the_plugin_with_least_privilege() -> None:
    """Not privileged, every capability but SYS_CHROOT dropped, the host read-only; it runs the
    installer's nvhook on the socket of nvhook's default settings (nri.socket)."""
    from nvhook.settings import defaults

    ds = load("nri-plugin.yaml")
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    pod = ds["spec"]["template"]["spec"]
    assert "hostPID" not in pod and "hostNetwork" not in pod
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYS_CHROOT"]}
    assert all(m.get("readOnly") is True for m in container["volumeMounts"])
    assert container["command"] == ["/bin/chroot"]
    assert container["args"][:3] == ["/host", "/opt/nvhook/bin/nvhook", "nri-plugin"]
    assert container["args"][3:] == ["--socket", defaults().nri_socket]
    assert (  # every GPU node, DRA's too (the shim's decision serves either allocation)
        pod["affinity"]
        == load_all("installer-daemonset.yaml")[0]["spec"]["template"]["spec"]["affinity"]
    )


def test_the_containerd_1_7_drop_in_switches_nri_on() -> None:
    import tomllib

    from nvhook.engines.containerd import NRI_DISABLE
    from nvhook.settings import defaults

    data = tomllib.loads((KUBE / "containerd-nri.toml").read_text())
    assert data["version"] == 2
    section = data[NRI_DISABLE[0]][NRI_DISABLE[1]]
    assert section == {"disable": False, "socket_path": defaults().nri_socket}


# --------------------------------------------------------------------------- DRA

_MODELS = {
    "ServiceAccount": "V1ServiceAccount",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "DaemonSet": "V1DaemonSet",
    "DeviceClass": "V1DeviceClass",
    "ResourceClaimTemplate": "V1ResourceClaimTemplate",
}


@pytest.mark.parametrize("name", DRA_MANIFESTS)
def test_every_dra_object_is_the_client_s_model(name: str) -> None:
    from tests.support.kubeapi import validate_model

    for doc in load_all(name):
        assert validate_model(doc, _MODELS[doc["kind"]]) == [], f"{name}: {doc['kind']}"


def test_the_model_check_refuses_a_misspelt_field() -> None:
    from tests.support.kubeapi import validate_model

    ds = next(d for d in load_all("dra-driver.yaml") if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    assert validate_model(ds, "V1DaemonSet") != []


def _dra_daemonset(name: str = "dra-driver.yaml", at: int = 3) -> tuple[Doc, Doc, Doc]:
    ds = load_all(name)[at]
    assert ds["kind"] == "DaemonSet"
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return ds, pod, container


@pytest.mark.parametrize(
    ("name", "at", "vendor"),
    [("dra-driver.yaml", 3, "nvidia"),
     *(("dra-driver-vendors.yaml", at, vendor) for at, vendor, _ in VENDOR_DRA)],
)  # fmt: skip
def test_the_dra_driver_writes_only_the_host_paths_it_mounts_writable(
    name: str, at: int, vendor: str
) -> None:
    """Least privilege: the host root read-only; kubelet's plugin and registry directories
    and the CDI directory writable; every directory flag of the command is one of them."""
    import shlex

    import click

    from nvhook.cli.draplugin import dra_plugin

    _, pod, container = _dra_daemonset(name, at)
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["/host"]["readOnly"] is True
    assert volumes[mounts["/host"]["name"]]["hostPath"]["path"] == "/"
    writable = {p.removeprefix("/host") for p, m in mounts.items() if not m.get("readOnly")}
    assert writable == {
        "/var/lib/kubelet/plugins",
        "/var/lib/kubelet/plugins_registry",
        "/var/run/cdi",
    }
    (script,) = container["args"]
    argv = shlex.split(script.split("exec chroot /host ", 1)[1].replace("\\\n", " "))
    assert argv[:2] == ["/opt/nvhook/bin/nvhook", "dra-plugin"]
    ctx = dra_plugin.make_context("dra-plugin", argv[2:])  # the flags exist and parse
    params = ctx.params
    for flag in ("plugins_dir", "registry_dir", "cdi_root"):
        assert params[flag] in writable, flag
    assert "/host" + params["service_account_dir"] in mounts
    assert "/host" + params["device_plugin_dir"] in mounts
    from nvhook.dra.vendors import driver_name

    assert params["vendor"] == vendor  # its own driver name's directory for the token
    assert params["service_account_dir"].startswith(
        f"/var/lib/kubelet/plugins/{driver_name(vendor)}/"
    )
    assert isinstance(ctx, click.Context)
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


@pytest.mark.parametrize("name", ["dra-driver.yaml", "dra-driver-vendors.yaml"])
def test_the_dra_rbac_grants_the_driver_s_calls_only(name: str) -> None:
    role = next(d for d in load_all(name) if d["kind"] == "ClusterRole")
    rules = {r["resources"][0]: set(r["verbs"]) for r in role["rules"]}
    assert rules == {
        "resourceslices": {"get", "list", "watch", "create", "update", "delete"},
        "resourceclaims": {"get"},
    }


def test_the_device_classes_select_the_driver_s_device_types() -> None:
    from nvhook.dra.inventory import DRIVER

    classes = {d["metadata"]["name"]: d for d in load_all("dra-deviceclasses.yaml")}
    for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig"),
                       ("imex-channel.gpu.nvidia.com", "channel")):  # fmt: skip
        (selector,) = classes[name]["spec"]["selectors"]
        expression = selector["cel"]["expression"]
        assert f"device.driver == '{DRIVER}'" in expression
        assert f"device.attributes['{DRIVER}'].type == '{kind}'" in expression
    from nvhook.dra.vendors import DRIVERS

    for vendor, driver in DRIVERS.items():  # the other vendors' classes: their drivers' names
        if vendor != "nvidia":
            (selector,) = classes[driver]["spec"]["selectors"]
            assert selector["cel"]["expression"] == f"device.driver == '{driver}'"
    for claim in load_all("dra-example-claims.yaml"):
        for request in claim["spec"]["spec"]["devices"]["requests"]:
            assert request["exactly"]["deviceClassName"] in classes


def test_the_labeller_may_patch_its_own_node_s_nvidia_labels_only() -> None:
    account, role, binding, policy, policy_binding, ds = load_all("labeller.yaml")
    assert (account["kind"], role["kind"], binding["kind"]) == (
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
    )
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    subject = binding["subjects"][0]
    assert (subject["name"], subject["namespace"]) == ("nvhook-labeller", "kube-system")
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == "nvhook-labeller"
    assert policy_binding["spec"] == {
        "policyName": "nvhook-labeller",
        "validationActions": ["Deny"],
    }
    spec = policy["spec"]
    assert (
        "system:serviceaccount:kube-system:nvhook-labeller"
        in spec["matchConditions"][0]["expression"]
    )
    checks = " ".join(v["expression"] for v in spec["validations"])
    assert "authentication.kubernetes.io/node-name" in checks and "object.metadata.name" in checks
    assert "startsWith('nvidia.com/')" in checks and "object.spec == oldObject.spec" in checks
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    (script,) = container["args"]
    assert 'nvhook labels --node "$NODE_NAME"' in script and "$(" not in script
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    proc = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    shellcheck = require("shellcheck")
    proc = subprocess.run(
        [shellcheck, "--shell=sh", "-"], input=script, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout


def _admitted(
    request_user: str, node_of_token: str, old: Doc, new: Doc, manifest: str = "labeller.yaml"
) -> bool | None:
    """The labeller's (or ``manifest``'s) ValidatingAdmissionPolicy on one Node UPDATE, its
    CEL evaluated by the reference implementation (PyPI common-expression-language): None when
    it does not apply (another user), else whether every validation holds."""
    import cel

    policy = load_all(manifest)[3]["spec"]
    request = {
        "userInfo": {
            "username": request_user,
            "extra": {"authentication.kubernetes.io/node-name": [node_of_token]},
        }
    }
    context: dict[str, Any] = {"request": request, "object": new, "oldObject": old}
    if not all(cel.evaluate(c["expression"], context) for c in policy["matchConditions"]):
        return None
    context["variables"] = {
        v["name"]: cel.evaluate(v["expression"], context) for v in policy["variables"]
    }
    return all(cel.evaluate(v["expression"], context) is True for v in policy["validations"])


def test_the_admission_policy_admits_only_its_own_node_s_nvidia_labels() -> None:
    me = "system:serviceaccount:kube-system:nvhook-labeller"

    def node(name: str, labels: dict[str, str], **more: Any) -> Doc:
        return {"metadata": {"name": name, "labels": labels, **more}, "spec": {}}

    old = node("gpu-1", {"kubernetes.io/hostname": "gpu-1", "nvidia.com/gpu.stale": "x"})
    ours = node("gpu-1", {"kubernetes.io/hostname": "gpu-1", "nvidia.com/gpu.count": "8"})
    assert _admitted(me, "gpu-1", old, ours) is True
    assert _admitted(me, "gpu-2", old, ours) is False  # another node's token
    renamed = node("gpu-1", {"kubernetes.io/hostname": "evil", "nvidia.com/gpu.count": "8"})
    assert _admitted(me, "gpu-1", old, renamed) is False  # someone else's label changed
    assert _admitted(me, "gpu-1", old, node("gpu-1", {})) is False  # …or removed
    added = node("gpu-1", {**ours["metadata"]["labels"], "node-role.kubernetes.io/x": ""})
    assert _admitted(me, "gpu-1", old, added) is False  # …or added
    cordoned = {**ours, "spec": {"unschedulable": True}}
    assert _admitted(me, "gpu-1", old, cordoned) is False  # not the spec
    annotated = node("gpu-1", ours["metadata"]["labels"], annotations={"a": "b"})
    assert _admitted(me, "gpu-1", old, annotated) is False  # not the annotations
    assert _admitted("system:node:gpu-1", "gpu-1", old, renamed) is None  # others: not ours


def test_the_presence_labeller_may_set_gpu_present_on_its_own_node_only() -> None:
    account, role, binding, policy, policy_binding, ds = load_all("presence-labeller.yaml")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    assert binding["subjects"][0]["name"] == account["metadata"]["name"] == "nvhook-presence"
    assert policy_binding["spec"] == {
        "policyName": "nvhook-presence",
        "validationActions": ["Deny"],
    }
    assert policy["spec"]["failurePolicy"] == "Fail"
    pod = ds["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "nvhook-presence"
    # nothing of the host: no hostPath, not privileged, not root, no capability
    assert all("hostPath" not in v for v in pod["volumes"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert not container["securityContext"].get("privileged")
    (script,) = container["args"]
    assert "nvhook labels --presence --root /" in script
    for tool in ("sh", "shellcheck"):
        argv = [require(tool), "-n"] if tool == "sh" else [require(tool), "--shell=sh", "-"]
        proc = subprocess.run(argv, input=script, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    me = "system:serviceaccount:kube-system:nvhook-presence"

    def node(name: str, labels: dict[str, str], **more: Any) -> Doc:
        return {"metadata": {"name": name, "labels": labels, **more}, "spec": {}}

    def admitted(token_node: str, old: Doc, new: Doc, user: str = me) -> bool | None:
        return _admitted(user, token_node, old, new, "presence-labeller.yaml")

    fresh = node("gpu-1", {"kubernetes.io/hostname": "gpu-1", "nvidia.com/gpu.count": "8"})
    present = node("gpu-1", {**fresh["metadata"]["labels"], "nvidia.com/gpu.present": "true"})
    assert admitted("gpu-1", fresh, present) is True
    assert admitted("gpu-1", present, fresh) is True  # removed: no NVIDIA GPU any more
    assert admitted("gpu-2", fresh, present) is False  # another node's token
    lying = node("gpu-1", {**fresh["metadata"]["labels"], "nvidia.com/gpu.present": "false"})
    assert admitted("gpu-1", fresh, lying) is False  # only "true"
    counted = node("gpu-1", {**present["metadata"]["labels"], "nvidia.com/gpu.count": "9"})
    assert admitted("gpu-1", present, counted) is False  # another nvidia.com/ label
    dropped = node("gpu-1", {"nvidia.com/gpu.present": "true"})
    assert admitted("gpu-1", fresh, dropped) is False  # …or others' removed
    annotated = node("gpu-1", present["metadata"]["labels"], annotations={"a": "b"})
    assert admitted("gpu-1", fresh, annotated) is False  # not the annotations
    cordoned = {**present, "spec": {"unschedulable": True}}
    assert admitted("gpu-1", fresh, cordoned) is False  # not the spec
    assert admitted("gpu-1", fresh, counted, user="system:node:gpu-1") is None  # not ours
