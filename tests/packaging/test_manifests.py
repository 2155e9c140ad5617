"""The Kubernetes manifests: well-formed, and consistent with each other and with nvhook.

The RuntimeClass handler is the runtime name ``nvhook runtime configure`` gives containerd by
default; the example pod and the installer DaemonSet use the same name; the DaemonSet runs the
installer from where its image (the Dockerfile) puts it. The device plugin's DaemonSet runs the
nvhook the installer put on the node, with the configuration of its ConfigMap (valid for
``nvhook device-plugin``), on nodes labelled as ``nvhook labels`` labels them.

Every object is checked against ``kubernetes-schema.json`` (jsonschema, offline): a JSON Schema
written for these objects after the Kubernetes API reference, refusing unknown keys, so a
misspelt or misplaced field fails here rather than at ``kubectl apply``.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from nvhook.deviceplugin.config import parse_config
from nvhook.deviceplugin.plugin import DEFAULT_DIRECTORY
from nvhook.engines import DEFAULT_NAME
from tests.packaging.conftest import PACKAGING
from tests.support.containers import require

KUBE = PACKAGING / "kubernetes"
SCHEMA = Path(__file__).parent / "kubernetes-schema.json"

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
    "runtimeclass.yaml",
]


#: The DRA driver's manifests: checked against the ``kubernetes`` client's models (DeviceClass,
#: ResourceClaimTemplate and RBAC are not in kubernetes-schema.json), below.
DRA_MANIFESTS = ["dra-deviceclasses.yaml", "dra-driver.yaml", "dra-example-claims.yaml"]


def test_every_manifest_is_checked_here() -> None:
    assert sorted(p.name for p in KUBE.glob("*.yaml")) == sorted(MANIFESTS + DRA_MANIFESTS)


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("name", MANIFESTS)
def test_every_object_matches_the_api_schema(name: str) -> None:
    validator = _validator()
    for doc in load_all(name):
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(doc)
        ]
        assert errors == [], f"{name}: {doc.get('kind')}: " + "; ".join(errors)


@pytest.mark.parametrize(
    ("path", "key", "value"),
    [
        (("spec", "template", "spec"), "nodeSelecter", {"a": "b"}),  # misspelt
        (("spec", "template", "spec", "containers", 0), "hostPID", True),  # misplaced
        (("spec", "template", "spec", "tolerations", 0), "operator", "Exist"),  # bad value
        (("spec", "template", "spec", "volumes", 0, "hostPath"), "path", "relative"),
    ],
)
def test_the_schema_refuses_a_wrong_field(
    path: tuple[str | int, ...], key: str, value: Any
) -> None:
    (_, ds) = load_all("device-plugin.yaml")
    node: Any = ds
    for step in path:
        node = node[step]
    node[key] = value
    assert not _validator().is_valid(ds)


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
    cm, ds = load_all("device-plugin.yaml")
    assert (cm["apiVersion"], cm["kind"]) == ("v1", "ConfigMap")
    assert (ds["apiVersion"], ds["kind"]) == ("apps/v1", "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return cm, ds, pod, container


def test_device_plugin_config_is_valid_for_nvhook_device_plugin() -> None:
    cm, _, _, _ = _device_plugin()
    config = parse_config(yaml.safe_load(cm["data"]["config.yaml"]), source="ConfigMap")
    # the strategy nvhook-runtime reads without trusting image env (README, Kubernetes)
    assert config.device_list_strategies == ("cdi-annotations",)


def test_device_plugin_runs_on_gpu_nodes_only_and_tolerates_their_taint() -> None:
    _, ds, pod, _ = _device_plugin()
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}  # as `nvhook labels` says
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert ds["spec"]["selector"]["matchLabels"].items() <= (
        ds["spec"]["template"]["metadata"]["labels"].items()
    )


def test_device_plugin_mounts_its_config_and_the_host() -> None:
    cm, _, pod, container = _device_plugin()
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounts["/host"]]["hostPath"]["path"] == "/"
    assert volumes[mounts["/config"]]["configMap"]["name"] == cm["metadata"]["name"]
    assert container["securityContext"]["privileged"] is True  # NVML opens /dev/nvidia*
    assert cm["metadata"]["namespace"] == load_all("device-plugin.yaml")[1]["metadata"]["namespace"]


def test_device_plugin_runs_the_installed_nvhook_on_kubelet_s_directory() -> None:
    _, _, _, container = _device_plugin()
    (installer,) = _daemonset()[1]["containers"]
    assert container["image"] == installer["image"]
    prefix = {e["name"]: e["value"] for e in installer["env"]}["PREFIX"]
    (script,) = container["args"]
    assert f"exec chroot /host {prefix}/bin/nvhook device-plugin" in script
    assert "cp /config/config.yaml " in script
    assert f"--device-plugin-path {DEFAULT_DIRECTORY}" in script
    assert '--config "$stage/config.yaml"' in script
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
    assert (
        pod["nodeSelector"]
        == load_all("device-plugin.yaml")[1]["spec"]["template"]["spec"]["nodeSelector"]
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


def _dra_daemonset() -> tuple[Doc, Doc, Doc]:
    ds = next(d for d in load_all("dra-driver.yaml") if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return ds, pod, container


def test_the_dra_driver_writes_only_the_host_paths_it_mounts_writable() -> None:
    """Least privilege: the host root read-only; kubelet's plugin and registry directories
    and the CDI directory writable; every directory flag of the command is one of them."""
    import shlex

    import click

    from nvhook.cli.draplugin import dra_plugin

    _, pod, container = _dra_daemonset()
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
    assert isinstance(ctx, click.Context)
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_the_dra_rbac_grants_the_driver_s_calls_only() -> None:
    role = next(d for d in load_all("dra-driver.yaml") if d["kind"] == "ClusterRole")
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
    for claim in load_all("dra-example-claims.yaml"):
        for request in claim["spec"]["spec"]["devices"]["requests"]:
            assert request["exactly"]["deviceClassName"] in classes
